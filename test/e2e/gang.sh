#!/usr/bin/env bash
# Gangs against a real control plane (fake GPU nodes): kube-scheduler with
# the extender places the members of a gang all together or not at all.
#   1. a GpuClaim gang (gangRef, gangSize) that fits: every member bound,
#      inside the tightest zone that holds it, one ledger place each;
#   2. a gang that does not fit: no member bound, the reason in the pods'
#      events;
#   3. a PodGroup gang (scheduling.x-k8s.io, minMember): none placed while
#      only some members exist; all bound once the last one is created;
#   4. two gangs of which only one fits, their members created interleaved:
#      one gang whole, the other nothing; deleting the winner lets the other in;
#   5. a member that never comes: the gang's unused place is released after
#      the gang's timeout;
#   6. the extender killed (SIGKILL) with a gang reserved and one place
#      free: a new one binds the last member into it from the ledgers,
#      exactly once;
#   7. Kubernetes' own gang API (1.35: a Workload's pod group with gang
#      minCount, pods with spec.workloadRef; 1.36 on: a PodGroup object,
#      pods with spec.schedulingGroup), with kube-scheduler's GangScheduling
#      plugin on: every member bound, into the gang's places;
#   8. two extender replicas, each with a kube-scheduler of the same
#      schedulerName, racing for one gang's members: the gang reserved once
#      (one replica's lock), every member bound exactly once;
#   9. two members of one gang whose claims differ only in the memory share:
#      the one the places were not planned for is not given one;
#  10. the extender killed (SIGKILL) part-way through writing a gang's places
#      (after the first node's): the other replica rolls the half-written
#      reservation back within the gang's timeout, then places it whole.
# After each: test/e2e/verify_allocations.py (no device twice, every bound
# pod's annotation in its ledger).
#
#   test/e2e/run.sh test/e2e/gang.sh        GANG_SCENARIOS="1 4" (or E2E_SCENARIOS) for a subset
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

E2E_SCENARIOS=${GANG_SCENARIOS:-${E2E_SCENARIOS:-1 2 3 4 5 6 7 8 9 10}}
T_START=$SECONDS
NS=ml
ZONE=topology.kubernetes.io/zone
EXT_FLAGS=(--reap-interval 1 --bind-timeout 20 --gang-timeout 60)

# Kubernetes' own gang API (alpha in 1.35, beta in 1.37): served, and kube-scheduler's GangScheduling plugin on.
e2e_k8s_gang_api || { echo "gang: 0 passed, 1 failed (K8S_VERSION)"; exit 1; }
e2e_setup || { echo "gang: 0 passed, 1 failed (cluster setup)"; exit 1; }
kubectl apply -f deploy/base/10-crd-podgroup.yaml >/dev/null &&
  cluster_wait 30 "PodGroup CRD established" kubectl wait --for=condition=Established --timeout=1s \
    crd/podgroups.scheduling.x-k8s.io >/dev/null || { echo "gang: 0 passed, 1 failed (PodGroup CRD)"; exit 1; }
WORK=$CLUSTER_DIR/gang
mkdir -p "$WORK"

# Zone a: two 8-GPU nodes; zone b: three; pool c (scenario 4): three 4-GPU nodes.
for n in ga1 ga2; do cluster_create_gpu_node "$n" "$ZONE=a" pool=ab >/dev/null && e2e_gns "$n" 8; done
for n in gb1 gb2 gb3; do cluster_create_gpu_node "$n" "$ZONE=b" pool=ab >/dev/null && e2e_gns "$n" 8; done
for n in gc1 gc2 gc3; do cluster_create_gpu_node "$n" "$ZONE=c" pool=c >/dev/null && e2e_gns "$n" 4; done

e2e_start_extender ext "${EXT_FLAGS[@]}" || { echo "gang: 0 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched "$E2E_URL" || { echo "gang: 0 passed, 1 failed (scheduler)"; exit 1; }

# gclaim NAME GANG SIZE GPUS POOL [TIMEOUT]: a GpuClaim for the members of a gang.
gclaim() {
  local timeout=${6:+,\"gangTimeoutSeconds\":$6}
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"gpu.scheduling/v1","kind":"GpuClaim","metadata":{"name":"$1","namespace":"$NS"},
 "spec":{"devices":{"count":$4},"selector":{"matchLabels":{"pool":"$5"}},"gangRef":"$2","gangSize":$3$timeout}}
JSON
}
# member NAME CLAIM [SCHEDULER [SPEC_JSON_PREFIX]]: a pod of a GpuClaim gang (labelled as the webhook labels GPU pods).
member() {
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"$NS","labels":{"gpu.scheduling/managed":"true"},
  "annotations":{"gpu.scheduling/claim":"$2"}},
 "spec":{${4:-}"schedulerName":"${3:-gpu-scheduler}","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/claim":"1"}}}]}}
