#!/usr/bin/env bash
# End-to-end on the real node: the whole product, deployed from deploy/ as
# pods (through test/node/local, as `make cluster` does: the extender with its
# webhook, the agent DaemonSet with its device plugin, the second
# kube-scheduler), on this machine's kubelet with containerd and runc, and 8
# fake GPUs (device files with NVIDIA's major number under a test device root,
# and an nvidia-smi that prints a real A100 host's outputs). The agent runs
# as on a host: privileged, chrooting into deploy/'s read-only host mounts,
# where the fake nvidia-smi (run with the host's sh) opens /dev/nvidiactl.
#
# The agent mounts no hostPath of /, and nothing writable but the device
# plugin's directories. Pods really run, and each sees exactly the devices
# the extender bound: its /dev/nvidia* and CUDA_VISIBLE_DEVICES match its binding annotation and
# kubelet's PodResources record; two pods get disjoint GPUs; a share gets one
# GPU and its MPS limits; a claim-only pod runs; a pod without a GPU request
# sees none; a pod that sets NVIDIA_VISIBLE_DEVICES itself is refused, and so
# is a GPU pod another scheduler placed; after the agent and kubelet restart,
# running pods keep their devices and new ones start; an unhealthy GPU gets
# no new pod; the three delivery modes (device files, NVIDIA volume mounts,
# CDI through containerd) each deliver; a gang (a PodGroup of three
# 2-GPU pods) runs whole, each member with its own devices; kubelet
# restarted with pods bound out of creation order while it was down gives
# each its own devices, and the agent's audit finds nothing wrong; and a
# pod another scheduler bound, admitted before a bound pod, is not started
# with that pod's devices (PreStartContainer), with an Event and the metric.
#
#   test/e2e/node.sh            (root; make all first: the image is build/)
#   E2E_SCENARIOS="1 3" test/e2e/node.sh
#
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh
. test/node/deploy.sh

E2E_SCENARIOS=${E2E_SCENARIOS:-"1 2 3 4 5 6 7 8 9 10 11 12"}
NS=ml
export KUBECTL AGENT=$E2E_ROOT/build/gpu-agent

if (($(id -u) != 0)); then
  echo "node.sh needs root (a real kubelet node)"
  echo "node: 0 passed, 1 failed"
  exit 1
fi

# ---- set-up: control plane, default scheduler, the node, the product -------

t0=$SECONDS
setup() {
  cluster_up || return 1
  KUBECTL="$CLUSTER_BIN/kubectl --kubeconfig=$CLUSTER_KUBECONFIG"
  node_start_default_scheduler >/dev/null || return 1
  cluster_node_up || return 1
  cluster_fake_gpus "$NODE_FAKE_ROOT" 8 || return 1
  node_deploy_product || return 1
  node_wait_product || return 1
  cluster_ensure_namespace "$NS" >/dev/null
}
if ! setup; then
  e2e_check "the control plane, the real node and the product come up" false
  e2e_summary
  exit 1
fi
e2e_note "control plane, node and product up in $((SECONDS - t0))s"
# On a failure, what the product's pods said (a crashed agent's last words too).
product_logs() {
  ((E2E_FAILED)) || return 0
  local p
  for p in gpu-agent gpu-extender; do
    echo "---- $p (previous container, if it restarted)"
    kubectl -n gpu-system logs -l "app.kubernetes.io/name=$p" --previous --tail=40 2>/dev/null
    echo "---- $p"
    kubectl -n gpu-system logs -l "app.kubernetes.io/name=$p" --tail=40 2>/dev/null
  done
}
cluster_add_cleanup product_logs

