#!/usr/bin/env bash
# The product's image as an OCI image archive, with no container engine
# and no daemon (`make image`): deploy/image/rootfs.sh's tree of BUILDDIR
# (the programs, their libraries) packed as one reproducible layer by
# test/node/ocilayout.py (tar and sha256, standard library only: the same
# build gives the same digest).
#
#   deploy/image/oci.sh [BUILDDIR]      (default: build)
#
# Writes BUILDDIR/image/gpu-extender-VERSION.tar, named
# docker.io/library/gpu-extender:VERSION (VERSION: the repository's VERSION
# file, the tag deploy/base/kustomization.yaml names and what the programs'
# --version prints), and prints its path. Load it into a node's containerd
# with `ctr -n k8s.io images import FILE`, or push it to a registry with
# `skopeo copy oci-archive:FILE docker://REGISTRY/gpu-extender:VERSION`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:-$repo/build}
version=$(cat "$repo/VERSION")
err() { echo "oci.sh: $*" >&2; exit 1; }

for b in gpu-extender gpu-agent kubectl-gpu; do
  [[ -x $build/$b ]] || err "no $build/$b (run make all first)"
  got=$("$build/$b" --version | awk '{print $2}')
  [[ $got == "$version" ]] || err "$build/$b --version says $got, VERSION says $version (run make all again)"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
umask 022
"$here/rootfs.sh" "$work/rootfs" "$build"
mkdir -p "$build/image"
out=$build/image/gpu-extender-$version.tar
python3 "$repo/test/node/ocilayout.py" "$out" "docker.io/library/gpu-extender:$version" "$work/rootfs" \
  --entrypoint '["/usr/local/bin/gpu-extender"]' --user 65532:65532 >/dev/null || err "could not pack $out"
echo "$out"
