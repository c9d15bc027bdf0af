#!/usr/bin/env bash
# A one-machine cluster for trying gpu-extender out (`make cluster`,
# `make cluster-down`): the harness's control plane (test/cluster/cluster.sh)
# and a default kube-scheduler, the real node of this machine with 8 fake
# A100 GPUs (cluster_node_up, cluster_fake_gpus), optionally FAKE_NODES more
# fake nodes with 8 GPUs each, and the product from deploy/ through the
# overlay test/node/local (image gpu-extender:VERSION of `make image`).
#
#   test/node/local-cluster.sh up      start it in the background; ends with
#                                      `export KUBECONFIG=...` (needs root)
#   test/node/local-cluster.sh down    stop it and clean the host
#
# Environment: FAKE_NODES (default 0); GPU_EXTENDER_CACHE (the build cache,
# also where the state of the running cluster is kept: cluster/dir, and the
# admin kubeconfig cluster/kubeconfig, which embeds its CA and token).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}/cluster

log() { echo "local-cluster: $*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=../cluster/cluster.sh
. "$repo/test/cluster/cluster.sh"
# shellcheck source=deploy.sh
. "$here/deploy.sh"

running() {  # the cluster in $state/dir is up
  local dir
  dir=$(cat "$state/dir" 2>/dev/null) && [[ -f $dir/pids ]] || return 1
  CLUSTER_DIR=$dir cluster_alive kube-apiserver
}

down() {
  local dir
  dir=$(cat "$state/dir" 2>/dev/null) || { log "no cluster to stop"; return 0; }
  if [[ -d $dir ]]; then
    CLUSTER_DIR=$dir
    # shellcheck disable=SC1091
    [[ ! -f $dir/env ]] || . "$dir/env"
    cluster_down
  fi
  rm -rf "$state"
  log "stopped"
}

fail() {  # DESC: stop whatever was started
  log "$1 failed"
  [[ -n ${CLUSTER_DIR:-} ]] && log "logs: $CLUSTER_DIR/logs (kept)" && CLUSTER_KEEP=1 cluster_down
  rm -rf "$state"
  exit 1
}

write_kubeconfig() {  # self-contained: valid wherever it is copied
  (
    umask 077
    cat >"$state/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpu-local
  cluster:
    server: $CLUSTER_API_URL
    certificate-authority-data: $(base64 -w0 "$CLUSTER_CA_FILE")
users:
- name: admin
  user:
    token: $CLUSTER_ADMIN_TOKEN
contexts:
- name: gpu-local
  context: {cluster: gpu-local, user: admin}
current-context: gpu-local
EOF
  )
}

up() {
  local t0=$SECONDS i
  if running; then
    log "already up ($(cat "$state/dir"))"
    echo "export KUBECONFIG=$state/kubeconfig"
    return 0
  fi
  [[ -f $state/dir ]] && { log "cleaning up a cluster that is no longer running"; down; }
  [[ ${FAKE_NODES:-0} =~ ^[0-9]+$ ]] || die "FAKE_NODES must be a number"
  [[ -x $repo/build/gpu-extender && -x $repo/build/gpu-agent ]] || die "no build/gpu-extender, build/gpu-agent (make all)"
  mkdir -p "$state"

  # Detached: no traps, no watchdog; the processes outlive this script.
  _CLUSTER_DETACHED=1
  cluster_up || fail "cluster_up"
  echo "$CLUSTER_DIR" >"$state/dir"
  log "control plane up ($((SECONDS - t0))s)"
  node_start_default_scheduler || fail "the default kube-scheduler"
  cluster_node_up || fail "cluster_node_up"
  log "node $CLUSTER_NODE_NAME Ready ($((SECONDS - t0))s)"
  cluster_fake_gpus "$NODE_FAKE_ROOT" 8 || fail "cluster_fake_gpus"
  for ((i = 1; i <= ${FAKE_NODES:-0}; i++)); do
    cluster_create_gpu_node "fake-gpu-$i" --resource gpu.scheduling/gpu=8 || fail "fake node fake-gpu-$i"
  done

  node_deploy_product || fail "deploying test/node/local"
  # The fake nodes have no kubelet and no agent pod: publish their
  # GpuNodeStatus once, from here, as the agent's identity.
  for ((i = 1; i <= ${FAKE_NODES:-0}; i++)); do
    "$repo/build/gpu-agent" run --once --node "fake-gpu-$i" --tools-dir "$NODE_FAKE_ROOT/bin" \
      --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --log-level warn || fail "GpuNodeStatus of fake-gpu-$i"
  done
  node_wait_product || fail "the product to roll out"
  write_kubeconfig
  kubectl get pods -n gpu-system -o wide >&2
  log "up in $((SECONDS - t0))s: node $CLUSTER_NODE_NAME with 8 fake GPUs, ${FAKE_NODES:-0} fake nodes; logs in $CLUSTER_DIR/logs"
  log "stop it with: make cluster-down"
  echo "export KUBECONFIG=$state/kubeconfig"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2 ;;
esac
