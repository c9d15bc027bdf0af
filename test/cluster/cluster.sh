#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for tests: etcd, kube-apiserver,
# kube-controller-manager (garbage collector, service accounts, root CA
# publisher, endpoints, Deployments/ReplicaSets/DaemonSets, Jobs/CronJobs and
# their clean-up, namespaces; never the node
# lifecycle controller) and, on request, kube-scheduler. Nodes are fake Node
# objects whose status the tests write; on request (cluster_node_up, root) this
# machine also joins as one real node: containerd, runc, a CNI bridge and kubelet.
# Binaries come from test/cluster/build.sh (cached; built on first use).
#
# ---------------------------------------------------------------------------
# Sourced use (test scripts):
#
#   . test/cluster/cluster.sh
#   cluster_up                 # build if needed, start, install EXIT/INT/TERM traps
#   cluster_start_scheduler my-sched-config.yaml [NAME]
#   cluster_create_gpu_node gpu-a1 gpu.scheduling/model=H100 --resource gpu.scheduling/gpu=8
#   kubectl apply -f ...       # admin; see kubectl_as for other identities
#   cluster_wait 30 "pod scheduled" cluster_pod_node default p1
#   ...                        # the traps call cluster_down on exit, Ctrl-C, TERM
#
# cluster_up sets traps on EXIT, INT and TERM; a test that needs its own
# cleanup should register it with cluster_add_cleanup rather than replace them
# (or call cluster_down from its own trap). If the shell that ran cluster_up is
# killed with SIGKILL, a watchdog process stops the cluster within a few seconds.
#
# Functions
#   cluster_up                    start etcd, kube-apiserver, kube-controller-manager,
#                                 wait for /readyz and the default ServiceAccount,
#                                 set the variables below, install traps; extra
#                                 kube-apiserver flags: CLUSTER_APISERVER_FLAGS (word-split)
#   cluster_down                  stop every process this harness started (each is
#                                 its own process group), wait, remove CLUSTER_DIR;
#                                 idempotent; runs cluster_add_cleanup hooks first
#   cluster_add_cleanup CMD...    run CMD (eval'd) at the start of cluster_down
#   cluster_env                   print `export VAR=...` lines for the variables below
#   cluster_versions              print the version of every component
#   cluster_binary_versions DIR [INDENT]
#                                 print the version of each binary in DIR (build.sh)
#   cluster_start_scheduler CONFIG [NAME]
#                                 start kube-scheduler (NAME default "scheduler"; a
#                                 second NAME starts a second instance) with the
#                                 KubeSchedulerConfiguration file CONFIG (YAML).
#                                 --leader-elect=false, own free secure port, waits
#                                 for its /readyz. With --config, kube-scheduler
#                                 ignores --kubeconfig, so if CONFIG has no top-level
#                                 `clientConnection:` a copy with
#                                 clientConnection.kubeconfig=$CLUSTER_SCHEDULER_KUBECONFIG
#                                 is used. Extra scheduler flags: CLUSTER_SCHEDULER_FLAGS
#                                 (word-split) or arguments after CONFIG NAME.
#   cluster_stop_apiserver [--kill]
#                                 stop kube-apiserver (TERM, then KILL after 10 s;
#                                 --kill: SIGKILL at once, like a crash); etcd and the
#                                 other processes keep running. With clients' watches
#                                 open, TERM takes the whole 10 s (it stops listening
#                                 at once but keeps the open watches, silent, until
#                                 killed)
#   cluster_start_apiserver       start it again with the same flags, certificates,
#                                 tokens and port (CLUSTER_API_URL and the kubeconfigs
#                                 stay valid); waits for /readyz
#   cluster_restart_apiserver [--kill]
#                                 both of the above
#   cluster_stop_etcd [--kill]    stop etcd (TERM, then KILL after 10 s; --kill: SIGKILL
#                                 at once); its data stays, kube-apiserver keeps running
#   cluster_start_etcd            start it again on the same ports with the same data;
#                                 waits for its /health
#   cluster_restart_etcd [--kill] both of the above
#   cluster_stop_scheduler [NAME] stop that instance (TERM, then KILL)
#   cluster_scheduler_port [NAME] its secure (HTTPS) port
#   cluster_spawn NAME CMD...     start CMD in its own process group, stdout+stderr to
#                                 $CLUSTER_DIR/logs/NAME.log; stopped by cluster_down
#                                 (use for the extender, the agent, ...). Prints nothing;
#                                 the pid is in CLUSTER_LAST_PID.
#   cluster_kill NAME             stop a spawned process (TERM, 10 s, KILL)
#   cluster_kill9 NAME            SIGKILL its process group at once, like a crash, and
#                                 wait up to 5 s for it to go; fails if it did not.
#                                 It stays recorded (cluster_kill forgets it)
#   cluster_alive NAME            true if that process is still running
#   cluster_log NAME              path of its log (etcd, kube-apiserver,
#                                 kube-controller-manager, scheduler NAME, spawn NAME)
#   cluster_create_gpu_node NAME [LABEL=VALUE...] [--cpu N] [--memory Q] [--pods N]
#                           [--resource NAME=QTY]... [--taint KEY=VAL:EFFECT]...
#                                 create a Node, set capacity=allocatable (defaults
#                                 cpu 64, memory 512Gi, pods 110, plus each
#                                 --resource) and a Ready condition through the
#                                 status subresource, and make sure it has no taints
#                                 but the --taint ones
#   cluster_ensure_namespace NS   create NS if needed, wait for its default ServiceAccount
#   cluster_delete_pod NS NAME    delete a pod at once (--grace-period=0 --force: without
#                                 a kubelet a bound pod otherwise stays Terminating)
#   cluster_pod_node NS NAME      print spec.nodeName; fails while it is empty
#   cluster_wait SECONDS DESC CMD...
#                                 run CMD every 0.25 s until it succeeds; on timeout
#                                 print "timed out after Ns waiting for DESC" and fail
#   cluster_wait_gone SECONDS KIND NAME [NS]
#                                 wait until the object no longer exists
#   cluster_node_up [NAME]        (root) this machine as a real node, NAME default the
#                                 host name in lower case: containerd 2.x (own config,
#                                 CDI on, runc v2, cgroupfs), CNI bridge cni0 with
#                                 10.244.0.0/24, the images of test/node/images.sh
#                                 imported, kubelet with a client certificate for
#                                 system:node:NAME and a serving certificate from the
#                                 harness CA, node IP = the default route's address,
#                                 label gpu-extender.test/real-node=true. Waits for Ready.
#                                 One per host (kubelet root /var/lib/kubelet). Details:
#                                 node.sh
#   cluster_node_down             delete the node's pods (while kubelet runs), stop
#                                 kubelet and containerd, delete the Node, then remove
#                                 every shim, container, mount, kubepods cgroup, cni0 and
#                                 host path the node made; cluster_down calls it
#   cluster_kubelet_restart       stop kubelet and start it with the same configuration
#                                 (pods keep running); waits for /healthz and Ready
#   cluster_containerd_restart    the same for containerd
#   cluster_node_ready [NAME]     true when the Node's Ready condition is True
#   cluster_ctr ARGS...           ctr -n k8s.io against the node's containerd
#   cluster_make_cert DIR NAME SUBJECT [EXT-LINE...]
#                                 DIR/NAME.{key,crt} signed by the harness CA (openssl
#                                 extension lines; default: a client certificate)
#   cluster_fake_gpus DIR N       (test only) N fake NVIDIA GPUs under DIR: char devices
#                                 DIR/dev/nvidia0..N-1 (195:i), nvidiactl (195:255),
#                                 nvidia-uvm (511:0), and DIR/bin/nvidia-smi printing
#                                 recorded A100 outputs (interpreter: a static busybox in
#                                 DIR/bin, so it runs in the product image too); DIR is
#                                 removed by cluster_down
#   kubectl ARGS...               the built kubectl with the admin kubeconfig
#   kubectl_as ID ARGS...         kubectl as ID: admin, extender, agent, scheduler,
#                                 controller-manager
#
# Variables set (and exported) by cluster_up
#   CLUSTER_DIR            temp dir of this cluster (certs, kubeconfigs, logs, data)
#   CLUSTER_BIN            directory of the binaries (also put first on PATH)
#   CLUSTER_K8S_VERSION    e.g. v1.35.4 (K8S_VERSION picks another release the harness
#                          builds: test/cluster/k8s-version.sh)
#   CLUSTER_API_URL        https://127.0.0.1:PORT
#   CLUSTER_API_PORT, CLUSTER_ETCD_URL, CLUSTER_ETCD_PEER_URL
#   CLUSTER_CA_FILE        CA that signed the API server's serving certificate
#   CLUSTER_CA_KEY         its key (to sign more certificates, e.g. an HTTPS extender)
#   CLUSTER_SA_KEY         service-account signing key (private, PEM)
#   CLUSTER_KUBECONFIG             admin (user admin, group system:masters); also KUBECONFIG
#   CLUSTER_EXTENDER_KUBECONFIG    system:serviceaccount:gpu-system:gpu-extender
#   CLUSTER_AGENT_KUBECONFIG       system:serviceaccount:gpu-system:gpu-agent
#   CLUSTER_SCHEDULER_KUBECONFIG   system:kube-scheduler
#   CLUSTER_CONTROLLER_MANAGER_KUBECONFIG  system:kube-controller-manager
#   CLUSTER_ADMIN_TOKEN, CLUSTER_EXTENDER_TOKEN, CLUSTER_AGENT_TOKEN, CLUSTER_SCHEDULER_TOKEN
#                          bearer tokens (random per run); each is also in a file
#   CLUSTER_ADMIN_TOKEN_FILE, CLUSTER_EXTENDER_TOKEN_FILE, CLUSTER_AGENT_TOKEN_FILE
#   The gpu-extender and gpu-agent identities carry the groups system:serviceaccounts,
#   system:serviceaccounts:gpu-system and system:authenticated, so RBAC bindings to the
#   ServiceAccounts gpu-system/gpu-extender and gpu-system/gpu-agent apply to them.
#   (The gpu-system namespace is not created; apply deploy/ for that.)
#
# Variables set (and exported) by cluster_node_up (also in $CLUSTER_DIR/node/env)
#   CLUSTER_NODE_NAME      the Node's name (the agent's NODE_NAME must agree)
#   CLUSTER_NODE_IP        its InternalIP (the address of the default route)
#   CLUSTER_NODE_DIR       $CLUSTER_DIR/node: configs, certificates, containerd's root
#                          and state, CNI config and IPAM state
#   CLUSTER_CONTAINERD_ADDRESS, CLUSTER_CONTAINERD_BIN (containerd, ctr, the shim)
#   CLUSTER_KUBELET_PORT   kubelet's HTTPS port on CLUSTER_NODE_IP
#   Constants: CLUSTER_BUSYBOX_IMAGE (gpu-test/busybox:local), CLUSTER_PRODUCT_IMAGE
#   (gpu-extender:VERSION, make image), CLUSTER_PAUSE_IMAGE, CLUSTER_KUBELET_ROOT (/var/lib/kubelet);
#   pods must use imagePullPolicy: Never (no registry).
#
# Environment read
#   GPU_EXTENDER_CACHE     build cache root (see build.sh)
#   TMPDIR                 where CLUSTER_DIR is made (default /tmp)
#   CLUSTER_KEEP=1         keep CLUSTER_DIR after cluster_down (logs for debugging)
#   CLUSTER_VERBOSE=1      log each step to stderr
#   CLUSTER_KUBELET_V      kubelet's --v (default 1)
#
# Standalone use:
#   test/cluster/cluster.sh up        start detached, print `export` lines (eval them);
#                                     the cluster runs until `down`
#   test/cluster/cluster.sh down [DIR]
#                                     stop the cluster in DIR (default: the last `up`)
#   test/cluster/cluster.sh run CMD...
#                                     start, run CMD with the variables exported, stop;
#                                     exits with CMD's status
#   (test/node/local-cluster.sh, `make cluster`: the same plus the real node and deploy/)
# ---------------------------------------------------------------------------