# node_pod NAME LIMITS_JSON [ANNOTATIONS_JSON [SCHEDULER [ENV_JSON [LABELS_JSON [GATES_JSON]]]]]: a
# busybox pod on the real node that prints what it sees (node_check.py reads it) and sleeps.
node_pod() {
  local name=$1 limits=$2 ann=${3:-'{}'} sched=${4:-gpu-scheduler} env=${5:-'[]'} labels=${6:-'{}'} gates=${7:-'[]'}
  kubectl apply -f - <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$name","namespace":"$NS","annotations":$ann,"labels":$labels},
 "spec":{"schedulerName":"$sched","restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "nodeSelector":{"gpu-extender.test/real-node":"true"},"schedulingGates":$gates,
   "containers":[{"name":"main","image":"$CLUSTER_BUSYBOX_IMAGE","imagePullPolicy":"Never","env":$env,
     "command":["sh","-c","echo \"devices=\$(ls /dev | grep '^nvidia[0-9]' | tr '\\\\n' ' ')\"; echo \"mounts=\$(ls /var/run/nvidia-container-devices 2>/dev/null | tr '\\\\n' ' ')\"; env | grep -E '^(CUDA|NVIDIA|GPU_SCHEDULING|ROCR)_'; exec sleep 100000"],
     "resources":{"limits":$limits}}]}}
JSON
}

pod_phase() { kubectl -n "$NS" get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null; }
pod_running() { [[ $(pod_phase "$1") == Running ]] && kubectl -n "$NS" logs "$1" 2>/dev/null | grep -q '^devices='; }
wait_running() { cluster_wait "${2:-60}" "pod $1 Running" pod_running "$1"; }
check() { python3 test/e2e/node_check.py "$@"; }
clean_pods() {
  kubectl -n "$NS" delete pod --all --grace-period=0 --force --wait=false >/dev/null 2>&1
  cluster_wait 60 "the test pods gone" bash -c "[[ -z \$($KUBECTL -n $NS get pods -o name) ]]"
}
allocatable() {  # RESOURCE: the node's allocatable count of it
  kubectl get node "$CLUSTER_NODE_NAME" -o "jsonpath={.status.allocatable.${1//./\\.}}"
}
allocatable_is() { [[ $(allocatable "$1") == "$2" ]]; }

# ---- 1. what kubelet counts -------------------------------------------------------

if e2e_want 1; then
  product_pods() {
    local p
    for p in gpu-extender gpu-agent gpu-scheduler; do
      [[ $(kubectl -n gpu-system get pods -l "app.kubernetes.io/name=$p" \
        -o 'jsonpath={.items[*].status.phase}') == Running ]] || { echo "$p is not Running"; return 1; }
    done
  }
  e2e_check "the extender, the agent and gpu-scheduler run as pods from deploy/" product_pods
  agent_mounts() { check agent-mounts; }
  e2e_check "the agent mounts no hostPath of /, and only the device plugin's directories writable (spec and mount table)" agent_mounts
  advertised() {
    cluster_wait 30 "the device plugin's resources" allocatable_is gpu.scheduling/gpu 8 || return 1
    allocatable_is gpu.scheduling/gpu-share 384 && allocatable_is gpu.scheduling/claim 110 || {
      kubectl get node "$CLUSTER_NODE_NAME" -o 'jsonpath={.status.allocatable}'; return 1; }
    [[ $(kubectl get gns "$CLUSTER_NODE_NAME" -o 'jsonpath={.status.shareSlots}') == 48 ]]
  }
  e2e_check "kubelet advertises 8 GPUs, 384 share slots and 110 claim tickets; the GpuNodeStatus says 48 slots" advertised
fi

# ---- 2. whole GPUs -------------------------------------------------------------------

if e2e_want 2; then
  two_gpus() {
    node_pod two-a '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running two-a && check devices "$NS" two-a
  }
  e2e_check "a pod asking 2 GPUs runs; its /dev/nvidia*, CUDA_VISIBLE_DEVICES and kubelet's PodResources are its binding" two_gpus
  allocated_event() {  # the deployed extender's Event (its service account's RBAC), as kubectl describe shows it
    local node=$CLUSTER_NODE_NAME
    cluster_wait 20 "GPUsAllocated on two-a" bash -c \
      "$KUBECTL -n $NS describe pod two-a | grep -q 'GPUsAllocated.*node $node: GPUs '" || return 1
    kubectl -n "$NS" describe pod two-a | grep GPUsAllocated
  }
  e2e_check "kubectl describe pod shows the extender's GPUsAllocated Event" allocated_event
  disjoint() {
    node_pod two-b '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running two-b &&
      check devices "$NS" two-b && check disjoint "$NS" two-a "$NS" two-b
  }
  e2e_check "a second 2-GPU pod gets two other GPUs" disjoint
  no_gpu() { node_pod plain '{"cpu":"50m"}' >/dev/null && wait_running plain && check none "$NS" plain; }
  e2e_check "a pod without a GPU request sees no GPU device and no GPU variable" no_gpu
