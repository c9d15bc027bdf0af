#!/usr/bin/env bash
# Least privilege of deploy/base/03-rbac.yaml, proven on the real API server with
# `kubectl auth can-i --as=system:serviceaccount:gpu-system:<sa>`: for each
# service account, what it needs (yes) and a table of what it must not do
# (no): read Secrets, delete or relabel Nodes, create or change pods beyond
# binding, write what another component owns, escalate through RBAC or
# impersonation, change admission. Prints the table.
#
#   test/e2e/rbac.sh
#
# Ends with "rbac: N passed, N failed"; nonzero on any failure.
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

t_start=$SECONDS
# Kubernetes' gang API served, so that can-i knows workloads (and, 1.36 on, podgroups) of scheduling.k8s.io.
e2e_k8s_gang_api || { echo "rbac: 0 passed, 1 failed (K8S_VERSION)"; exit 1; }
e2e_setup || { echo "rbac: 0 passed, 1 failed (cluster setup)"; exit 1; }
# (kubectl auth can-i resolves a resource through discovery: the PodGroup CRD must be served.)
kubectl apply -f deploy/base/10-crd-podgroup.yaml >/dev/null &&
  cluster_wait 30 "PodGroup CRD established" kubectl wait --for=condition=Established --timeout=1s \
    crd/podgroups.scheduling.x-k8s.io >/dev/null || { echo "rbac: 0 passed, 1 failed (PodGroup CRD)"; exit 1; }