# Where this file lives (works when sourced from anywhere).
CLUSTER_HARNESS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_cluster_log() {
  if [[ ${CLUSTER_VERBOSE:-0} == 1 ]]; then echo "cluster: $*" >&2; fi
}
_cluster_err() { echo "cluster: $*" >&2; }

# ---- process management ---------------------------------------------------
# Each process runs as the leader of its own process group (setsid without a
# fork), recorded as "NAME PID" in $CLUSTER_DIR/pids, so cluster_down works
# even for processes started in a subshell.

# _cluster_start NAME LOGFILE CMD...   sets CLUSTER_LAST_PID
_cluster_start() {
  local name=$1 logfile=$2; shift 2
  local had_m=0
  case $- in *m*) had_m=1; set +m ;; esac   # so that setsid does not fork
  setsid "$@" </dev/null >>"$logfile" 2>&1 &
  CLUSTER_LAST_PID=$!
  ((had_m)) && set -m
  echo "$name $CLUSTER_LAST_PID" >>"$CLUSTER_DIR/pids"
  if [[ $name == watchdog ]]; then
    _cluster_log "started watchdog (pid $CLUSTER_LAST_PID)"
  else
    _cluster_log "started $name (pid $CLUSTER_LAST_PID): $*"
  fi
}

# _cluster_group_alive PGID: true while a non-zombie process is in that group.
_cluster_group_alive() {
  ps -e -o pgid=,stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {found=1} END {exit !found}'
}

_cluster_pid_of() {  # NAME -> latest pid recorded for NAME
  [[ -n ${CLUSTER_DIR:-} && -f $CLUSTER_DIR/pids ]] || return 1
  awk -v n="$1" '$1 == n {p=$2} END {if (p == "") exit 1; print p}' "$CLUSTER_DIR/pids"
}

