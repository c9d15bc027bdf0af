# Sourced by bench/e2e.sh: the peer extenders' rows (gpushare, hami), each
# started and configured as its own documentation says, on this harness's
# control plane. bench/peers/build.sh builds them (cached).
#
#   peer_start NAME LABEL BINARY   spawn the peer as LABEL (cluster_spawn) on a
#                                  free port, wait until it answers; sets PEER_URL
#   peer_extender_config NAME URL  print the `extenders:` stanza of
#                                  KubeSchedulerConfiguration for it
#   peer_resource NAME             the pods' limits (e2e_load.py pods's RESOURCE)
#
# Both talk to the API server as admin (CLUSTER_KUBECONFIG; their own RBAC
# is not installed) with QPS and burst 5000, as the harness's kube-scheduler.

PEERS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

peer_resource() {
  case $1 in
    gpushare) echo "aliyun.com/gpu-mem=80" ;;                      # a whole GPU's memory: one device a pod
    hami) echo "nvidia.com/gpu=1,nvidia.com/gpumem=81559" ;;        # the same
  esac
}

peer_start() {  # NAME LABEL BINARY
  local name=$1 label=$2 bin=$3 port mport
  port=$(e2e_free_port) || return 1
  case $name in
    gpushare)
      # Its log (zap JSON) goes to stdout, five lines a node at every filter
      # at its quietest level (LOG_LEVEL cannot turn off its V(3) lines):
      # dropped, not written to disk. Ready once it listens (/version): it
      # builds its cache from the informers first.
      # PEER_GPUSHARE_QPS=0: client-go's defaults, as published (5 qps, burst 10).
      cluster_spawn "$label" env KUBECONFIG="$CLUSTER_KUBECONFIG" PORT="$port" BENCH_KUBE_QPS="${PEER_GPUSHARE_QPS:-5000}" \
        bash -c 'exec "$0" >/dev/null' "$bin"
      PEER_URL=http://127.0.0.1:$port
      cluster_wait 60 "$label ready" curl -sf "$PEER_URL/version" >/dev/null || return 1 ;;
    hami)
      mport=$(e2e_free_port) || return 1
      while [[ $mport == "$port" ]]; do mport=$(e2e_free_port) || return 1; done
      # No device plugin and no kubelet here: nobody releases the node lock
      # its bind takes (hami.io/mutex.lock, which the device plugin releases
      # when kubelet asks it to allocate). --node-lock-timeout 1ms lets the
      # next bind on that node find the lock expired and release it itself
      # (the same patch the device plugin would make), so that a lock never
      # blocks a bind for its 5-minute default. (HAMI_NODELOCK_EXPIRE, the
      # chart's setting, is overridden by the flag's default at start.)
      cluster_spawn "$label" env KUBECONFIG="$CLUSTER_KUBECONFIG" "$bin" --node-lock-timeout 1ms \
        --http_bind "127.0.0.1:$port" --metrics-bind-address "127.0.0.1:$mport" \
        --device-config-file "$PEERS_DIR/hami-device-config.yaml" --kube-qps 5000 --kube-burst 5000
      PEER_URL=http://127.0.0.1:$port
      cluster_wait 60 "$label ready" curl -sf "$PEER_URL/readyz" >/dev/null || return 1
      # It learns the nodes' devices from their annotations every 15 s: the
      # row starts once every node is known (its log names each once).
      cluster_wait 180 "$label knows the nodes" bash -c \
        '(( $(grep -c "Node device added" "$0") >= $1 ))' "$(cluster_log "$label")" "$NODES" >/dev/null || return 1 ;;
    *) return 1 ;;
  esac
}

peer_extender_config() {  # NAME URL
  case $1 in
    gpushare)  # config/scheduler-policy-config.yaml of gpushare-scheduler-extender
      cat <<YAML
extenders:
- urlPrefix: "$2/gpushare-scheduler"
  filterVerb: filter
  bindVerb: bind
  enableHTTPS: false
  nodeCacheCapable: true
  managedResources:
  - name: aliyun.com/gpu-mem
    ignoredByScheduler: false
  ignorable: false
YAML
      ;;
    hami)  # charts/hami/templates/scheduler/configmap.yaml, default values, no webhook TLS
      cat <<YAML
extenders:
- urlPrefix: "$2"
  enableHTTPS: false
  filterVerb: filter
  bindVerb: bind
  nodeCacheCapable: true
  weight: 1
  httpTimeout: 30s
  managedResources:
$(for r in nvidia.com/gpu nvidia.com/gpumem nvidia.com/gpucores nvidia.com/gpumem-percentage nvidia.com/priority; do
    printf '  - name: %s\n    ignoredByScheduler: true\n' "$r"; done)
YAML
      ;;
  esac
}
