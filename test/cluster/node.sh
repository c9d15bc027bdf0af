# The real node of the test harness: containerd 2.x + Debian's runc + CNI
# bridge + kubelet on this machine, joined to the harness's API server with
# TLS and a real node identity. Sourced by cluster.sh (see the interface at
# the top of that file); needs root.
#
# One real node per host: kubelet's device-plugin directory is fixed
# (/var/lib/kubelet/device-plugins), and the kubepods cgroups and the cni0
# bridge are the host's. So the kubelet root is the default /var/lib/kubelet,
# and $_CLUSTER_NODE_STATE (in /run) names the cluster that owns the node and
# the host paths that the node created, for cluster_node_down, for the
# watchdog and for a later cluster_node_up after a crash.
#
# What lives where
#   $CLUSTER_DIR/node/                 configs, certificates, containerd's root and
#                                      state, CNI conf and IPAM state, resolv.conf
#   $CLUSTER_DIR/logs/{containerd,kubelet}.log
#   /var/lib/kubelet                   kubelet's root (pods, device-plugins,
#                                      pod-resources, plugins, pod logs)
#   /run/containerd                    shim sockets (s/) and runc state (runc/):
#                                      containerd puts them there whatever its state dir
#   /var/log/containers                kubelet's fixed symlinks to the container logs
#   /var/lib/cni/results               libcni's result cache
#   cni0, /sys/fs/cgroup/*/kubepods    the bridge and the pods' cgroups

_CLUSTER_NODE_STATE=/run/gpu-extender-test-node
CLUSTER_KUBELET_ROOT=/var/lib/kubelet
# Host paths the node may create; those missing before cluster_node_up are
# removed by cluster_node_down.
_CLUSTER_NODE_HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/containerd
  /etc/cdi /run/cdi /usr/libexec/kubernetes)
_CLUSTER_NODE_CNI_NET=gpu-test
_CLUSTER_NODE_LABEL=gpu-extender.test/real-node
CLUSTER_PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
CLUSTER_BUSYBOX_IMAGE=gpu-test/busybox:local
CLUSTER_PRODUCT_IMAGE=gpu-extender:$(cat "$CLUSTER_HARNESS_DIR/../../VERSION")
# nvidia-uvm has no fixed major: the driver asks for a dynamic one (listed in
# /proc/devices; real hosts show numbers from 234 to 511). The fake takes 511,
# the first number the kernel hands out from its upper dynamic range, which
# this machine's /proc/devices does not list; nothing opens the fake anyway.
CLUSTER_FAKE_UVM_MAJOR=511

# ---- host state --------------------------------------------------------------------

_cluster_node_host_ip() {  # the address of the default route (kubelet refuses loopback)
  ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}'
}

# _cluster_node_pids_under DIR: processes whose command line names DIR
# (kubelet and containerd by their configs, the shims by containerd's socket).
_cluster_node_pids_under() {
  local pid cmd
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [[ $pid == "${BASHPID:-$$}" ]] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
    [[ $cmd == *"$1"* ]] && echo "$pid"
  done
}

