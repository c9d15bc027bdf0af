#!/usr/bin/env bash
# Faults injected into a real control plane while GPU pods are being placed by
# a real kube-scheduler through the extender, one scenario each (24 to 26
# pods on 4 fake nodes of 8 GPUs):
#   1. kube-apiserver restarted mid-run (TERM, as a rolling upgrade does: it
#      stops listening at once and drops the open watches 10 s later; down
#      2 s more; started again with the same flags and port);
#   2. etcd killed (SIGKILL) mid-run and started again on its data 12 s later
#      (longer than the 10 s the extender gives each API request);
#   3. every connection of the extender to the API server reset at once, six
#      times 0.3 s apart, mid-stream (watches and binds alike), while the
#      answers are held 0.2 s so that the resets lose answers to requests
#      the API server carried out; then what a release whose answer was lost
#      can leave, made on purpose: a reservation Lease without its ledger
#      entry, which the reaper must delete;
#   4. a slow API server: its answers delayed by twice the bind timeout
#      (the requests reach it at once, so it carries out the ledger writes
#      of binds that then run past their deadline); then the delay is
#      removed: every pod ends bound once, and the reservations failed binds
#      left are released by the reaper (or reused by the pod's next bind).
#      A round that left no such reservation (nothing to check) is followed
#      by up to two short ones;
#   5. SIGTERM of the extender while binds are in flight (0.3 s per chunk so
#      that they last): they are answered, a bind sent after the signal is
#      not served, the process exits within EXIT_BOUND (measured), and a
#      restarted extender on the same port carries on.
# The extender always reaches the API server through test/e2e/faultproxy.py, a
# TCP proxy (its kubeconfig names 127.0.0.1:<proxy port>; TLS passes through
# end to end) that can reset every connection or delay chunks; in scenarios 1
# and 2 it adds 0.2 s per chunk while the fault is on, so that binds (a few
# ms on loopback) are caught by it.
# After each: every pod is bound; test/e2e/verify_allocations.py over every
# Lease and pod: no device on two pods, no reservation leaked (past the
# reaper's bound) or lost; the extender never had to put back a bound pod's
# reservation; it logged the fault; /readyz answers 200 within READY_BOUND s
# of the fault's end. Prints a table of the faults, then
# "faults: N passed, N failed". About 2.5 minutes on 2 cores.
#
#   test/e2e/run.sh test/e2e/faults.sh
#   FAULTS_SCENARIOS="1 3" bash test/e2e/faults.sh      # a subset
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

E2E_SCENARIOS=${FAULTS_SCENARIOS:-1 2 3 4 5}
T_START=$SECONDS
e2e_reaper_bounds 5 1      # BIND_TIMEOUT, REAP_INTERVAL, EXT_FLAGS, REAP_BOUND
# /readyz answers 200 again within this many seconds of the fault's end (for
# SIGTERM: of the old process's exit, the replacement's start included).
READY_BOUND=20
# Scenario 4's delay per answer chunk: twice the bind timeout (and above the
# 10 s the extender gives each API request, so that every bind runs out of time).
SLOW_DELAY=$((2 * BIND_TIMEOUT))
# Scenario 5: SIGTERM to exit. The HTTP server drains requests in flight for
# up to 10 s, then the watches and the reaper stop.
EXIT_BOUND=15
# While a fault is injected the proxy adds LATENCY s per chunk (both ways in
# scenarios 1 and 2, to the answers only in 3), so that binds last long enough
# to be caught by it (on loopback a bind takes a few ms); scenario 5 adds
# TERM_DELAY both ways.
LATENCY=0.2
TERM_DELAY=0.3
# Scenario 3: this many cuts, 0.3 s apart.
CUTS=6
# Scenario 2: etcd stays down this long: longer than the 10 s the extender
# gives each API request (while etcd is down the API server holds requests;
# a shorter outage only delays them).
ETCD_DOWN=12
# 24 pods, 28 GPUs, on 4 nodes x 8 GPUs: every pod fits (a 2-GPU pod finds at
# least 6 GPUs free, so one node with 2)
PODS_SPEC=20xgpu1,4xgpu2
PODS_N=24
# Scenarios 4 and 5 add 4 (6) pods of their own: 20 pods, 24 GPUs here.
PODS_SMALL=16xgpu1,4xgpu2
PODS_SMALL_N=20
LOAD=test/e2e/reserve_load.py