JSON
}
# pg_member NAME GROUP GPUS: a pod of a coscheduling PodGroup.
pg_member() {
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"$NS",
  "labels":{"gpu.scheduling/managed":"true","scheduling.x-k8s.io/pod-group":"$2"}},
 "spec":{"schedulerName":"gpu-scheduler","terminationGracePeriodSeconds":0,"nodeSelector":{"pool":"ab"},
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/gpu":"$3"}}}]}}
JSON
}
node_of() { e2e_pod_node "$NS" "$1"; }
bound_count() { local n=0 p; for p in "$@"; do [[ -n $(node_of "$p") ]] && n=$((n + 1)); done; echo $n; }
all_bound() { (($(bound_count "$@") == $#)); }
zone_of() { kubectl get node "$1" -o "jsonpath={.metadata.labels.topology\.kubernetes\.io/zone}"; }
delete_pods() { kubectl -n "$NS" delete pod "$@" --grace-period=0 --force --wait=true >/dev/null 2>&1; }
# The ledgers' entries of a gang: "places bound" counts.
gang_entries() {  # GANG
  kubectl -n gpu-system get leases -l gpu.scheduling/ledger=true -o json | python3 -c '
import json, sys
places = bound = 0
for l in json.load(sys.stdin)["items"]:
    for e in json.loads(l["metadata"].get("annotations", {}).get("gpu.scheduling/reservations") or "[]"):
        if e.get("gang") == sys.argv[1] and e.get("namespace") == "ml":
            if e["uid"].startswith("gang-"):
                places += 1
            else:
                bound += 1
print(places, bound)' "$1"
}
# no_lock GANG: the gang's lock Lease is gone.
no_lock() {
  ! kubectl -n gpu-system get leases -l gpu.scheduling/gang-lock=true \
    -o 'jsonpath={range .items[*]}{.metadata.annotations.gpu\.scheduling/gang}{"\n"}{end}' | grep -qx "ml/$1"
}
verify() {  # NAME: e2e_verify, its output shown only when it fails
  e2e_verify "$WORK/verify-$1" >/dev/null || { cat "$WORK/verify-$1/verify.txt" 2>/dev/null; return 1; }
}
# gang_status KIND NAME: "phase bound/placed reserved" as kubectl shows the gang (GpuClaim status.gang, PodGroup status).
gang_status() {
  if [[ $1 == gclaim ]]; then
    kubectl -n "$NS" get gclaim "$2" -o 'jsonpath={.status.gang.phase} {.status.gang.bound} {.status.gang.reserved}'
  else
    kubectl -n "$NS" get podgroups.scheduling.x-k8s.io "$2" -o 'jsonpath={.status.phase} {.status.placed} {.status.reserved}'
  fi
}
status_is() {  # KIND NAME WANT
  local got
  got=$(gang_status "$1" "$2")
  [[ $got == "$3" ]] || { echo "status of $1 $2: '$got', want '$3'"; return 1; }
}
# reason_of KIND NAME REASON: the messages of the Events REASON on the object (pod, PodGroup) NAME
reason_of() {
  kubectl -n "$NS" get events --field-selector "involvedObject.kind=$1,involvedObject.name=$2,reason=$3" \
    -o jsonpath='{range .items[*]}{.message}{"\n"}{end}'
}
has_event() { [[ -n $(reason_of "$@") ]]; }   # KIND NAME REASON
described() { kubectl -n "$NS" describe pod "$1" | grep -qF -- "$2"; }   # POD TEXT
events_say() {  # POD TEXT: the pod's FailedScheduling events carry TEXT
  kubectl -n "$NS" get events --field-selector "involvedObject.name=$1" -o json | grep -qF -- "$2"
}
# No change for longer than kube-scheduler's pod backoff (10 s): nothing more gets bound.
settle() { sleep 12; }

if e2e_want 1; then
  gclaim fit job-1 2 8 ab
  member fit-0 fit
  member fit-1 fit
  e2e_check "1. a GpuClaim gang of 2×8 GPUs that fits: both members bound" \
    cluster_wait 40 "fit-0 and fit-1 bound" all_bound fit-0 fit-1
  same_zone_a() {
    local a b
    a=$(node_of fit-0) b=$(node_of fit-1)
    [[ $a != "$b" && $(zone_of "$a") == a && $(zone_of "$b") == a ]] || { echo "on $a and $b"; return 1; }
  }
  e2e_check "1. inside the tightest zone that holds it (zone a: 2 nodes; zone b has 3)" same_zone_a
  took_places() { [[ $(gang_entries job-1) == "0 2" ]] || { echo "places bound: $(gang_entries job-1)"; return 1; }; }
  e2e_check "1. each member took one of the gang's places in the ledgers (none left)" took_places
  e2e_check "1. no device twice; annotations match the ledgers" verify 1
  e2e_check "1. kubectl get gclaim shows the gang Bound, 2 members, no place left" \
    cluster_wait 10 "the gang's status" status_is gclaim fit "Bound 2 0"
  spread() {
    local got
    got=$(kubectl -n "$NS" get gclaim fit -o 'jsonpath={.status.gang.nodes} {.status.gang.domains}')
    [[ $got == "2 1" ]] || { echo "nodes, domains: $got"; return 1; }
  }
  e2e_check "1. ... and its spread: 2 nodes, 1 zone" spread
  e2e_check "1. kubectl describe pod shows the member's GPUsAllocated Event" \
    cluster_wait 10 "GPUsAllocated on fit-0" described fit-0 "node $(node_of fit-0): GPUs 0,1,2,3,4,5,6,7"
fi

if e2e_want 2; then
  # Pool ab has five 8-GPU nodes (three when scenario 1 ran): never room for six members.
  gclaim big job-2 6 8 ab
  for i in 0 1 2 3 4 5; do member "big-$i" big; done
  settle
  none_bound() { local n; n=$(bound_count big-0 big-1 big-2 big-3 big-4 big-5); ((n == 0)) || { echo "$n bound"; return 1; }; }
  e2e_check "2. a gang of 6×8 GPUs that does not fit: no member bound" none_bound
  e2e_check "2. ... and the pods' events say why" \
    events_say big-5 "gang ml/job-2 needs 6×8 GPUs (one pod each); room for"
  no_places() { [[ $(gang_entries job-2) == "0 0" ]] || { echo "entries: $(gang_entries job-2)"; return 1; }; }
  e2e_check "2. ... and no place of it is in any ledger" no_places
  e2e_check "2. ... and the GpuClaim shows the gang Waiting" status_is gclaim big "Waiting 0 0"
  delete_pods big-0 big-1 big-2 big-3 big-4 big-5
fi

if e2e_want 3; then
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"scheduling.x-k8s.io/v1alpha1","kind":"PodGroup","metadata":{"name":"pg-3","namespace":"$NS"},
 "spec":{"minMember":3,"scheduleTimeoutSeconds":60}}
JSON
  pg_member pg-0 pg-3 2
  pg_member pg-1 pg-3 2
  settle
  waiting() { (($(bound_count pg-0 pg-1) == 0)) && events_say pg-1 "gang ml/pg-3 waits for its members"; }
  e2e_check "3. a PodGroup gang (minMember 3) with 2 members created: none placed, the events say it waits" waiting
  e2e_check "3. ... kubectl describe pod shows GangWaiting, 2 of 3 members" \
    described pg-1 "gang pg-3 waits for its members: 2 of 3 exist"
  e2e_check "3. ... and the PodGroup has the GangWaiting Event too" has_event PodGroup pg-3 GangWaiting
  t0=$SECONDS
  pg_member pg-2 pg-3 2
  e2e_check "3. the third member created: all three bound" cluster_wait 40 "pg-0..2 bound" all_bound pg-0 pg-1 pg-2
  e2e_note "3. all bound $((SECONDS - t0)) s after the last member was created"
  e2e_check "3. no device twice" verify 3
  e2e_check "3. the PodGroup's status: Bound, 3 placed" cluster_wait 10 "pg-3 status" status_is podgroup pg-3 "Bound 3 0"
fi

if e2e_want 4; then
  # Pool c: three 4-GPU nodes; gangs A and B of 3×4 each: only one fits.
  gclaim race-a race-a 3 4 c
  gclaim race-b race-b 3 4 c
  for i in 0 1 2; do member "ra-$i" race-a; member "rb-$i" race-b; done
  settle
  one_whole() {
    local a b
    a=$(bound_count ra-0 ra-1 ra-2) b=$(bound_count rb-0 rb-1 rb-2)
    [[ "$a $b" == "3 0" || "$a $b" == "0 3" ]] || { echo "gang A: $a bound, gang B: $b bound"; return 1; }
  }
  e2e_check "4. two gangs of which one fits, created interleaved: one whole, the other nothing" one_whole
  e2e_check "4. no device twice" verify 4
  winner=ra loser=rb
  (($(bound_count rb-0 rb-1 rb-2) == 3)) && winner=rb loser=ra
  delete_pods "$winner-0" "$winner-1" "$winner-2"
  e2e_check "4. the winner deleted: the other gang is placed, whole" \
    cluster_wait 60 "$loser-0..2 bound" all_bound "$loser-0" "$loser-1" "$loser-2"
  delete_pods "$loser-0" "$loser-1" "$loser-2"
fi

if e2e_want 5; then
  # A gang of 2 whose second member never reaches the extender (it fits no
  # node for kube-scheduler): both exist, so the gang is reserved; one place
  # stays free and goes after the gang's timeout, 5 s.
  gclaim lone job-5 2 1 ab 5
  member lone-1 lone gpu-scheduler '"nodeSelector":{"pool":"none"},'
  member lone-0 lone
  e2e_check "5. the member that is scheduled is bound into the gang's place" cluster_wait 40 "lone-0 bound" all_bound lone-0
  released() { [[ $(gang_entries job-5) == "0 1" ]]; }
  e2e_check "5. the place no member took is released after the gang's timeout (5 s)" \
    cluster_wait 20 "job-5's unused place released" released
  e2e_check "5. ... with a log line saying why" \
    grep -q 'released a reservation.*reason="gang place unused in time"' "$(cluster_log ext)"
  e2e_check "5. ... and the GpuClaim shows the gang TimedOut (1 bound, no place left)" \
    cluster_wait 10 "the gang's status" status_is gclaim lone "TimedOut 1 0"
  e2e_check "5. ... and its lock Lease, expired, is deleted" cluster_wait 10 "job-5's lock gone" no_lock job-5
  e2e_check "5. ... and the members have a GangTimedOut Event" \
    cluster_wait 10 "GangTimedOut on lone-0" has_event Pod lone-0 GangTimedOut
  delete_pods lone-0 lone-1
fi

if e2e_want 6; then
  # Three members exist, one of them another scheduler's: the gang is reserved
  # whole, two members bind, one place stays free; then SIGKILL.
  gclaim crash job-6 3 2 ab
  member crash-2 crash nobody
  member crash-0 crash
  member crash-1 crash
  cluster_wait 40 "crash-0 and crash-1 bound" all_bound crash-0 crash-1 >/dev/null
  at=$(gang_entries job-6)
  cluster_kill9 ext
  e2e_note "6. SIGKILL with the gang at (places bound): $at"
  # A new extender (and a scheduler pointed at it); the third member comes back as a gpu-scheduler pod.
  cluster_kill scheduler-sched
  e2e_start_extender ext2 "${EXT_FLAGS[@]}"
  e2e_start_scheduler sched2 "$E2E_URL"
  delete_pods crash-2
  member crash-2 crash
  e2e_check "6. killed mid-gang ($at): the new extender binds the last member into the gang's free place" \
    cluster_wait 60 "crash-2 bound" all_bound crash-0 crash-1 crash-2
  exactly_once() { [[ $(gang_entries job-6) == "0 3" ]] || { echo "places bound: $(gang_entries job-6)"; return 1; }; }
  e2e_check "6. ... each member in one place of the gang, none left over, none twice" exactly_once
  e2e_check "6. no device twice" verify 6
fi

if e2e_want 7; then
  if ((E2E_K8S_MINOR >= 36)); then
    # 1.36 on: a PodGroup object (the newest version served) named by the pods' spec.schedulingGroup.
    W7_GANG=podgroup:w7-workers W7_REF=schedulingGroup W7_PATH='{.spec.schedulingGroup.podGroupName}' W7_WANT=w7-workers
    kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"scheduling.k8s.io/v1beta1","kind":"PodGroup","metadata":{"name":"w7-workers","namespace":"$NS"},
 "spec":{"schedulingPolicy":{"gang":{"minCount":3}}}}
JSON
    REF='"schedulingGroup":{"podGroupName":"w7-workers"}'
  else
    # 1.35: a Workload (v1alpha1) with its pod group, named by the pods' spec.workloadRef.
    W7_GANG=w7/workers W7_REF=workloadRef W7_PATH='{.spec.workloadRef.podGroup}' W7_WANT=workers
    kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"scheduling.k8s.io/v1alpha1","kind":"Workload","metadata":{"name":"w7","namespace":"$NS"},
 "spec":{"podGroups":[{"name":"workers","policy":{"gang":{"minCount":3}}}]}}