# _cluster_node_pod_pids: every process in a kubepods cgroup (the containers).
_cluster_node_pod_pids() {
  cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/*/cgroup.procs \
    /sys/fs/cgroup/*/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/*/cgroup.procs \
    /sys/fs/cgroup/kubepods/cgroup.procs 2>/dev/null | sort -u
}

# _cluster_node_mounts PREFIX...: mount points at or under the prefixes, deepest first.
_cluster_node_mounts() {
  awk '{print $5}' /proc/self/mountinfo | while read -r m; do
    m=$(printf '%b' "$m")   # mountinfo escapes spaces as \040
    local p
    for p in "$@"; do
      if [[ $m == "$p" || $m == "$p"/* ]]; then echo "$m"; break; fi
    done
  done | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-
}

# _cluster_node_scrub OWNER_DIR: remove everything a node of the cluster in
# OWNER_DIR left on the host, whether it stopped cleanly or crashed: its
# processes and containers, mounts, cgroups, the bridge, the host paths it
# created. Idempotent; goes on past what fails, also under set -e.
_cluster_node_scrub() {
  case $- in *e*) set +e; _cluster_node_scrub "$@"; set -e; return 0 ;; esac
  local owner=$1 node=$1/node i pid m
  # Processes that name the node's directory (kubelet, containerd, shims),
  # then whatever still runs in the pods' cgroups.
  for pid in $(_cluster_node_pids_under "$node/"); do kill -KILL "$pid" 2>/dev/null; done
  for ((i = 0; i < 50; i++)); do
    local pids
    pids=$(_cluster_node_pod_pids)
    [[ -z $pids ]] && break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.1
  done
  [[ -z $(_cluster_node_pod_pids) ]] || _cluster_err "cluster_node_down: processes left in kubepods cgroups: $(_cluster_node_pod_pids | tr '\n' ' ')"
  # Mounts: kubelet's volumes and its root bind-mounted onto itself, the
  # containers' root file systems and shm, the network namespaces.
  for ((i = 0; i < 3; i++)); do
    local left=0
    while read -r m; do
      [[ -n $m ]] || continue
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || left=1
    done < <(_cluster_node_mounts "$CLUSTER_KUBELET_ROOT" "$node" /run/containerd)
    ((left)) || break
    sleep 0.2
  done
  m=$(_cluster_node_mounts "$CLUSTER_KUBELET_ROOT" "$node" /run/containerd)
  [[ -z $m ]] || _cluster_err "cluster_node_down: could not unmount: ${m//$'\n'/ }"
  # cgroups: every v1 hierarchy (and a v2 root) has a kubepods tree; children first.
  local cg
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $cg ]] || continue
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
    [[ -d $cg ]] && _cluster_err "cluster_node_down: could not remove the cgroup $cg"
  done
  if ip link show cni0 >/dev/null 2>&1; then
    ip link delete cni0 || _cluster_err "cluster_node_down: could not delete the bridge cni0"
  fi
  rm -f /var/lib/cni/results/"$_CLUSTER_NODE_CNI_NET"-* 2>/dev/null
  # Container log links into kubelet's root.
  local l
  for l in /var/log/containers/*.log; do
    [[ -L $l && $(readlink "$l") == "$CLUSTER_KUBELET_ROOT"/* ]] && rm -f "$l"
  done
  if [[ -f $_CLUSTER_NODE_STATE/created ]]; then
    local p
    while read -r p; do
      [[ -n $p && -e $p ]] || continue
      # (never through a mount point that we failed to take down)
      if [[ -n $(_cluster_node_mounts "$p") ]]; then
        _cluster_err "cluster_node_down: $p still has mounts; left in place"
      else
        rm -rf "$p"
      fi
    done <"$_CLUSTER_NODE_STATE/created"
  fi
  if [[ -f $CLUSTER_KUBELET_ROOT/.gpu-extender-test-node && -z $(_cluster_node_mounts "$CLUSTER_KUBELET_ROOT") ]]; then
    rm -rf "$CLUSTER_KUBELET_ROOT"
  fi
  rm -rf "$_CLUSTER_NODE_STATE"
}

# _cluster_node_claim: take the host's node slot for this cluster, or fail.
_cluster_node_claim() {
  if [[ -f $_CLUSTER_NODE_STATE/owner ]]; then
    local owner
    owner=$(<"$_CLUSTER_NODE_STATE/owner")
    if [[ -n $(_cluster_node_pids_under "$owner/node/") ]]; then
      _cluster_err "cluster_node_up: the node of the cluster in $owner is running on this host (one per host; stop it first)"
      return 1
    fi
    _cluster_err "cluster_node_up: cleaning up after the node of $owner, which did not stop cleanly"
    _cluster_node_scrub "$owner"
  fi
  if [[ -e $CLUSTER_KUBELET_ROOT && ! -f $CLUSTER_KUBELET_ROOT/.gpu-extender-test-node ]]; then
    _cluster_err "cluster_node_up: $CLUSTER_KUBELET_ROOT exists and was not made by this harness (a real kubelet?); not touching it"
    return 1
  fi
  if [[ -e $CLUSTER_KUBELET_ROOT ]]; then   # ours, from a run whose /run state is gone (reboot)
    _cluster_node_scrub "/nonexistent"
  fi
  if ip link show cni0 >/dev/null 2>&1; then
    _cluster_err "cluster_node_up: a bridge cni0 exists (another CNI user on this host?)"
    return 1
  fi
  mkdir -p "$_CLUSTER_NODE_STATE"
  echo "$CLUSTER_DIR" >"$_CLUSTER_NODE_STATE/owner"
  local p
  : >"$_CLUSTER_NODE_STATE/created"
  for p in "${_CLUSTER_NODE_HOST_PATHS[@]}"; do
    [[ -e $p ]] || echo "$p" >>"$_CLUSTER_NODE_STATE/created"
  done
}

# ---- containerd --------------------------------------------------------------------

_cluster_node_write_containerd_config() {
  local n=$CLUSTER_NODE_DIR
  mkdir -p "$n/containerd/root" "$n/containerd/state" "$n/containerd/tmp" "$n/cni/net.d" "$n/cni/ipam"
  # Config version 3 (containerd 2.x): the CRI settings live in
  # io.containerd.cri.v1.images and io.containerd.cri.v1.runtime.
  cat >"$n/containerd.toml" <<EOF
version = 3
root = '$n/containerd/root'
state = '$n/containerd/state'
temp = '$n/containerd/tmp'
imports = []

[grpc]
  address = '$CLUSTER_CONTAINERD_ADDRESS'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$CLUSTER_PAUSE_IMAGE'

  [plugins.'io.containerd.cri.v1.runtime']
    # This VM lacks CAP_SYS_RESOURCE: lowering a container's oom_score_adj
    # below containerd's own is refused, and runc then fails with "can't get
    # final child's PID from pipe".
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
    # network namespaces under the state dir, not /run/netns
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '$n/cni/net.d'
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
EOF
  # One bridge network; pods get 10.244.0.0/24 (no routes to other nodes,
  # no masquerading: test pods talk to nothing but themselves).
  cat >"$n/cni/net.d/10-$_CLUSTER_NODE_CNI_NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$_CLUSTER_NODE_CNI_NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n/cni/ipam",
        "ranges": [[{"subnet": "10.244.0.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

# cluster_ctr ARGS...: ctr in the k8s.io namespace of the node's containerd.
cluster_ctr() {
  "$CLUSTER_CONTAINERD_BIN/ctr" --address "$CLUSTER_CONTAINERD_ADDRESS" -n k8s.io "$@"
}

_cluster_node_start_containerd() {
  _cluster_start containerd "$CLUSTER_DIR/logs/containerd.log" \
    env PATH="$CLUSTER_CONTAINERD_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "$CLUSTER_CONTAINERD_BIN/containerd" --config "$CLUSTER_NODE_DIR/containerd.toml" --log-level info
  if ! _cluster_wait_up containerd 30 "containerd on $CLUSTER_CONTAINERD_ADDRESS" cluster_ctr version; then
    _cluster_tail_log containerd
    return 1
  fi
}

# cluster_containerd_restart: stop containerd (TERM; running containers and
# their shims stay, as with a real restart) and start it with the same config.
cluster_containerd_restart() {
  [[ -n ${CLUSTER_NODE_DIR:-} ]] || { _cluster_err "cluster_containerd_restart: no node"; return 1; }
  cluster_kill containerd || return 1
  _cluster_node_start_containerd
}

# ---- kubelet -------------------------------------------------------------------------

_cluster_node_write_kubelet_config() {
  local n=$CLUSTER_NODE_DIR p=$CLUSTER_NODE_DIR/pki
  cluster_make_cert "$p" kubelet-client "/O=system:nodes/CN=system:node:$CLUSTER_NODE_NAME" || return 1
  cluster_make_cert "$p" kubelet-serving "/O=system:nodes/CN=system:node:$CLUSTER_NODE_NAME" \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:$CLUSTER_NODE_IP,IP:127.0.0.1,DNS:$CLUSTER_NODE_NAME,DNS:localhost" || return 1
  _cluster_kubeconfig "$n/kubelet.kubeconfig" kubelet "system:node:$CLUSTER_NODE_NAME" \
    "client-certificate: $p/kubelet-client.crt" "client-key: $p/kubelet-client.key" || return 1
  : >"$n/resolv.conf"   # no cluster DNS; pods get an empty resolv.conf
  local ports
  mapfile -t ports < <(_cluster_free_ports 2)
  CLUSTER_KUBELET_PORT=${ports[0]}
  local healthz=${ports[1]}
  echo "$healthz" >"$n/kubelet-healthz-port"
  cat >"$n/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $CLUSTER_NODE_IP
port: $CLUSTER_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
tlsCertFile: $p/kubelet-serving.crt
tlsPrivateKeyFile: $p/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CLUSTER_CA_FILE}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CLUSTER_CONTAINERD_ADDRESS
# cgroup v1 here; kubelet 1.35 refuses it unless told
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
resolvConf: $n/resolv.conf
# kubelet's default would be /usr/libexec/kubernetes/...; keep it in the root
volumePluginDir: $CLUSTER_KUBELET_ROOT/volume-plugins
podLogsDir: $CLUSTER_KUBELET_ROOT/pod-logs
staticPodPath: ""
rotateCertificates: false
serverTLSBootstrap: false
# Images cannot be pulled again (no registry): never collect them, and do
# not evict on a busy build disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
EOF
}

_cluster_node_kubelet_healthy() {
  [[ $(curl -s --max-time 2 "http://127.0.0.1:$(<"$CLUSTER_NODE_DIR/kubelet-healthz-port")/healthz" 2>/dev/null) == ok ]]
}

# cluster_node_ready [NAME]: true when the Node's Ready condition is True.
cluster_node_ready() {
  [[ $(kubectl get node "${1:-$CLUSTER_NODE_NAME}" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

_cluster_node_start_kubelet() {
  _cluster_start kubelet "$CLUSTER_DIR/logs/kubelet.log" "$CLUSTER_BIN/kubelet" \
    --config="$CLUSTER_NODE_DIR/kubelet.yaml" \
    --kubeconfig="$CLUSTER_NODE_DIR/kubelet.kubeconfig" \
    --root-dir="$CLUSTER_KUBELET_ROOT" \
    --cert-dir="$CLUSTER_NODE_DIR/pki" \
    --hostname-override="$CLUSTER_NODE_NAME" \
    --node-ip="$CLUSTER_NODE_IP" \
    --node-labels="$_CLUSTER_NODE_LABEL=true" \
    --v="${CLUSTER_KUBELET_V:-1}"
  if ! _cluster_wait_up kubelet 60 "kubelet /healthz" _cluster_node_kubelet_healthy ||
    ! _cluster_wait_up kubelet 60 "node $CLUSTER_NODE_NAME Ready" cluster_node_ready; then
    _cluster_tail_log kubelet
    return 1
  fi
}

# cluster_kubelet_restart: stop kubelet (TERM; the pods keep running) and
# start it again with the same configuration; waits for /healthz and Ready.
cluster_kubelet_restart() {
  [[ -n ${CLUSTER_NODE_DIR:-} ]] || { _cluster_err "cluster_kubelet_restart: no node"; return 1; }
  cluster_kill kubelet || return 1
  _cluster_node_start_kubelet
}

# ---- up / down -------------------------------------------------------------------------

cluster_node_up() {
  local t0=$SECONDS tool
  [[ -n ${CLUSTER_DIR:-} && -n ${CLUSTER_API_URL:-} ]] || { _cluster_err "cluster_node_up: no cluster (run cluster_up)"; return 1; }
  [[ -z ${CLUSTER_NODE_DIR:-} ]] || { _cluster_err "cluster_node_up: the node is already up"; return 1; }
  (($(id -u) == 0)) || { _cluster_err "cluster_node_up: needs root (mounts, cgroups, a bridge)"; return 1; }
  for tool in runc ip mount umount curl gcc python3 /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback; do
    command -v "$tool" >/dev/null || {
      _cluster_err "cluster_node_up: '$tool' is missing (make deps installs runc, containernetworking-plugins, iproute2, ...)"
      return 1
    }
  done
  CLUSTER_NODE_NAME=${1:-$(hostname | tr '[:upper:]' '[:lower:]')}
  [[ $CLUSTER_NODE_NAME =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] ||
    { _cluster_err "cluster_node_up: '$CLUSTER_NODE_NAME' is not a valid node name"; return 1; }
  CLUSTER_NODE_IP=$(_cluster_node_host_ip)
  [[ -n $CLUSTER_NODE_IP && $CLUSTER_NODE_IP != 127.* ]] ||
    { _cluster_err "cluster_node_up: no non-loopback IPv4 address on the default route (kubelet refuses loopback)"; return 1; }
  CLUSTER_CONTAINERD_BIN=$("$CLUSTER_HARNESS_DIR/../node/build-containerd.sh" --print-bin-dir) ||
    { _cluster_err "cluster_node_up: building containerd failed"; return 1; }
  _cluster_node_claim || return 1
  CLUSTER_NODE_DIR=$CLUSTER_DIR/node
  CLUSTER_CONTAINERD_ADDRESS=$CLUSTER_NODE_DIR/containerd.sock
  export CLUSTER_NODE_NAME CLUSTER_NODE_IP CLUSTER_NODE_DIR CLUSTER_CONTAINERD_ADDRESS CLUSTER_CONTAINERD_BIN
  mkdir -p "$CLUSTER_NODE_DIR" "$CLUSTER_KUBELET_ROOT"
  touch "$CLUSTER_KUBELET_ROOT/.gpu-extender-test-node"
  # kubelet makes its root an rshared mount (a bind mount onto itself) when
  # it starts, while another of its threads creates the PodResources socket
  # there: a rename that straddles the new mount fails with EXDEV and kubelet
  # exits. Made here, before kubelet starts, the mount is already in place.
  # (_cluster_node_scrub unmounts it with the rest.)
  mount --bind "$CLUSTER_KUBELET_ROOT" "$CLUSTER_KUBELET_ROOT" &&
    mount --make-rshared "$CLUSTER_KUBELET_ROOT" ||
    { _cluster_err "cluster_node_up: could not make $CLUSTER_KUBELET_ROOT an rshared mount"; cluster_node_down; return 1; }

  _cluster_node_write_containerd_config
  _cluster_node_start_containerd || { cluster_node_down; return 1; }
  _cluster_log "containerd up after $((SECONDS - t0))s"
  CTR="$CLUSTER_CONTAINERD_BIN/ctr" "$CLUSTER_HARNESS_DIR/../node/images.sh" import "$CLUSTER_CONTAINERD_ADDRESS" 2>"$CLUSTER_NODE_DIR/images.log" || {
    cat "$CLUSTER_NODE_DIR/images.log" >&2
    _cluster_err "cluster_node_up: importing the images failed"; cluster_node_down; return 1
  }
  _cluster_log "images imported after $((SECONDS - t0))s"
  _cluster_node_write_kubelet_config || { cluster_node_down; return 1; }
  export CLUSTER_KUBELET_PORT
  _cluster_node_start_kubelet || { _cluster_err "cluster_node_up: kubelet did not become Ready"; cluster_node_down; return 1; }
  {
    local v
    for v in CLUSTER_NODE_NAME CLUSTER_NODE_IP CLUSTER_NODE_DIR CLUSTER_CONTAINERD_ADDRESS CLUSTER_CONTAINERD_BIN \
      CLUSTER_KUBELET_PORT; do
      printf 'export %s=%q\n' "$v" "${!v}"
    done
  } >"$CLUSTER_NODE_DIR/env"
  _cluster_log "node $CLUSTER_NODE_NAME ($CLUSTER_NODE_IP) Ready in $((SECONDS - t0))s"
}

_cluster_node_pods() {  # the pods bound to the node, as ns/name lines
  kubectl get pods -A --field-selector "spec.nodeName=$CLUSTER_NODE_NAME" \
    -o 'jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' 2>/dev/null
}
_cluster_node_no_pods() { local p; p=$(_cluster_node_pods) && [[ -z $p ]]; }

cluster_node_down() {
  [[ -n ${CLUSTER_DIR:-} ]] || return 0
  # (a teardown goes on past what fails, also under set -e)
  case $- in *e*) set +e; cluster_node_down "$@"; set -e; return 0 ;; esac
  local owned=0
  [[ -f $_CLUSTER_NODE_STATE/owner && $(<"$_CLUSTER_NODE_STATE/owner") == "$CLUSTER_DIR" ]] && owned=1
  [[ -n ${CLUSTER_NODE_DIR:-} || -d $CLUSTER_DIR/node ]] || ((owned)) || return 0
  if [[ -z ${CLUSTER_BIN:-} && -f $CLUSTER_DIR/env ]]; then   # from `cluster.sh down DIR`
    # shellcheck disable=SC1091
    . "$CLUSTER_DIR/env"
  fi
  if [[ -z ${CLUSTER_NODE_DIR:-} && -f $CLUSTER_DIR/node/env ]]; then
    # shellcheck disable=SC1091
    . "$CLUSTER_DIR/node/env"
  fi
  CLUSTER_NODE_DIR=${CLUSTER_NODE_DIR:-$CLUSTER_DIR/node}
  if [[ -n ${CLUSTER_NODE_NAME:-} ]] && cluster_alive kubelet && _cluster_api_ready; then
    # Pods first, while kubelet runs (stopping kubelet leaves the containers
    # running). The NoExecute taint keeps DaemonSets and the schedulers from
    # putting pods back.
    kubectl taint node "$CLUSTER_NODE_NAME" gpu-extender.test/node-down=true:NoExecute --overwrite >/dev/null 2>&1
    _cluster_node_pods | while IFS=/ read -r ns name; do
      kubectl delete pod -n "$ns" "$name" --grace-period=1 --wait=false >/dev/null 2>&1
    done
    cluster_wait 60 "the pods on $CLUSTER_NODE_NAME to be deleted" _cluster_node_no_pods ||
      _cluster_err "cluster_node_down: left: $(_cluster_node_pods | tr '\n' ' ')"
  fi
  cluster_alive kubelet && cluster_kill kubelet
  [[ -n ${CLUSTER_NODE_NAME:-} ]] && _cluster_api_ready &&
    kubectl delete node "$CLUSTER_NODE_NAME" --wait=false >/dev/null 2>&1
  cluster_alive containerd && cluster_kill containerd
  # Shims, containers that kubelet did not stop, mounts, cgroups, cni0,
  # created paths: all of it, whatever state the node was in.
  ((owned)) && _cluster_node_scrub "$CLUSTER_DIR"
  rm -rf "$CLUSTER_NODE_DIR"
  unset CLUSTER_NODE_DIR CLUSTER_NODE_NAME CLUSTER_NODE_IP CLUSTER_CONTAINERD_ADDRESS CLUSTER_KUBELET_PORT
  return 0
}

# ---- fake GPUs ---------------------------------------------------------------------------

# cluster_fake_gpus DIR N: a fake NVIDIA host under DIR (test only): device
# files DIR/dev/nvidia0..N-1 (char 195:i), nvidiactl (195:255), nvidia-uvm
# ($CLUSTER_FAKE_UVM_MAJOR:0), and DIR/bin/nvidia-smi answering the agent's
# calls with the recorded outputs of an 8 x A100-SXM4-80GB host
# (test/fixtures/agent/nvidia/a100-sxm4-80gb-8gpu.*, cut to the first N GPUs;
# copied to DIR/fixtures). The script's interpreter is a static busybox in
# DIR/bin, so it also runs in the product's image, which has no shell: mount
# DIR at the same path. N is 1 to 8. Removed by cluster_down.
cluster_fake_gpus() {
  local dir=${1:?usage: cluster_fake_gpus DIR N} n=${2:?usage: cluster_fake_gpus DIR N}
  [[ $dir == /* ]] || { _cluster_err "cluster_fake_gpus: DIR must be absolute"; return 1; }
  [[ $n =~ ^[1-8]$ ]] || { _cluster_err "cluster_fake_gpus: N must be 1 to 8 (the fixture has 8 GPUs)"; return 1; }
  local fix=$CLUSTER_HARNESS_DIR/../fixtures/agent/nvidia/a100-sxm4-80gb-8gpu i
  [[ -x /bin/busybox ]] || { _cluster_err "cluster_fake_gpus: no /bin/busybox (install busybox-static)"; return 1; }
  rm -rf "$dir"
  mkdir -p "$dir/dev" "$dir/bin" "$dir/fixtures"
  [[ -n ${CLUSTER_DIR:-} ]] && cluster_add_cleanup "rm -rf '$dir'"
  for ((i = 0; i < n; i++)); do mknod -m 666 "$dir/dev/nvidia$i" c 195 "$i" || return 1; done
  mknod -m 666 "$dir/dev/nvidiactl" c 195 255 || return 1
  mknod -m 666 "$dir/dev/nvidia-uvm" c "$CLUSTER_FAKE_UVM_MAJOR" 0 || return 1
  head -n $((n + 1)) "$fix.query.csv" >"$dir/fixtures/query.csv"
  head -n "$n" "$fix.list.txt" >"$dir/fixtures/list.txt"
  # topo -m: 8-character columns; keep the first N GPU rows and columns.
  awk -v n="$n" '
    /^GPU[0-9]+/ { if (substr($1, 4) + 0 >= n) next }
    NR == 1 || /^(GPU|NIC)[0-9]+/ { $0 = substr($0, 1, 8 * (n + 1)) substr($0, 8 * 9 + 1) }
    { print }' "$fix.topo.txt" >"$dir/fixtures/topo.txt"
  install -m 0755 /bin/busybox "$dir/bin/busybox"
  cat >"$dir/bin/nvidia-smi" <<EOF
#!$dir/bin/busybox sh
# Fake nvidia-smi (gpu-extender test harness): recorded outputs of an
# A100-SXM4-80GB host, cut to $n GPUs.
case "\$1" in
--query-gpu=*) exec $dir/bin/busybox cat $dir/fixtures/query.csv ;;
-L) exec $dir/bin/busybox cat $dir/fixtures/list.txt ;;
topo) exec $dir/bin/busybox cat $dir/fixtures/topo.txt ;;
*) echo "fake nvidia-smi: '\$*' is not recorded" >&2; exit 1 ;;
esac
EOF
  chmod 0755 "$dir/bin/nvidia-smi"
}