# _cluster_wait_groups TENTHS PGID...: wait up to TENTHS x 0.1 s for the groups to end.
_cluster_wait_groups() {
  local n=$1 pg left i; shift
  for ((i = 0; i < n; i++)); do
    left=0
    for pg in "$@"; do _cluster_group_alive "$pg" && left=1; done
    ((left)) || break
    sleep 0.1
  done
  return 0
}

# _cluster_stop_groups PGID...: TERM every group, wait up to 10 s, KILL the rest.
_cluster_stop_groups() {
  local pg
  for pg in "$@"; do kill -TERM -- "-$pg" 2>/dev/null || true; done
  _cluster_wait_groups 100 "$@"
  for pg in "$@"; do
    if _cluster_group_alive "$pg"; then
      _cluster_err "process group $pg did not stop on TERM; killing it"
      kill -KILL -- "-$pg" 2>/dev/null || true
    fi
  done
  _cluster_wait_groups 50 "$@"
  # Reap those that are our children (others are reaped by their parent/init).
  for pg in "$@"; do wait "$pg" 2>/dev/null || true; done
}

cluster_spawn() {
  local name=$1; shift
  [[ -n ${CLUSTER_DIR:-} ]] || { _cluster_err "cluster_spawn: no cluster (run cluster_up)"; return 1; }
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { _cluster_err "cluster_spawn: bad name '$name'"; return 1; }
  case $name in
    etcd|kube-apiserver|kube-controller-manager|watchdog|scheduler-*|kubelet|containerd)
      _cluster_err "cluster_spawn: '$name' is reserved"; return 1 ;;
  esac
  if cluster_alive "$name"; then _cluster_err "cluster_spawn: $name is already running"; return 1; fi
  _cluster_start "$name" "$CLUSTER_DIR/logs/$name.log" "$@"
}

cluster_kill() {
  local pid
  pid=$(_cluster_pid_of "$1") || { _cluster_err "cluster_kill: no process named $1"; return 1; }
  _cluster_stop_groups "$pid"
  # Forget it, so that cluster_down never signals a recycled process id.
  awk -v p="$pid" '$2 != p' "$CLUSTER_DIR/pids" >"$CLUSTER_DIR/pids.new" &&
    mv "$CLUSTER_DIR/pids.new" "$CLUSTER_DIR/pids"
}

cluster_kill9() {
  local pid
  pid=$(_cluster_pid_of "$1") || return 1
  # (in a block with stderr closed: bash would report the killed job)
  {
    kill -KILL -- "-$pid"
    _cluster_wait_groups 50 "$pid"
    wait "$pid"
  } 2>/dev/null
  ! _cluster_group_alive "$pid"
}

cluster_alive() {
  local pid
  pid=$(_cluster_pid_of "$1") || return 1
  _cluster_group_alive "$pid"
}

cluster_log() {
  case $1 in
    etcd|kube-apiserver|kube-controller-manager) echo "$CLUSTER_DIR/logs/$1.log" ;;
    *) if [[ -f $CLUSTER_DIR/logs/kube-scheduler-$1.log ]]; then
         echo "$CLUSTER_DIR/logs/kube-scheduler-$1.log"
       else
         echo "$CLUSTER_DIR/logs/$1.log"
       fi ;;
  esac
}

_cluster_tail_log() {  # NAME: show the end of a component's log on stderr
  local f
  f=$(cluster_log "$1")
  if [[ -f $f ]]; then
    echo "----- last lines of $f -----" >&2
    tail -n 40 "$f" >&2
    echo "-----" >&2
  fi
}

# ---- waiting ----------------------------------------------------------------

cluster_wait() {
  local timeout=$1 desc=$2; shift 2
  local deadline=$((SECONDS + timeout))
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ((SECONDS >= deadline)); then
      _cluster_err "timed out after ${timeout}s waiting for $desc"
      return 1
    fi
    sleep 0.25
  done
}

_cluster_absent() {  # KIND NAME [NS]
  local out
  out=$(kubectl get "$1" "$2" ${3:+-n "$3"} --ignore-not-found -o name 2>/dev/null) || return 1
  [[ -z $out ]]
}

cluster_wait_gone() { cluster_wait "$1" "$2/$3 to be deleted" _cluster_absent "$2" "$3" "${4:-}"; }

# ---- kubectl ------------------------------------------------------------------

kubectl() {
  "$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_KUBECONFIG" "$@"
}

kubectl_as() {
  local id=$1; shift
  case $id in
    admin|extender|agent|scheduler|controller-manager) ;;
    *) _cluster_err "kubectl_as: unknown identity '$id'"; return 2 ;;
  esac
  "$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_DIR/kubeconfig/$id.kubeconfig" "$@"
}

# ---- certificates, tokens, kubeconfigs -------------------------------------------