JSON
    REF='"workloadRef":{"name":"w7","podGroup":"workers"}'
  fi
  for i in 0 1 2; do
    kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"wl-$i","namespace":"$NS","labels":{"gpu.scheduling/managed":"true"}},
 "spec":{"schedulerName":"gpu-scheduler","terminationGracePeriodSeconds":0,"nodeSelector":{"pool":"ab"},$REF,
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/gpu":"2"}}}]}}
JSON
  done
  has_ref() { [[ $(kubectl -n "$NS" get pod wl-0 -o "jsonpath=$W7_PATH") == "$W7_WANT" ]]; }
  e2e_check "7. the API server keeps spec.$W7_REF (GenericWorkload on, Kubernetes 1.$E2E_K8S_MINOR)" has_ref
  e2e_check "7. a gang of Kubernetes' own API (minCount 3) with kube-scheduler's GangScheduling on: all three bound" \
    cluster_wait 60 "wl-0..2 bound" all_bound wl-0 wl-1 wl-2
  wl_places() { [[ $(gang_entries "$W7_GANG") == "0 3" ]] || { echo "places bound: $(gang_entries "$W7_GANG")"; return 1; }; }
  if ((E2E_K8S_MINOR >= 36)); then
    newest() { grep -q 'reading scheduling.k8s.io PodGroups.*version=v1beta1' "$CLUSTER_DIR"/logs/ext*.log; }
    e2e_check "7. ... the extender reads PodGroups in the newest version served (v1beta1, not v1alpha3)" newest
  fi
  e2e_check "7. ... each into a place the extender reserved for the whole gang" wl_places
  e2e_check "7. no device twice" verify 7
fi

if e2e_want 8; then
  # Room of its own: two 8-GPU nodes of pool d; a gang of 6×2 GPUs.
  for n in gd1 gd2; do cluster_create_gpu_node "$n" "$ZONE=d" pool=d >/dev/null && e2e_gns "$n" 8; done
  e2e_start_extender ext-b "${EXT_FLAGS[@]}"
  e2e_start_scheduler sched-b "$E2E_URL"
  gclaim duo job-8 6 2 d
  for i in 0 1 2 3 4 5; do member "duo-$i" duo; done
  e2e_check "8. two replicas and two schedulers racing: all six members bound" \
    cluster_wait 60 "duo-0..5 bound" all_bound duo-0 duo-1 duo-2 duo-3 duo-4 duo-5
  once() {
    [[ $(gang_entries job-8) == "0 6" ]] || { echo "places bound: $(gang_entries job-8)"; return 1; }
    local n
    n=$(cat "$CLUSTER_DIR"/logs/ext*.log | grep -c 'reserved a gang.*gang=ml/job-8 ')
    ((n == 1)) || { echo "the gang was reserved $n times"; return 1; }
  }
  e2e_check "8. ... the gang reserved once (by one replica), each member in one of its places" once
  e2e_check "8. no device twice" verify 8
  e2e_note "8. lock refusals seen by the schedulers: $(cat "$CLUSTER_DIR"/logs/kube-scheduler*.log | grep -c 'is being reserved by')"
fi

if e2e_want 9; then
  # One 2-GPU node of its own; a gang of two 1-GPU shares whose claims differ
  # in memory only: the places are made for the member that completes the
  # gang, and the other may not take one (it would get 8 GiB for 16, or 16 for 8).
  cluster_create_gpu_node gf1 "$ZONE=f" pool=f >/dev/null && e2e_gns gf1 2
  for m in 8192 16384; do
    kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"gpu.scheduling/v1","kind":"GpuClaim","metadata":{"name":"share-$m","namespace":"$NS"},
 "spec":{"devices":{"count":1,"exclusivity":"Shared","memoryMiB":$m},"selector":{"matchLabels":{"pool":"f"}},
   "gangRef":"job-9","gangSize":2}}
