#!/usr/bin/env bash
# A real kube-scheduler calls the extender for real pods in a real API server:
# placement, allocation annotations, FailedScheduling reasons, binpack vs spread,
# GpuClaims, the ledgers, release on delete, a GPU sidecar counted as
# Kubernetes counts it (beside the main container, not instead of it), and
# an extender that posts only Warning Events (normalEvents: false).
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

e2e_setup || { echo "scheduling: 0 passed, 1 failed (cluster setup)"; exit 1; }
e2e_gpu_node gpu-a 4
e2e_gpu_node gpu-b 4
e2e_gpu_node gpu-c 8 "NVIDIA A100-SXM4-40GB" 2 40960
cluster_create_gpu_node cpu-only >/dev/null
e2e_start_extender ext --reap-interval 2 || { echo "scheduling: 0 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched "$E2E_URL" || { echo "scheduling: 0 passed, 1 failed (scheduler)"; exit 1; }

bound() { [[ -n $(e2e_pod_node "$1" "$2") ]]; }
claim_status_is() {  # NAME PHASE/NODE: the GpuClaim ml/NAME's status
  [[ $(kubectl -n ml get gclaim "$1" -o jsonpath='{.status.phase}/{.status.nodeName}') == "$2" ]]
}

# --- binpack (the default): 1-GPU pods fill one node before the next ---
for i in 1 2 3 4; do e2e_pod ml bp$i '{"gpu.scheduling/gpu":"1"}'; done
check_binpack() {
  for i in 1 2 3 4; do cluster_wait 20 "bp$i bound" bound ml bp$i || return 1; done
  local nodes
  nodes=$(for i in 1 2 3 4; do e2e_pod_node ml bp$i; echo; done | sort -u)
  [[ $(grep -c . <<<"$nodes") == 1 ]] || { echo "binpack spread over: $nodes"; return 1; }
}
e2e_check "binpack fills one node first" check_binpack
BP_NODE=$(e2e_pod_node ml bp1)

check_annotations() {
  local node ids alloc cuda all
  node=$(e2e_pod_node ml bp1)
  alloc=$(e2e_ann ml bp1 gpu.scheduling/allocated)
  [[ $alloc == "$node:"[0-9]* ]] || { echo "allocated=$alloc"; return 1; }
  ids=${alloc#*:}
  cuda=$(e2e_ann ml bp1 gpu.scheduling/cuda-visible-devices)
  [[ $cuda == "GPU-$node-$ids" ]] || { echo "cuda=$cuda ids=$ids"; return 1; }
  [[ $(e2e_ann ml bp1 gpu.scheduling/nvidia-visible-devices) == "$cuda" ]] || return 1
  all=$(for i in 1 2 3 4; do e2e_ann ml bp$i gpu.scheduling/allocated; echo; done | sort -u | grep -c .)
  [[ $all == 4 ]] || { echo "devices handed out twice: $all distinct allocations"; return 1; }
}
e2e_check "allocation annotations on the bound pods" check_annotations

# `kubectl describe pod` tells the story: the extender's Events (docs/operations.md, "Events").
described() {  # POD TEXT: kubectl describe pod shows TEXT (its Events are found by the pod's uid)
  kubectl -n ml describe pod "$1" | grep -qF -- "$2"
}
check_allocated_event() {
  local alloc node ids
  alloc=$(e2e_ann ml bp1 gpu.scheduling/allocated)
  node=${alloc%%:*} ids=${alloc#*:}
  cluster_wait 10 "GPUsAllocated on bp1" described bp1 "GPUsAllocated" || return 1
  described bp1 "node $node: GPU $ids (GPU-$node-$ids)" || { kubectl -n ml describe pod bp1 | sed -n '/^Events:/,$p'; return 1; }
  kubectl -n ml describe pod bp1 | grep GPUsAllocated
}
e2e_check "kubectl describe pod shows GPUsAllocated: the node, the devices and their UUIDs" check_allocated_event

# --- spread, per pod, with the annotation gpu.scheduling/policy ---
for i in 1 2; do e2e_pod ml sp$i '{"gpu.scheduling/gpu":"1"}' '{"gpu.scheduling/policy":"spread"}'; done
check_spread() {
  for i in 1 2; do cluster_wait 20 "sp$i bound" bound ml sp$i || return 1; done
  local a b
  a=$(e2e_pod_node ml sp1); b=$(e2e_pod_node ml sp2)
  [[ $a != "$BP_NODE" && $b != "$BP_NODE" ]] || { echo "spread chose the full node: $a $b"; return 1; }
}
e2e_check "spread prefers emptier nodes" check_spread

# --- a pod that fits nowhere stays Pending with the extender's reason ---
e2e_pod ml huge '{"gpu.scheduling/gpu":"16"}'
events_of() {
  kubectl -n ml get events --field-selector "involvedObject.name=$1,reason=FailedScheduling" \
    -o jsonpath='{.items[*].message}'
}
events_have() { events_of "$1" | grep -q "$2"; }   # POD TEXT
check_pending_reason() {
  cluster_wait 20 "FailedScheduling for huge" events_have huge 'claim needs 16' || return 1
  [[ -z $(e2e_pod_node ml huge) ]] || { echo "huge was bound"; return 1; }
  events_of huge | head -c 400; echo
}
e2e_check "unschedulable pod stays Pending with the extender's reason" check_pending_reason
check_unsatisfiable_event() {
  cluster_wait 20 "GPUClaimUnsatisfiable on huge" described huge "GPUClaimUnsatisfiable" || return 1
  local got
  got=$(kubectl -n ml get events --field-selector "reportingComponent=gpu-extender,involvedObject.name=huge,reason=GPUClaimUnsatisfiable" \
    -o jsonpath='{range .items[*]}{.type} {.source.component} {.count} {.message}{"\n"}{end}')
  echo "$got"
  [[ $got == "Warning gpu-extender "*"no node of "*" fits: "*"claim needs 16"* ]]
}
e2e_check "kubectl describe pod shows GPUClaimUnsatisfiable, the reasons summarised" check_unsatisfiable_event

# --- a GpuClaim: two A100s on one NVLink island ---
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: gpu.scheduling/v1
kind: GpuClaim
metadata: {name: pair, namespace: ml}
spec:
  devices: {count: 2, model: A100}
  topology: {mode: Required}
YAML
# Every phase the claim goes through, from its watch.
PHASES=$(mktemp)
kubectl -n ml get gclaim pair --watch -o jsonpath='{.status.phase}{"\n"}' >"$PHASES" 2>/dev/null &
PHASE_WATCH=$!
e2e_pod ml claimed '{"gpu.scheduling/claim":"1"}' '{"gpu.scheduling/claim":"pair"}'
check_claim() {
  cluster_wait 20 "claimed bound" bound ml claimed || return 1
  [[ $(e2e_pod_node ml claimed) == gpu-c ]] || { echo "on $(e2e_pod_node ml claimed)"; return 1; }
  local ids a b
  ids=$(e2e_ann ml claimed gpu.scheduling/allocated); ids=${ids#*:}
  a=${ids%,*}; b=${ids#*,}
  (( a / 4 == b / 4 )) || { echo "ids $ids span islands"; return 1; }
  cluster_wait 10 "GpuClaim status Bound" claim_status_is pair Bound/gpu-c
}
e2e_check "GpuClaim with Required topology lands on one island; status Bound" check_claim
check_claim_phases() {
  kill "$PHASE_WATCH" 2>/dev/null; wait "$PHASE_WATCH" 2>/dev/null
  local seen
  seen=$(grep -v '^$' "$PHASES" | uniq | tr '\n' ' ')
  rm -f "$PHASES"
  [[ $seen == *"Reserved Bound"* ]] || { echo "phases seen: $seen"; return 1; }
  echo "phases seen: $seen"
}
e2e_check "GpuClaim status goes Reserved, then Bound" check_claim_phases

# --- a claim no node can satisfy: the claim's reason reaches the event ---
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: gpu.scheduling/v1
kind: GpuClaim
metadata: {name: amd-only, namespace: ml}
spec:
  devices: {count: 1, vendor: amd}
YAML
e2e_pod ml wantsamd '{"gpu.scheduling/claim":"1"}' '{"gpu.scheduling/claim":"amd-only"}'
e2e_check "unresolvable reason (wrong vendor) in the event" cluster_wait 20 "amd reason" events_have wantsamd 'no amd GPU'
# A bind the node cannot take (asked directly, as a racing scheduler might): Failed, with why.
check_claim_failed() {
  local uid out
  uid=$(kubectl -n ml get pod wantsamd -o jsonpath='{.metadata.uid}')
  out=$(curl -s -X POST "$E2E_URL/bind" \
    -d "{\"PodName\":\"wantsamd\",\"PodNamespace\":\"ml\",\"PodUID\":\"$uid\",\"Node\":\"gpu-c\"}")
  [[ $out == *'"Error":"'?* ]] || { echo "bind answered: $out"; return 1; }
  cluster_wait 10 "GpuClaim amd-only Failed" claim_status_is amd-only Failed/gpu-c || return 1
  echo "message: $(kubectl -n ml get gclaim amd-only -o jsonpath='{.status.message}')"
}
e2e_check "a failed bind sets the GpuClaim Failed, with the reason" check_claim_failed

# --- the ledgers agree with the pods ---
ledger_devices() {
  kubectl -n gpu-system get lease -l gpu.scheduling/ledger=true -o json | python3 -c '
import json, sys
n = 0
for l in json.load(sys.stdin)["items"]:
    n += sum(len(r["devices"]) for r in json.loads(l["metadata"]["annotations"]["gpu.scheduling/reservations"]))
print(n)'
}
check_ledger() {
  local total
  total=$(ledger_devices)
  # bp1-4 (4) + sp1-2 (2) + claimed (2)
  [[ $total == 8 ]] || { echo "ledgers hold $total devices, pods 8"; return 1; }
}
e2e_check "ledgers record exactly the bound pods' devices" check_ledger

# --- deleting pods frees their GPUs for the next pods ---
check_release() {
  for i in 1 2 3 4; do cluster_delete_pod ml bp$i >/dev/null; done
  cluster_wait 20 "ledger of $BP_NODE empty" bash -c \
    "[[ \$(kubectl -n gpu-system get lease gpu-ledger.$BP_NODE -o jsonpath='{.metadata.annotations.gpu\\.scheduling/reservations}') == '[]' ]]" || return 1
  e2e_pod ml after '{"gpu.scheduling/gpu":"4"}'
  cluster_wait 20 "after bound" bound ml after
}
e2e_check "deleted pods' GPUs are schedulable again" check_release

# --- a GPU sidecar (restartable init container) runs beside the main container ---
# Kubernetes counts the pod as 2 GPUs (the sidecar keeps running); so must
# the extender: the binding and the node's ledger name 2 devices.
kubectl apply -f - >/dev/null <<'JSON'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"sidecar","namespace":"ml"},
 "spec":{"schedulerName":"gpu-scheduler","restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "initContainers":[{"name":"side","image":"registry.k8s.io/pause:3.10","restartPolicy":"Always",
     "resources":{"limits":{"gpu.scheduling/gpu":"1"}}}],
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/gpu":"1"}}}]}}
JSON
check_sidecar() {
  cluster_wait 20 "sidecar bound" bound ml sidecar || return 1
  local node alloc uid held
  node=$(e2e_pod_node ml sidecar)
  alloc=$(e2e_ann ml sidecar gpu.scheduling/allocated)
  [[ $alloc =~ ^$node:[0-9]+,[0-9]+$ ]] || { echo "allocated=$alloc, want 2 devices on $node"; return 1; }
  uid=$(kubectl -n ml get pod sidecar -o jsonpath='{.metadata.uid}')
  held=$(kubectl -n gpu-system get lease "gpu-ledger.$node" -o json | python3 -c '
import json, sys
l = json.load(sys.stdin)
print(",".join(str(d) for d in sorted(d for r in json.loads(l["metadata"]["annotations"]["gpu.scheduling/reservations"])
               if r["uid"] == sys.argv[1] for d in r["devices"])))' "$uid")
  [[ $held == "$(tr , '\n' <<<"${alloc#*:}" | sort -n | paste -sd,)" ]] || { echo "ledger of $node holds [$held] for the pod, binding says ${alloc#*:}"; return 1; }
}
e2e_check "a 1-GPU sidecar beside a 1-GPU container reserves 2 devices (binding and ledger)" check_sidecar

# --- normalEvents: false posts the Warnings only (docs/operations.md, "Events") ---
cluster_stop_scheduler sched
cluster_kill ext
QUIET_UP=0
e2e_start_extender ext-quiet --reap-interval 2 --normal-events=false && e2e_start_scheduler sched-quiet "$E2E_URL" &&
  QUIET_UP=1
check_warnings_only() {
  ((QUIET_UP)) || { echo "the extender (--normal-events=false) or its scheduler did not start"; return 1; }
  e2e_pod ml quiet '{"gpu.scheduling/gpu":"1"}'
  cluster_wait 20 "quiet bound" bound ml quiet || return 1
  # Posted in the order queued: once a later Warning is there, a GPUsAllocated of quiet would be too.
  e2e_pod ml huge2 '{"gpu.scheduling/gpu":"16"}'
  cluster_wait 20 "GPUClaimUnsatisfiable on huge2" described huge2 "GPUClaimUnsatisfiable" || return 1
  local mine
  mine=$(kubectl -n ml get events --field-selector "reportingComponent=gpu-extender,involvedObject.name=quiet" \
    -o jsonpath='{range .items[*]}{.reason} {.message}{"\n"}{end}')
  [[ -z $mine ]] || { echo "Events of the extender on quiet: $mine"; return 1; }
  [[ -n $(e2e_ann ml quiet gpu.scheduling/allocated) ]] || { echo "quiet has no allocation annotation"; return 1; }
}
e2e_check "normalEvents false: no GPUsAllocated on a bound pod, a Warning still posted" check_warnings_only

e2e_summary