e2e_setup || { echo "faults: 0 passed, 1 failed (cluster setup)"; exit 1; }
WORK=$CLUSTER_DIR/faults
mkdir -p "$WORK"

# ---- helpers -------------------------------------------------------------------

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f\n", b - a}'; }
fle() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}'; }

# pool NAME [COUNT]: nodes NAME-1..NAME-COUNT (4) of 8 GPUs labelled pool=NAME; NODES names them.
pool() {
  local i
  NODES=""
  for ((i = 1; i <= ${2:-4}; i++)); do
    cluster_create_gpu_node "$1-$i" "pool=$1" >/dev/null && e2e_gns "$1-$i" 8 || return 1
    NODES+="${NODES:+,}$1-$i"
  done
}

all_bound() { [[ $(e2e_count_bound "$1") == "$2" ]]; }   # NS N
some_bound() { (($(e2e_count_bound "$NS") >= $1)); }      # N: at least N pods of NS bound


leaked_in() { grep -cE '^LEAK' "$1/verify.txt" 2>/dev/null; }
doubled_in() { grep -cE '^(DOUBLE ALLOCATION|OVERCOMMIT)|reserved on several nodes' "$1/verify.txt" 2>/dev/null; }

# Reservations (ledger entries) whose pod is not bound to that node: "NS/POD@NODE uid".
orphans() {
  kubectl get lease -n gpu-system -o json >"$WORK/o-l.json" && kubectl get pods -A -o json >"$WORK/o-p.json" &&
    python3 - "$WORK/o-l.json" "$WORK/o-p.json" <<'PY'
import json, sys
pods = {p["metadata"]["uid"]: p for p in json.load(open(sys.argv[2]))["items"]}
for l in json.load(open(sys.argv[1]))["items"]:
    a = l["metadata"].get("annotations") or {}
    node = a.get("gpu.scheduling/node")
    for e in json.loads(a.get("gpu.scheduling/reservations") or "[]"):
        p = pods.get(e["uid"])
        if p is None or p["spec"].get("nodeName") != node:
            print("%s/%s@%s %s" % (e["namespace"], e["pod"], node, e["uid"]))
PY
}

# The extender, on PORT, reaching the API server through the fault proxy.
EXT=ext
start_ext() {
  cluster_spawn "$EXT" "$E2E_EXTENDER" serve --kubeconfig "$PROXY_KUBECONFIG" \
    --listen "127.0.0.1:$PORT" --identity "$EXT" "${EXT_FLAGS[@]}" || return 1
  EXT_PID=$CLUSTER_LAST_PID
  disown "$EXT_PID" 2>/dev/null   # no job notices when it is killed
  cluster_wait 30 "$EXT ready" curl -sf "$URL/readyz"
}
ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/readyz") == 200 ]]; }
# ready_after T: waits (up to READY_BOUND + 10 s) for /readyz 200; prints the seconds since T.
ready_after() {
  local t=$1 deadline=$((SECONDS + READY_BOUND + 10))
  until ready; do
    ((SECONDS < deadline)) || { echo never; return 1; }
    sleep 0.1
  done
  since "$t"
}
ready_within() { [[ $1 != never ]] && fle "$1" "$READY_BOUND"; }

# What a component logged after a mark (a line count).
mark() { wc -l <"$(cluster_log "$1")"; }
log_since() { tail -n +"$(($2 + 1))" "$(cluster_log "$1")"; }

# The /readyz answers while a fault lasts: a poller (spawned, so cluster_down
# stops it) writes "TIME CODE" every 0.2 s.
poll_ready() {  # FILE
  cluster_spawn readyz-poll bash -c 'while :; do
    printf "%s %s\n" "$(date +%s.%N)" "$(curl -s -o /dev/null -w "%{http_code}" --max-time 1 "$1/readyz")" >>"$2"
    sleep 0.2; done' poll "$URL" "$1"
  disown "$CLUSTER_LAST_PID" 2>/dev/null
}
stop_poll() { cluster_alive readyz-poll && cluster_kill readyz-poll; return 0; }
unready_s() {  # FILE: seconds /readyz did not answer 200 (samples x 0.2)
  awk '$2 != 200 {n++} END {printf "%.1f\n", n * 0.2}' "$1" 2>/dev/null
}

# The fault proxy: every connection of the extender to the API server, when
# the extender uses PROXY_KUBECONFIG.
PROXY_CTL=$WORK/proxy.ctl
: >"$PROXY_CTL"
cluster_spawn faultproxy python3 test/e2e/faultproxy.py --upstream "127.0.0.1:$CLUSTER_API_PORT" \
  --control "$PROXY_CTL" --port-file "$WORK/proxy.port"
