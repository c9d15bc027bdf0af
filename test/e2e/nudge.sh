#!/usr/bin/env bash
# Waiting pods placed the moment a GPU frees (docs/scheduling.md, "When a
# waiting pod is tried again"). A real kube-scheduler keeps a pod the
# extender rejected in its unschedulable queue until an event it watches, or
# five minutes. Two ways a GPU frees while a GPU pod waits, refused by the
# extender: the only GPU of a node turns Healthy in its GpuNodeStatus (which
# kube-scheduler does not watch), and the pod holding a node's only GPU
# finishes (kube-scheduler sees that itself, and tries the waiting pod at
# once: if before the extender's own pod watch has freed the GPU, the pod is
# refused again and sleeps).
#
#   1. nudges on (the default): the extender annotates the waiting pod and
#      it is bound within 2 s plus kube-scheduler's backoff for it (at most
#      10 s), measured from the extender's own lines ("GPUs freed": its
#      cache published the free GPU; "released a reservation": the release
#      written) to "bound"; the figures are printed;
#   2. nudges off (--nudge=false): the pod whose GPU turned healthy is still
#      Pending 30 s after the extender's cache shows the GPU free.
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

# A node whose one GPU a pod holds, the pod that waits for it, its refusal, then the holder finished.
# (The holder carries the label the webhook gives GPU pods: the extender's pod watch sees it finish.)
wait_then_finish() {  # NODE HOLDER POD
  e2e_gpu_node "$1" 1 || return 1
  kubectl apply -f - >/dev/null <<JSON || return 1
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$2","namespace":"ml","labels":{"gpu.scheduling/managed":"true"}},
 "spec":{"schedulerName":"gpu-scheduler","restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/gpu":"1"}}}]}}
JSON
  cluster_wait 20 "$2 bound" bound ml "$2" || return 1
  [[ $(e2e_pod_node ml "$2") == "$1" ]] || { echo "$2 went to $(e2e_pod_node ml "$2"), not $1"; return 1; }
  e2e_pod ml "$3" '{"gpu.scheduling/gpu":"1"}' || return 1
  cluster_wait 20 "$3 refused" refused ml "$3" || return 1
  sleep 3
  bound ml "$3" && { echo "$3 was bound while $2 held the GPU"; return 1; }
  kubectl -n ml patch pod "$2" --subresource=status --type=merge -p '{"status":{"phase":"Succeeded"}}' >/dev/null
}
# The earlier of two RFC 3339 times (the second may be empty).
earlier() { [[ -z $2 ]] && { echo "$1"; return; }; awk -v a="$(secs "$1")" -v b="$(secs "$2")" 'BEGIN { exit !(a <= b) }' && echo "$1" || echo "$2"; }

# Seconds from T0 (RFC 3339) to the extender's "bound" line of POD; at most 2 s + 10 s of backoff.
bound_within() {  # EXT POD T0 WHAT
  local bound_at dt
  bound_at=$(log_of "$1" | grep "msg=\"bound\" pod=ml/$2 " | head -1 | sed -E 's/^ts=([^ ]+).*/\1/')
  [[ -n $bound_at ]] || { echo "no 'bound' line of $2"; return 1; }
  dt=$(awk -v a="$(secs "$bound_at")" -v b="$(secs "$3")" 'BEGIN { printf "%.3f", a - b }')
  note "nudges on: $4 ($3) to $2 bound ($bound_at): ${dt} s (nudged at $(e2e_ann ml "$2" gpu.scheduling/nudged))"
  # 2 s, plus kube-scheduler's backoff for the pod: 1 s doubled per failed try, at most 10 s.
  awk -v d="$dt" 'BEGIN { exit !(d <= 12) }' || { echo "$2 bound ${dt} s after its GPU freed: more than 2 s + 10 s backoff"; return 1; }
}
# The time of the extender's first line matching PATTERN, or of its FIELD=.
line_time() {  # EXT PATTERN [FIELD]
  local l
  l=$(log_of "$1" | grep -E "$2" | head -1)
  [[ -n $l ]] || return 1
  if [[ -n ${3:-} ]]; then sed -E "s/.* $3=([^ ]+).*/\1/" <<<"$l"; else sed -E 's/^ts=([^ ]+).*/\1/' <<<"$l"; fi
}

