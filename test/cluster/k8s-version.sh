# Sourced: selects the Kubernetes release the harness builds and runs.
#
#   K8S_VERSION=v1.37.2 test/e2e/run.sh test/e2e/gang.sh
#
# Without K8S_VERSION (or with the default's), the default release:
# versions.env with go.mod/go.sum. Any other release the harness supports has
# versions/<version>.env, .mod and .sum (gen-gomod.sh <version> writes them);
# the build uses that .mod through `go build -modfile`. Each release is built
# and cached on its own (build.sh: $GPU_EXTENDER_CACHE/k8s-<version>/).
#
# Sets K8S_VERSION, K8S_BUILD_DATE, ETCD_VERSION, K8S_GOTOOLCHAIN (the Go
# toolchain the release needs, "local" for this machine's) and K8S_MODFILE
# (absolute path of the .mod file). An unknown version is an error (return 2)
# that names the supported ones.
# K8S_SUPPORTED_VERSIONS lists every release the harness has files for, oldest first.
_k8s_harness_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_k8s_wanted=${K8S_VERSION:-}
K8S_GOTOOLCHAIN=local
# shellcheck source=versions.env
. "$_k8s_harness_dir/versions.env"
K8S_MODFILE=$_k8s_harness_dir/go.mod
K8S_SUPPORTED_VERSIONS=$(
  { echo "$K8S_VERSION"
    for f in "$_k8s_harness_dir"/versions/v*.env; do [[ -f $f ]] && basename "$f" .env; done
  } | sort -uV | tr '\n' ' ')
K8S_SUPPORTED_VERSIONS=${K8S_SUPPORTED_VERSIONS% }
if [[ -n $_k8s_wanted && $_k8s_wanted != "$K8S_VERSION" ]]; then
  if [[ ! -f $_k8s_harness_dir/versions/$_k8s_wanted.env || ! -f $_k8s_harness_dir/versions/$_k8s_wanted.mod ]]; then
    echo "K8S_VERSION=$_k8s_wanted: the harness has no files for it (supported: $K8S_SUPPORTED_VERSIONS; test/cluster/gen-gomod.sh $_k8s_wanted adds one)" >&2
    unset _k8s_wanted _k8s_harness_dir
    return 2
  fi
  # shellcheck disable=SC1090
  . "$_k8s_harness_dir/versions/$_k8s_wanted.env"
  K8S_MODFILE=$_k8s_harness_dir/versions/$_k8s_wanted.mod
fi
unset _k8s_wanted _k8s_harness_dir