PROXY_PID=$CLUSTER_LAST_PID
cluster_wait 10 "the fault proxy" test -s "$WORK/proxy.port" || { echo "faults: 0 passed, 1 failed (proxy)"; exit 1; }
PROXY_KUBECONFIG=$WORK/proxy.kubeconfig
sed "s#^\(    server:\).*#\1 https://127.0.0.1:$(cat "$WORK/proxy.port")#" "$CLUSTER_EXTENDER_KUBECONFIG" >"$PROXY_KUBECONFIG"
chmod 600 "$PROXY_KUBECONFIG"
proxy_delay() { echo "delay $1 ${2:-both}" >"$PROXY_CTL"; sleep 0.3; }   # SECONDS [WAY]; read every 0.1 s
proxy_cut() { kill -USR1 "$PROXY_PID"; }

PORT=$(e2e_free_port)
URL=http://127.0.0.1:$PORT
start_ext || { echo "faults: 0 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched "$URL" || { echo "faults: 0 passed, 1 failed (kube-scheduler)"; exit 1; }

# ---- one scenario's frame -------------------------------------------------------

ROWS=()
# begin N NAME: namespace fN, pool fN (4 x 8 GPUs), the extender up; counts
# the checks from here.
begin() {
  SC=$1 SC_NAME=$2 NS=f$1 t0=$SECONDS
  SC_FAILED0=$E2E_FAILED
  cluster_ensure_namespace "$NS" >/dev/null
  pool "$NS" || echo "pool $NS failed"
  cluster_alive "$EXT" || start_ext || echo "the extender did not start"
  SC_MARK=$(mark "$EXT")
  : >"$WORK/s$SC-ready.txt"
  poll_ready "$WORK/s$SC-ready.txt"
}
create_pods() {  # PREFIX SPEC [load flags]
  python3 "$LOAD" pods "$NS" "$@" --selector "pool=$NS" --managed-every 2 | kubectl create -f - >/dev/null
}
# create_pods_bg PREFIX SPEC: the pods' List in $WORK/PREFIX.json, created in the
# background (CREATE_PID) one by one; a fault may cut the creation off:
# create_rest creates what is missing afterwards, as a client would retry.
create_pods_bg() {
  python3 "$LOAD" pods "$NS" "$@" --selector "pool=$NS" --managed-every 2 >"$WORK/$1.json"
  kubectl create -f "$WORK/$1.json" --request-timeout=5s >/dev/null 2>&1 &
  CREATE_PID=$!
}
create_rest() {  # PREFIX
  wait "$CREATE_PID" 2>/dev/null
  cluster_wait 30 "the pods of $1 created" bash -c 'kubectl create -f "$1" 2>&1 | grep -v AlreadyExists | grep -q . && exit 1; exit 0' _ "$WORK/$1.json"
}
# settle EXPECTED T_QUIET: every pod bound (60 s at most), then the reaper's
# bound past T_QUIET (the last moment a bind could have failed), then check.
settle() {
  local want=$1 quiet=$2 left
  cluster_wait 60 "$want pods of $NS bound" all_bound "$NS" "$want"
  BOUND=$(e2e_count_bound "$NS")
  e2e_check "$SC_NAME: all $want pods bound ($BOUND)" test "$BOUND" = "$want"
  left=$((quiet + REAP_BOUND - SECONDS))
  ((left > 0)) && sleep $left
  e2e_check "$SC_NAME: no device on two pods; no reservation leaked or lost (verify_allocations.py --settled)" \
    e2e_verify "$WORK/s$SC" --settled --full-use "$NS" --nodes "$NODES"
  # The reaper puts back the reservation of a bound pod that no ledger holds:
  # that it had to means one was lost on the way, if only for a while.
  e2e_check "$SC_NAME: no reservation of a bound pod went missing meanwhile (none put back, none clashing)" \
    not_logged "$SC_MARK" 'put back a reservation the ledger had lost|reserved by another pod'
}
not_logged() {  # MARK ERE: no line of the extender's log after MARK matches
  ! log_since "$EXT" "$1" | grep -E "$2" | head -5 | grep .
}
# end READY_AFTER: the table row; the namespace's pods go (the reapers release them).
end() {
  stop_poll
  local result=PASS
  ((E2E_FAILED > SC_FAILED0)) && result=FAIL
  ROWS+=("$(printf '| %-28s | %19s | %6s | %13s | %21s | %-6s |' "$SC_NAME" "$BOUND/$EXPECTED" \
    "$(leaked_in "$WORK/s$SC")" "$(doubled_in "$WORK/s$SC")" "$1" "$result")")
  e2e_note "$SC_NAME: $((SECONDS - t0))s"
  kubectl -n "$NS" delete pods --all --force --grace-period=0 --wait=false >/dev/null 2>&1
}
# The reflectors of the extender (one line each when a watch breaks).
RESOURCES="nodes gpunodestatuses gpuclaims ledgers reservations pods"
# every_watch_failed MARK [ERROR_RE]: each reflector logged a failed watch after MARK.
every_watch_failed() {
  local m=$1 re=${2:-.} r missing=""
  for r in $RESOURCES; do
    log_since "$EXT" "$m" | grep 'msg="watch failed; retrying"' | grep "resource=$r " | grep -qE "$re" ||
      missing+=" $r"
  done
  [[ -z $missing ]] || { echo "no 'watch failed' line for:$missing"; log_since "$EXT" "$m" | grep -v 'level=debug' | tail -15; return 1; }
}
logged() {  # MARK ERE: a line of the extender's log after MARK matches
  log_since "$EXT" "$1" | grep -qE "$2" || { echo "nothing matches /$2/ in:"; log_since "$EXT" "$1" | tail -15; return 1; }
}
first_line() { log_since "$EXT" "$1" | grep -E "$2" | head -1 | sed -E 's/^ts=[^ ]+ //' | cut -c1-220; }
# A warning about a request to the API server that failed (not, say, a node that filled up).
API_FAILED='level=(warn|error).*(Timeout|timed out|connect|reset|Failure when|HTTP2|partial file|HTTP 5[0-9][0-9]|HTTP 429|Unavailable)'
binds_failed() { log_since "$EXT" "$1" | grep 'msg="bind refused"' | grep -c "pod=$NS/"; }
binds_ok() { log_since "$EXT" "$1" | grep 'msg="reserved and bound"' | grep -c "pod=$NS/"; }
# Bindings whose answer was lost: found done, or left to the reaper.
unknown_outcomes() {
  echo "$(log_since "$EXT" "$1" | grep -c 'msg="the binding went through; its answer was lost"') went through," \
    "$(log_since "$EXT" "$1" | grep -c "msg=\"the binding's outcome is unknown")" "left to the reaper"
}
reaped() { log_since "$EXT" "$1" | grep 'msg="released a reservation"' | grep -c "pod=$NS/"; }
# load_begin PREFIX [WAY]: the API answers slowed by LATENCY (WAY, as
# proxy_delay), the pods created in the background; returns once two are
# bound, with at_fault the bound count then.
load_begin() {
  proxy_delay "$LATENCY" ${2:+"$2"}
  create_pods_bg "$1" "$PODS_SPEC"
  cluster_wait 20 "the first pods bound" some_bound 2
  at_fault=$(e2e_count_bound "$NS")
}