fi

# ---- 3. shares and claims ------------------------------------------------------------

if e2e_want 3; then
  share() {
    node_pod share-a '{"gpu.scheduling/gpu-memory":"8192","gpu.scheduling/gpu-core":"30","gpu.scheduling/gpu-share":"1"}' \
      >/dev/null && wait_running share-a && check devices "$NS" share-a --resource gpu-share || return 1
    local logs
    logs=$(kubectl -n "$NS" logs share-a)
    grep -qx 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30' <<<"$logs" &&
      grep -qx 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M' <<<"$logs" || { echo "$logs"; return 1; }
  }
  e2e_check "a shared pod gets one GPU, a slot on it in kubelet's record, and its MPS limits" share
  claim_only() {
    kubectl apply -f - >/dev/null <<'EOF' || return 1
apiVersion: gpu.scheduling/v1
kind: GpuClaim
metadata: {name: pair, namespace: ml}
spec: {devices: {count: 2}}
EOF
    node_pod claimed '{}' '{"gpu.scheduling/claim":"pair"}' >/dev/null && wait_running claimed || return 1
    # the webhook gives a claim-only pod its claim's count (kubelet's record
    # then names the GPUs), or a claim ticket when it could not read the claim
    local res=gpu
    [[ -n $(kubectl -n "$NS" get pod claimed -o 'jsonpath={.spec.containers[0].resources.limits.gpu\.scheduling/claim}') ]] &&
      res=claim
    check devices "$NS" claimed --resource "$res"
  }
  e2e_check "a claim-only pod runs with its GpuClaim's 2 GPUs" claim_only
  clean_pods
fi

# ---- 4. what the node refuses ---------------------------------------------------------

if e2e_want 4; then
  bypass() {
    local out
    if out=$(node_pod sneaky '{"cpu":"50m"}' '{}' default-scheduler '[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]' 2>&1); then
      echo "admitted: $out"; kubectl -n "$NS" delete pod sneaky --grace-period=0 --force >/dev/null 2>&1; return 1
    fi
    grep -q NVIDIA_VISIBLE_DEVICES <<<"$out" || { echo "$out"; return 1; }
    e2e_note "refused: $(tail -1 <<<"$out" | cut -c1-160)"
  }
  e2e_check "a pod that sets NVIDIA_VISIBLE_DEVICES=all itself is refused at admission" bypass
  other_scheduler() {
    node_pod stray '{"gpu.scheduling/gpu":"1"}' '{}' default-scheduler >/dev/null || return 1
    cluster_wait 60 "pod stray refused by kubelet" bash -c "[[ \$($KUBECTL -n $NS get pod stray -o 'jsonpath={.status.phase}') == Failed ]]" || return 1
    local why
    why=$(kubectl -n "$NS" get pod stray -o 'jsonpath={.status.reason}: {.status.message}')
    grep -q "gpu-scheduler" <<<"$why" || { echo "$why"; return 1; }
    e2e_note "kubelet: ${why:0:160}"
  }
  e2e_check "a GPU pod another scheduler placed gets no device: kubelet refuses it with the agent's reason" other_scheduler
  clean_pods
fi

# ---- 5. the agent restarts -----------------------------------------------------------

