#!/usr/bin/env bash
# Reservations under races, crashes and releases, against a real control plane:
# two extender replicas and two kube-schedulers with the same schedulerName
# competing for fewer GPUs than pods (exclusive, then shared); concurrent /bind
# from many threads against both replicas; kill -9 of the extender mid-bind;
# deleted and finished pods giving their GPUs back; the pod watch's evidence
# never releasing alone (a label taken off, a silent watch) and a ledger's
# lost entry of an unwatched pod put back. After each, every Lease and every
# pod annotation is checked by test/e2e/verify_allocations.py.
#
#   test/e2e/run.sh test/e2e/reserve.sh
#   RESERVE_SCENARIOS="1 3" bash test/e2e/reserve.sh     # a subset (E2E_SCENARIOS too)
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

E2E_SCENARIOS=${RESERVE_SCENARIOS:-${E2E_SCENARIOS:-1 2 3 4 5 6 7 8}}
T_START=$SECONDS
e2e_reaper_bounds 5 1      # BIND_TIMEOUT, REAP_INTERVAL, EXT_FLAGS, REAP_BOUND
# "No more pods get bound": no change for longer than kube-scheduler's longest
# pod backoff (10 s), so that a pod whose bind failed has had its retry.
SETTLE=11
LOAD=test/e2e/reserve_load.py

e2e_setup || { echo "reserve: 0 passed, 1 failed (cluster setup)"; exit 1; }
WORK=$CLUSTER_DIR/reserve
mkdir -p "$WORK"

# Binds of one pod by both replicas at once (the loser's POST binding got 409).
same_pod_races() {  # NS
  cat "$(cluster_log ext1)" "$(cluster_log ext2)" | grep "pod=$1/" | grep -c 'already assigned to node'
}

# ---- helpers -------------------------------------------------------------------

# pool NAME NODES COUNT [MODEL [ISLANDS [MIB]]]: nodes NAME-1..NAME-NODES labelled pool=NAME
pool() {
  local name=$1 n=$2 i; shift 2
  for ((i = 1; i <= n; i++)); do
    cluster_create_gpu_node "$name-$i" "pool=$name" >/dev/null && e2e_gns "$name-$i" "$@" || return 1
  done
}
pool_nodes() { local i s=""; for ((i = 1; i <= $2; i++)); do s+="${s:+,}$1-$i"; done; echo "$s"; }

# begin NS POOL NODES COUNT [MODEL [ISLANDS [MIB]]]: a scenario starts: t0, the
# namespace NS and a pool of nodes, whose names NODES lists.
begin() {
  t0=$SECONDS NS=$1
  cluster_ensure_namespace "$NS" >/dev/null
  pool "${@:2}" || echo "pool $2 failed"
  NODES=$(pool_nodes "$2" "$3")
}

# An extender on a fixed port (restarts keep the URL the scheduler was given).
start_ext() {  # NAME PORT
  cluster_spawn "$1" "$E2E_EXTENDER" serve --kubeconfig "$CLUSTER_EXTENDER_KUBECONFIG" \
    --listen "127.0.0.1:$2" --identity "$1" "${EXT_FLAGS[@]}"
  disown "$CLUSTER_LAST_PID" 2>/dev/null   # no "Killed" job notices after cluster_kill9
  cluster_wait 30 "$1 ready" curl -sf "http://127.0.0.1:$2/readyz"
}

# Sum of a counter (all label values, or those matching LABEL) on the extenders' /metrics.
metric() {  # NAME [LABEL_RE] URL...
  local name=$1 re=$2; shift 2
  local u
  for u in "$@"; do curl -sf "$u/metrics"; done |
    awk -v n="$name" -v re="$re" '$1 ~ "^"n"({|$)" && (re == "" || $1 ~ re) {s += $2} END {printf "%d\n", s}'
}
conflicts() { metric gpu_extender_reservation_conflicts_total "" "$URL1" "$URL2"; }


summary_of() { sed -n 's/^summary: //p' "$1/verify.txt"; }
jfield() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))' "$1" "$2"; }

gpus_used_is() {  # WANT SUMMARY: the verifier's summary counts WANT GPUs in use
  local used
  used=$(jfield "$2" gpus_used)
  [[ $used == "$1" ]] || { echo "$used of $1 GPUs in use ($2)"; return 1; }
}

# wait_settled NS STABLE TIMEOUT: until the bound count of NS has not changed for STABLE s.
wait_settled() {
  local ns=$1 stable=$2 timeout=$3 last=-1 since=$SECONDS start=$SECONDS now
  while ((SECONDS - start < timeout)); do
    now=$(e2e_count_bound "$ns")
    if [[ $now != "$last" ]]; then last=$now since=$SECONDS; fi
    ((SECONDS - since >= stable)) && { echo "$now"; return 0; }
    sleep 0.5
  done
  echo "$last"
  return 1
}

# failed_unbound LOAD_JSON NS: every pod whose bind answered an Error (not
# abandoned) is unbound, or bound where an earlier cut-off attempt put it
# ("already assigned to node X"); every pod the client bound is there.
failed_unbound() {
  python3 - "$1" <(kubectl -n "$2" get pods -o json) <<'PY'
import json, re, sys
load = json.loads(sys.argv[1])
pods = {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in json.load(open(sys.argv[2]))["items"]}
bad = 0
for name, err in load["failed"].items():
    if err.startswith("abandoned"):
        continue
    m = re.search(r'already assigned to node \\?"([^"\\]+)', err)
    if pods.get(name) and not (m and m.group(1) == pods[name]):
        print("%s answered %r but is bound to %s" % (name, err[:160], pods[name])); bad = 1
for name, node in (load["bound"].items() if isinstance(load["bound"], dict) else []):
    if pods.get(name) != node:
        print("%s was bound through the extender to %s, in the API it is on %r" % (name, node, pods.get(name))); bad = 1
sys.exit(bad)
PY
}