# ==== 1. kube-apiserver restarted mid-run ==========================================
if e2e_want 1; then
  begin 1 "kube-apiserver restart"
  m=$(mark "$EXT")
  EXPECTED=$PODS_N
  # Stopped while the pods are being created and bound: kube-scheduler holds
  # the pods it has, and goes on binding them through the extender.
  load_begin a
  cluster_stop_apiserver 2>/dev/null   # TERM: ~10 s with watches open
  sleep 2
  cluster_start_apiserver || echo "kube-apiserver did not start again"
  proxy_delay 0
  t_end=$(now) q=$SECONDS
  before=$(e2e_count_bound "$NS")
  create_rest a
  ra=$(ready_after "$t_end")
  settle "$EXPECTED" "$q"
  e2e_check "$SC_NAME: every watch of the extender broke and it said so ('watch failed; retrying' x6)" \
    every_watch_failed "$m"
  e2e_check "$SC_NAME: /readyz 200 within ${READY_BOUND}s of the API server's return (${ra}s)" ready_within "$ra"
  e2e_note "$SC_NAME: $at_fault of $EXPECTED bound when it was stopped, $before when it was back; binds refused $(binds_failed "$m"), bound $(binds_ok "$m");" \
    "reaper releases $(reaped "$m"); /readyz not 200 for $(unready_s "$WORK/s1-ready.txt")s; first line:" \
    "$(first_line "$m" "$API_FAILED")"
  end "$ra"