agent_pod() { kubectl -n gpu-system get pods -l app.kubernetes.io/name=gpu-agent -o 'jsonpath={.items[0].metadata.name}'; }
if e2e_want 5; then
  node_pod keep-a '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running keep-a >/dev/null
  agent_restart() {
    local old t=$SECONDS
    old=$(agent_pod)
    kubectl -n gpu-system delete pod "$old" --wait=true >/dev/null || return 1
    cluster_wait 60 "a new agent pod" bash -c "[[ \$($KUBECTL -n gpu-system get pods -l app.kubernetes.io/name=gpu-agent -o 'jsonpath={.items[0].status.phase}') == Running ]]" || return 1
    pod_running keep-a || { echo "keep-a is $(pod_phase keep-a) after the agent restart"; return 1; }
    check devices "$NS" keep-a || return 1
    kubectl -n "$NS" exec keep-a -- ls /dev | grep -q '^nvidia' || { echo "keep-a lost its devices"; return 1; }
    node_pod after-agent '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running after-agent && check devices "$NS" after-agent &&
      check disjoint "$NS" keep-a "$NS" after-agent || return 1
    e2e_note "agent replaced and a new pod running $((SECONDS - t))s after the delete"
  }
  e2e_check "after the agent restarts, a running pod keeps its GPUs and a new pod gets others" agent_restart
fi

# ---- 6. kubelet restarts -------------------------------------------------------------

if e2e_want 6; then
  kubelet_restart() {
    local t=$SECONDS
    cluster_kubelet_restart || return 1
    cluster_wait 60 "the node Ready" cluster_node_ready || return 1
    cluster_wait 60 "the device plugin registered again" allocatable_is gpu.scheduling/gpu 8 || return 1
    e2e_note "kubelet back and the plugin registered again in $((SECONDS - t))s"
    # kubelet's own server (logs) may answer a moment after the node is Ready
    wait_running keep-a 30 || { echo "keep-a is $(pod_phase keep-a) after the restart"; return 1; }
    check devices "$NS" keep-a || return 1
    node_pod after-kubelet '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running after-kubelet &&
      check devices "$NS" after-kubelet && check disjoint "$NS" keep-a "$NS" after-kubelet
  }
  e2e_check "after kubelet restarts (its plugin directory wiped), running pods keep their GPUs and new pods start" kubelet_restart
  clean_pods
fi

# ---- 7. an unhealthy GPU --------------------------------------------------------------

# fake_health BAD: the fake nvidia-smi reports uncorrected ECC errors on GPU BAD (-1: none)
fake_health() {
  local q=$NODE_FAKE_ROOT/fixtures/query.csv
  [[ -f $q.orig ]] || cp "$q" "$q.orig"
  awk -v bad="$1" 'NR == 1 {print $0 ", ecc.errors.uncorrected.volatile.total"; next}
    {print $0 ", " ((NR - 2) == bad ? 7 : 0)}' "$q.orig" >"$q.new" && mv "$q.new" "$q"
}
gns_health() { kubectl get gns "$CLUSTER_NODE_NAME" -o "jsonpath={.status.devices[$1].health}"; }
if e2e_want 7; then
  # The agent's Events on the node (kubectl describe node finds them by the node's name as uid, as kubelet's).
  node_event_messages() {  # REASON
    kubectl -n default get events --field-selector \
      "involvedObject.kind=Node,involvedObject.name=$CLUSTER_NODE_NAME,reason=$1,reportingComponent=gpu-agent" \
      -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}' 2>/dev/null
  }
  node_event() { node_event_messages "$1" | grep -qF -- "$2"; }   # REASON TEXT
  unhealthy() {
    fake_health 3
    cluster_wait 60 "GPU 3 Unhealthy in kubelet's count" allocatable_is gpu.scheduling/gpu 7 || return 1
    cluster_wait 20 "a GPUUnhealthy Event on the node" node_event GPUUnhealthy "GPU 3 " || return 1
    e2e_note "Event: $(node_event_messages GPUUnhealthy | head -1)"
    [[ $(gns_health 3) == Unhealthy ]] || { echo "GpuNodeStatus says $(gns_health 3)"; return 1; }
    node_pod seven '{"gpu.scheduling/gpu":"7"}' >/dev/null && wait_running seven && check devices "$NS" seven || return 1
    [[ ,$(e2e_ann "$NS" seven gpu.scheduling/allocated), != *[:,]3,* ]] || { echo "GPU 3 was handed out"; return 1; }
    node_pod one-more '{"gpu.scheduling/gpu":"1"}' >/dev/null
    sleep 3 & wait $!
    [[ $(pod_phase one-more) == Pending ]] || { echo "one-more is $(pod_phase one-more)"; return 1; }
    fake_health -1
    cluster_wait 60 "GPU 3 healthy again" allocatable_is gpu.scheduling/gpu 8 || return 1
    cluster_wait 20 "a GPUHealthy Event on the node" node_event GPUHealthy "GPU 3 " || return 1
    wait_running one-more 60 && check devices "$NS" one-more &&
      [[ $(e2e_ann "$NS" one-more gpu.scheduling/allocated) == *:3 ]]
  }
  e2e_check "an unhealthy GPU leaves kubelet's count and gets no new pod, with a GPUUnhealthy Event on the node; healthy again, it does (GPUHealthy)" unhealthy
  clean_pods