# Where each reservation is, in any ledger or as a Lease.
held() {  # UID: true while a ledger entry or a reservation Lease of UID exists
  kubectl get lease -A -o json | python3 -c '
import json, sys
uid = sys.argv[1]
for l in json.load(sys.stdin)["items"]:
    md = l["metadata"]
    if md["name"].startswith("gpu-reservation." + uid + "."):
        sys.exit(0)
    if uid in ((md.get("annotations") or {}).get("gpu.scheduling/reservations") or ""):
        sys.exit(0)
sys.exit(1)' "$1"
}
released() { ! held "$1"; }

create_pods() {  # NS PREFIX SPEC [load flags]
  python3 "$LOAD" pods "$@" | kubectl create -f - >/dev/null
}

cleanup_ns() {  # NS: pods go at once; the garbage collector and the reapers do the rest
  kubectl -n "$1" delete pods --all --force --grace-period=0 --wait=false >/dev/null 2>&1
}

# Both schedulers and both extenders, as in the race scenarios.
start_race_schedulers() {
  (e2e_start_scheduler sched1 "$URL1") &
  local p1=$!
  (e2e_start_scheduler sched2 "$URL2") &
  local p2=$!
  wait $p1 && wait $p2
}
# race_pods NS PREFIX SPEC: both schedulers started, then the pods of SPEC
# created while both run: each pod reaches both queues at once, and both
# pick the oldest first, so they race for the same pods (not only GPUs).
# Sets BOUND (when settled) and CONFLICTS (the ledger 409s meanwhile).
race_pods() {
  local c0
  c0=$(conflicts)
  start_race_schedulers || echo "schedulers failed to start"
  create_pods "$1" "$2" "$3" --selector "pool=$2" --managed-every 2
  BOUND=$(wait_settled "$1" $SETTLE 90)
  CONFLICTS=$(($(conflicts) - c0))
}
stop_schedulers() {
  cluster_alive scheduler-sched1 && cluster_stop_scheduler sched1
  cluster_alive scheduler-sched2 && cluster_stop_scheduler sched2
  return 0
}

PORT1=$(e2e_free_port) PORT2=$(e2e_free_port)
while [[ $PORT2 == "$PORT1" ]]; do PORT2=$(e2e_free_port); done
URL1=http://127.0.0.1:$PORT1 URL2=http://127.0.0.1:$PORT2
start_ext ext1 "$PORT1" && start_ext ext2 "$PORT2" || { echo "reserve: 0 passed, 1 failed (extenders)"; exit 1; }