fi

# ==== 2. etcd killed and restarted mid-run =========================================
if e2e_want 2; then
  begin 2 "etcd restart"
  m=$(mark "$EXT")
  EXPECTED=$PODS_N
  load_begin e
  cluster_stop_etcd --kill 2>/dev/null
  sleep "$ETCD_DOWN"
  cluster_start_etcd || echo "etcd did not start again"
  cluster_wait 60 "the API server ready again" _cluster_api_ready || echo "the API server did not recover"
  proxy_delay 0
  t_end=$(now) q=$SECONDS
  before=$(e2e_count_bound "$NS")
  create_rest e
  ra=$(ready_after "$t_end")
  settle "$EXPECTED" "$q"
  e2e_check "$SC_NAME: the extender logged the API server's failures (a watch, list, bind or lookup that failed)" \
    logged "$m" "$API_FAILED"
  e2e_check "$SC_NAME: /readyz 200 within ${READY_BOUND}s of the API server's recovery (${ra}s)" ready_within "$ra"
  e2e_note "$SC_NAME: $at_fault of $EXPECTED bound when it was killed, $before when it was back; binds refused $(binds_failed "$m"), bound $(binds_ok "$m");" \
    "reaper releases $(reaped "$m"); /readyz not 200 for $(unready_s "$WORK/s2-ready.txt")s; first line:" \
    "$(first_line "$m" "$API_FAILED")"
  end "$ra"
fi

# ==== 3. the extender's connections cut mid-stream =================================
if e2e_want 3; then
  begin 3 "connections reset"
  proxy_delay 0
  m=$(mark "$EXT") pm=$(mark faultproxy)
  EXPECTED=$PODS_N
  # The answers wait: a cut then loses answers to requests the API server
  # carried out (a ledger write, a binding), as a reset connection does.
  load_begin c down
  before=""
  for ((k = 0; k < CUTS; k++)); do
    ((k)) && sleep 0.3
    proxy_cut
    before+="${before:+,}$(e2e_count_bound "$NS")"
  done
  proxy_delay 0
  create_rest c
  sleep 0.2
  t_end=$(now) q=$SECONDS
  ra=$(ready_after "$t_end")
  settle "$EXPECTED" "$q"
  cuts=$(log_since faultproxy "$pm" | sed -n 's/.* cut \([0-9]*\) connections/\1/p' | paste -sd, -)
  check_cut() {
    local first=${cuts%%,*}
    [[ -n $first ]] && ((first >= 6)) || { echo "the first cut closed '$first' connections (cuts: $cuts), not the 6 watches and more"; return 1; }
  }
  e2e_check "$SC_NAME: the proxy cut every open connection, the 6 watches among them (cuts: $cuts)" check_cut
  e2e_check "$SC_NAME: every watch of the extender broke, reset, and it said so ('watch failed; retrying' x6)" \
    every_watch_failed "$m" 'reset|Recv failure|Failure when receiving'
  e2e_check "$SC_NAME: /readyz 200 within ${READY_BOUND}s of the last cut (${ra}s)" ready_within "$ra"
  # What a release whose answer was lost (the ledger entry gone, its Lease
  # never deleted) leaves behind, made on purpose: a reservation Lease of a
  # bound pod for a node where it holds nothing. The reaper deletes it.
  stale_lease() {  # POD NODE: creates the Lease; prints its name
    python3 - "$NS" "$1" "$2" <(kubectl -n "$NS" get pod "$1" -o json) <<'PY' | kubectl create -f - -o name
import hashlib, json, sys
ns, pod, node, p = sys.argv[1], sys.argv[2], sys.argv[3], json.load(open(sys.argv[4]))
uid = p["metadata"]["uid"]
print(json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
    "metadata": {"name": "gpu-reservation.%s.%s" % (uid, hashlib.sha256(node.encode()).hexdigest()[:16]), "namespace": ns,
                 "labels": {"gpu.scheduling/reservation": "true"},
                 "annotations": {"gpu.scheduling/node": node, "gpu.scheduling/allocated": node + ":7"},
                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]},
    "spec": {"holderIdentity": ns + "/" + pod}}))