JSON
  done
  member sh-8 share-8192
  member sh-16 share-16384
  settle
  one_member() {
    local n
    n=$(bound_count sh-8 sh-16)
    ((n == 1)) || { echo "$n of sh-8, sh-16 bound (each member into a place made for the other's claim)"; return 1; }
  }
  e2e_check "9. members whose claims differ in memory share: only the one the places fit is bound" one_member
  other=sh-16
  [[ -n $(node_of sh-16) ]] && other=sh-8
  e2e_check "9. ... and the other's events say why" events_say "$other" "this member asks"
  e2e_check "9. no device twice" verify 9
  delete_pods sh-8 sh-16
fi

if e2e_want 10; then
  # Two 4-GPU nodes of their own: a gang of 2×4 GPUs takes one place on each,
  # two ledger writes. A replica told to pause after the first (a test-only
  # setting) is killed there; a running replica (ext) must roll the half
  # back within the gang's timeout (60 s), and then place the gang whole.
  for n in gh1 gh2; do cluster_create_gpu_node "$n" "$ZONE=h" pool=h >/dev/null && e2e_gns "$n" 4; done
  main_url=$E2E_URL
  sed 's/schedulerName: gpu-scheduler/schedulerName: pause-scheduler/' config/scheduler-config.yaml >"$WORK/pause.yaml"
  export GPU_EXTENDER_TEST_GANG_PAUSE_S=300
  e2e_start_extender ext-p "${EXT_FLAGS[@]}"
  unset GPU_EXTENDER_TEST_GANG_PAUSE_S
  e2e_start_scheduler sched-p "$E2E_URL" "$WORK/pause.yaml"
  E2E_URL=$main_url
  gclaim half half-10 2 4 h
  member half-0 half pause-scheduler
  member half-1 half pause-scheduler
  paused() { grep -q 'test only: pausing after writing a gang.*gang=half-10' "$(cluster_log ext-p)"; }
  cluster_wait 60 "ext-p paused part-way through the gang" paused >/dev/null
  at=$(gang_entries half-10)
  cluster_kill9 ext-p
  cluster_kill scheduler-sched-p
  t0=$SECONDS
  e2e_note "10. SIGKILL part-way through the gang's places (places bound): $at"
  rolled_back() { [[ $(gang_entries half-10) == "0 0" ]] && no_lock half-10; }
  e2e_check "10. the other replica rolls the half-written gang back (no place, no lock) within its timeout" \
    cluster_wait 50 "half-10 rolled back" rolled_back
  e2e_note "10. rolled back $((SECONDS - t0)) s after the kill"
  if ! rolled_back; then   # what the replicas saw, for the failure above
    kubectl -n gpu-system get leases -l gpu.scheduling/gang-lock=true -o json | grep -F 'half-10' -A2 | head -20
    for f in "$CLUSTER_DIR"/logs/ext*.log; do
      echo "  $(basename "$f"):"; grep -E 'gang|lock|reap' "$f" | tail -8 | cut -c1-300
    done
  fi
  said() {  # (the running replicas: ext, or ext2 and ext-b after scenarios 6 and 8)
    grep -l 'rolled back a gang.*gang=ml/half-10' "$CLUSTER_DIR"/logs/ext*.log | grep -qv '/ext-p\.log$'
  }
  e2e_check "10. ... and says so in its log" said
  e2e_check "10. ... no member was bound meanwhile" test "$(bound_count half-0 half-1)" = 0
  e2e_start_scheduler sched-q "$main_url" "$WORK/pause.yaml"
  e2e_check "10. then both members are bound, into a gang reserved whole again" \
    cluster_wait 60 "half-0 and half-1 bound" all_bound half-0 half-1
  whole() { [[ $(gang_entries half-10) == "0 2" ]] || { echo "places bound: $(gang_entries half-10)"; return 1; }; }
  e2e_check "10. ... each member in one place, none left over" whole
  e2e_check "10. no device twice" verify 10
  cluster_kill scheduler-sched-q
  delete_pods half-0 half-1
fi

echo "gang.sh took $((SECONDS - T_START))s"
e2e_summary