fi

# ---- 8-9. the other delivery modes ----------------------------------------------------

# delivery MODE: the agent DaemonSet with --delivery MODE, rolled out and registered again
delivery() {
  local args
  args=$(kubectl -n gpu-system get ds gpu-agent -o 'jsonpath={.spec.template.spec.containers[0].args}' |
    python3 -c 'import json, sys; a = json.load(sys.stdin); a[a.index("--delivery") + 1] = sys.argv[1]; print(json.dumps(a))' "$1")
  kubectl -n gpu-system patch ds gpu-agent --type=json \
    -p "[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/args\",\"value\":$args}]" >/dev/null || return 1
  kubectl -n gpu-system rollout status ds/gpu-agent --timeout=90s >/dev/null || return 1
  cluster_wait 60 "the device plugin registered again" allocatable_is gpu.scheduling/gpu 8
}
if e2e_want 8; then
  volume_mounts() {
    delivery volume-mounts || return 1
    node_pod vm-a '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running vm-a &&
      check devices "$NS" vm-a --delivery volume-mounts
  }
  e2e_check "--delivery volume-mounts: /var/run/nvidia-container-devices/<uuid> of exactly the bound GPUs" volume_mounts
  clean_pods
fi
if e2e_want 9; then
  cdi() {
    delivery cdi || return 1
    local spec=/var/run/cdi/gpu.scheduling-gpu.json
    cluster_wait 30 "the CDI spec $spec" test -s "$spec" || return 1
    node_pod cdi-a '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running cdi-a &&
      check devices "$NS" cdi-a --delivery cdi || return 1
    e2e_note "containerd made the device files from $spec ($(grep -c '"name"' "$spec") devices)"
  }
  e2e_check "--delivery cdi: kubelet passes CDI names, containerd makes exactly the bound GPUs' device files" cdi
  clean_pods
  delivery devices >/dev/null
fi

# ---- 10. a gang ------------------------------------------------------------------------

if e2e_want 10; then
  gang() {
    kubectl apply -f - >/dev/null <<JSON || return 1
{"apiVersion":"scheduling.x-k8s.io/v1alpha1","kind":"PodGroup","metadata":{"name":"trio","namespace":"$NS"},
 "spec":{"minMember":3,"scheduleTimeoutSeconds":120}}
JSON
    local i
    for i in 0 1 2; do
      node_pod "trio-$i" '{"gpu.scheduling/gpu":"2"}' '{}' gpu-scheduler '[]' \
        '{"scheduling.x-k8s.io/pod-group":"trio"}' >/dev/null || return 1
    done
    for i in 0 1 2; do wait_running "trio-$i" 90 && check devices "$NS" "trio-$i" || return 1; done
    check disjoint "$NS" trio-0 "$NS" trio-1 && check disjoint "$NS" trio-0 "$NS" trio-2 &&
      check disjoint "$NS" trio-1 "$NS" trio-2 || return 1
    [[ $(kubectl -n "$NS" get podgroups.scheduling.x-k8s.io trio -o 'jsonpath={.status.phase} {.status.placed}') == "Bound 3" ]] ||
      { kubectl -n "$NS" get podgroups.scheduling.x-k8s.io trio -o 'jsonpath={.status}'; return 1; }
  }
  e2e_check "a gang (PodGroup, minMember 3, 2 GPUs each) runs whole: each member its own devices; the PodGroup says Bound 3" gang
  clean_pods