PY
  }
  check_stale_deleted() {
    local pod node lease t
    pod=$(kubectl -n "$NS" get pods -o 'jsonpath={.items[0].metadata.name}')
    node=$(e2e_pod_node "$NS" "$pod")
    node=$([[ $node == "$NS-1" ]] && echo "$NS-2" || echo "$NS-1")
    lease=$(stale_lease "$pod" "$node") || return 1
    t=$SECONDS
    cluster_wait "$REAP_BOUND" "$lease deleted" bash -c '! kubectl -n "$1" get "$2" >/dev/null 2>&1' _ "$NS" "$lease" ||
      { echo "$lease ($pod, node $node) still there after ${REAP_BOUND}s"; return 1; }
    echo "deleted after $((SECONDS - t))s"
  }
  e2e_check "$SC_NAME: a reservation Lease left without its ledger entry is deleted by the reaper within ${REAP_BOUND}s" \
    check_stale_deleted
  e2e_note "$SC_NAME: bound at the cuts: $before of $EXPECTED; binds refused $(binds_failed "$m"), bound $(binds_ok "$m");" \
    "bindings that lost their answer: $(unknown_outcomes "$m");" \
    "kube-scheduler found $(grep -E "pod=\"$NS/" "$(cluster_log sched)" | grep -c 'Pod has been assigned to node. Abort') pods bound after their bind failed;" \
    "reaper releases $(reaped "$m"); /readyz not 200 for $(unready_s "$WORK/s3-ready.txt")s; first line:" \
    "$(first_line "$m" "$API_FAILED")"
  end "$ra"
fi