# cluster_make_cert DIR NAME SUBJECT [EXT-LINE...]: DIR/NAME.key and DIR/NAME.crt,
# an EC key and a certificate signed by the harness CA with the given openssl
# extension lines (default: a client certificate).
cluster_make_cert() {
  local dir=$1 name=$2 subj=$3; shift 3
  (($#)) || set -- "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth"
  mkdir -p "$dir"
  (
    set -e
    umask 077
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "$subj" 2>/dev/null
    printf '%s\n' "$@" >"$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$CLUSTER_CA_FILE" -CAkey "$CLUSTER_CA_KEY" \
      -CAserial "$dir/ca.srl" -CAcreateserial -out "$dir/$name.crt" -days 2 -extfile "$dir/$name.ext" 2>/dev/null
    chmod 644 "$dir/$name.crt"
  ) || { _cluster_err "openssl could not make the certificate $dir/$name.crt ($subj)"; return 1; }
}

_cluster_make_pki() {
  local d=$CLUSTER_DIR/pki
  mkdir -p "$d"
  (
    set -e
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout ca.key -out ca.crt -days 2 -subj "/CN=gpu-extender-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    cat >apiserver.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out apiserver.crt -days 2 -extfile apiserver.ext 2>/dev/null
    # Front-proxy (request-header) CA and client: kube-scheduler's delegated
    # authentication reads this CA from kube-system/extension-apiserver-authentication
    # and logs errors forever when it is missing.
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 2 -subj "/CN=gpu-extender-test-front-proxy-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout front-proxy-client.key -out front-proxy-client.csr -subj "/CN=front-proxy-client" 2>/dev/null
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" >front-proxy-client.ext
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
      -CAcreateserial -out front-proxy-client.crt -days 2 -extfile front-proxy-client.ext 2>/dev/null
    # The API server's client certificate towards kubelets (logs, exec, port-forward).
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout apiserver-kubelet-client.key -out apiserver-kubelet-client.csr \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" >apiserver-kubelet-client.ext
    openssl x509 -req -in apiserver-kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out apiserver-kubelet-client.crt -days 2 -extfile apiserver-kubelet-client.ext 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  ) || { _cluster_err "openssl failed to make the certificates"; return 1; }
}

_cluster_make_tokens() {
  local d=$CLUSTER_DIR/tokens
  mkdir -p "$d"
  local id
  for id in admin extender agent scheduler controller-manager; do
    # 32 hex digits; (umask) so the files are private
    (umask 077; openssl rand -hex 16 >"$d/$id")
  done
  CLUSTER_ADMIN_TOKEN=$(<"$d/admin")
  CLUSTER_EXTENDER_TOKEN=$(<"$d/extender")
  CLUSTER_AGENT_TOKEN=$(<"$d/agent")
  CLUSTER_SCHEDULER_TOKEN=$(<"$d/scheduler")
  local kcm_token
  kcm_token=$(<"$d/controller-manager")
  local sa_groups="system:serviceaccounts,system:serviceaccounts:gpu-system,system:authenticated"
  # token,user,uid,"group1,group2"
  {
    echo "$CLUSTER_ADMIN_TOKEN,admin,admin-uid,\"system:masters,system:authenticated\""
    echo "$CLUSTER_EXTENDER_TOKEN,system:serviceaccount:gpu-system:gpu-extender,gpu-extender-uid,\"$sa_groups\""
    echo "$CLUSTER_AGENT_TOKEN,system:serviceaccount:gpu-system:gpu-agent,gpu-agent-uid,\"$sa_groups\""
    echo "$CLUSTER_SCHEDULER_TOKEN,system:kube-scheduler,kube-scheduler-uid,\"system:authenticated\""
    echo "$kcm_token,system:kube-controller-manager,kube-controller-manager-uid,\"system:authenticated\""
  } >"$CLUSTER_DIR/pki/tokens.csv"
  chmod 600 "$CLUSTER_DIR/pki/tokens.csv"
}

_cluster_write_kubeconfig() {  # ID USER TOKENFILE
  _cluster_kubeconfig "$CLUSTER_DIR/kubeconfig/$1.kubeconfig" "$1" "$2" "tokenFile: $3"
}

# _cluster_kubeconfig FILE CONTEXT USER CREDENTIALS...: a kubeconfig for the
# harness's API server; each CREDENTIALS line goes under the user (e.g.
# "tokenFile: F", or "client-certificate: C" and "client-key: K").
_cluster_kubeconfig() {
  local f=$1 ctx=$2 user=$3 line
  shift 3
  {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpu-test
  cluster:
    server: $CLUSTER_API_URL
    certificate-authority: $CLUSTER_CA_FILE
contexts:
- name: $ctx
  context: {cluster: gpu-test, user: "$user"}
current-context: $ctx
users:
- name: "$user"
  user:
EOF
    for line in "$@"; do echo "    $line"; done
  } >"$f"
  chmod 600 "$f"
}

# ---- start/stop ---------------------------------------------------------------------

_cluster_free_ports() { "$CLUSTER_BIN/freeport" "$1"; }

_cluster_api_ready() {
  [[ $("$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_KUBECONFIG" --request-timeout=5s get --raw /readyz 2>/dev/null) == ok ]]
}

# _cluster_wait_up NAME SECONDS DESC CMD...: like cluster_wait but fails fast when
# the process NAME dies.
_cluster_wait_up() {
  local name=$1 timeout=$2 desc=$3; shift 3
  local deadline=$((SECONDS + timeout))
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! cluster_alive "$name"; then
      _cluster_err "$name exited while waiting for $desc"
      return 3
    fi
    if ((SECONDS >= deadline)); then
      _cluster_err "timed out after ${timeout}s waiting for $desc"
      return 1
    fi
    sleep 0.25
  done
}

_cluster_port_conflict() {  # NAME: did it die because a port was taken?
  grep -q -i 'address already in use' "$(cluster_log "$1")" 2>/dev/null
}

# _cluster_launch_etcd: start etcd on $CLUSTER_ETCD_URL and $CLUSTER_ETCD_PEER_URL with
# its data in $CLUSTER_DIR/etcd-data (used by the first start and by restarts).
_cluster_launch_etcd() {
  _cluster_start etcd "$CLUSTER_DIR/logs/etcd.log" "$CLUSTER_BIN/etcd" \
    --name=test --data-dir="$CLUSTER_DIR/etcd-data" \
    --listen-client-urls="$CLUSTER_ETCD_URL" --advertise-client-urls="$CLUSTER_ETCD_URL" \
    --listen-peer-urls="$CLUSTER_ETCD_PEER_URL" --initial-advertise-peer-urls="$CLUSTER_ETCD_PEER_URL" \
    --initial-cluster="test=$CLUSTER_ETCD_PEER_URL" --initial-cluster-state=new \
    --unsafe-no-fsync --log-level=warn --quota-backend-bytes=$((1 << 30))
}

_cluster_start_etcd() {
  local attempt ports
  for attempt in 1 2 3; do
    mapfile -t ports < <(_cluster_free_ports 2)
    CLUSTER_ETCD_URL=http://127.0.0.1:${ports[0]}
    CLUSTER_ETCD_PEER_URL=http://127.0.0.1:${ports[1]}
    rm -rf "$CLUSTER_DIR/etcd-data"
    _cluster_launch_etcd
    if _cluster_wait_up etcd 30 "etcd on $CLUSTER_ETCD_URL" _cluster_etcd_ready; then return 0; fi
    if ! cluster_alive etcd && _cluster_port_conflict etcd; then
      _cluster_err "etcd lost a port race; retrying"; continue
    fi
    # died before writing a line (seen once right after another suite's
    # teardown): nothing to diagnose, so start it again
    if ! cluster_alive etcd && [[ ! -s $(cluster_log etcd) ]] && ((attempt < 3)); then
      _cluster_err "etcd exited without a word; retrying"; continue
    fi
    _cluster_tail_log etcd
    return 1
  done
  return 1
}

_cluster_etcd_ready() {
  # etcd answers GET /health with {"health":"true",...}; bash has no HTTP client,
  # so use /dev/tcp.
  local hostport=${CLUSTER_ETCD_URL#http://} reply
  exec 7<>"/dev/tcp/${hostport%:*}/${hostport#*:}" || return 1
  printf 'GET /health HTTP/1.0\r\nHost: %s\r\n\r\n' "$hostport" >&7
  reply=$(timeout 2 cat <&7)
  exec 7<&- 7>&-
  [[ $reply == *'"health":"true"'* ]]
}

# _cluster_launch_apiserver: start kube-apiserver on $CLUSTER_API_PORT with the
# harness's flags and certificates (used by the first start and by restarts).
_cluster_launch_apiserver() {
  local p=$CLUSTER_DIR/pki
  _cluster_start kube-apiserver "$CLUSTER_DIR/logs/kube-apiserver.log" "$CLUSTER_BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$CLUSTER_API_PORT" \
    --etcd-servers="$CLUSTER_ETCD_URL" \
    --cert-dir="$CLUSTER_DIR/apiserver-certs" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" \
    --requestheader-client-ca-file="$p/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$p/front-proxy-client.crt" \
    --proxy-client-key-file="$p/front-proxy-client.key" \
    --token-auth-file="$p/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" \
    --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --disable-admission-plugins=TaintNodesByCondition \
    --enable-admission-plugins=NodeRestriction \
    --endpoint-reconciler-type=none \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --enable-aggregator-routing=true \
    --allow-privileged=true \
    --profiling=false \
    --v=1 ${CLUSTER_APISERVER_FLAGS:-}
}

_cluster_start_apiserver() {
  local attempt
  for attempt in 1 2 3; do
    CLUSTER_API_PORT=$(_cluster_free_ports 1)
    CLUSTER_API_URL=https://127.0.0.1:$CLUSTER_API_PORT
    local id
    for id in admin extender agent scheduler controller-manager; do
      local user
      case $id in
        admin) user=admin ;;
        extender) user=system:serviceaccount:gpu-system:gpu-extender ;;
        agent) user=system:serviceaccount:gpu-system:gpu-agent ;;
        scheduler) user=system:kube-scheduler ;;
        controller-manager) user=system:kube-controller-manager ;;
      esac
      _cluster_write_kubeconfig "$id" "$user" "$CLUSTER_DIR/tokens/$id"
    done
    _cluster_launch_apiserver
    if _cluster_wait_up kube-apiserver 90 "kube-apiserver /readyz on $CLUSTER_API_URL" _cluster_api_ready; then
      return 0
    fi
    if ! cluster_alive kube-apiserver && _cluster_port_conflict kube-apiserver; then
      _cluster_err "kube-apiserver lost a port race; retrying"; continue
    fi
    _cluster_tail_log kube-apiserver
    return 1
  done
  return 1
}

