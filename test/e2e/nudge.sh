#!/usr/bin/env bash
# Waiting pods placed the moment a GPU frees (docs/scheduling.md, "When a
# waiting pod is tried again"). A real kube-scheduler keeps a pod the
# extender rejected in its unschedulable queue until an event it watches, or
# five minutes. Here the only GPU of a node is Unhealthy, a GPU pod waits
# (rejected by the extender), then the device turns Healthy in the node's
# GpuNodeStatus, which kube-scheduler does not watch:
#
#   1. nudges on (the default): the extender annotates the waiting pod and
#      it is bound within 2 s plus kube-scheduler's backoff for it (at most
#      10 s), measured from the extender's own "GPUs freed" line (when its
#      cache published the healthy device) to its "bound" line; the figure
#      is printed;
#   2. nudges off (--nudge=false): the same pod stays Pending 30 s after the
#      extender's cache shows the GPU free.
#
# The extender runs as its service account with deploy/base's RBAC and the
# ValidatingAdmissionPolicies of 11-least-privilege.yaml in force.
#
#   test/e2e/nudge.sh
#
# Ends with "nudge: N passed, N failed"; nonzero on any failure.
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

t_start=$SECONDS
OFF_WAIT=${NUDGE_OFF_WAIT:-30}
e2e_setup || { echo "nudge: 0 passed, 1 failed (cluster setup)"; exit 1; }
kubectl apply -f deploy/base/11-least-privilege.yaml >/dev/null || { echo "nudge: 0 passed, 1 failed (policies)"; exit 1; }

health() {  # NODE HEALTH: device 0 of NODE's GpuNodeStatus
  kubectl patch gpunodestatus "$1" --type=json \
    -p "[{\"op\":\"replace\",\"path\":\"/status/devices/0/health\",\"value\":\"$2\"}]" >/dev/null
}
bound() { [[ -n $(e2e_pod_node "$1" "$2") ]]; }
# The pod was tried and refused: kube-scheduler's condition says so.
refused() {
  [[ $(kubectl -n "$1" get pod "$2" -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]]
}
# The extender's cache shows NODE's GPU free (its /debug/nodes).
free_in_cache() { curl -sf "$E2E_DEBUG_URL/debug/nodes?node=$1" | grep -q '"freeDevices":1'; }
log_of() { cat "$CLUSTER_DIR/logs/$1.log"; }
# A check runs in a subshell: its figures go to a file, printed after it.
NOTES=$(mktemp)
note() { echo "$*" >>"$NOTES"; }
print_notes() { while IFS= read -r l; do e2e_note "$l"; done <"$NOTES"; : >"$NOTES"; }
# Seconds (3 decimals) of an RFC 3339 time with milliseconds.
secs() { date -u -d "$1" +%s.%3N; }

# A node whose one GPU is Unhealthy, the pod that waits for it, its refusal, then the GPU healthy.
wait_then_heal() {  # NODE POD
  e2e_gpu_node "$1" 1 && health "$1" Unhealthy || return 1
  cluster_wait 10 "$1's GPU unhealthy in the extender's cache" \
    bash -c "curl -sf '$E2E_DEBUG_URL/debug/nodes?node=$1' | grep -q '\"health\":\"Unhealthy\"'" || return 1
  e2e_pod ml "$2" '{"gpu.scheduling/gpu":"1"}' || return 1
  cluster_wait 20 "$2 refused" refused ml "$2" || return 1
  sleep 3   # it sits in kube-scheduler's unschedulable queue, nothing else happening
  bound ml "$2" && { echo "$2 was bound before its GPU was healthy"; return 1; }
  health "$1" Healthy
}

# --- 1. nudges on ---
e2e_start_extender ext --reap-interval 2 || { echo "nudge: 0 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched "$E2E_URL" || { echo "nudge: 0 passed, 1 failed (scheduler)"; exit 1; }
check_nudged() {
  wait_then_heal gpu-on waiter-on || return 1
  cluster_wait 30 "waiter-on bound" bound ml waiter-on || { log_of ext | tail -20; return 1; }
  local freed bound_at ann dt
  freed=$(log_of ext | grep 'msg="GPUs freed: nudging' | grep 'first=gpu-on' | head -1 | sed -E 's/.*freed_at=([^ ]+).*/\1/')
  bound_at=$(log_of ext | grep 'msg="bound" pod=ml/waiter-on ' | head -1 | sed -E 's/^ts=([^ ]+).*/\1/')
  [[ -n $freed && -n $bound_at ]] || { echo "no 'GPUs freed' or 'bound' line:"; log_of ext | tail -20; return 1; }
  ann=$(e2e_ann ml waiter-on gpu.scheduling/nudged)
  [[ -n $ann ]] || { echo "waiter-on has no gpu.scheduling/nudged annotation"; return 1; }
  dt=$(awk -v a="$(secs "$bound_at")" -v b="$(secs "$freed")" 'BEGIN { printf "%.3f", a - b }')
  note "nudges on: GPU freed (extender's cache: $freed) to pod bound ($bound_at): ${dt} s (nudged at $ann)"
  # 2 s, plus kube-scheduler's backoff for the pod: 1 s doubled per failed try, at most 10 s.
  awk -v d="$dt" 'BEGIN { exit !(d <= 12) }' || { echo "bound ${dt} s after its GPU freed: more than 2 s + 10 s backoff"; return 1; }
  curl -sf "$E2E_URL/metrics" | grep -q '^gpu_extender_nudges_total{result="sent"} [1-9]' ||
    { echo "no nudge counted sent:"; curl -sf "$E2E_URL/metrics" | grep nudges; return 1; }
}
e2e_check "nudges on: a waiting pod is bound within 2 s + its backoff (<= 10 s) of its GPU turning healthy" check_nudged
print_notes
cluster_stop_scheduler sched
cluster_kill ext

# --- 2. nudges off: the same, and the pod waits on ---
e2e_start_extender ext-off --reap-interval 2 --nudge=false || { echo "nudge: 1 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched-off "$E2E_URL" || { echo "nudge: 1 passed, 1 failed (scheduler)"; exit 1; }
check_not_nudged() {
  wait_then_heal gpu-off waiter-off || return 1
  cluster_wait 10 "gpu-off's GPU free in the extender's cache" free_in_cache gpu-off || return 1
  local t0=$SECONDS
  while ((SECONDS - t0 < OFF_WAIT)); do
    bound ml waiter-off && { echo "waiter-off bound $((SECONDS - t0)) s after its GPU freed, without a nudge"; return 1; }
    sleep 1
  done
  note "nudges off: waiter-off still Pending ${OFF_WAIT} s after its GPU freed (kube-scheduler's flush: up to 5 min)"
  [[ -z $(e2e_ann ml waiter-off gpu.scheduling/nudged) ]] || { echo "annotated with nudges off"; return 1; }
}
e2e_check "nudges off: the waiting pod is still Pending ${OFF_WAIT} s after its GPU turned healthy" check_not_nudged
print_notes
rm -f "$NOTES"echo "nudge.sh took $((SECONDS - t_start))s"
e2e_summary