# ==== 4. a slow API server =========================================================
if e2e_want 4; then
  begin 4 "slow API server"
  # One pod on each node first: every node has a ledger, which binds then
  # write without reading it first (as on a cluster that has been running).
  for i in 1 2 3 4; do
    python3 "$LOAD" pods "$NS" "w$i" 1xgpu1 --selector "kubernetes.io/hostname=$NS-$i" | kubectl create -f - >/dev/null
  done
  cluster_wait 30 "the 4 first pods bound" all_bound "$NS" 4
  m=$(mark "$EXT")
  EXPECTED=4
  # Reservations of pods not bound there, seen while binds fail (each time the ledgers are read).
  declare -A ORPHANS=()
  watch_orphans() {  # UNTIL (SECONDS)
    while ((SECONDS < $1)); do
      while read -r o u; do [[ $o == "$NS/"* ]] && ORPHANS[$o]=$u; done < <(orphans)
      sleep 1
    done
  }
  # The check needs a ledger write carried out whose answer was lost. Under
  # the whole suite, about one round in five left none (every write the
  # extender sent in it timed out before reaching the API server; not
  # explained): such a round is followed by one more with 2 pods, twice at
  # most, on the GPUs the first leaves free (4 + 24 + 2 + 2 of 32).
  for round in 1 2 3; do
    spec=$PODS_SMALL n=$PODS_SMALL_N
    ((round > 1)) && spec=2xgpu1 n=2
    EXPECTED=$((EXPECTED + n))
    proxy_delay "$SLOW_DELAY" down
    t_slow=$SECONDS
    create_pods "s$round" "$spec"
    watch_orphans $((t_slow + SLOW_DELAY + 4))
    ((round == 1)) && slow_bound=$(e2e_count_bound "$NS")
    proxy_delay 0
    t_end=$(now)
    ((round == 1)) && ra=$(ready_after "$t_end")
    # Chunks already delayed still arrive up to SLOW_DELAY s later: binds can fail until then.
    t_drain=$((SECONDS + SLOW_DELAY))
    watch_orphans "$t_drain"
    cluster_wait 60 "$EXPECTED pods of $NS bound" all_bound "$NS" "$EXPECTED"
    ((${#ORPHANS[@]} > 0)) && break
  done
  SLOW_ROUNDS=$round
  settle "$EXPECTED" "$t_drain"
  e2e_check "$SC_NAME: binds ran out of time and the extender said so ('bind refused' ... Timeout)" \
    logged "$m" 'msg="bind refused".*(Timeout|timed out)'
  # Every reservation seen without its binding is gone now, or its pod was bound
  # there after all (a retry reused it).
  check_orphans() {
    local o bad=0 n=0 node
    for o in "${!ORPHANS[@]}"; do
      [[ $o == "$NS/"* ]] || continue
      n=$((n + 1))
      node=${o##*@}
      if held_on "${ORPHANS[$o]}" "$node" && [[ $(e2e_pod_node "$NS" "$(basename "${o%@*}")") != "$node" ]]; then
        echo "still reserved: $o"; bad=1
      fi
    done
    ((n > 0)) || { echo "no bind left a reservation behind: the fault did not bite"; return 1; }
    return $bad
  }
  held_on() {  # UID NODE: the node's ledger has an entry of UID
    kubectl -n gpu-system get lease "gpu-ledger.$2" -o 'jsonpath={.metadata.annotations.gpu\.scheduling/reservations}' |
      grep -q "\"$1\""
  }
  e2e_check "$SC_NAME: the reservations failed binds left (${#ORPHANS[@]}) were released (or reused by the pod's bind)" check_orphans
  e2e_check "$SC_NAME: /readyz 200 within ${READY_BOUND}s of the delay's end (${ra}s)" ready_within "$ra"
  e2e_note "$SC_NAME: ${SLOW_DELAY}s per answer chunk for $((SLOW_DELAY + 4))s, $SLOW_ROUNDS round(s); $slow_bound of $((4 + PODS_SMALL_N)) bound in the first;" \
    "binds refused $(binds_failed "$m"), bound $(binds_ok "$m"); reaper releases $(reaped "$m")" \
    "($(log_since "$EXT" "$m" | grep 'released a reservation' | grep "pod=$NS/" | grep -c 'not bound in time') not bound in time);" \
    "retried binds that reused their reservation $(log_since "$EXT" "$m" | grep "pod=$NS/" | grep -c 'retried=yes');" \
    "/readyz not 200 for $(unready_s "$WORK/s4-ready.txt")s; first line: $(first_line "$m" 'msg="bind refused"')"
  end "$ra"
fi

# ==== 5. SIGTERM of the extender while binds are in flight =========================
if e2e_want 5; then
  begin 5 "extender SIGTERM"
  # 6 pods nobody schedules, for a node of their own: a client binds them
  # straight (filter, then bind).
  cluster_create_gpu_node "$NS-d" "pool=${NS}d" >/dev/null && e2e_gns "$NS-d" 8 || echo "node $NS-d failed"
  python3 "$LOAD" pods "$NS" d 6xgpu1 --selector "pool=${NS}d" --managed-every 2 --scheduler none |
    kubectl create -f - >/dev/null
  kubectl -n "$NS" get pods -l e2e=d -o json >"$WORK/s5-direct.json"
  m=$(mark "$EXT")
  EXPECTED=$((PODS_SMALL_N + 6))
  proxy_delay "$TERM_DELAY"
  create_pods t "$PODS_SMALL"
  sleep 0.3
  # The client: binds 5 pods at once, SIGTERM 0.5 s later (while they wait on the
  # slowed API server), then a new bind of the 6th; waits for the exit.
  python3 - "$URL" "$WORK/s5-direct.json" "$NS-d" "$EXT_PID" >"$WORK/s5-term.json" <<'PY'
import json, os, signal, sys, threading, time, urllib.request
url, pods, nodes, pid = sys.argv[1], json.load(open(sys.argv[2]))["items"], sys.argv[3].split(","), int(sys.argv[4])
def post(path, body, timeout=30):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())
out = {"inflight": {}, "late": None}
targets = {}
for p in pods:
    f = post("/filter", {"Pod": p, "NodeNames": nodes})
    targets[p["metadata"]["name"]] = (f.get("NodeNames") or [""])[0]
def bind(p, key, t_sent):
    md = p["metadata"]
    try:
        b = post("/bind", {"PodName": md["name"], "PodNamespace": md["namespace"], "PodUID": md["uid"],
                           "Node": targets[md["name"]]})
        res = {"answered": True, "error": b.get("Error") or "", "node": targets[md["name"]]}
    except Exception as e:
        res = {"answered": False, "error": repr(e)}
    res["sent"], res["done"] = t_sent, time.time()
    if key == "late":
        out["late"] = dict(res, pod=md["name"])
    else:
        out["inflight"][md["name"]] = res
ts = [threading.Thread(target=bind, args=(p, "inflight", time.time())) for p in pods[:5]]
for t in ts:
    t.start()
time.sleep(0.5)
out["term"] = time.time()
os.kill(pid, signal.SIGTERM)
time.sleep(0.3)
bind(pods[5], "late", time.time())
for t in ts:
    t.join()
while True:
    try:
        os.kill(pid, 0)
        if open("/proc/%d/stat" % pid).read().split()[2] == "Z":
            break
    except OSError:
        break
    time.sleep(0.05)
out["exit"] = time.time()
print(json.dumps(out))
PY
  t_exit=$(now)
  term=$(cat "$WORK/s5-term.json")
  jf() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))' "$term" "$1"; }
  EXIT_S=$(jf '"%.1f" % (exit - term)' 2>/dev/null || echo "?")
  proxy_delay 0
  start_ext || echo "the extender did not start again"
  ra=$(ready_after "$t_exit")
  check_inflight() {
    python3 - "$term" <(kubectl -n "$NS" get pods -o json) <<'PY'
import json, sys
d = json.loads(sys.argv[1])
pods = {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in json.load(open(sys.argv[2]))["items"]}
bad = 0
for name, r in sorted(d["inflight"].items()):
    if not r["answered"]:
        print("%s: the bind in flight at SIGTERM got no answer: %s" % (name, r["error"])); bad = 1
    elif not r["error"] and pods.get(name) != r["node"]:
        print("%s: bound to %s says the answer, the API says %r" % (name, r["node"], pods.get(name))); bad = 1
    elif r["error"] and pods.get(name):
        print("%s: answered %r but bound to %s" % (name, r["error"], pods[name])); bad = 1
if len(d["inflight"]) != 5:
    print("%d binds in flight, not 5" % len(d["inflight"])); bad = 1
sys.exit(bad)
PY
  }
  e2e_check "$SC_NAME: the 5 binds in flight were answered, and each answer is what the API holds" check_inflight
  check_late() {
    python3 - "$term" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
l = d["late"]
if l is None or l["answered"]:
    print("a bind sent 0.3 s after SIGTERM was served: %r" % (l,)); sys.exit(1)
PY
  }
  e2e_check "$SC_NAME: a bind sent after the signal was refused (no answer), not served" check_late
  # kube-scheduler's binds in flight too: none may end cut off (EOF, reset); a
  # bind sent after the signal may be refused (connection refused, or reset
  # from the listening socket's backlog when it closes).
  check_sched_answered() {
    local cut
    cut=$(grep -E "pod=\"$NS/" "$(cluster_log sched)" | grep 'Error scheduling pod' | grep -E '/bind.*(EOF|reset by peer)')
    [[ -z $cut ]] || { echo "$cut" | cut -c1-300 | head -5; return 1; }
  }
  e2e_check "$SC_NAME: kube-scheduler's binds in flight were answered too (none cut off)" check_sched_answered
  e2e_check "$SC_NAME: the extender exited within ${EXIT_BOUND}s (${EXIT_S}s)" fle "$EXIT_S" "$EXIT_BOUND"
  e2e_check "$SC_NAME: it logged 'shutting down' signal=15" logged "$m" 'msg="shutting down" signal=15'
  e2e_check "$SC_NAME: the restarted extender answered /readyz 200 within ${READY_BOUND}s of the exit (${ra}s)" ready_within "$ra"
  # The restarted extender binds the direct pods left unbound, as the client would retry them.
  python3 "$LOAD" binds <(kubectl -n "$NS" get pods -l e2e=d -o json) "$URL" "$NS-d" --threads 3 >"$WORK/s5-retry.json"
  NODES+=",$NS-d"
  settle "$EXPECTED" "$SECONDS"
  e2e_note "$SC_NAME: exit ${EXIT_S}s after the signal; in flight: $(jf '", ".join("%s %s in %.1fs" % (k, v["error"][:60] or "bound", v["done"] - v["sent"]) for k, v in sorted(inflight.items()))');" \
    "late bind: $(jf 'late["error"][:80]') after $(jf '"%.1f" % (late["done"] - late["sent"])')s;" \
    "kube-scheduler binds cut off or refused: $(grep -E "pod=\"$NS/" "$(cluster_log sched)" | grep -cE '/bind.*(EOF|connection reset|connection refused)');" \
    "binds refused $(binds_failed "$m"), bound $(binds_ok "$m"); reaper releases $(reaped "$m")"
  end "$ra"
fi

cluster_stop_scheduler sched
echo
echo "| fault                        | pods bound/expected | leaked | double-booked | ready again after (s) | result |"
echo "|------------------------------|---------------------|--------|---------------|-----------------------|--------|"
printf '%s\n' "${ROWS[@]}"
echo "(leaked, double-booked: verify_allocations.py's LEAK, and DOUBLE ALLOCATION/OVERCOMMIT lines, past the reaper's bound)"
echo "faults: total $((SECONDS - T_START))s"
e2e_summary