# cluster_stop_apiserver [--kill]: stop kube-apiserver (TERM, then KILL after 10 s;
# --kill: SIGKILL at once, like a crash). etcd and everything else keep running.
cluster_stop_apiserver() {
  [[ -n ${CLUSTER_DIR:-} ]] || { _cluster_err "cluster_stop_apiserver: no cluster"; return 1; }
  local pid
  pid=$(_cluster_pid_of kube-apiserver) || { _cluster_err "cluster_stop_apiserver: kube-apiserver is not running"; return 1; }
  [[ ${1:-} == --kill ]] && cluster_kill9 kube-apiserver
  cluster_kill kube-apiserver
}

# cluster_start_apiserver: start kube-apiserver again after cluster_stop_apiserver:
# same flags, certificates, tokens and port (CLUSTER_API_URL and every kubeconfig
# stay valid); waits for /readyz. The port stays free while the API server is
# down unless another program takes it, which fails after a few tries.
cluster_start_apiserver() {
  [[ -n ${CLUSTER_DIR:-} && -n ${CLUSTER_API_PORT:-} ]] || { _cluster_err "cluster_start_apiserver: no cluster"; return 1; }
  if cluster_alive kube-apiserver; then _cluster_err "cluster_start_apiserver: kube-apiserver is already running"; return 1; fi
  local attempt rc
  for attempt in 1 2 3 4 5; do
    local mark
    mark=$(wc -l <"$(cluster_log kube-apiserver)" 2>/dev/null || echo 0)
    _cluster_launch_apiserver
    _cluster_wait_up kube-apiserver 90 "kube-apiserver /readyz on $CLUSTER_API_URL" _cluster_api_ready
    rc=$?
    ((rc == 0)) && return 0
    if ! cluster_alive kube-apiserver &&
      tail -n +"$((mark + 1))" "$(cluster_log kube-apiserver)" | grep -q -i 'address already in use'; then
      cluster_kill kube-apiserver 2>/dev/null
      _cluster_err "port $CLUSTER_API_PORT is still in use; retrying"; sleep 1; continue
    fi
    _cluster_tail_log kube-apiserver
    return 1
  done
  return 1
}

# cluster_restart_apiserver [--kill]: cluster_stop_apiserver, then cluster_start_apiserver.
cluster_restart_apiserver() { cluster_stop_apiserver "$@" && cluster_start_apiserver; }

# cluster_stop_etcd [--kill]: stop etcd (TERM, then KILL after 10 s; --kill:
# SIGKILL at once, like a crash). Its data stays; kube-apiserver keeps running
# (its requests fail or time out until etcd is back).
cluster_stop_etcd() {
  [[ -n ${CLUSTER_DIR:-} ]] || { _cluster_err "cluster_stop_etcd: no cluster"; return 1; }
  _cluster_pid_of etcd >/dev/null || { _cluster_err "cluster_stop_etcd: etcd is not running"; return 1; }
  [[ ${1:-} == --kill ]] && cluster_kill9 etcd
  cluster_kill etcd
}

# cluster_start_etcd: start etcd again after cluster_stop_etcd: same data,
# ports and flags (CLUSTER_ETCD_URL stays valid); waits for its /health.
cluster_start_etcd() {
  [[ -n ${CLUSTER_DIR:-} && -n ${CLUSTER_ETCD_PEER_URL:-} ]] || { _cluster_err "cluster_start_etcd: no cluster"; return 1; }
  if cluster_alive etcd; then _cluster_err "cluster_start_etcd: etcd is already running"; return 1; fi
  local attempt mark
  for attempt in 1 2 3 4 5; do
    mark=$(wc -l <"$(cluster_log etcd)" 2>/dev/null || echo 0)
    _cluster_launch_etcd
    _cluster_wait_up etcd 30 "etcd on $CLUSTER_ETCD_URL" _cluster_etcd_ready && return 0
    if ! cluster_alive etcd &&
      tail -n +"$((mark + 1))" "$(cluster_log etcd)" | grep -q -i 'address already in use'; then
      cluster_kill etcd 2>/dev/null
      _cluster_err "etcd's ports are still in use; retrying"; sleep 1; continue
    fi
    _cluster_tail_log etcd
    return 1
  done
  return 1
}

# cluster_restart_etcd [--kill]: cluster_stop_etcd, then cluster_start_etcd.
cluster_restart_etcd() { cluster_stop_etcd "$@" && cluster_start_etcd; }

# What the fake nodes and the real one (cluster_node_up) need, and never the
# node lifecycle or node IPAM controllers: fake nodes have no kubelet, and the
# lifecycle controller would mark them NotReady and taint them.
_CLUSTER_CONTROLLERS=garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller
# kube-root-ca.crt in every namespace (service-account token volumes need it)
_CLUSTER_CONTROLLERS+=,root-ca-certificate-publisher-controller
# Services get endpoints (webhook Services are called at their endpoints:
# --enable-aggregator-routing, no kube-proxy)
_CLUSTER_CONTROLLERS+=,endpoints-controller,endpointslice-controller
# deploy/ runs as Deployments and a DaemonSet
_CLUSTER_CONTROLLERS+=,deployment-controller,replicaset-controller,daemonset-controller
# ClusterRoles aggregated to view, edit, admin (deploy/base/12-kubectl-gpu-rbac.yaml)
_CLUSTER_CONTROLLERS+=,clusterrole-aggregation-controller
# deploy/'s certificates: a Job at install, a CronJob that renews, finished Jobs deleted
_CLUSTER_CONTROLLERS+=,job-controller,cronjob-controller,ttl-after-finished-controller
# a deleted namespace's objects go with it (deploy/'s uninstall)
_CLUSTER_CONTROLLERS+=,namespace-controller

