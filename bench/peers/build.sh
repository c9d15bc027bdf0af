#!/usr/bin/env bash
# Builds a peer scheduler extender from its public source, for bench/e2e.sh's
# peer rows; never part of this project's build and never vendored into it.
#
#   bench/peers/build.sh gpushare|hami     prints the binary's path
#
#   gpushare  github.com/AliyunContainerService/gpushare-scheduler-extender
#             (Apache-2.0), ./cmd, as gpushare-ext
#   hami      github.com/Project-HAMi/HAMi (Apache-2.0), ./cmd/scheduler, as
#             hami-scheduler (its scheduler extender; no device plugin)
#
# Each is built at a pinned commit (PEER_COMMIT overrides it) into
# $GPU_EXTENDER_CACHE/peers/NAME-COMMIT/ (~/.cache/gpu-extender by default);
# a binary already there is reused, so only the first run pays the build
# (minutes: the Go module proxy serves their dependencies into the
# harness's GOMODCACHE). The source comes from PEER_GIT_DIR (a clone, bare
# or not, that has the commit), else from PEER_MIRRORS/OWNER+NAME/repo
# (/work/.mirror by default) when there is one, else from a bare clone the
# script makes in the cache (git clone over the network, once).
#
# One change is made to gpushare's source, and only when it is built here:
# its API client takes its QPS and burst from BENCH_KUBE_QPS when that is
# set (one line after the client's configuration is built). As published
# it keeps client-go's defaults, 5 requests a second with bursts of 10,
# with no flag to change them: two writes a pod (the annotation patch and
# the binding) cap it at about 2.5 pods a second. Unset, the binary behaves
# as published. HAMi's scheduler has flags for it (--kube-qps, --kube-burst)
# and is built unchanged. The binary names are under 16 characters so that
# bench/e2e.sh finds them by process name (pgrep -x).
set -euo pipefail
name=${1:-}
case $name in
  gpushare) repo=AliyunContainerService/gpushare-scheduler-extender commit=c0b61411cddabd1b19500878ab355afeeae5589e pkg=./cmd bin=gpushare-ext ;;
  hami) repo=Project-HAMi/HAMi commit=4707fb02c91c545bc7343ce26dba4c32919f9a3e pkg=./cmd/scheduler bin=hami-scheduler ;;
  *) echo "usage: bench/peers/build.sh gpushare|hami" >&2; exit 2 ;;
esac
commit=${PEER_COMMIT:-$commit}
cache=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}
out=$cache/peers/$name-${commit:0:12}
if [[ -x $out/$bin ]]; then echo "$out/$bin"; exit 0; fi
git_dir=${PEER_GIT_DIR:-}
mirror=${PEER_MIRRORS:-/work/.mirror}/${repo/\//+}/repo   # a mirror already on the machine
[[ -z $git_dir && -d $mirror ]] && git_dir=$mirror
if [[ -z $git_dir ]]; then
  git_dir=$cache/peers/src/$name.git
  [[ -d $git_dir ]] || git clone --bare --quiet "https://github.com/$repo" "$git_dir" >&2
fi
git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null ||
  git --git-dir="$git_dir" fetch --quiet origin "$commit" >&2 ||
  { echo "peers: $name: commit $commit is not in $git_dir" >&2; exit 1; }
mkdir -p "$out"
tree=$(mktemp -d "$out/src.XXXXXX")
trap 'rm -rf "$tree"' EXIT
git --git-dir="$git_dir" archive "$commit" | tar -x -C "$tree"
if [[ $name == gpushare ]]; then
  # The QPS hook (see above): after `restConfig, err := clientcmd.BuildConfigFromFlags(...)`.
  sed -i '/restConfig, err := clientcmd.BuildConfigFromFlags/a\
	if q, e := strconv.Atoi(os.Getenv("BENCH_KUBE_QPS")); e == nil \&\& q > 0 { restConfig.QPS, restConfig.Burst = float32(q), q }' "$tree/cmd/main.go"
  grep -q BENCH_KUBE_QPS "$tree/cmd/main.go" || { echo "peers: gpushare: the QPS hook did not apply" >&2; exit 1; }
fi
export GOMODCACHE=$cache/gomodcache GOCACHE=$cache/gocache GOFLAGS=-mod=mod
echo "peers: building $name at ${commit:0:12} (first time only; minutes)" >&2
(cd "$tree" && go build -o "$out/$bin.tmp" "$pkg") >&2 || { echo "peers: building $name failed" >&2; exit 1; }
mv "$out/$bin.tmp" "$out/$bin"
echo "$out/$bin"
