#!/usr/bin/env bash
# Builds containerd 2.x for the test node, once, into the same cache as
# test/cluster/build.sh (Debian's containerd 1.6 has no CDI):
#
#   test/node/build-containerd.sh                 build if needed, print the versions
#   test/node/build-containerd.sh --print-bin-dir build if needed, then print only
#                                                 the bin directory on stdout
#
# Binaries: containerd, containerd-shim-runc-v2 and ctr, from the module
# github.com/containerd/containerd/v2 at the version pinned in
# test/node/containerd/go.mod (its go.sum makes the build reproducible; after
# changing the version run `go mod tidy` there). runc and the CNI plugins come
# from Debian (runc, containernetworking-plugins).
#
# Cache: $GPU_EXTENDER_CACHE/containerd-<version>/bin/ with a .stamp holding a
# hash of the inputs (written last); GOMODCACHE and GOCACHE are build.sh's.
# Environment: GPU_EXTENDER_CACHE, GPU_EXTENDER_BUILD_P, GO (as build.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod=$here/containerd

print_bin_dir=0
case ${1:-} in
  --print-bin-dir) print_bin_dir=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) echo "build-containerd.sh: unknown argument '$1'" >&2; exit 2 ;;
esac

log() { echo "build-containerd.sh: $*" >&2; }

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || { log "no Go toolchain found (set GO=/path/to/go)"; exit 1; }

# (in go.mod's require block: tidy lists it among the tools' indirect requirements)
version=$(awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "github.com/containerd/containerd/v2" {print $2; exit}' "$mod/go.mod")
[[ $version =~ ^v2\.[0-9]+\.[0-9]+$ ]] || { log "no containerd v2 pin in $mod/go.mod"; exit 1; }

cache_root=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}
version_dir=$cache_root/containerd-$version
bin_dir=$version_dir/bin
stamp=$bin_dir/.stamp
binaries=(containerd containerd-shim-runc-v2 ctr)

build_key() {
  {
    "$GO" env GOVERSION GOOS GOARCH
    cat "$mod/go.mod" "$mod/go.sum"
    sed -n '/^# BUILD-FLAGS-BEGIN/,/^# BUILD-FLAGS-END/p' "${BASH_SOURCE[0]}"
  } | sha256sum | cut -d' ' -f1
}

is_built() {
  [[ -f $stamp ]] && [[ $(cat "$stamp") == "$(build_key)" ]] || return 1
  local b
  for b in "${binaries[@]}"; do [[ -x $bin_dir/$b ]] || return 1; done
}

print_versions() {
  printf '  %-24s %s\n' containerd "$("$bin_dir/containerd" --version 2>&1)" >&2
  printf '  %-24s %s\n' runc "$(runc --version 2>/dev/null | head -1 || echo 'not installed (apt-get install runc)')" >&2
}

finish() {  # [built]
  log "binaries in $bin_dir"
  if ((!print_bin_dir)) || [[ ${1:-} == built ]]; then print_versions; fi
  if ((print_bin_dir)); then echo "$bin_dir"; fi
}

mkdir -p "$version_dir"
if is_built; then finish; exit 0; fi
exec 9>"$version_dir/.lock"
flock 9
if is_built; then finish; exit 0; fi

export GOMODCACHE=$cache_root/gomodcache
export GOCACHE=$cache_root/gocache
export GOTOOLCHAIN=local
export GOWORK=off
export CGO_ENABLED=0
# BUILD-FLAGS-BEGIN (this block is part of the cache key)
export GOFLAGS="-mod=readonly -modcacherw -buildvcs=false"
pkg=github.com/containerd/containerd/v2
ldflags="-s -w -X '$pkg/version.Version=$version' -X '$pkg/version.Revision=module-proxy'"
# CGO_ENABLED=0 already leaves btrfs out (it needs cgo); devmapper and zfs are
# of no use here.
tags=no_devmapper,no_zfs
# BUILD-FLAGS-END

tmp_out=$version_dir/bin.tmp.$$
rm -rf "$tmp_out" "$version_dir"/bin.tmp.*
mkdir -p "$tmp_out" "$GOMODCACHE" "$GOCACHE"
trap 'rm -rf "$tmp_out"' EXIT

log "building containerd $version with $("$GO" env GOVERSION) into $bin_dir"
start=$(date +%s)
(
  cd "$mod"
  "$GO" build -p "${GPU_EXTENDER_BUILD_P:-$(nproc)}" -trimpath -tags "$tags" -ldflags "$ldflags" \
    -o "$tmp_out/" "$pkg/cmd/containerd" "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/ctr"
) >&2
for b in "${binaries[@]}"; do
  [[ -x $tmp_out/$b ]] || { log "go build did not produce $b"; exit 1; }
done
rm -rf "$bin_dir"
mv "$tmp_out" "$bin_dir"
build_key >"$stamp"
elapsed=$(($(date +%s) - start))
log "build took ${elapsed}s ($((elapsed / 60))m$((elapsed % 60))s)"
finish built