_cluster_start_controller_manager() {
  local p=$CLUSTER_DIR/pki
  _cluster_start kube-controller-manager "$CLUSTER_DIR/logs/kube-controller-manager.log" \
    "$CLUSTER_BIN/kube-controller-manager" \
    --kubeconfig="$CLUSTER_CONTROLLER_MANAGER_KUBECONFIG" \
    --controllers="$_CLUSTER_CONTROLLERS" \
    --service-account-private-key-file="$p/sa.key" \
    --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=true \
    --leader-elect=false \
    --secure-port=0 \
    --concurrent-gc-syncs=5 \
    --v=1
  if ! _cluster_wait_up kube-controller-manager 60 "the default ServiceAccount (service-account controller)" \
    kubectl get serviceaccount default -n default; then
    _cluster_tail_log kube-controller-manager
    return 1
  fi
}

# Kill the whole cluster if the shell that started it dies without running its
# traps (SIGKILL, a crashed CI step).
_cluster_start_watchdog() {
  local parent=$1
  _cluster_start watchdog "$CLUSTER_DIR/logs/watchdog.log" bash -c '
    parent=$1 dir=$2 harness=$3
    while kill -0 "$parent" 2>/dev/null && [[ -f $dir/pids ]]; do sleep 1; done
    [[ -f $dir/pids ]] || exit 0
    echo "parent $parent is gone; stopping the cluster in $dir"
    # The real node first, if any: its pods, mounts, cgroups and bridge.
    "$harness" node-down "$dir"
    stop() {  # stop the groups named by the awk filter, as cluster_down does
      local pgs pg i
      pgs=$(awk "$1 {print \$2}" "$dir/pids")
      for pg in $pgs; do kill -TERM -- "-$pg" 2>/dev/null; done
      for ((i = 0; i < 100; i++)); do
        local alive=0
        for pg in $pgs; do kill -0 -- "-$pg" 2>/dev/null && alive=1; done
        ((alive)) || return 0
        sleep 0.1
      done
      for pg in $pgs; do kill -KILL -- "-$pg" 2>/dev/null; done
    }
    stop "\$1 != \"watchdog\" && \$1 != \"kube-apiserver\" && \$1 != \"etcd\""
    stop "\$1 == \"kube-apiserver\""
    stop "\$1 == \"etcd\""
    [[ -n ${CLUSTER_KEEP:-} ]] || rm -rf "$dir"
' watchdog "$parent" "$CLUSTER_DIR" "$CLUSTER_HARNESS_DIR/cluster.sh"
}

cluster_up() {
  if [[ -n ${CLUSTER_DIR:-} && -f $CLUSTER_DIR/pids ]]; then
    _cluster_err "cluster_up: a cluster is already up in $CLUSTER_DIR"
    return 1
  fi
  local t0=$SECONDS bin tool
  for tool in openssl setsid ps awk mktemp; do
    command -v "$tool" >/dev/null || { _cluster_err "cluster_up: '$tool' is not installed"; return 1; }
  done
  bin=$("$CLUSTER_HARNESS_DIR/build.sh" --print-bin-dir) || { _cluster_err "build failed"; return 1; }
  CLUSTER_BIN=$bin
  CLUSTER_K8S_VERSION=$(. "$CLUSTER_HARNESS_DIR/k8s-version.sh" && echo "$K8S_VERSION") || return 1
  CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-cluster.XXXXXX") || return 1
  mkdir -p "$CLUSTER_DIR/logs" "$CLUSTER_DIR/kubeconfig"
  : >"$CLUSTER_DIR/pids"
  export CLUSTER_DIR CLUSTER_BIN CLUSTER_K8S_VERSION
  export PATH="$CLUSTER_BIN:$PATH"
  CLUSTER_CA_FILE=$CLUSTER_DIR/pki/ca.crt
  CLUSTER_CA_KEY=$CLUSTER_DIR/pki/ca.key
  CLUSTER_SA_KEY=$CLUSTER_DIR/pki/sa.key
  CLUSTER_KUBECONFIG=$CLUSTER_DIR/kubeconfig/admin.kubeconfig
  CLUSTER_EXTENDER_KUBECONFIG=$CLUSTER_DIR/kubeconfig/extender.kubeconfig
  CLUSTER_AGENT_KUBECONFIG=$CLUSTER_DIR/kubeconfig/agent.kubeconfig
  CLUSTER_SCHEDULER_KUBECONFIG=$CLUSTER_DIR/kubeconfig/scheduler.kubeconfig
  CLUSTER_CONTROLLER_MANAGER_KUBECONFIG=$CLUSTER_DIR/kubeconfig/controller-manager.kubeconfig
  CLUSTER_ADMIN_TOKEN_FILE=$CLUSTER_DIR/tokens/admin
  CLUSTER_EXTENDER_TOKEN_FILE=$CLUSTER_DIR/tokens/extender
  CLUSTER_AGENT_TOKEN_FILE=$CLUSTER_DIR/tokens/agent
  KUBECONFIG=$CLUSTER_KUBECONFIG
  export CLUSTER_CA_FILE CLUSTER_CA_KEY CLUSTER_SA_KEY CLUSTER_KUBECONFIG CLUSTER_EXTENDER_KUBECONFIG \
    CLUSTER_AGENT_KUBECONFIG CLUSTER_SCHEDULER_KUBECONFIG CLUSTER_CONTROLLER_MANAGER_KUBECONFIG \
    CLUSTER_ADMIN_TOKEN_FILE CLUSTER_EXTENDER_TOKEN_FILE CLUSTER_AGENT_TOKEN_FILE KUBECONFIG

  if [[ ${_CLUSTER_DETACHED:-0} != 1 ]]; then
    trap 'cluster_down' EXIT
    trap 'cluster_down; trap - INT; kill -INT "${BASHPID:-$$}"' INT
    trap 'cluster_down; trap - TERM; kill -TERM "${BASHPID:-$$}"' TERM
    _cluster_start_watchdog "${BASHPID:-$$}"
  fi

  _cluster_make_pki || { cluster_down; return 1; }
  _cluster_make_tokens || { cluster_down; return 1; }
  export CLUSTER_ADMIN_TOKEN CLUSTER_EXTENDER_TOKEN CLUSTER_AGENT_TOKEN CLUSTER_SCHEDULER_TOKEN
  _cluster_start_etcd || { _cluster_err "etcd did not start"; cluster_down; return 1; }
  _cluster_start_apiserver || { _cluster_err "kube-apiserver did not start"; cluster_down; return 1; }
  export CLUSTER_API_URL CLUSTER_API_PORT CLUSTER_ETCD_URL CLUSTER_ETCD_PEER_URL
  _cluster_start_controller_manager || { _cluster_err "kube-controller-manager did not start"; cluster_down; return 1; }
  cluster_env >"$CLUSTER_DIR/env"
  _cluster_log "cluster up in $((SECONDS - t0))s: $CLUSTER_API_URL (dir $CLUSTER_DIR)"
}