# --- 1. nudges on ---
e2e_start_extender ext --reap-interval 2 || { echo "nudge: 0 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched "$E2E_URL" || { echo "nudge: 0 passed, 1 failed (scheduler)"; exit 1; }
check_healed() {
  wait_then_heal gpu-on waiter-on || return 1
  cluster_wait 30 "waiter-on bound" bound ml waiter-on || { log_of ext | tail -20; return 1; }
  local freed
  freed=$(line_time ext 'msg="GPUs freed: nudging.* first=gpu-on ' freed_at) ||
    { echo "no 'GPUs freed' line of gpu-on:"; log_of ext | tail -20; return 1; }
  [[ -n $(e2e_ann ml waiter-on gpu.scheduling/nudged) ]] || { echo "waiter-on has no gpu.scheduling/nudged annotation"; return 1; }
  bound_within ext waiter-on "$freed" "healthy GPU in the extender's cache" || return 1
  curl -sf "$E2E_URL/metrics" | grep -q '^gpu_extender_nudges_total{result="sent"} [1-9]' ||
    { echo "no nudge counted sent:"; curl -sf "$E2E_URL/metrics" | grep nudges; return 1; }
}
e2e_check "nudges on: a waiting pod is bound within 2 s + its backoff (<= 10 s) of its GPU turning healthy" check_healed
print_notes
# kube-scheduler tries the waiting pod at the holder's update; the extender frees the GPU when its own
# pod watch brings the same update (then the reaper releases the reservation): a race, which the
# pod loses when its filter comes first. Either way it is bound within 2 s + its backoff.
check_released() {
  wait_then_finish gpu-fin holder-on waiter-fin-on || return 1
  cluster_wait 30 "waiter-fin-on bound" bound ml waiter-fin-on || { echo "waiter-fin-on not bound"; log_of ext | tail -8; return 1; }
  local released freed
  released=$(line_time ext 'msg="released a reservation" pod=ml/holder-on ') ||
    { echo "no release of holder-on:"; log_of ext | tail -8; return 1; }
  freed=$(line_time ext 'msg="GPUs freed: nudging.* first=gpu-fin ' freed_at)
  bound_within ext waiter-fin-on "$(earlier "$released" "$freed")" \
    "holder-on finished: its GPU free in the extender's cache or released, whichever first" || return 1
}
e2e_check "nudges on: a waiting pod is bound within 2 s + its backoff (<= 10 s) of a finished pod's GPU freed" \
  check_released
print_notes
cluster_stop_scheduler sched
cluster_kill ext

# --- 2. nudges off: the same, and the pods wait on ---
e2e_start_extender ext-off --reap-interval 2 --nudge=false || { echo "nudge: 2 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched-off "$E2E_URL" || { echo "nudge: 2 passed, 1 failed (scheduler)"; exit 1; }
# A finished pod is a Pod event kube-scheduler sees itself (a race with the extender's pod watch):
# only the healthy GPU, which no event of its announces, shows the pod left waiting.
pending_for() {  # POD: still Pending OFF_WAIT seconds from now
  local t0=$SECONDS
  while ((SECONDS - t0 < OFF_WAIT)); do
    bound ml "$1" && { echo "$1 bound $((SECONDS - t0)) s after its GPU freed, without a nudge"; return 1; }
    sleep 1
  done
  [[ -z $(e2e_ann ml "$1" gpu.scheduling/nudged) ]] || { echo "$1 annotated with nudges off"; return 1; }
  note "nudges off: $1 still Pending ${OFF_WAIT} s after its GPU freed (kube-scheduler's flush: up to 5 min)"
}
check_not_nudged_healed() {
  wait_then_heal gpu-off waiter-off || return 1
  cluster_wait 10 "gpu-off's GPU free in the extender's cache" free_in_cache gpu-off || return 1
  pending_for waiter-off
}
e2e_check "nudges off: the waiting pod is still Pending ${OFF_WAIT} s after its GPU turned healthy" check_not_nudged_healed
print_notes
rm -f "$NOTES"
echo "nudge.sh took $((SECONDS - t_start))s"
e2e_summary