# SA EXPECT VERB RESOURCE [NAMESPACE]: one row; "-" as NAMESPACE: cluster-wide
ROWS=()
BAD=()
row() {
  local sa=$1 want=$2 verb=$3 res=$4 ns=${5:-ml} got
  local -a where=(-n "$ns") sub=()
  [[ $ns == - ]] && where=(--all-namespaces)
  [[ $res == */* ]] && sub=(--subresource="${res#*/}")
  got=$(kubectl auth can-i "$verb" "${res%%/*}" "${sub[@]}" "${where[@]}" \
    --as="system:serviceaccount:gpu-system:$sa" 2>/dev/null)
  [[ $got == yes || $got == no ]] || got="error"
  ROWS+=("$(printf '| %-13s | %-7s | %-42s | %-10s | %-4s | %-4s |' "$sa" "$verb" "$res" "$ns" "$want" "$got")")
  [[ $got == "$want" ]] || BAD+=("$sa $verb $res ($ns): want $want, got $got")
}

# The extender: reads the cluster, binds pods, writes ledgers and reservation Leases, claim status.
for v in get list watch; do
  row gpu-extender yes "$v" nodes -
  row gpu-extender yes "$v" pods -
  row gpu-extender yes "$v" gpunodestatuses.gpu.scheduling -
  row gpu-extender yes "$v" gpuclaims.gpu.scheduling
done
row gpu-extender yes create pods/binding
row gpu-extender yes patch gpunodestatuses.gpu.scheduling -   # its counts (status.allocation) only: the policy below
row gpu-extender yes patch gpuclaims.gpu.scheduling/status
row gpu-extender yes get podgroups.scheduling.x-k8s.io
row gpu-extender yes patch podgroups.scheduling.x-k8s.io/status
row gpu-extender yes get workloads.scheduling.k8s.io
row gpu-extender yes patch pods             # a nudge's annotation (held to it by 11-least-privilege.yaml)
((E2E_K8S_MINOR < 36)) || row gpu-extender yes get podgroups.scheduling.k8s.io
row gpu-extender yes create events          # docs/operations.md, "Events"
row gpu-extender yes patch events           # a repeat's count
for v in create update patch delete; do
  row gpu-extender yes "$v" leases.coordination.k8s.io gpu-system
  row gpu-extender yes "$v" leases.coordination.k8s.io
done
# The agent: its node's GpuNodeStatus and labels, the pods it serves devices to.
for v in get create update; do row gpu-agent yes "$v" gpunodestatuses.gpu.scheduling -; done
row gpu-agent yes patch nodes -
row gpu-agent yes list pods -
# ... and reads (only) its node's ledger and posts Events for the allocation audit (docs/node.md).
for v in get list watch; do row gpu-agent yes "$v" leases.coordination.k8s.io gpu-system; done
row gpu-agent yes create events
row gpu-agent yes patch events
# The second scheduler: kube-scheduler's own role, leader election in gpu-system.
row gpu-scheduler yes create pods/binding
row gpu-scheduler yes get nodes -
row gpu-scheduler yes update leases.coordination.k8s.io gpu-system
row gpu-scheduler yes delete pods           # preemption (kube-scheduler's own role)

# What none of them may do.
for sa in gpu-extender gpu-agent gpu-scheduler; do
  row "$sa" no get secrets gpu-system
  row "$sa" no list secrets -
  row "$sa" no delete nodes -
  row "$sa" no create pods
  row "$sa" no update pods
  row "$sa" no create pods/exec
  row "$sa" no create clusterrolebindings.rbac.authorization.k8s.io -
  row "$sa" no escalate clusterroles.rbac.authorization.k8s.io -
  row "$sa" no bind clusterroles.rbac.authorization.k8s.io -
  row "$sa" no impersonate serviceaccounts
  row "$sa" no create serviceaccounts/token gpu-system
  row "$sa" no update mutatingwebhookconfigurations.admissionregistration.k8s.io -
  row "$sa" no delete validatingadmissionpolicies.admissionregistration.k8s.io -
  row "$sa" no delete customresourcedefinitions.apiextensions.k8s.io -
done
row gpu-extender no delete pods
row gpu-agent no delete pods
row gpu-extender no patch nodes -
row gpu-extender no update gpunodestatuses.gpu.scheduling -
row gpu-extender no create gpunodestatuses.gpu.scheduling -
row gpu-extender no delete gpunodestatuses.gpu.scheduling -
row gpu-extender no update gpuclaims.gpu.scheduling
row gpu-extender no update podgroups.scheduling.x-k8s.io
row gpu-agent no create pods/binding
row gpu-agent no delete gpunodestatuses.gpu.scheduling -
row gpu-agent no update leases.coordination.k8s.io gpu-system
for v in create patch delete; do row gpu-agent no "$v" leases.coordination.k8s.io gpu-system; done
row gpu-agent no get leases.coordination.k8s.io
row gpu-agent no update events
row gpu-extender no update events
row gpu-extender no delete events
row gpu-agent no delete events
row gpu-agent no update gpuclaims.gpu.scheduling/status
row gpu-scheduler no update leases.coordination.k8s.io
row gpu-scheduler no update gpunodestatuses.gpu.scheduling -

echo "| service account | verb | resource | namespace | want | got |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
allowed() { local n=0 r; for r in "${ROWS[@]}"; do [[ $r == *"| yes  | yes  |" ]] && n=$((n + 1)); done; echo "$n"; }
check_needs() {
  local b out=0
  for b in "${BAD[@]}"; do [[ $b == *"want yes"* ]] && { echo "$b"; out=1; }; done
  return $out
}
check_denies() {
  local b out=0
  for b in "${BAD[@]}"; do [[ $b == *"want no"* ]] && { echo "$b"; out=1; }; done
  return $out
}
e2e_check "each service account may do what it needs ($(allowed) rows)" check_needs
e2e_check "none may read Secrets, delete Nodes, change pods beyond binding, escalate or change admission ($(( ${#ROWS[@]} - $(allowed) )) rows)" check_denies

# RBAC grants the extender Lease writes everywhere (reservation Leases live in
# the pods' namespaces); deploy/base/11-least-privilege.yaml holds it to its own.
as_ext() { kubectl --as=system:serviceaccount:gpu-system:gpu-extender "$@"; }
lease() {  # NS NAME [LABELS_JSON]
  local labels=${3:-}
  [[ -n $labels ]] || labels='{}'
  printf '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"%s","namespace":"%s","labels":%s},"spec":{}}' \
    "$2" "$1" "$labels"
}
check_lease_policy() {
  kubectl apply -f deploy/base/11-least-privilege.yaml >/dev/null || return 1
  kubectl create namespace kube-node-lease >/dev/null 2>&1
  lease kube-node-lease a-node | kubectl apply -f - >/dev/null || return 1
  # The policy is loaded a moment after it is created: until a write it must refuse is refused.
  # (a server-side dry run: admission runs, nothing is stored, so a try before the policy leaves nothing)
  refused() { ! lease ml intruder | as_ext create --dry-run=server -f - >/dev/null 2>&1; }
  cluster_wait 20 "the Lease policy in force" refused || return 1
  local out
  out=$(lease ml intruder | as_ext create --dry-run=server -f - 2>&1)
  [[ $out == *"may write only its reservation Leases"* ]] || { echo "another Lease in ml: $out"; return 1; }
  ! as_ext -n kube-node-lease annotate lease a-node x=y >/dev/null 2>&1 || { echo "updated a node's heartbeat"; return 1; }
  ! as_ext -n kube-node-lease delete lease a-node >/dev/null 2>&1 || { echo "deleted a node's heartbeat"; return 1; }
  ! lease ml gpu-reservation.u1.h | as_ext create -f - >/dev/null 2>&1 ||
    { echo "a reservation Lease without its label was created"; return 1; }
  lease ml gpu-reservation.u2.h '{"gpu.scheduling/reservation":"true"}' | as_ext create -f - >/dev/null ||
    { echo "a reservation Lease was refused"; return 1; }
  as_ext -n ml delete lease gpu-reservation.u2.h >/dev/null || { echo "deleting a reservation Lease was refused"; return 1; }
  lease gpu-system gpu-ledger.n1 | as_ext create -f - >/dev/null && as_ext -n gpu-system delete lease gpu-ledger.n1 >/dev/null ||
    { echo "a ledger Lease in gpu-system was refused"; return 1; }
}
e2e_check "the extender may write only its own Leases (ValidatingAdmissionPolicy): not a node's heartbeat, not another Lease in a pod's namespace; its reservation Leases and gpu-system ones, yes" \
  check_lease_policy

# RBAC lets gpu-agent patch any Node and write any GpuNodeStatus; with the
# token the kubelet gives its pod (bound to the pod, so carrying the pod's
# node) the same policy file holds it to its own node.
check_agent_policy() {
  cluster_create_gpu_node own-node >/dev/null && cluster_create_gpu_node other-node >/dev/null || return 1
  kubectl apply -f - >/dev/null <<JSON || return 1
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"agent-probe","namespace":"gpu-system"},
 "spec":{"serviceAccountName":"gpu-agent","nodeName":"own-node","containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}}
JSON
  local bound unbound
  bound=$(kubectl -n gpu-system create token gpu-agent --bound-object-kind Pod --bound-object-name agent-probe) &&
    unbound=$(kubectl -n gpu-system create token gpu-agent) || return 1
  # The agent's own kind of writes, straight to the API server (kubectl would GET first, which it may not).
  api() {  # TOKEN METHOD PATH BODY: prints the HTTP status, then the body
    local out
    out=$(curl -s --cacert "$CLUSTER_CA_FILE" -H "Authorization: Bearer $1" -X "$2" \
      -H "Content-Type: $([[ $2 == PATCH ]] && echo application/merge-patch+json || echo application/json)" \
      -w '\n%{http_code}' -d "$4" "$CLUSTER_API_URL$3")
    printf '%s\n%s\n' "${out##*$'\n'}" "${out%$'\n'*}"
  }
  label() { api "$1" PATCH "/api/v1/nodes/$2" '{"metadata":{"labels":{"gpu.scheduling/present":"true"}}}'; }
  gns() {
    api "$1" POST /apis/gpu.scheduling/v1/gpunodestatuses \
      "{\"apiVersion\":\"gpu.scheduling/v1\",\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"$2\"},\"spec\":{\"nodeName\":\"$2\"}}"
  }
  # Policies load a moment after they are created: until the write it must refuse is refused.
  other_refused() { [[ $(label "$bound" other-node | head -1) == 403 ]]; }
  cluster_wait 20 "the agent policy in force" other_refused || return 1
  local out
  out=$(label "$bound" other-node)
  [[ $out == *"may write only its own node, not other-node"* ]] || { echo "another node's labels: $out"; return 1; }
  [[ $(label "$bound" own-node | head -1) == 200 ]] || { echo "its own node's labels refused: $(label "$bound" own-node)"; return 1; }
  [[ $(gns "$bound" own-node | head -1) == 201 ]] || { echo "its own GpuNodeStatus refused"; return 1; }
  [[ $(gns "$bound" other-node | head -1) == 403 ]] || { echo "another node's GpuNodeStatus: $(gns "$bound" other-node)"; return 1; }
  out=$(label "$unbound" own-node)
  [[ $out == *"only with its pod-bound token"* ]] || { echo "a token without a node: $out"; return 1; }
}
e2e_check "the agent may write only its own node's labels and GpuNodeStatus (ValidatingAdmissionPolicy on its pod-bound token); another node's, or with a token without a node, no" \
  check_agent_policy
# RBAC lets the extender patch GpuNodeStatuses, for its counts; the policy
# file holds it to status.allocation.
check_counts_policy() {
  kubectl apply -f deploy/base/11-least-privilege.yaml >/dev/null || return 1
  e2e_gns counts-node 2 || return 1
  local counts='{"status":{"allocation":{"allocated":1,"whole":1,"shared":0,"free":1,"unhealthy":0,"reservations":1,"countedAt":"2026-01-02T03:04:05Z","countedBy":"ext"}}}'
  ext_patch() { as_ext patch gpunodestatus counts-node --type merge -p "$1" "${@:2}"; }
  refused() { ! ext_patch '{"status":{"total":9}}' --dry-run=server >/dev/null 2>&1; }
  cluster_wait 20 "the counts policy in force" refused || return 1
  ext_patch "$counts" >/dev/null || { echo "its counts were refused: $(ext_patch "$counts" 2>&1)"; return 1; }
  [[ $(kubectl get gns counts-node -o 'jsonpath={.status.allocation.allocated}/{.status.total}') == 1/2 ]] ||
    { echo "the counts did not land: $(kubectl get gns counts-node -o json)"; return 1; }
  local p out
  for p in '{"status":{"devices":[]}}' '{"status":{"total":9}}' '{"spec":{"nodeName":"elsewhere"}}' \
    '{"metadata":{"labels":{"x":"y"}}}' '{"metadata":{"annotations":{"x":"y"}}}' '{"status":{"islands":[{"name":"x"}]}}'; do
    out=$(ext_patch "$p" 2>&1) && { echo "allowed: $p"; return 1; }
    [[ $out == *"may change only status.allocation"* ]] || { echo "$p: $out"; return 1; }
  done
  ! kubectl get gns counts-node -o json | as_ext delete -f - >/dev/null 2>&1 || { echo "deleted a GpuNodeStatus"; return 1; }
  # the admin (as the agent would) still writes the rest
  kubectl patch gpunodestatus counts-node --type merge -p '{"status":{"total":3}}' >/dev/null ||
    { echo "another writer was refused"; return 1; }
}
e2e_check "the extender may change only its counts (status.allocation) in a GpuNodeStatus (ValidatingAdmissionPolicy): not the devices, total, spec, labels, annotations; no delete" \
  check_counts_policy
# RBAC lets the extender patch pods (a nudge: docs/scheduling.md); the
# policy holds it to the one annotation on a pod that waits for a node.
check_nudge_policy() {
  kubectl -n ml apply -f - >/dev/null <<JSON || return 1
{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"v1","kind":"Pod","metadata":{"name":"waits","namespace":"ml","labels":{"app":"a"},"annotations":{"keep":"me"}},
  "spec":{"schedulerName":"nobody","containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}},
 {"apiVersion":"v1","kind":"Pod","metadata":{"name":"placed","namespace":"ml"},
  "spec":{"nodeName":"own-node","containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}}]}
JSON
  patch() { as_ext -n ml patch pod "$1" --type merge -p "$2" 2>&1; }
  local out
  refused() { [[ $(patch waits '{"metadata":{"labels":{"app":"b"}}}') == *"may change only the annotation"* ]]; }
  cluster_wait 20 "the pod policy in force" refused || return 1
  out=$(patch waits '{"metadata":{"annotations":{"gpu.scheduling/nudged":"2026-01-01T00:00:00.000Z"}}}') ||
    { echo "the nudge refused: $out"; return 1; }
  # the reaper's fence (docs/architecture.md): the same patch, held to the version the pod was read at
  local uid version
  uid=$(kubectl -n ml get pod waits -o jsonpath='{.metadata.uid}')
  version=$(kubectl -n ml get pod waits -o jsonpath='{.metadata.resourceVersion}')
  fence() { patch waits "{\"metadata\":{\"uid\":\"$uid\",\"resourceVersion\":\"$version\",\"annotations\":{\"gpu.scheduling/nudged\":\"$1\"}}}"; }
  out=$(fence 2026-01-01T00:00:01Z) || { echo "the fence refused: $out"; return 1; }
  out=$(fence 2026-01-01T00:00:02Z)
  [[ $out == *Conflict* || $out == *"has been modified"* ]] || { echo "a fence of a pod changed since carried out: $out"; return 1; }
  out=$(patch waits '{"metadata":{"annotations":{"keep":"not"}}}')
  [[ $out == *"may change only the annotation"* ]] || { echo "another annotation changed: $out"; return 1; }
  out=$(patch waits '{"metadata":{"annotations":{"gpu.scheduling/allocated":"n:0"}}}')
  [[ $out == *"may change only the annotation"* ]] || { echo "an annotation added: $out"; return 1; }
  out=$(patch waits '{"spec":{"activeDeadlineSeconds":5}}')
  [[ $out == *"may change only the annotation"* ]] || { echo "the spec changed: $out"; return 1; }
  out=$(patch placed '{"metadata":{"annotations":{"gpu.scheduling/nudged":"2026-01-01T00:00:00.000Z"}}}')
  [[ $out == *"only pods that wait for a node"* ]] || { echo "a bound pod annotated: $out"; return 1; }
  [[ $(kubectl -n ml get pod waits -o jsonpath='{.metadata.labels.app}/{.metadata.annotations.keep}') == a/me ]] ||
    { echo "the pod changed"; return 1; }
}
e2e_check "the extender may patch only the nudge annotation of a waiting pod (ValidatingAdmissionPolicy; the reaper's fence too, refused once the pod changed): not a label, another annotation, the spec, or a bound pod" \
  check_nudge_policy
echo "rbac.sh took $((SECONDS - t_start))s"
e2e_summary