cluster_down() {
  [[ -n ${CLUSTER_DIR:-} && -d $CLUSTER_DIR ]] || return 0
  if [[ -f $CLUSTER_DIR/cleanup ]]; then
    local hook
    while IFS= read -r hook; do
      eval "$hook" || _cluster_err "cleanup hook failed: $hook"
    done <"$CLUSTER_DIR/cleanup"
    rm -f "$CLUSTER_DIR/cleanup"
  fi
  # The real node, while the API server still runs (its pods are deleted first).
  cluster_node_down
  if [[ -f $CLUSTER_DIR/pids ]]; then
    local -a clients=() apiserver=() etcd=() watchdog=()
    local name pid
    while read -r name pid; do
      case $name in
        etcd) etcd+=("$pid") ;;
        kube-apiserver) apiserver+=("$pid") ;;
        watchdog) watchdog+=("$pid") ;;
        *) clients+=("$pid") ;;
      esac
    done <"$CLUSTER_DIR/pids"
    # Clients first (so they do not log errors about a vanished API server),
    # then the API server, then etcd (an API server whose etcd is gone takes
    # ~10 s to stop; in this order the whole teardown takes ~1.5 s).
    ((${#clients[@]})) && _cluster_stop_groups "${clients[@]}"
    ((${#apiserver[@]})) && _cluster_stop_groups "${apiserver[@]}"
    ((${#etcd[@]})) && _cluster_stop_groups "${etcd[@]}"
    ((${#watchdog[@]})) && _cluster_stop_groups "${watchdog[@]}"
    rm -f "$CLUSTER_DIR/pids"
  fi
  if [[ -n ${CLUSTER_KEEP:-} && ${CLUSTER_KEEP} != 0 ]]; then
    _cluster_err "kept $CLUSTER_DIR"
  else
    rm -rf "$CLUSTER_DIR"
  fi
  unset CLUSTER_DIR
  return 0
}

cluster_add_cleanup() {
  [[ -n ${CLUSTER_DIR:-} ]] || { _cluster_err "cluster_add_cleanup: no cluster"; return 1; }
  printf '%s\n' "$*" >>"$CLUSTER_DIR/cleanup"
}

cluster_env() {
  local v
  for v in CLUSTER_DIR CLUSTER_BIN CLUSTER_K8S_VERSION CLUSTER_API_URL CLUSTER_API_PORT CLUSTER_ETCD_URL CLUSTER_ETCD_PEER_URL \
    CLUSTER_CA_FILE CLUSTER_CA_KEY CLUSTER_SA_KEY \
    CLUSTER_KUBECONFIG CLUSTER_EXTENDER_KUBECONFIG CLUSTER_AGENT_KUBECONFIG \
    CLUSTER_SCHEDULER_KUBECONFIG CLUSTER_CONTROLLER_MANAGER_KUBECONFIG \
    CLUSTER_ADMIN_TOKEN CLUSTER_EXTENDER_TOKEN CLUSTER_AGENT_TOKEN CLUSTER_SCHEDULER_TOKEN \
    CLUSTER_ADMIN_TOKEN_FILE CLUSTER_EXTENDER_TOKEN_FILE CLUSTER_AGENT_TOKEN_FILE KUBECONFIG; do
    printf 'export %s=%q\n' "$v" "${!v-}"
  done
  printf 'export PATH=%q:"$PATH"\n' "$CLUSTER_BIN"
}

cluster_binary_versions() {  # DIR [INDENT]
  local b=$1 in=${2:-}
  printf '%s%-24s %s\n' "$in" kube-apiserver "$("$b/kube-apiserver" --version 2>&1)"
  printf '%s%-24s %s\n' "$in" kube-controller-manager "$("$b/kube-controller-manager" --version 2>&1)"
  printf '%s%-24s %s\n' "$in" kube-scheduler "$("$b/kube-scheduler" --version 2>&1)"
  printf '%s%-24s %s\n' "$in" kubectl "$("$b/kubectl" version --client 2>&1 | head -1)"
  printf '%s%-24s %s\n' "$in" kubelet "$("$b/kubelet" --version 2>&1)"
  printf '%s%-24s %s\n' "$in" etcd "$("$b/etcd" --version 2>&1 | head -1)"
}

cluster_versions() {
  cluster_binary_versions "$CLUSTER_BIN"
  printf '%-24s %s\n' "server (live)" "$(kubectl version 2>/dev/null | grep -i '^server' || echo '?')"
}

# ---- kube-scheduler -------------------------------------------------------------------

_cluster_scheduler_ready() {  # PORT
  [[ $("$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_KUBECONFIG" --server="https://127.0.0.1:$1" \
    --insecure-skip-tls-verify=true --request-timeout=5s get --raw /readyz 2>/dev/null) == ok ]]
}

cluster_start_scheduler() {
  local config=${1:?usage: cluster_start_scheduler CONFIG [NAME] [FLAGS...]} name=${2:-scheduler}
  shift; (($#)) && shift
  [[ -n ${CLUSTER_DIR:-} ]] || { _cluster_err "cluster_start_scheduler: no cluster (run cluster_up)"; return 1; }
  [[ -f $config ]] || { _cluster_err "cluster_start_scheduler: no such file $config"; return 1; }
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { _cluster_err "cluster_start_scheduler: bad name '$name'"; return 1; }
  if cluster_alive "scheduler-$name"; then
    _cluster_err "cluster_start_scheduler: scheduler $name is already running"; return 1
  fi
  local d=$CLUSTER_DIR/scheduler-$name
  mkdir -p "$d/certs"
  local cfg=$d/config.yaml
  if grep -q '^clientConnection:' "$config"; then
    cp "$config" "$cfg"
  else
    # kube-scheduler ignores --kubeconfig when --config is given.
    { cat "$config"; echo; echo "clientConnection:"; echo "  kubeconfig: \"$CLUSTER_SCHEDULER_KUBECONFIG\""; } >"$cfg"
  fi
  local attempt port
  # shellcheck disable=SC2206
  local -a extra=(${CLUSTER_SCHEDULER_FLAGS:-} "$@")
  for attempt in 1 2 3; do
    port=$(_cluster_free_ports 1)
    echo "$port" >"$d/port"
    _cluster_start "scheduler-$name" "$CLUSTER_DIR/logs/kube-scheduler-$name.log" \
      "$CLUSTER_BIN/kube-scheduler" \
      --config="$cfg" \
      --leader-elect=false \
      --bind-address=127.0.0.1 --secure-port="$port" --cert-dir="$d/certs" \
      --authentication-kubeconfig="$CLUSTER_SCHEDULER_KUBECONFIG" \
      --authorization-kubeconfig="$CLUSTER_SCHEDULER_KUBECONFIG" \
      --v="${CLUSTER_SCHEDULER_V:-2}" \
      "${extra[@]}"
    if _cluster_wait_up "scheduler-$name" 60 "kube-scheduler $name /readyz on port $port" _cluster_scheduler_ready "$port"; then
      return 0
    fi
    if ! cluster_alive "scheduler-$name" && _cluster_port_conflict "$name"; then
      _cluster_err "kube-scheduler $name lost a port race; retrying"; continue
    fi
    _cluster_tail_log "$name"
    cluster_kill "scheduler-$name" 2>/dev/null
    return 1
  done
  return 1
}

cluster_stop_scheduler() { cluster_kill "scheduler-${1:-scheduler}"; }
cluster_scheduler_port() { cat "$CLUSTER_DIR/scheduler-${1:-scheduler}/port"; }

# ---- objects ------------------------------------------------------------------------------

cluster_ensure_namespace() {
  local ns=$1
  kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null || return 1
  cluster_wait 60 "ServiceAccount $ns/default" kubectl get serviceaccount default -n "$ns"
}

cluster_delete_pod() {
  kubectl delete pod "$2" -n "$1" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  cluster_wait_gone 30 pod "$2" "$1"
}

cluster_pod_node() {
  local n
  n=$(kubectl get pod "$2" -n "$1" -o 'jsonpath={.spec.nodeName}' 2>/dev/null) || return 1
  [[ -n $n ]] || return 1
  echo "$n"
}

cluster_create_gpu_node() {
  local name=${1:?usage: cluster_create_gpu_node NAME [LABEL=VALUE...] [--cpu N] [--memory Q] [--pods N] [--resource R=Q]... [--taint K=V:E]...}
  shift
  local cpu=64 memory=512Gi pods=110
  local -a labels=() resources=() taints=()
  while (($#)); do
    case $1 in
      --cpu) cpu=$2; shift 2 ;;
      --memory) memory=$2; shift 2 ;;
      --pods) pods=$2; shift 2 ;;
      --resource) resources+=("$2"); shift 2 ;;
      --taint) taints+=("$2"); shift 2 ;;
      *=*) labels+=("$1"); shift ;;
      *) _cluster_err "cluster_create_gpu_node: bad argument '$1'"; return 2 ;;
    esac
  done
  local l lj="\"kubernetes.io/hostname\":\"$name\",\"kubernetes.io/os\":\"linux\",\"kubernetes.io/arch\":\"amd64\""
  for l in "${labels[@]}"; do lj+=",\"${l%%=*}\":\"${l#*=}\""; done
  local tj="" t
  for t in "${taints[@]}"; do
    # KEY[=VALUE]:EFFECT
    local kv=${t%:*} effect=${t##*:}
    local key=${kv%%=*} value=""
    [[ $kv == *=* ]] && value=${kv#*=}
    tj+="${tj:+,}{\"key\":\"$key\",\"value\":\"$value\",\"effect\":\"$effect\"}"
  done
  kubectl apply -f - >/dev/null <<EOF || return 1
{"apiVersion":"v1","kind":"Node",
 "metadata":{"name":"$name","labels":{$lj}},
 "spec":{"taints":[$tj]}}
EOF
  local rj="\"cpu\":\"$cpu\",\"memory\":\"$memory\",\"pods\":\"$pods\"" r
  for r in "${resources[@]}"; do rj+=",\"${r%%=*}\":\"${r#*=}\""; done
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kubectl patch node "$name" --subresource=status --type=merge -p "{\"status\":{
    \"capacity\":{$rj},\"allocatable\":{$rj},
    \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",
      \"message\":\"fake node (no kubelet)\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}],
    \"addresses\":[{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},{\"type\":\"Hostname\",\"address\":\"$name\"}],
    \"nodeInfo\":{\"kubeletVersion\":\"$CLUSTER_K8S_VERSION\",\"architecture\":\"amd64\",\"operatingSystem\":\"linux\",
      \"machineID\":\"\",\"systemUUID\":\"\",\"bootID\":\"\",\"kernelVersion\":\"\",\"osImage\":\"\",
      \"containerRuntimeVersion\":\"\",\"kubeProxyVersion\":\"\"}}}" >/dev/null || return 1
  # Nothing should have added a taint (TaintNodesByCondition admission is off and
  # no node lifecycle controller runs), but make sure that only --taint ones stay.
  local have
  have=$(kubectl get node "$name" -o 'jsonpath={range .spec.taints[*]}{.key}{"\n"}{end}') || return 1
  if [[ -n $have && ${#taints[@]} -eq 0 ]] || [[ $(grep -c . <<<"$have") != "${#taints[@]}" ]]; then
    _cluster_err "node $name had taints '${have//$'\n'/ }'; resetting them to '${taints[*]}'"
    kubectl patch node "$name" --type=merge -p "{\"spec\":{\"taints\":[$tj]}}" >/dev/null || return 1
  fi
}

# ---- the real node ---------------------------------------------------------------------------

# shellcheck source=node.sh
. "$CLUSTER_HARNESS_DIR/node.sh"

# ---- standalone entry point --------------------------------------------------------------

_cluster_main() {
  set -euo pipefail
  local cmd=${1:-}
  shift || true
  case $cmd in
    up)
      _CLUSTER_DETACHED=1
      cluster_up
      echo "$CLUSTER_DIR" >"${TMPDIR:-/tmp}/gpu-cluster.last"
      cat "$CLUSTER_DIR/env"
      echo "# cluster up; stop it with: $CLUSTER_HARNESS_DIR/cluster.sh down $CLUSTER_DIR" ;;
    down)
      local dir=${1:-}
      if [[ -z $dir ]]; then
        dir=$(cat "${TMPDIR:-/tmp}/gpu-cluster.last" 2>/dev/null) || { echo "cluster.sh: no cluster to stop" >&2; exit 1; }
      fi
      [[ -d $dir ]] || { echo "cluster.sh: $dir does not exist (already down?)" >&2; exit 0; }
      CLUSTER_DIR=$dir
      set +e   # a teardown goes on past what fails
      cluster_down
      rm -f "${TMPDIR:-/tmp}/gpu-cluster.last" ;;
    node-down)   # (the watchdog's) stop the real node of the cluster in DIR
      CLUSTER_DIR=${1:?usage: cluster.sh node-down DIR}
      set +e   # a teardown goes on past what fails
      cluster_node_down ;;
    run)
      (($#)) || { echo "usage: cluster.sh run CMD..." >&2; exit 2; }
      cluster_up
      local rc=0
      "$@" || rc=$?
      cluster_down
      trap - EXIT INT TERM
      exit "$rc" ;;
    *)
      sed -n '2,/^# -----------------------------------------------------------------------------*$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      echo "usage: cluster.sh up | down [DIR] | run CMD..." >&2
      [[ $cmd == -h || $cmd == --help ]] && exit 0
      exit 2 ;;
  esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  _cluster_main "$@"
fi
