#!/usr/bin/env bash
# Builds the real control-plane binaries for the cluster tests, once, into a
# cache outside the repository:
#
#   test/cluster/build.sh            build if needed, print each version
#   test/cluster/build.sh --print-bin-dir
#                                    build if needed, then print only the bin
#                                    directory on stdout (logs go to stderr)
#
# Binaries: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kubelet (all from k8s.io/kubernetes at $K8S_VERSION: versions.env's, or the
# release K8S_VERSION names, see k8s-version.sh), etcd
# (from go.etcd.io/etcd/server/v3 at the version that release requires) and
# freeport (a helper that prints free 127.0.0.1 ports).
#
# Without --print-bin-dir it also builds containerd for the test node
# (test/node/build-containerd.sh, its own cache entry) and prints its version;
# cluster_up needs only the Kubernetes binaries, cluster_node_up builds
# containerd itself.
#
# Cache layout (GPU_EXTENDER_CACHE defaults to $HOME/.cache/gpu-extender):
#   $GPU_EXTENDER_CACHE/k8s-<version>/bin/     the binaries and a .stamp
#   $GPU_EXTENDER_CACHE/gomodcache/            GOMODCACHE (module downloads)
#   $GPU_EXTENDER_CACHE/gocache/               GOCACHE (compiled packages)
# The .stamp is written last and holds a hash of everything that goes into the
# build, so an interrupted build, or one from older sources, is built again
# (incrementally: GOCACHE keeps what was compiled).
#
# Environment:
#   GPU_EXTENDER_CACHE   cache root (see above)
#   GPU_EXTENDER_BUILD_P go build -p value (default: number of CPUs)
#   K8S_VERSION          the release (default: versions.env's; k8s-version.sh)
#   GO                   go command to use (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=k8s-version.sh
. "$here/k8s-version.sh" || exit 2
# shellcheck source=cluster.sh
. "$here/cluster.sh"   # cluster_binary_versions

print_bin_dir=0
case ${1:-} in
  --print-bin-dir) print_bin_dir=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) echo "build.sh: unknown argument '$1'" >&2; exit 2 ;;
esac

log() { echo "build.sh: $*" >&2; }

for tool in flock sha256sum awk sort; do
  command -v "$tool" >/dev/null || { log "'$tool' is not installed"; exit 1; }
done

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || { log "no Go toolchain found (set GO=/path/to/go)"; exit 1; }

cache_root=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}
version_dir=$cache_root/k8s-$K8S_VERSION
bin_dir=$version_dir/bin
stamp=$bin_dir/.stamp
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet etcd freeport)

# Everything that decides what gets built: if any of it changes, build again.
build_key() {
  {
    echo "k8s=$K8S_VERSION etcd=$ETCD_VERSION date=$K8S_BUILD_DATE"
    GOTOOLCHAIN=$K8S_GOTOOLCHAIN "$GO" env GOVERSION GOOS GOARCH
    cat "$K8S_MODFILE" "${K8S_MODFILE%.mod}.sum" "$here/etcd/main.go" "$here/freeport/main.go"
    sed -n '/^# BUILD-FLAGS-BEGIN/,/^# BUILD-FLAGS-END/p' "$here/build.sh"
  } | sha256sum | cut -d' ' -f1
}

print_versions() { cluster_binary_versions "$bin_dir" '  ' >&2; }

is_built() {
  [[ -f $stamp ]] && [[ $(cat "$stamp") == "$(build_key)" ]] || return 1
  local b
  for b in "${binaries[@]}"; do [[ -x $bin_dir/$b ]] || return 1; done
}

finish() {  # [built]
  log "binaries in $bin_dir"
  # cluster_up calls --print-bin-dir on every start: keep that quiet.
  if ((!print_bin_dir)) || [[ ${1:-} == built ]]; then print_versions; fi
  if ((print_bin_dir)); then
    echo "$bin_dir"
  else
    "$here/../node/build-containerd.sh"
  fi
}

mkdir -p "$version_dir"
if is_built; then
  finish
  exit 0
fi

# One build at a time per version (two test scripts may start together).
exec 9>"$version_dir/.lock"
flock 9
if is_built; then   # someone else built it while we waited
  finish
  exit 0
fi

export GOMODCACHE=$cache_root/gomodcache
# The module's go directive must be satisfiable by this toolchain (the local
# one, or the one the release's .env names, which the go command fetches from
# the module proxy into GOMODCACHE).
need=$(awk '$1=="go" {print $2; exit}' "$K8S_MODFILE")
have=$(GOTOOLCHAIN=$K8S_GOTOOLCHAIN "$GO" env GOVERSION); have=${have#go}
if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
  log "Go $have is older than go $need required by ${K8S_MODFILE#"$here/"}"
  exit 1
fi

[[ $K8S_VERSION =~ ^v([0-9]+)\.([0-9]+)\. ]] || { log "bad K8S_VERSION $K8S_VERSION"; exit 1; }
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

export GOCACHE=$cache_root/gocache
export GOTOOLCHAIN=$K8S_GOTOOLCHAIN
export GOWORK=off
export CGO_ENABLED=0
# BUILD-FLAGS-BEGIN (this block is part of the cache key)
export GOFLAGS="-mod=readonly -modcacherw -buildvcs=false"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X '$pkg.gitVersion=$K8S_VERSION'"
  ldflags+=" -X '$pkg.gitMajor=$major'"
  ldflags+=" -X '$pkg.gitMinor=$minor'"
  ldflags+=" -X '$pkg.gitTreeState=clean'"
  ldflags+=" -X '$pkg.buildDate=$K8S_BUILD_DATE'"
done
ldflags+=" -X 'go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION'"
packages=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  k8s.io/kubernetes/cmd/kubelet
  ./etcd
  ./freeport
)
# BUILD-FLAGS-END

tmp_out=$version_dir/bin.tmp.$$
rm -rf "$tmp_out" "$version_dir"/bin.tmp.*
mkdir -p "$tmp_out" "$GOMODCACHE" "$GOCACHE"
trap 'rm -rf "$tmp_out"' EXIT

log "building Kubernetes $K8S_VERSION and etcd $ETCD_VERSION with $("$GO" env GOVERSION) into $bin_dir"
log "(a cold build downloads ~1 GiB of modules and compiles for a long while on 2 cores)"
start=$(date +%s)
(
  cd "$here"
  # -modfile: the release's module file (go.mod for the default one).
  "$GO" build -modfile="$K8S_MODFILE" -p "${GPU_EXTENDER_BUILD_P:-$(nproc)}" -trimpath -ldflags "$ldflags" -o "$tmp_out/" "${packages[@]}"
) >&2
for b in "${binaries[@]}"; do
  [[ -x $tmp_out/$b ]] || { log "go build did not produce $b"; exit 1; }
done
rm -rf "$bin_dir"
mv "$tmp_out" "$bin_dir"
build_key > "$stamp"
elapsed=$(($(date +%s) - start))
log "build took ${elapsed}s ($((elapsed / 60))m$((elapsed % 60))s)"
finish built
