#!/usr/bin/env bash
# The test node's container images, made without a registry or a container
# engine, as OCI image archives (test/node/ocilayout.py), and their import
# into containerd:
#
#   test/node/images.sh build             write the archives, print their paths
#   test/node/images.sh import ADDRESS    build, then `ctr -n k8s.io images import`
#                                         each into the containerd at ADDRESS (socket)
#
# Images (linux/amd64, one uncompressed layer, reproducible: the same inputs
# give the same digest, so importing again changes nothing):
#   registry.k8s.io/pause:3.10.1        the sandbox image kubelet 1.35 and containerd 2.x
#                                       expect by default; pause.c from the
#                                       k8s.io/kubernetes module source, gcc -static
#   gpu-test/busybox:local              busybox-static with one symlink per applet
#                                       (CMD sh); for test workloads
#   gpu-extender:VERSION                the product's image of `make image`
#                                       (deploy/image/oci.sh of build/), the tag
#                                       deploy/ names; left out (with a warning)
#                                       when build/ has no binaries
#   registry.k8s.io/kube-scheduler:$K8S_VERSION
#                                       the harness's static kube-scheduler in
#                                       /usr/local/bin (deploy/base/07-scheduler.yaml)
# Pods name them as above (kubelet and containerd complete short names to
# docker.io/library/...; the archives carry the completed names) and need
# imagePullPolicy: Never (or IfNotPresent): there is no registry.
#
# Archives go to $GPU_EXTENDER_CACHE/images/ (default ~/.cache/gpu-extender).
# Environment: GPU_EXTENDER_BUILD_DIR (default: the repository's build/),
# CTR (the ctr binary; default: the one test/node/build-containerd.sh built).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../cluster/k8s-version.sh
. "$repo/test/cluster/k8s-version.sh" || exit 2   # K8S_VERSION: the release the node runs

err() { echo "images.sh: $*" >&2; exit 1; }

cache_root=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}
out_dir=$cache_root/images
build_dir=${GPU_EXTENDER_BUILD_DIR:-$repo/build}
PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
BUSYBOX_IMAGE=docker.io/gpu-test/busybox:local
PRODUCT_IMAGE=docker.io/library/gpu-extender:$(cat "$repo/VERSION")
SCHEDULER_IMAGE=registry.k8s.io/kube-scheduler:$K8S_VERSION

# pack SLUG NAME ROOTFS [ocilayout options]: the archive, path on stdout
pack() {
  local slug=$1 name=$2 rootfs=$3; shift 3
  python3 "$here/ocilayout.py" "$out_dir/$slug.tar" "$name" "$rootfs" "$@" >/dev/null ||
    err "could not pack $name"
  echo "$out_dir/$slug.tar"
}

build_pause() {
  local src=$cache_root/gomodcache/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c
  [[ -f $src ]] || err "no $src (test/cluster/build.sh downloads the module)"
  command -v gcc >/dev/null || err "gcc is not installed"
  mkdir -p "$work/pause"
  # -static: the image has no libc. VERSION is what `pause -v` prints.
  gcc -static -O2 -Wall -DVERSION="v3.10.1-$K8S_VERSION" -o "$work/pause/pause" "$src" ||
    err "could not compile $src"
  strip "$work/pause/pause"
  pack pause "$PAUSE_IMAGE" "$work/pause" --entrypoint '["/pause"]' --user 65535:65535
}

build_busybox() {
  local bb=/bin/busybox r=$work/busybox applet
  [[ -x $bb ]] && ! ldd "$bb" >/dev/null 2>&1 || err "no static $bb (install busybox-static)"
  mkdir -p "$r/bin" "$r/tmp" "$r/etc" "$r/root"
  chmod 1777 "$r/tmp"
  install -m 0755 "$bb" "$r/bin/busybox"
  # --list-full: one relative path per applet (bin/ls, usr/bin/awk, sbin/...)
  while read -r applet; do
    [[ $applet == bin/busybox ]] && continue
    mkdir -p "$r/$(dirname "$applet")"
    ln -sf /bin/busybox "$r/$applet"
  done < <("$bb" --list-full)
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/:/bin/false' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$r/etc/group"
  pack busybox "$BUSYBOX_IMAGE" "$r" --cmd '["sh"]'
}

build_product() {
  if [[ ! -x $build_dir/gpu-extender || ! -x $build_dir/gpu-agent ]]; then
    echo "images.sh: no $build_dir/gpu-extender or gpu-agent: $PRODUCT_IMAGE left out (run make all)" >&2
    return 0
  fi
  # exactly what `make image` writes (and the same bytes again)
  "$repo/deploy/image/oci.sh" "$build_dir" || err "deploy/image/oci.sh failed"
}

build_scheduler() {
  local bin
  bin=$("$repo/test/cluster/build.sh" --print-bin-dir 2>/dev/null) || err "test/cluster/build.sh failed"
  mkdir -p "$work/scheduler/usr/local/bin" "$work/scheduler/tmp"
  chmod 1777 "$work/scheduler/tmp"
  install -m 0755 "$bin/kube-scheduler" "$work/scheduler/usr/local/bin/kube-scheduler"
  pack kube-scheduler "$SCHEDULER_IMAGE" "$work/scheduler" --entrypoint '["/usr/local/bin/kube-scheduler"]'
}

build_all() {
  mkdir -p "$out_dir"
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-images.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  umask 022
  build_pause
  build_busybox
  build_product
  build_scheduler
}

case ${1:-} in
  build)
    build_all ;;
  import)
    address=${2:?usage: images.sh import CONTAINERD-SOCKET}
    ctr=${CTR:-$("$here/build-containerd.sh" --print-bin-dir 2>/dev/null)/ctr}
    [[ -x $ctr ]] || err "no ctr at $ctr"
    mapfile -t archives < <(build_all)
    ((${#archives[@]} >= 3)) || err "building the images failed"
    for a in "${archives[@]}"; do
      # Unpacked for the default (overlayfs) snapshotter, as the CRI plugin
      # needs them.
      "$ctr" --address "$address" -n k8s.io images import "$a" >/dev/null ||
        err "ctr images import $a failed"
    done
    "$ctr" --address "$address" -n k8s.io images ls -q >&2 ;;
  *)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
    exit 2 ;;
esac