fi

# ---- 11-12. kubelet restarted with pods waiting for admission ----------------------

metric() {  # NAME{LABELS}: the agent's /metrics value of that series (test overlay: 127.0.0.1:9402)
  curl -s --max-time 5 http://127.0.0.1:9402/metrics | awk -v m="$1" '$1 == m {print $2}'
}
problems_none() {
  local k v
  for k in held_twice unbound outside_binding not_in_ledger; do
    v=$(metric "gpu_agent_allocation_problems_found_total{kind=\"$k\"}")
    [[ $v == 0 ]] || { echo "the audit found $k: ${v:-no metric}"; return 1; }
  done
}
audits_after() {  # N: the agent completed more than N audits
  local n
  n=$(metric gpu_agent_audits_total)
  [[ -n $n ]] && ((n > $1))
}
# gated_pod NAME LIMITS: a node_pod held back from scheduling by a scheduling gate.
gated_pod() { node_pod "$1" "$2" '{}' gpu-scheduler '[]' '{}' '[{"name":"gpu-extender.test/hold"}]'; }
ungate() { kubectl -n "$NS" patch pod "$1" --type=json -p '[{"op":"remove","path":"/spec/schedulingGates"}]' >/dev/null; }
bound() { [[ -n $(kubectl -n "$NS" get pod "$1" -o 'jsonpath={.spec.nodeName}' 2>/dev/null) ]]; }
kubelet_stop() { cluster_kill kubelet; }
kubelet_start() {
  _cluster_node_start_kubelet || return 1
  cluster_wait 60 "the device plugin registered again" allocatable_is gpu.scheduling/gpu 8
}

if e2e_want 11; then
  restart_order() {
    local before t=$SECONDS
    node_pod running '{"gpu.scheduling/gpu":"2"}' >/dev/null && wait_running running || return 1
    kubelet_stop || return 1
    # x is created first but held back; y, created after it, is bound first; then x.
    gated_pod order-x '{"gpu.scheduling/gpu":"2"}' >/dev/null || return 1
    sleep 1.2   # creationTimestamp has whole seconds: kubelet must see x as the older
    node_pod order-y '{"gpu.scheduling/gpu":"2"}' >/dev/null || return 1
    cluster_wait 30 "order-y bound" bound order-y || return 1
    ungate order-x && cluster_wait 30 "order-x bound" bound order-x || return 1
    e2e_note "bound while kubelet was down: order-y ($(e2e_ann "$NS" order-y gpu.scheduling/allocated)), then order-x ($(e2e_ann "$NS" order-x gpu.scheduling/allocated))"
    kubelet_start || return 1
    wait_running order-x 90 && wait_running order-y 60 || {
      kubectl -n "$NS" get pods -o wide; return 1; }
    check devices "$NS" order-x && check devices "$NS" order-y && check devices "$NS" running &&
      check disjoint "$NS" order-x "$NS" order-y && check disjoint "$NS" running "$NS" order-x &&
      check disjoint "$NS" running "$NS" order-y || return 1
    e2e_note "kubelet back and both pods running with their own GPUs $((SECONDS - t))s after the stop"
  }
  e2e_check "kubelet restarted with two GPU pods bound out of creation order while it was down: each container's devices are its binding and kubelet's record" restart_order
  audit_quiet() {
    local before
    before=$(metric gpu_agent_audits_total)
    [[ -n $before ]] || { echo "no /metrics from the agent"; return 1; }
    # an audit after every problem could have lasted DP_AUDIT_PERSIST_S (10 s)
    sleep 12
    cluster_wait 30 "another audit" audits_after "$before" || return 1
    problems_none || return 1
    [[ $(metric 'gpu_agent_prestart_checks_total{result="refused"}') == 0 ]] || { echo "a PreStart was refused"; return 1; }
    local ok
    ok=$(metric 'gpu_agent_prestart_checks_total{result="verified"}')
    ((ok >= 2)) || { echo "PreStart verified ${ok:-no} containers"; return 1; }
    e2e_note "audits: $(metric gpu_agent_audits_total), PreStart checks verified: $ok"
  }
  e2e_check "the agent's audit (kubelet's record vs bindings vs the node's ledger) reports nothing; every PreStart check passed" audit_quiet
  clean_pods
