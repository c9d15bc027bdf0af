#!/usr/bin/env bash
# Assembles the root file system of the gpu-extender image (its programs) in
# a directory. The repository's Dockerfile runs it in its build stage and
# copies the result onto scratch; the test node (test/node/images.sh) runs it
# on the build machine and packs the same tree as an OCI archive, so both
# images hold the same files.
#
#   deploy/image/rootfs.sh OUTDIR [BUILDDIR]     (BUILDDIR default: build)
#
# Contents: /usr/local/bin/gpu-extender, /usr/local/bin/gpu-agent and
# /usr/local/bin/kubectl-gpu (the `kubectl gpu` plugin, for `kubectl exec`
# and for copying out) from BUILDDIR (`make all`), exactly the shared
# libraries they load (as ldd
# resolves them on this machine, the dynamic loader included),
# /etc/ssl/certs/ca-certificates.crt, /etc/passwd and /etc/group with root
# and nonroot (65532), and a world-writable /tmp. OUTDIR is emptied first.
set -euo pipefail

out=${1:?usage: rootfs.sh OUTDIR [BUILDDIR]}
build=${2:-build}
err() { echo "rootfs.sh: $*" >&2; exit 1; }

bins=(gpu-extender gpu-agent kubectl-gpu)
for b in "${bins[@]}"; do
  [[ -x $build/$b ]] || err "no $build/$b (run make all first)"
done
certs=/etc/ssl/certs/ca-certificates.crt
[[ -f $certs ]] || err "no $certs (install the ca-certificates package)"

rm -rf "$out"
mkdir -p "$out/usr/local/bin" "$out/etc/ssl/certs" "$out/tmp"
chmod 1777 "$out/tmp"
for b in "${bins[@]}"; do
  install -m 0755 "$build/$b" "$out/usr/local/bin/$b"
done

# Every path ldd prints ("libx.so.1 => /path (0x...)" and the loader's own
# "/lib64/ld-linux-x86-64.so.2 (0x...)"), copied with symlinks resolved to
# the same path in the image, where the loader's default directories find
# them (no ld.so.cache in the image).
mapfile -t libs < <(for b in "${bins[@]}"; do ldd "$build/$b"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
((${#libs[@]})) || err "ldd found no libraries for ${bins[*]} (static build?)"
for lib in "${libs[@]}"; do
  [[ -f $lib ]] || err "ldd names $lib, which does not exist"
  mkdir -p "$out$(dirname "$lib")"
  install -m 0755 "$(readlink -f "$lib")" "$out$lib"
done

install -m 0644 "$certs" "$out/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$out/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$out/etc/group"
chmod 0644 "$out/etc/passwd" "$out/etc/group"
echo "rootfs.sh: $out: ${bins[*]} and ${#libs[@]} libraries" >&2