# ==== 1. race, exclusive ============================================================
# 6 nodes x 4 GPUs; 150 pods of 1 or 2 GPUs (200 GPUs asked); both schedulers
# (one schedulerName) race for every pod and every GPU, each through its own
# extender replica.
if e2e_want 1; then
  # The race is the point of this scenario: a round in which the replicas
  # happened not to collide (no ledger conflict, no pod bound by both: about
  # one round in 25 here) proves nothing either way, so it runs again on
  # fresh nodes, three rounds at most. Every round must allocate safely.
  for round in 1 2 3; do
    sfx=${round/#1/}
    begin "race-excl$sfx" "rx$sfx" 6 4
    race_pods "$NS" "rx$sfx" 100xgpu1,50xgpu2
    RX_CONFLICTS=$CONFLICTS
    e2e_check "race/exclusive: zero double allocations; ledgers, Leases and annotations agree" \
      e2e_verify "$WORK/s1$sfx" --full-use "$NS" --nodes "$NODES"
    s=$(summary_of "$WORK/s1$sfx")
    e2e_check "race/exclusive: all 24 GPUs in use with pods pending" gpus_used_is 24 "$s"
    RX_SAME_POD=$(same_pod_races "$NS")
    e2e_note "race/exclusive, round $round: 150 pods (100x1 + 50x2 GPUs) for 24 GPUs; $BOUND bound; conflicts $RX_CONFLICTS;" \
      "both replicas bound the same pod $RX_SAME_POD times;" \
      "binds so far: ok ext1 $(metric gpu_extender_binds_total 'result="ok"' "$URL1") ext2 $(metric gpu_extender_binds_total 'result="ok"' "$URL2")," \
      "failed $(metric gpu_extender_binds_total 'result="(no_fit|conflict|error)"' "$URL1" "$URL2"); $((SECONDS - t0))s"
    e2e_note "race/exclusive summary: $s"
    stop_schedulers
    cleanup_ns "$NS"
    ((RX_CONFLICTS + RX_SAME_POD > 0)) && break
  done
  # Either sign shows the replicas wrote at once: a ledger write that lost
  # (409), or a pod both bound (one POST binding got 409).
  check_rx_raced() {
    ((RX_CONFLICTS + RX_SAME_POD > 0)) ||
      { echo "no ledger conflict and no pod bound by both in $round rounds: the race did not happen"; return 1; }
  }
  e2e_check "race/exclusive: the replicas really raced (ledger conflicts or same-pod binds > 0)" check_rx_raced
fi

# ==== 2. race, shared ===============================================================
# 4 nodes x 2 GPUs of 81559 MiB; 30 pods asking gpu-core 30 + gpu-memory 20000
# (at most 3 per GPU, by compute) and 6 exclusive 1-GPU pods on the same GPUs.
if e2e_want 2; then
  begin race-shared rs 4 2 "NVIDIA H100 80GB HBM3" 1 81559
  race_pods "$NS" rs 30xshared,6xgpu1
  RS_CONFLICTS=$CONFLICTS
  e2e_check "race/shared: memory and compute sums within capacity; no exclusive overlap" \
    e2e_verify "$WORK/s2" --full-use "$NS" --nodes "$NODES"
  s=$(summary_of "$WORK/s2")
  e2e_check "race/shared: all 8 GPUs in use; no pending pod fits" gpus_used_is 8 "$s"
  e2e_note "race/shared: 36 pods (30 shared + 6 exclusive) for 8 GPUs; $BOUND bound; conflicts $RS_CONFLICTS;" \
    "both replicas bound the same pod $(same_pod_races "$NS") times; $((SECONDS - t0))s"
  e2e_note "race/shared summary: $s"
  stop_schedulers
  cleanup_ns "$NS"
fi

# ==== 3. concurrent /filter + /bind from 16 threads, no scheduler =================
# 3 nodes x 4 GPUs; 40 one-GPU pods of a schedulerName nobody serves; each pod
# is filtered and bound through a random replica, retried like kube-scheduler
# while the filter still passes some node.
if e2e_want 3; then
  begin binds rb 3 4
  c0=$(conflicts)
  create_pods "$NS" rb 40xgpu1 --scheduler none --managed-every 3
  kubectl -n "$NS" get pods -o json >"$WORK/s3-pods.json"
  python3 "$LOAD" binds "$WORK/s3-pods.json" "$URL1,$URL2" "$NODES" --threads 16 >"$WORK/s3-load.json"
  RB_CONFLICTS=$(($(conflicts) - c0))
  load=$(cat "$WORK/s3-load.json")
  check_rb_counts() {
    local ok fail api
    ok=$(jfield "$load" 'len(bound)') fail=$(jfield "$load" 'len(failed)')
    api=$(e2e_count_bound "$NS")
    [[ $ok == 12 && $fail == 28 && $api == 12 ]] ||
      { echo "binds ok $ok, failed $fail, pods bound in the API $api (want 12, 28, 12)"; jfield "$load" 'failed'; return 1; }
  }
  e2e_check "binds: exactly as many succeed as GPUs (12 of 40)" check_rb_counts
  e2e_check "binds: pods that got an Error stay unbound; the others are where /bind said" failed_unbound "$load" "$NS"
  # kube-scheduler binds a pod again when the answer of its first bind was
  # lost: the retry finds its reservation and its Lease, and renews the Lease
  # (a reaper that took it for left over then cannot delete it).
  check_rebind() {
    local pod uid node lease v0 v1 out
    read -r pod uid node < <(kubectl -n "$NS" get pods -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["spec"].get("nodeName") and (p["metadata"].get("labels") or {}).get("gpu.scheduling/managed") != "true":
        print(p["metadata"]["name"], p["metadata"]["uid"], p["spec"]["nodeName"])
        break')
    [[ -n ${pod:-} ]] || { echo "no bound pod outside the pod watch"; return 1; }
    lease=gpu-reservation.$uid.$(printf %s "$node" | sha256sum | cut -c1-16)
    v0=$(kubectl -n "$NS" get lease "$lease" -o 'jsonpath={.metadata.resourceVersion}') || return 1
    out=$(curl -sS -X POST -H 'Content-Type: application/json' "$URL2/bind" \
      -d "{\"PodName\":\"$pod\",\"PodNamespace\":\"$NS\",\"PodUID\":\"$uid\",\"Node\":\"$node\"}") || return 1
    python3 -c 'import json, sys; sys.exit(1 if json.loads(sys.argv[1]).get("Error") else 0)' "$out" ||
      { echo "the second bind of $pod answered $out"; return 1; }
    v1=$(kubectl -n "$NS" get lease "$lease" -o 'jsonpath={.metadata.resourceVersion}') ||
      { echo "$lease is gone after the second bind"; return 1; }
    [[ $v1 != "$v0" ]] || { echo "$lease not renewed (resourceVersion $v0)"; return 1; }
  }
  e2e_check "binds: a bind repeated for a bound pod succeeds, keeps its reservation and renews its Lease" check_rebind
  e2e_check "binds: zero double allocations" e2e_verify "$WORK/s3" --full-use "$NS" --nodes "$NODES"
  # An earlier try bound the pod after kube-scheduler gave up on it, and its
  # second placement names another node, one with room: refused before any
  # ledger write.
  check_bound_elsewhere() {
    local pod uid node other gone gone_uid ledger v0 v1 out
    read -r pod uid node other gone gone_uid < <(kubectl -n "$NS" get pods -o json | python3 -c '
import json, sys
bound = [p for p in json.load(sys.stdin)["items"] if p["spec"].get("nodeName")]
watched = [p for p in bound if (p["metadata"].get("labels") or {}).get("gpu.scheduling/managed") == "true"]
for p in watched:
    for q in bound:
        if q["spec"]["nodeName"] != p["spec"]["nodeName"]:
            print(p["metadata"]["name"], p["metadata"]["uid"], p["spec"]["nodeName"], q["spec"]["nodeName"],
                  q["metadata"]["name"], q["metadata"]["uid"])
            sys.exit(0)')
    [[ -n ${other:-} ]] || { echo "no bound pod in the pod watch with a pod on another node"; return 1; }
    # A GPU frees up on the other node: its pod goes, and the reaper releases it.
    kubectl -n "$NS" delete pod "$gone" --grace-period=0 --force >/dev/null 2>&1
    cluster_wait 60 "$gone released" released "$gone_uid" >/dev/null || { echo "$gone's reservation was not released"; return 1; }
    ledger=gpu-ledger.$other
    v0=$(kubectl -n gpu-system get lease "$ledger" -o 'jsonpath={.metadata.resourceVersion}') || return 1
    out=$(curl -sS -X POST -H 'Content-Type: application/json' "$URL1/bind" \
      -d "{\"PodName\":\"$pod\",\"PodNamespace\":\"$NS\",\"PodUID\":\"$uid\",\"Node\":\"$other\"}") || return 1
    python3 -c 'import json, sys; sys.exit("already assigned to node \"%s\" (seen by the pod watch" % sys.argv[2] not in json.loads(sys.argv[1])["Error"])' "$out" "$node" ||
      { echo "the bind of $pod (on $node) to $other answered $out"; return 1; }
    v1=$(kubectl -n gpu-system get lease "$ledger" -o 'jsonpath={.metadata.resourceVersion}') || return 1
    [[ $v1 == "$v0" ]] || { echo "$ledger was written ($v0 -> $v1)"; return 1; }
  }
  e2e_check "binds: a bind of a pod bound elsewhere, to a node with room, is refused without a write" check_bound_elsewhere
  e2e_note "binds: 40 pods, 12 GPUs, 16 threads, 2 replicas: $(jfield "$load" 'binds') binds" \
    "($(jfield "$load" 'bind_errors') refused, $(jfield "$load" 'retried') of them on a retry), $(jfield "$load" 'filters') filters;" \
    "conflicts $RB_CONFLICTS; $((SECONDS - t0))s"
  cleanup_ns "$NS"
fi

# ==== 4. kill -9 of the extender during binds ======================================
# One replica, ext1 (ext2 stopped), with its scheduler sched1, on 10 nodes x 8
# GPUs. 8 waves of 10 one-GPU pods: 4 for sched1, created while ext1 is down
# (they come back from their backoff), and 6 that a 6-thread client filters
# and binds directly (schedulerName none) as soon as ext1 is ready again. A
# direct client whose request is cut off waits for /readyz and tries again,
# as kube-scheduler would, except for 2 pods per wave ("ra-") that it
# abandons: what their cut-off binds reserved only the reaper can release.
# ext1 is killed with SIGKILL at a random moment 0.05-0.35 s after the wave's
# binds began, and restarted on the same port. 80 pods for 80 GPUs. In the
# end: no double allocation; past the reaper's bound, no reservation of a
# pod that is not bound to that node; every pod but the abandoned ones bound.
if e2e_want 4; then
  begin crash rc 10 8
  stop_schedulers
  cluster_alive ext2 && cluster_kill ext2
  e2e_start_scheduler sched1 "$URL1" || echo "sched1 failed to start"
  # Reservations whose pod is not bound to that node (binds caught mid-way).
  dangling() {
    kubectl get lease -n gpu-system -o json >"$WORK/s4-l.json" && kubectl -n "$NS" get pods -o json >"$WORK/s4-p.json" &&
      python3 - "$WORK/s4-l.json" "$WORK/s4-p.json" <<'PY'
import json, sys
pods = {p["metadata"]["uid"]: p for p in json.load(open(sys.argv[2]))["items"]}
for l in json.load(open(sys.argv[1]))["items"]:
    a = l["metadata"].get("annotations") or {}
    for e in json.loads(a.get("gpu.scheduling/reservations") or "[]"):
        p = pods.get(e["uid"])
        if p is not None and p["spec"].get("nodeName") != a.get("gpu.scheduling/node"):
            print("%s@%s" % (e["pod"], a.get("gpu.scheduling/node")))
PY
  }
  # The pods of wave K: N from each List in turn.
  slice() {  # K N FILE [N FILE...]
    python3 -c '
import json, sys
k, out = int(sys.argv[1]), []
for n, f in zip(sys.argv[2::2], sys.argv[3::2]):
    n = int(n); out += json.load(open(f))["items"][k * n:][:n]
json.dump({"apiVersion": "v1", "kind": "List", "items": out}, sys.stdout)' "$@"
  }
  KILLS=0
  declare -A DANGLING=()
  python3 "$LOAD" pods "$NS" rc 32xgpu1 --selector pool=rc --managed-every 2 >"$WORK/s4-pods.json"
  { python3 "$LOAD" pods "$NS" rd 32xgpu1 --selector pool=rc --managed-every 2 --scheduler none
    python3 "$LOAD" pods "$NS" ra 16xgpu1 --selector pool=rc --managed-every 2 --scheduler none; } | kubectl create -f - >/dev/null
  kubectl -n "$NS" get pods -l e2e=rd -o json >"$WORK/s4-rd.json"
  kubectl -n "$NS" get pods -l e2e=ra -o json >"$WORK/s4-ra.json"
  LOADERS=()
  cluster_kill9 ext1
  for ((k = 0; k < 8; k++)); do
    slice "$k" 4 "$WORK/s4-pods.json" | kubectl create -f - >/dev/null
    slice "$k" 4 "$WORK/s4-rd.json" 2 "$WORK/s4-ra.json" >"$WORK/s4-direct-$k.json"
    start_ext ext1 "$PORT1" || echo "ext1 did not restart"
    python3 "$LOAD" binds "$WORK/s4-direct-$k.json" "$URL1" "$NODES" --threads 6 --deadline 60 \
      >"$WORK/s4-load-$k.json" &
    LOADERS+=($!)
    sleep "$(printf '0.%02d' $((5 + RANDOM % 30)))"
    cluster_kill9 ext1 || echo "ext1 did not die"
    KILLS=$((KILLS + 1))
    for d in $(dangling); do DANGLING[$d]=1; done
  done
  start_ext ext1 "$PORT1" || echo "ext1 did not restart"
  t_last=$SECONDS
  for p in "${LOADERS[@]}"; do wait "$p"; done
  # sched1's pods come back from their backoff (up to 10 s after their last error).
  unbound_left() {
    kubectl -n "$NS" get pods -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' |
      awk '$2 == "" && $1 !~ /^ra-/ {print $1}'
  }
  all_bound() { [[ -z $(unbound_left) ]]; }
  cluster_wait 45 "every pod bound" all_bound
  bound=$(e2e_count_bound "$NS")
  # The reaper's bound: a reservation cut off by the last kill is gone
  # REAP_BOUND s after the restart.
  left=$((t_last + REAP_BOUND - SECONDS))
  ((left > 0)) && sleep $left
  e2e_check "crash: zero double allocations; nothing leaked past the reaper's bound" \
    e2e_verify "$WORK/s4" --settled --full-use "$NS" --nodes "$NODES" --skip-pending '^ra-'
  s=$(summary_of "$WORK/s4")
  load=$(cat "$WORK"/s4-load-*.json | python3 -c '
import json, sys
t = {"bound": 0, "failed": {}, "cut": 0}
for line in sys.stdin.read().replace("}{", "}\n{").splitlines():
    d = json.loads(line)
    t["bound"] += len(d["bound"]); t["cut"] += d["cut"]; t["failed"].update(d["failed"])
print(json.dumps(t))')
  check_rc_all() {
    local unbound
    unbound=$(unbound_left)
    [[ -z $unbound ]] || { echo "pods left unbound: $unbound ($s)"; return 1; }
    [[ $(jfield "$s" bound_gpu_pods) == $(jfield "$s" gpus_used) ]] || { echo "GPUs used != pods bound: $s"; return 1; }
  }
  e2e_check "crash: after $KILLS kills every pod (abandoned ones aside) is bound, one GPU each" check_rc_all
  e2e_check "crash: a direct bind that answered an Error left its pod unbound" failed_unbound "$load" "$NS"
  # Deterministically, what a kill right after the ledger write leaves: a
  # reservation of an unbound pod, one watched (managed) and one not. The
  # reaper must keep it for bind-timeout s, and release it within REAP_BOUND.
  # They go to a fresh node outside the pool, so the first one also creates
  # that node's ledger, as another replica's first reservation there would.
  # Its binding may still be in the API server (waiting for etcd): before
  # the release the reaper fences the pod, so that the binding, carrying
  # the pod's resourceVersion of before the reservation, is refused when it
  # comes (posted here after the release).
  pool rcx 1 8 || echo "node rcx-1 failed"
  check_timeout_release() {
    local p t_inj uids="" u
    [[ $# == 2 && -n $1 && -n $2 ]] || { echo "want a watched and an unwatched unbound pod, got '$*'"; return 1; }
    for p in "$@"; do
      [[ -z $(e2e_pod_node "$NS" "$p") ]] || { echo "$p is bound"; return 1; }
      kubectl -n "$NS" get pod "$p" -o 'jsonpath={.metadata.resourceVersion}' >"$WORK/s4-version-$p"
      python3 "$LOAD" inject "$NS" "$p" rcx-1 >/dev/null || return 1
      uids+=" $(kubectl -n "$NS" get pod "$p" -o 'jsonpath={.metadata.uid}')"
    done
    t_inj=$SECONDS
    sleep $((BIND_TIMEOUT - 2))
    for u in $uids; do
      held "$u" || { echo "reservation of $u released before the bind timeout ($((SECONDS - t_inj)) s)"; return 1; }
    done
    for u in $uids; do
      cluster_wait $((REAP_BOUND - (SECONDS - t_inj))) "reservation of $u released" released "$u" || return 1
    done
    echo "$((SECONDS - t_inj))" >"$WORK/s4-timeout-release"
  }
  check_late_binding_refused() {
    local p out
    for p in "$@"; do
      out=$(kubectl create --raw "/api/v1/namespaces/$NS/pods/$p/binding" -f - 2>&1 <<JSON
{"apiVersion":"v1","kind":"Binding","metadata":{"name":"$p","namespace":"$NS","resourceVersion":"$(<"$WORK/s4-version-$p")",
 "annotations":{"gpu.scheduling/allocated":"rcx-1:0"}},"target":{"apiVersion":"v1","kind":"Node","name":"rcx-1"}}
JSON
      ) && { echo "the late binding of $p was carried out: $out"; return 1; }
      [[ $out == *Conflict* || $out == *"Precondition failed"* || $out == *"has been modified"* ]] ||
        { echo "the late binding of $p failed otherwise: $out"; return 1; }
      [[ -z $(e2e_pod_node "$NS" "$p") ]] || { echo "$p is bound"; return 1; }
      [[ -n $(kubectl -n "$NS" get pod "$p" -o 'jsonpath={.metadata.annotations.gpu\.scheduling/nudged}') ]] ||
        { echo "$p refused otherwise: not fenced (no gpu.scheduling/nudged)"; return 1; }
    done
  }
  unbound_of() {  # SELECTOR: the first unbound pod
    kubectl -n "$NS" get pods -l "$1" -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' |
      awk '$2 == "" {print $1; exit}'
  }
  # Two pods no one binds (rx-000 watched, rx-001 not): whether an abandoned
  # ra- pod is left unbound depends on where the kills fell.
  python3 "$LOAD" pods "$NS" rx 2xgpu1 --selector pool=rc --managed-every 2 --scheduler none | kubectl create -f - >/dev/null
  RA_M=$(unbound_of 'e2e=rx,gpu.scheduling/managed=true')
  RA_P=$(unbound_of 'e2e=rx,gpu.scheduling/managed!=true')
  e2e_check "crash: a reservation left by a bind that died after the ledger write (watched and unwatched pod) is kept for the bind timeout and then released" \
    check_timeout_release "$RA_M" "$RA_P"
  e2e_check "crash: the reaper fenced those pods before the release: a binding with their resourceVersion of before is refused (409), the pods stay unbound" \
    check_late_binding_refused "$RA_M" "$RA_P"
  CUT=$(grep 'Error scheduling pod' "$(cluster_log sched1)" | grep 'pod="crash/' | grep -cE '/bind\\?": .*(EOF|connection reset)')
  rel() { grep 'released a reservation' "$(cluster_log ext1)" | grep 'pod=crash/' | grep -c "$1"; }
  e2e_note "crash: $KILLS kill -9 of ext1; requests cut off: $CUT /bind from sched1, $(jfield "$load" cut) from the direct client;" \
    "${#DANGLING[@]} reservations found without their binding right after a kill (${!DANGLING[*]});" \
    "released: $(rel 'not bound in time') for bind timeout, $(rel 'instead') after the pod was bound elsewhere;" \
    "$(grep 'pod=crash/' "$(cluster_log ext1)" | grep -c 'retried=yes') binds reused their reservation;" \
    "injected reservations released $(cat "$WORK/s4-timeout-release" 2>/dev/null || echo '?') s after;" \
    "$bound bound ($(jfield "$load" bound) directly); $((SECONDS - t0))s"
  cleanup_ns "$NS"
fi

# ==== 5. release: deleted and finished pods give their GPUs back ====================
# 2 nodes x 4 GPUs, 8 one-GPU pods (half labelled gpu.scheduling/managed=true,
# watched; the others not, found through the garbage collector and the
# reaper's lookups). Two are deleted, two marked Succeeded (one of each
# kind); their ledger entries and reservation Leases must go within the
# reaper's bound (REAP_BOUND + 3 s; an unwatched pod that
# finished is only looked up once its reservation is bind-timeout old), and
# four new pods then get exactly those GPUs.
if e2e_want 5; then
  begin release rr 2 4
  cluster_alive ext1 || start_ext ext1 "$PORT1"
  cluster_alive scheduler-sched1 || e2e_start_scheduler sched1 "$URL1"
  # --managed-every 2 on a shuffled list: read back which pods are labelled.
  create_pods "$NS" rr 8xgpu1 --selector pool=rr --managed-every 2
  bound_is() { [[ $(e2e_count_bound "$NS") == "$1" ]]; }
  e2e_check "release: 8 pods bound" cluster_wait 60 "8 bound" bound_is 8
  mapfile -t MANAGED < <(kubectl -n "$NS" get pods -l gpu.scheduling/managed=true -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}')
  mapfile -t PLAIN < <(kubectl -n "$NS" get pods -l 'gpu.scheduling/managed!=true' -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}')
  declare -A HOW=([${MANAGED[0]}]=deleted [${PLAIN[0]}]=deleted [${MANAGED[1]}]=succeeded [${PLAIN[1]}]=succeeded)
  declare -A UID_OF FREED
  for p in "${!HOW[@]}"; do
    UID_OF[$p]=$(kubectl -n "$NS" get pod "$p" -o 'jsonpath={.metadata.uid}')
    FREED[$(e2e_ann "$NS" "$p" gpu.scheduling/allocated)]=1
  done
  tr0=$SECONDS
  for p in "${!HOW[@]}"; do
    if [[ ${HOW[$p]} == deleted ]]; then
      kubectl -n "$NS" delete pod "$p" --force --grace-period=0 --wait=false >/dev/null 2>&1
    else
      kubectl -n "$NS" patch pod "$p" --subresource=status --type=merge -p '{"status":{"phase":"Succeeded"}}' >/dev/null
    fi
  done
  BOUND_S=$((REAP_BOUND + 3))   # + the garbage collector, for deleted unwatched pods
  # When each reservation went (all four watched at once).
  declare -A GONE_AT=()
  while ((${#GONE_AT[@]} < 4 && SECONDS - tr0 <= BOUND_S)); do
    for p in "${!HOW[@]}"; do
      [[ -z ${GONE_AT[$p]:-} ]] && ! held "${UID_OF[$p]}" && GONE_AT[$p]=$((SECONDS - tr0))
    done
    sleep 0.2
  done
  RELEASE_TIMES=""
  for p in "${!HOW[@]}"; do
    label=plain; [[ " ${MANAGED[*]} " == *" $p "* ]] && label=managed
    e2e_check "release: $label pod ${HOW[$p]}: ledger entry and Lease gone within ${BOUND_S}s" \
      test -n "${GONE_AT[$p]:-}"
    RELEASE_TIMES+=" $label/${HOW[$p]}:${GONE_AT[$p]:-never}s"
  done
  create_pods "$NS" rrnew 4xgpu1 --selector pool=rr
  check_new() {
    local i a
    for i in 0 1 2 3; do cluster_wait 30 "rrnew-00$i bound" cluster_pod_node "$NS" rrnew-00$i || return 1; done
    for i in 0 1 2 3; do
      a=$(e2e_ann "$NS" rrnew-00$i gpu.scheduling/allocated)
      [[ -n ${FREED[$a]:-} ]] || { echo "rrnew-00$i got $a, not one of the freed GPUs: ${!FREED[*]}"; return 1; }
    done
  }
  e2e_check "release: four new pods get the four freed GPUs" check_new
  e2e_check "release: ledgers and Leases consistent afterwards" e2e_verify "$WORK/s5" --settled --full-use "$NS" --nodes "$NODES"
  e2e_note "release: released after (s since the deletes/patches):$RELEASE_TIMES; $((SECONDS - t0))s"
fi

# The ledger of NODE, as the API server has it now, holds an entry of UID.
in_ledger() {  # NODE UID
  kubectl -n gpu-system get lease "gpu-ledger.$1" -o 'jsonpath={.metadata.annotations.gpu\.scheduling/reservations}' |
    grep -q "\"$2\""
}
pod_uid() { kubectl -n "$1" get pod "$2" -o 'jsonpath={.metadata.uid}'; }   # NS POD

# ==== 6. a label taken off frees nothing ============================================
# The pod watch selects gpu.scheduling/managed=true: taking the label off a
# bound pod makes the API server send DELETED to that watch, though the pod
# lives on. 1 node x 8 GPUs: a 4-GPU pod is bound, its label taken off, then
# two more 4-GPU pods come: only one may bind.
if e2e_want 6; then
  begin label rl 1 8
  cluster_alive ext1 || start_ext ext1 "$PORT1"
  cluster_alive scheduler-sched1 || e2e_start_scheduler sched1 "$URL1"
  create_pods "$NS" rl 1xgpu4 --selector pool=rl --managed-every 1
  e2e_check "label: a 4-GPU pod bound" cluster_wait 60 "rl-000 bound" cluster_pod_node "$NS" rl-000
  kubectl -n "$NS" label pod rl-000 gpu.scheduling/managed- >/dev/null
  sleep $((2 * REAP_INTERVAL + 2))   # the DELETED, a reaper pass and its lookup
  create_pods "$NS" rlnew 2xgpu4 --selector pool=rl --managed-every 1
  BOUND=$(wait_settled "$NS" $SETTLE 60)
  check_one_more() { [[ $BOUND == 2 ]] || { echo "$BOUND of 3 pods of 4 GPUs bound on 8 GPUs (want 2)"; return 1; }; }
  e2e_check "label: with the label off the first pod, one of two more 4-GPU pods binds, not both" check_one_more
  e2e_check "label: zero double allocations; the unlabelled pod keeps its reservation" \
    e2e_verify "$WORK/s6" --nodes "$NODES"
  e2e_check "label: the unlabelled pod's ledger entry is there" in_ledger rl-1 "$(pod_uid "$NS" rl-000)"
  e2e_note "label: $BOUND of 3 bound; $((SECONDS - t0))s"
  cleanup_ns "$NS"
fi

# ==== 7. a lost ledger entry of an unwatched pod is put back ========================
# An unwatched pod (no label) bound on 1 node x 4 GPUs; its reservation
# Lease is older than the bind timeout when its entry is taken out of the
# ledger by hand. The reaper must read the pod, put the entry back from its
# allocation annotation, and keep the Lease (the same object).
if e2e_want 7; then
  begin lost rg 1 4
  cluster_alive ext1 || start_ext ext1 "$PORT1"
  cluster_alive scheduler-sched1 || e2e_start_scheduler sched1 "$URL1"
  create_pods "$NS" rg 1xgpu1 --selector pool=rg
  e2e_check "lost: an unwatched pod bound" cluster_wait 60 "rg-000 bound" cluster_pod_node "$NS" rg-000
  RG_UID=$(pod_uid "$NS" rg-000)
  RG_LEASE=gpu-reservation.$RG_UID.$(printf %s rg-1 | sha256sum | cut -c1-16)
  lease_uid() { kubectl -n "$NS" get lease "$RG_LEASE" -o 'jsonpath={.metadata.uid}' 2>/dev/null; }
  RG_LEASE_UID=$(lease_uid)
  sleep $((BIND_TIMEOUT + 1))        # the Lease is older than the bind timeout
  python3 "$LOAD" drop "$NS" rg-000 rg-1 || echo "drop failed"
  check_put_back() {
    [[ -n $RG_LEASE_UID ]] || { echo "no reservation Lease $RG_LEASE to begin with"; return 1; }
    cluster_wait $((REAP_BOUND + 3)) "rg-000's entry back" in_ledger rg-1 "$RG_UID" || return 1
    sleep $((2 * REAP_INTERVAL + 1))
    in_ledger rg-1 "$RG_UID" || { echo "the entry went again"; return 1; }
    [[ $(lease_uid) == "$RG_LEASE_UID" ]] || { echo "its reservation Lease was deleted (now '$(lease_uid)')"; return 1; }
  }
  e2e_check "lost: the entry comes back from the pod's annotation and its reservation Lease stays" check_put_back
  e2e_check "lost: ledgers and Leases consistent" e2e_verify "$WORK/s7" --nodes "$NODES"
  cleanup_ns "$NS"
fi

# ==== 8. a silent watch releases nothing ============================================
# A third replica, ext3, reaches the API server through test/e2e/faultproxy.py.
# A watched pod no scheduler serves gets a reservation (as a bind that wrote
# its ledger entry leaves it), which ext3 sees. Then ext3's watch connections
# go silent (half-open: no bytes, no close; its requests still get through on
# new connections), and the pod is bound as the replica that reserved it
# would bind it. ext3's watches still show the
# pod unbound; past the bind timeout, its reaper must not release it.
if e2e_want 8; then
  begin silent rq 1 4
  # Only ext3's reaper: another replica would put the entry back from the
  # pod's annotation once released, hiding the window in which it was free.
  stop_schedulers
  for e in ext1 ext2; do cluster_alive "$e" && cluster_kill "$e"; done
  PROXY_CTL=$WORK/proxy.ctl
  : >"$PROXY_CTL"
  rm -f "$WORK/proxy.port"
  cluster_spawn faultproxy python3 test/e2e/faultproxy.py --upstream "127.0.0.1:$CLUSTER_API_PORT" \
    --control "$PROXY_CTL" --port-file "$WORK/proxy.port"
  PROXY_PID=$CLUSTER_LAST_PID
  cluster_wait 10 "the fault proxy" test -s "$WORK/proxy.port" || echo "no fault proxy"
  PROXY_KUBECONFIG=$WORK/proxy.kubeconfig
  sed "s#^\(    server:\).*#\1 https://127.0.0.1:$(cat "$WORK/proxy.port")#" "$CLUSTER_EXTENDER_KUBECONFIG" >"$PROXY_KUBECONFIG"
  chmod 600 "$PROXY_KUBECONFIG"
  PORT3=$(e2e_free_port)
  # ext3's bind timeout leaves the binding below (5.5 s in) time to land on
  # a loaded machine too; its watches are found silent only after it passed.
  BIND3=10
  IDLE_FLAGS=(--watch-idle-timeout 16)   # (an extender without the setting runs on its defaults)
  "$E2E_EXTENDER" serve --help 2>&1 | grep -q watch-idle-timeout || IDLE_FLAGS=()
  cluster_spawn ext3 "$E2E_EXTENDER" serve --kubeconfig "$PROXY_KUBECONFIG" --listen "127.0.0.1:$PORT3" \
    --identity ext3 --reap-interval "$REAP_INTERVAL" --bind-timeout "$BIND3" "${IDLE_FLAGS[@]}"
  disown "$CLUSTER_LAST_PID" 2>/dev/null
  cluster_wait 30 "ext3 ready" curl -sf "http://127.0.0.1:$PORT3/readyz" || echo "ext3 not ready"
  python3 "$LOAD" pods "$NS" rq 1xgpu1 --selector pool=rq --managed-every 1 --scheduler none | kubectl create -f - >/dev/null
  RQ_UID=$(pod_uid "$NS" rq-000)
  read -r RQ_NODE RQ_DEV < <(python3 "$LOAD" inject "$NS" rq-000 rq-1)
  t_inj=$SECONDS
  sleep 2                            # ext3 sees the pod and its reservation
  # Every connection reset first: ext3 watches again at once (from where it
  # was, no relist) and its idle pooled connections are dead, so that the
  # stall then catches the watches alone and requests open new connections,
  # as when a NAT forgot only the long-lived ones.
  kill -USR1 "$PROXY_PID"
  sleep 3
  kill -USR2 "$PROXY_PID"
  sleep 0.5
  kubectl create --raw "/api/v1/namespaces/$NS/pods/rq-000/binding" -f - >/dev/null <<EOF || echo "binding failed"
{"apiVersion":"v1","kind":"Binding","metadata":{"name":"rq-000","namespace":"$NS",
 "annotations":{"gpu.scheduling/allocated":"$RQ_NODE:$RQ_DEV"}},
 "target":{"apiVersion":"v1","kind":"Node","name":"$RQ_NODE"}}
EOF
  t_bound=$((SECONDS - t_inj))
  sleep $((BIND3 + 1 + 2 * REAP_INTERVAL + 1 + 25))   # past the bind timeout, and an API request's timeout or two
  check_kept() {
    # (the premise: bound well within the bind timeout, as the replica that reserved would)
    ((t_bound <= BIND3 - 2)) || { echo "the test bound rq-000 ${t_bound}s after its reservation: too late to tell"; return 1; }
    [[ $(e2e_pod_node "$NS" rq-000) == "$RQ_NODE" ]] || { echo "rq-000 is not bound to $RQ_NODE"; return 1; }
    ! grep 'released a reservation' "$(cluster_log ext3)" | grep 'pod=silent/rq-000' ||
      { echo "ext3 released the bound pod's reservation"; return 1; }
    in_ledger "$RQ_NODE" "$RQ_UID" || { echo "the bound pod's ledger entry is gone"; return 1; }
  }
  e2e_check "silent: a pod bound while the watch was silent keeps its reservation past the bind timeout" check_kept
  noticed() { grep -q 'msg="watch silent' "$(cluster_log ext3)"; }
  e2e_check "silent: the extender found its watches silent and listed again" noticed
  e2e_note "silent: $(grep -c 'msg="watch silent' "$(cluster_log ext3)") silent watches restarted;" \
    "proxy: $(grep -E 'stalled|cut' "$(cluster_log faultproxy)" | cut -d' ' -f2- | tr '\n' ' ');" \
    "ext3 on rq-000 and the API: $(grep -E 'rq-000|cannot|silent|released' "$(cluster_log ext3)" | tail -6 |
      sed -E 's/^ts=[^ ]+ //' | cut -c1-160 | tr '\n' '|'); $((SECONDS - t0))s"
  cluster_kill ext3
  cluster_kill faultproxy
  cleanup_ns "$NS"
fi

stop_schedulers
e2e_summary
echo "reserve: total $((SECONDS - T_START))s"