fi

if e2e_want 12; then
  prestart_refusal() {
    local refused0 msg
    # (the default scheduler places stray by the node's allocatable: the plugin must be registered)
    cluster_wait 60 "the device plugin registered" allocatable_is gpu.scheduling/gpu 8 || return 1
    refused0=$(metric 'gpu_agent_prestart_checks_total{result="refused"}')
    # kubelet restores its checkpoint at start, stale entries of pods deleted just before
    # included, and prunes them only once its sources are ready: a running pod's
    # allocation has kubelet write a checkpoint without the earlier test pods
    node_pod keeper '{"gpu.scheduling/gpu":"1"}' >/dev/null && wait_running keeper || return 1
    kubelet_stop || return 1
    # stray: 1 GPU, bound by the default scheduler (no binding of the extender), created
    # first; victim: 1 GPU, bound by the extender. kubelet admits stray first, and the
    # agent's guess hands it the victim's GPU.
    node_pod stray '{"gpu.scheduling/gpu":"1"}' '{}' default-scheduler >/dev/null || return 1
    cluster_wait 30 "stray bound" bound stray || return 1
    sleep 1.2
    node_pod victim '{"gpu.scheduling/gpu":"1"}' >/dev/null || return 1
    cluster_wait 30 "victim bound" bound victim || return 1
    kubelet_start || return 1
    stray_refused() {
      kubectl -n "$NS" get pod stray -o 'jsonpath={.status.containerStatuses[0].state.waiting.message}' 2>/dev/null |
        grep -q 'not starting it\|did not bind'
    }
    if ! cluster_wait 90 "stray's container refused" stray_refused; then
      kubectl -n "$NS" get pod stray -o 'jsonpath={.status}'; echo; return 1
    fi
    msg=$(kubectl -n "$NS" get pod stray -o 'jsonpath={.status.containerStatuses[0].state.waiting.message}')
    e2e_note "kubelet: ${msg:0:200}"
    ! kubectl -n "$NS" logs stray 2>/dev/null | grep -q '^devices=' || { echo "stray's container ran"; return 1; }
    refused_more() { (($(metric 'gpu_agent_prestart_checks_total{result="refused"}') > ${refused0:-0})); }
    cluster_wait 20 "the refusal counted" refused_more || return 1
    event_on() {  # POD REASON
      [[ -n $(kubectl -n "$NS" get events --field-selector "involvedObject.name=$1,reason=$2" -o name 2>/dev/null) ]]
    }
    cluster_wait 30 "a GPUPreStartRefused Event on stray" event_on stray GPUPreStartRefused || return 1
    cluster_wait 60 "the audit reports stray's GPU without a binding" bash -c \
      "curl -s http://127.0.0.1:9402/metrics | grep -qx 'gpu_agent_allocation_problems{kind=\"unbound\"} 1'" || return 1
    cluster_wait 30 "a GPUWithoutBinding Event on stray" event_on stray GPUWithoutBinding || return 1
    e2e_note "Event: $(kubectl -n "$NS" get events --field-selector involvedObject.name=stray,reason=GPUWithoutBinding -o 'jsonpath={.items[0].message}')"
    e2e_note "victim: $(kubectl -n "$NS" get pod victim -o 'jsonpath={.status.phase} {.status.reason}')"
  }
  e2e_check "a pod another scheduler bound, admitted first after a kubelet restart, is not started with the GPU bound to another pod: PreStart refuses it, with an Event, and the audit reports it (metric and Event)" prestart_refusal
  clean_pods
  gone() { [[ $(metric 'gpu_agent_allocation_problems{kind="unbound"}') == 0 ]]; }
  e2e_check "once the pods are gone the audit's gauge is back to 0" cluster_wait 40 "the gauge at 0" gone
fi

e2e_note "node suite took $((SECONDS - t0))s"
e2e_summary
