#!/usr/bin/env bash
# make bench-e2e: GPU pods per second that a real kube-scheduler places on a
# real API server, alone and with the extender in the loop, in one run.
#
#   bench/e2e.sh [--nodes 1000] [--pods 2000] [--rounds 5] [--extender PATH] [--baseline-extender PATH] [--replicas] [--no-floor] [--peers] [--keep-curve] [--mixed] [--only ROWS] [--pprof DIR] [--http-timeout D]
#   bench/e2e.sh --cold-start [--nodes 5000] [--extender PATH] [--baseline-extender PATH]
#   bench/e2e.sh --sustained SECONDS [--nodes 1000] [--pods 400] [--extender PATH]
#
# Fake nodes (8 GPUs each, with their GpuNodeStatus) advertise the GPUs both as
# gpu.scheduling/gpu and as a plain extended resource, example.com/gpu. For each
# row, PODS one-GPU pods are created first, then the scheduler is started, and a
# watch notes when each pod is bound: the rate is (pods - 1) / (last binding -
# first binding). Rows:
#   plain      kube-scheduler alone; the pods ask for example.com/gpu
#   floor      bench/floor, the least an extender that binds can cost (filter
#              passes one node with room, bind posts the Binding, 64 at most in
#              flight and a 429 posted again after its Retry-After, as client-go
#              does; no ledger, no watches); what kube-scheduler and the API
#              server spend on any extender in the loop. Built with Go into the harness's cache;
#              --no-floor leaves it out.
#   keep-all   the extender with filterKeepsBest 0: filter passes every node
#              that fits, kube-scheduler scores them all (prioritize and its
#              own plugins); what `extender` gives a pod with a soft preference
#   keep-K     with --keep-curve (rows keep-1, keep-2, keep-4, keep-8 between
#              floor and keep-all): filterKeepsBest K and keepAllForPreferences
#              false, the K best nodes passed whatever the pod prefers. With it every pod
#              belongs to one of 8 groups (pod i to group i mod 8) and
#              carries two soft preferences (weight 100 each): a preferred
#              pod anti-affinity per hostname, no pod of its group on its
#              node (8 GPUs a node: binpack can meet it, 8 groups on each
#              node), and a preferred node affinity to the nodes labelled
#              bench/preferred, one in 5 (at 1000 nodes 1600 GPUs: room for
#              all of 1000 pods, 0.8 of 2000). The last column gives the shares of bound
#              pods that got each (e2e_load.py nodes --preferred, pods
#              --groups, honoured): what kube-scheduler's own soft
#              preferences still decide at each K. plain is the reference.
#   extender   kube-scheduler with the extender as `serve` starts by default,
#              as deploy/ ships it (filterKeepsBest 1: filter passes the node the
#              policy rates best, so kube-scheduler calls no prioritize and runs
#              none of its own scoring; a pod with a soft preference, as with
#              --keep-curve, gets every node that fits; binds through the
#              ledgers); the pods ask for gpu.scheduling/gpu
#   baseline   the same with --baseline-extender (another build), when given
#   proxy-1    with --replicas: the extender behind a TCP proxy (test/e2e/faultproxy.py)
#   proxy-2    two extender replicas behind it, each new connection to the next
#   gpushare   with --peers: kube-scheduler with gpushare-scheduler-extender
#              (filter and bind; the pods ask for aliyun.com/gpu-mem, a whole
#              GPU's 80)
#   hami       with --peers: kube-scheduler with HAMi's scheduler extender
#              (filter and bind; the pods ask for nvidia.com/gpu 1 and
#              nvidia.com/gpumem 81559). Both built from their public source
#              at a pinned commit by bench/peers/build.sh (cached), started
#              and configured by bench/peers/peers.sh, the nodes given the
#              capacity and annotations they read (e2e_load.py nodes --peers).
#              The rows with a record of devices (extender, keep-K, baseline,
#              proxy-N, gpushare, hami) are checked after binding: pods placed
#              on a device beyond its capacity, or bound with no device
#              recorded, are counted as double allocations (e2e_load.py check).
#
# --mixed: every row's pods are a mixed workload instead of one-GPU pods
# (e2e_load.py pods --mixed, the same seeded order each row and round):
# per 100 pods, 37 of one whole GPU, 15 of 2, 8 of 4, 2 of 8, 25 shares of
# a GPU (16384 MiB and 25 % of its compute), 5 pods of a GpuClaim of 4 GPUs
# on one NVLink island (topology Required; the fake nodes have two islands
# of 4) and 8 members of two gangs of 4 one-GPU pods (a PodGroup,
# scheduling.x-k8s.io, minMember 4; its CRD is applied). Rows plain (the
# closest whole example.com/gpu counterparts: a share as 1 GPU, the claim
# as its 4, gang members as independent pods) and extender; the floor and
# the peers have no counterpart and are left out. The check also counts
# shares beyond a GPU's memory or compute, pods whose record is not what
# they asked, claim pods across islands, and gangs only partly bound.
# (Every run first tries the checker on made-up pods: e2e_load.py selftest.)
#
# The rows run in interleaved rounds (--rounds, 5 by default): every row once
# a round, the order rotated by one each round (round 2 starts with the
# second row), so that no row always runs first or last and a neighbour's
# burst on the shared machine falls on different rows. --only ROWS (a comma
# list) picks rows and their first round's order.
# The closing table gives per row the median pods/s and its range over the
# rounds (the same build's round-to-round spread), the medians of the
# per-round ratios to plain and to floor, start-to-bound latency p50/p99
# (from the row's scheduler start, all its pods pending, to each binding),
# and CPU milliseconds per pod of kube-apiserver, etcd, kube-scheduler and
# the extender (utime + stime from /proc/PID/stat before and after the
# row's scheduling), which a busy neighbour disturbs less than wall time.
# After it, what the run can tell apart: each row's per-round ratios to
# plain and floor (and the extender's to --baseline-extender's) as a
# geometric mean with a 90 % interval, and the rounds that the same
# round-to-round spread would need to make that interval +-5 %.
# A table of every round and row comes before it: the API server's write
# requests per pod, the scheduler's mean scheduling attempt, the extender's
# mean time per verb, its refused binds (kube-scheduler retries those pods),
# ledger conflicts, connections refused at its connection limits, and the
# CPU seconds each component used.
# --http-timeout D: kube-scheduler's httpTimeout for the extender rows, e.g.
# 30s (config/scheduler-config.yaml's 5s otherwise).
# Both schedulers talk to the API server with qps and burst 5000.
# After each row its pods are deleted and its extenders release their
# reservations before they stop, so that every row starts on empty nodes
# and pays for no other row's clean-up.
# --pprof DIR: 5-second CPU profiles of kube-apiserver and of each row's
# kube-scheduler, from their /debug/pprof a second into the row, written to
# DIR/apiserver-ROW-rN.pb.gz and DIR/scheduler-ROW-rN.pb.gz (go tool pprof -top).
# Set CLUSTER_KEEP=1 to keep the logs (the cluster directory is printed);
# BENCH_E2E_ROUNDS_OUT=FILE keeps the rounds' figures (a JSON object a line;
# python3 bench/e2e_load.py table FILE prints the table again).
#
# --cold-start instead: the nodes, 8 bound one-GPU pods on each (one node
# keeps a GPU free) with their ledgers, as a running cluster holds them;
# then the extender is started and the seconds to /readyz 200 and to the
# first correct answer (a filter that passes exactly the node with room) are
# printed, with its RSS then; then the same for --baseline-extender.
#
# --sustained SECONDS instead (make bench-sustained: 30 minutes at 1000
# nodes): kube-scheduler with the extender; rounds of PODS pods created, all
# bound, all deleted, until SECONDS have passed. The extender's RSS, open
# files and threads after the first round and at the end, and its mean
# filter+prioritize and bind time in the first and the last rounds (from
# /metrics), are printed; then the same at the end of every minute (the
# verbs' means over that minute), and from minute 5 on: RSS against minute
# 5's, the range of open files and threads, and the verbs' means of
# minutes 5-9 against the last five minutes': a leak or a drift shows
# there. The CPU milliseconds the extender and the API server used a pod
# bound, each minute, tell the extender's own cost from the machine's
# load, which the verbs' wall times follow. Then its RSS by kind of
# memory (/proc/PID/smaps) at both times.
set -u
cd "$(dirname "$0")/.."
NODES=1000 PODS=2000 ROUNDS=5 EXT=$PWD/build/gpu-extender BASE="" ONLY="" COLD="" SUSTAIN="" REPLICAS="" PPROF="" FLOOR=1 HTTP_TIMEOUT="" PEERS="" CURVE="" MIXED=""
MIX_SEED=30   # --mixed: the order of the kinds of pods, the same in every run
while (($#)); do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --pods) PODS=$2; shift 2 ;;
    --extender) EXT=$(realpath "$2"); shift 2 ;;
    --baseline-extender) BASE=$(realpath "$2"); shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --replicas) REPLICAS=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --floor) FLOOR=1; shift ;;
    --no-floor) FLOOR=""; shift ;;
    --peers) PEERS=1; shift ;;
    --keep-curve) CURVE=1; shift ;;
    --mixed) MIXED=1; shift ;;
    --http-timeout) HTTP_TIMEOUT=$2; shift 2 ;;
    --cold-start) COLD=1; shift ;;
    --sustained) SUSTAIN=$2; shift 2 ;;
    --pprof) PPROF=$(realpath -m "$2"); shift 2 ;;
    *) echo "usage: bench/e2e.sh [--nodes N] [--pods N] [--rounds N] [--extender PATH] [--baseline-extender PATH] [--replicas] [--no-floor] [--peers] [--keep-curve] [--mixed] [--only ROWS] [--pprof DIR] [--http-timeout D]" \
         "| --cold-start [--nodes N] | --sustained SECONDS [--nodes N] [--pods N]" >&2; exit 2 ;;
  esac
done
. test/cluster/cluster.sh
. test/e2e/lib.sh
. bench/peers/peers.sh

fail() { echo "bench-e2e: $*" >&2; exit 1; }
[[ -n $MIXED && -n $CURVE ]] && fail "--mixed and --keep-curve do not go together"
if [[ -n $ONLY ]]; then
  IFS=, read -r -a ROW_ORDER <<<"$ONLY"
elif [[ -n $MIXED ]]; then
  ROW_ORDER=(plain extender)
  [[ -n $REPLICAS ]] && ROW_ORDER+=(proxy-1 proxy-2)
  [[ -n $BASE ]] && ROW_ORDER+=(baseline)
else
  ROW_ORDER=(plain)
  [[ -n $FLOOR ]] && ROW_ORDER+=(floor)
  [[ -n $CURVE ]] && ROW_ORDER+=(keep-1 keep-2 keep-4 keep-8)
  ROW_ORDER+=(keep-all extender)
  [[ -n $REPLICAS ]] && ROW_ORDER+=(proxy-1 proxy-2)
  [[ -n $BASE ]] && ROW_ORDER+=(baseline)
  [[ -n $PEERS ]] && ROW_ORDER+=(gpushare hami)
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || fail "--rounds needs a positive count"
FLOOR_BIN="" PEER_ROWS=""
declare -A PEER_BIN=()
for row in "${ROW_ORDER[@]}"; do
  [[ -n $MIXED && $row =~ ^(floor|gpushare|hami)$ ]] && fail "the $row row has no mixed workload (--mixed)"
  case $row in
    plain | extender | keep-all | proxy-1 | proxy-2) ;;
    keep-*) [[ ${row#keep-} =~ ^[1-9][0-9]*$ ]] || fail "no row named $row" ;;
    gpushare | hami)
      PEER_BIN[$row]=$(bench/peers/build.sh "$row") || fail "building the $row peer failed"
      PEER_ROWS+="${PEER_ROWS:+,}$row" ;;
    baseline) [[ -n $BASE ]] || fail "the baseline row needs --baseline-extender" ;;
    floor)
      cache=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender} FLOOR_BIN=$cache/floor-extender
      GOCACHE=$cache/gocache go build -o "$FLOOR_BIN" bench/floor/main.go || fail "building bench/floor failed" ;;
    *) fail "no row named $row" ;;
  esac
done
python3 bench/e2e_load.py selftest >/dev/null || fail "the allocation checker's self-test failed"
if [[ -n $PPROF ]]; then
  mkdir -p "$PPROF" || fail "cannot make $PPROF"
  export CLUSTER_APISERVER_FLAGS="${CLUSTER_APISERVER_FLAGS:-} --profiling=true"
fi
e2e_setup >/dev/null || fail "cluster setup failed"
if [[ -n $MIXED ]]; then   # the gangs' PodGroups
  kubectl apply -f deploy/base/10-crd-podgroup.yaml >/dev/null &&
    cluster_wait 30 "PodGroup CRD established" kubectl wait --for=condition=Established --timeout=1s \
      crd/podgroups.scheduling.x-k8s.io >/dev/null || fail "the PodGroup CRD"
fi
WORKLOAD="one-GPU pods"
[[ -n $MIXED ]] && WORKLOAD="mixed pods (--mixed)"
export CLUSTER_API_URL CLUSTER_ADMIN_TOKEN_FILE CLUSTER_CA_FILE
load() { python3 bench/e2e_load.py "$@"; }
echo "bench-e2e: $NODES nodes x 8 GPUs, $PODS $WORKLOAD per row, $ROUNDS rounds of ${ROW_ORDER[*]} ($(nproc) CPUs, $(cluster_versions 2>/dev/null | head -1))"
t=$(date +%s)
load nodes "$NODES" ${PEER_ROWS:+--peers "$PEER_ROWS"} ${CURVE:+--preferred 5} || fail "creating the nodes failed"
echo "  nodes created in $(( $(date +%s) - t )) s"

# A scheduler configuration: qps/burst 5000, the extender when a URL is given
# (a peer's own extender stanza with PEER).
scheduler_config() {  # OUT PROFILE [EXTENDER_URL [PEER]]
  if [[ -n ${4:-} ]]; then
    printf 'apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: %s\n' "$2" >"$1"
    peer_extender_config "$4" "$3" >>"$1"
  elif [[ -n ${3:-} ]]; then
    sed -e "s#http://127.0.0.1:8888#$3#" -e "s/^- schedulerName: gpu-scheduler/- schedulerName: $2/" \
      -e "${HTTP_TIMEOUT:+s/^  httpTimeout: .*/  httpTimeout: $HTTP_TIMEOUT/}" config/scheduler-config.yaml >"$1"
  else
    printf 'apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: %s\n' "$2" >"$1"
  fi
  printf 'clientConnection:\n  kubeconfig: "%s"\n  qps: 5000\n  burst: 5000\n' "$CLUSTER_SCHEDULER_KUBECONFIG" >>"$1"
}

metric_mean() {  # METRICS_TEXT NAME [LABEL_MATCH]: sum/count in ms
  awk -v n="$2" -v m="${3:-}" '
    index($1, n "_sum") == 1 && index($1, m) { s += $2 }
    index($1, n "_count") == 1 && index($1, m) { c += $2 }
    END { if (c > 0) printf "%.2f", s / c * 1000; else printf "-" }' <<<"$1"
}

# CPU seconds used so far by the harness's processes of those names
# (NAME|NAME...; utime + stime, in clock ticks from /proc/PID/stat: ps
# rounds to whole seconds). Only this cluster's: each process it started
# leads a process group of its own (cluster_spawn), and other programs of
# the same name on a shared machine (a test's extender) are not counted.
cpu_s() {
  local pids name groups
  groups=$(awk '{ print $2 }' "$CLUSTER_DIR/pids" | paste -sd, -)
  pids=$(for name in ${1//|/ }; do pgrep -x -g "$groups" "$name"; done | sed 's#.*#/proc/&/stat#')
  [[ -n $pids ]] || { echo 0; return; }
  # shellcheck disable=SC2086
  cat $pids 2>/dev/null | sed 's/^.*) //' | awk -v hz="$(getconf CLK_TCK)" '{ s += $12 + $13 } END { printf "%.3f", s / hz }'
}
CPU_OF=(kube-apiserver etcd kube-scheduler 'gpu-extender|floor-extender|gpushare-ext|hami-scheduler')
# An --extender or --baseline-extender of another name counts under its own (the kernel keeps 15 characters).
for bin in "$EXT" "$BASE"; do
  name=$(basename "$bin" | cut -c1-15)
  [[ -n $bin && "|${CPU_OF[3]}|" != *"|$name|"* ]] && CPU_OF[3]+="|$name"
done
CPU_KEYS=(apiserver etcd scheduler extender)

# pprof_row LABEL: CPU profiles of kube-apiserver and the row's kube-scheduler, a second into the row.
pprof_row() {
  local auth port
  auth="Authorization: Bearer $(cat "$CLUSTER_ADMIN_TOKEN_FILE")" port=$(cluster_scheduler_port "sched-$1")
  sleep 1
  curl -sfk -H "$auth" "$CLUSTER_API_URL/debug/pprof/profile?seconds=5" -o "$PPROF/apiserver-$1.pb.gz" &
  curl -sfk -H "$auth" "https://127.0.0.1:$port/debug/pprof/profile?seconds=5" -o "$PPROF/scheduler-$1.pb.gz" &
  wait
}

ROWS=() REQUESTS=() RATINGS=() ROUND=1
ROUNDS_FILE=""   # a JSON object a line, one per row and round (e2e_load.py table)
# run_row LABEL RESOURCE [EXTENDER_BINARY [REPLICAS]]: the row's run in round
# ROUND. With REPLICAS, that many extenders behind test/e2e/faultproxy.py,
# which hands each new connection to the next one in turn (a Service in
# front of replicas). EXT_FLAGS: more flags for the extenders. PEER: BINARY
# is that peer extender (bench/peers/peers.sh). CHECK: the kind of record
# the row's pods carry (e2e_load.py check), none when empty.
run_row() {
  local row=$1 label=$1-r$ROUND resource=$2 bin=${3:-} replicas=${4:-0} ns=bench-$1 url="" ext_metrics="" urls=() ups=() k
  local flags peer=${PEER:-} check=${CHECK:-}
  read -r -a flags <<<"${EXT_FLAGS:-}"
  cluster_ensure_namespace "$ns" >/dev/null || fail "namespace $ns"
  if [[ -n $peer ]]; then
    peer_start "$peer" "ext-$label" "$bin" || fail "peer $label did not become ready (log: $(cluster_log "ext-$label"))"
    url=$PEER_URL
  elif [[ -n $bin ]] && ((replicas)); then
    for ((k = 1; k <= replicas; k++)); do
      E2E_EXTENDER=$bin e2e_start_extender "ext-$label-$k" "${flags[@]}" || fail "extender $label-$k did not become ready"
      urls+=("$E2E_URL") ups+=(--upstream "${E2E_URL#http://}")
    done
    cluster_spawn "proxy-$label" python3 test/e2e/faultproxy.py --listen 127.0.0.1:0 "${ups[@]}" \
      --port-file "$CLUSTER_DIR/proxy-$label.port"
    cluster_wait 10 "proxy-$label listening" test -s "$CLUSTER_DIR/proxy-$label.port" || fail "proxy $label"
    url=http://127.0.0.1:$(cat "$CLUSTER_DIR/proxy-$label.port")
  elif [[ -n $bin ]]; then
    E2E_EXTENDER=$bin e2e_start_extender "ext-$label" "${flags[@]}" || fail "extender $label did not become ready"
    url=$E2E_URL urls=("$url")
  fi
  load pods "$ns" "$PODS" "$resource" "sched-$label" ${CURVE:+--groups 8} ${MIXED:+--mixed $MIX_SEED --prefix r$ROUND} ||
    fail "creating the pods failed"
  local out=$CLUSTER_DIR/watch-$label.json
  load watch "$ns" "$PODS" "$out" --timeout 900 &
  local watcher=$!
  cluster_wait 60 "the watch of $ns" test -e "$out.ready" || fail "watch did not start"
  local w0 c cpu0=() start
  w0=$(load writes)
  load requests >"$CLUSTER_DIR/requests-$label.before"
  for c in "${CPU_OF[@]}"; do cpu0+=("$(cpu_s "$c")"); done
  start=$(date +%s.%N)
  scheduler_config "$CLUSTER_DIR/sched-$label.yaml" "sched-$label" "$url" "$peer"
  cluster_start_scheduler "$CLUSTER_DIR/sched-$label.yaml" "sched-$label" >/dev/null || fail "scheduler $label"
  local profiler=""
  [[ -n $PPROF ]] && { pprof_row "$label" & profiler=$!; }
  wait "$watcher"
  [[ -n $profiler ]] && wait "$profiler"
  # The Events the row's binds caused are its work too: the recorders post
  # them from their own queues, some after the last binding.
  load events-settled --timeout 60 >/dev/null
  local w1 port sched_metrics cpu="" cpu_json="" used i double="-" unrecorded="-" apart="-" preferred="-" partial="-"
  w1=$(load writes)
  REQUESTS+=("$label: $(load requests "$CLUSTER_DIR/requests-$label.before" "$PODS")")
  for i in "${!CPU_OF[@]}"; do
    used=$(awk -v a="${cpu0[$i]}" -v b="$(cpu_s "${CPU_OF[$i]}")" 'BEGIN { printf "%.3f", b - a }')
    cpu+="${cpu:+/}$(awk -v u="$used" 'BEGIN { printf "%.1f", u }')"
    cpu_json+=",\"cpu_${CPU_KEYS[$i]}\":\"$(awk -v u="$used" -v n="$PODS" 'BEGIN { printf "%.3f", u * 1000 / n }')\""
  done
  port=$(cluster_scheduler_port "sched-$label")
  sched_metrics=$(kubectl --server="https://127.0.0.1:$port" --insecure-skip-tls-verify=true get --raw /metrics 2>/dev/null)
  for k in "${urls[@]}"; do ext_metrics+=$(curl -sf "$k/metrics")$'\n'; done   # replicas: summed
  cluster_stop_scheduler "sched-$label"
  [[ -n $CURVE ]] && read -r apart preferred < <(load honoured "$ns")
  if [[ -n $check ]]; then
    read -r _ double unrecorded _ partial < <(load check "$ns" "$check")
    double=${double:-?} unrecorded=${unrecorded:-?} partial=${partial:-?}
    [[ -n $MIXED ]] || partial="-"
  fi
  # The next row starts on empty nodes: this row's pods go while its
  # extenders run, so that they release the reservations (in this row's
  # time, not in the next row's).
  kubectl delete pods --all -n "$ns" --grace-period=0 --force --wait=false >/dev/null 2>&1
  load drained "$ns" --timeout 180 || fail "row $label: its pods or reservations did not go"
  [[ -n $MIXED ]] && kubectl delete gpuclaims.gpu.scheduling,podgroups.scheduling.x-k8s.io --all -n "$ns" --wait=false >/dev/null 2>&1
  if ((replicas)); then
    cluster_kill "proxy-$label"
    for ((k = 1; k <= replicas; k++)); do cluster_kill "ext-$label-$k"; done
  elif [[ -n $peer ]]; then
    cluster_kill9 "ext-$label" >/dev/null 2>&1   # gpushare does not stop on TERM; its work is done
  elif [[ -n $bin ]]; then
    cluster_kill "ext-$label"
  fi
  local rate bound lat50 lat99
  read -r rate bound < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f" % r.get("rate", 0), r["bound"])' "$out")
  read -r lat50 lat99 < <(load latency "$out" "$start")
  local refused conflicts conns events held choices
  refused=$(awk '/^gpu_extender_binds_total/ && !/result="ok"/ { s += $2 } END { print s + 0 }' <<<"$ext_metrics")
  conflicts=$(awk '/^gpu_extender_reservation_conflicts_total/ { s += $2 } END { print s + 0 }' <<<"$ext_metrics")
  conns=$(awk '/^gpu_extender_connections_refused_total/ { s += $2; n++ } END { print n ? s : "-" }' <<<"$ext_metrics")
  # The Events the extender posted (sent or counted on one) / dropped (its queue full) or rate limited
  events=$(awk '/^gpu_extender_events_total/ { if ($1 ~ /sent|patched/) s += $2; else if ($1 ~ /dropped|limited/) d += $2 }
    END { print s + 0 "/" d + 0 }' <<<"$ext_metrics")
  held=$(awk '/^gpu_extender_filter_waits_total/ { s += $2; n++ } END { print n ? s : "-" }' <<<"$ext_metrics")
  # The nodes filters chose alone whose count lapsed (no bind in 5 s) or was never made (the node filled meanwhile)
  choices=$(awk '/^gpu_extender_filter_choices_total/ { n++; if ($1 ~ /expired/) e += $2; else if ($1 ~ /uncounted/) u += $2 }
    END { print n ? e + 0 "/" u + 0 : "-" }' <<<"$ext_metrics")
  [[ -n $bin && -z $peer ]] || refused=- conflicts=- conns=- events=- held=- choices=-
  [[ -n $bin && -z $peer ]] && RATINGS+=("$label: $(awk '/^gpu_extender_prioritize_ratings_total/ { n[$1] += $2 }
    END { f = n["gpu_extender_prioritize_ratings_total{source=\"filter\"}"]; m = n["gpu_extender_prioritize_ratings_total{source=\"made\"}"]
      if (f + m) printf "%d of %d from the filter'"'"'s ratings", f, f + m; else print "none (or a build without the count)" }' <<<"$ext_metrics")")
  local writes attempt fms pms bms
  writes=$(awk -v a="$w0" -v b="$w1" -v n="$PODS" 'BEGIN { printf "%.2f", (b - a) / n }')
  attempt=$(metric_mean "$sched_metrics" scheduler_scheduling_attempt_duration_seconds)
  fms=$(metric_mean "$ext_metrics" gpu_extender_request_duration_seconds 'verb="filter"')
  pms=$(metric_mean "$ext_metrics" gpu_extender_request_duration_seconds 'verb="prioritize"')
  bms=$(metric_mean "$ext_metrics" gpu_extender_request_duration_seconds 'verb="bind"')
  ROWS+=("$(printf '| %-12s | %5s/%s | %7s | %11s | %6s | %8s | %8s | %8s | %8s | %7s | %7s | %7s | %9s | %5s | %7s | %s | %s / %s |' "$label" "$bound" "$PODS" "$rate" \
    "$lat50/$lat99" "$writes" "$attempt" "$fms" "$pms" "$bms" "$refused" "$conflicts" "$conns" "$events" "$held" "$choices" "$cpu" "$double" "$unrecorded")")
  printf '{"row":"%s","round":%d,"pods":%d,"bound":%d,"rate":"%s","lat_p50":"%s","lat_p99":"%s","writes":"%s","attempt_ms":"%s","filter_ms":"%s","prioritize_ms":"%s","bind_ms":"%s","double":"%s","unrecorded":"%s","partial_gangs":"%s","apart":"%s","preferred":"%s"%s}\n' \
    "$row" "$ROUND" "$PODS" "$bound" "$rate" "$lat50" "$lat99" "$writes" "$attempt" "$fms" "$pms" "$bms" "$double" "$unrecorded" "$partial" "$apart" "$preferred" "$cpu_json" >>"$ROUNDS_FILE"
  echo "  round $ROUND $row: $bound/$PODS bound, $rate pods/s, CPU s apiserver/etcd/scheduler/extender $cpu${check:+, double allocations $double (unrecorded $unrecorded)${MIXED:+, gangs partly bound $partial}}${CURVE:+, honoured: anti-affinity $apart, node affinity $preferred}"
}

if [[ -n $COLD ]]; then
  cluster_ensure_namespace bench-cold >/dev/null || fail "namespace"
  t=$(date +%s)
  load reserved bench-cold 8 "$NODES" || fail "creating the reservations failed"
  echo "  $(( NODES * 8 - 1 )) bound pods and $NODES ledgers created in $(( $(date +%s) - t )) s"
  echo "| build | nodes | bound pods | ready s | first correct answer s | RSS MiB |"
  echo "|---|---|---|---|---|---|"
  cold_row() {  # LABEL BINARY: one extender started on what the API server holds, then stopped
    local port out poller pid rss
    port=$(e2e_free_port)
    out=$CLUSTER_DIR/cold-$1.json
    load cold "http://127.0.0.1:$port" "$NODES" "$out" &
    poller=$!
    cluster_spawn "ext-cold-$1" "$2" serve --kubeconfig "$CLUSTER_EXTENDER_KUBECONFIG" --listen "127.0.0.1:$port" \
      --identity "ext-cold-$1"
    wait "$poller"
    pid=$(pgrep -f "identity ext-cold-$1" | head -1)
    rss=$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null)
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); f=lambda v: "-" if v is None else "%.2f" % v
print("| %s | %s | %s | %s | %s | %s |" % (sys.argv[5], sys.argv[2], sys.argv[3], f(r["ready"]), f(r["correct"]), sys.argv[4]))' \
      "$out" "$NODES" "$(( NODES * 8 - 1 ))" "${rss:--}" "$1"
    [[ -n $pid ]] && kill "$pid" 2>/dev/null
    cluster_wait 20 "ext-cold-$1 stopped" bash -c '! pgrep -f "identity ext-cold-$1" >/dev/null' _ "$1" >/dev/null
  }
  cold_row extender "$EXT"
  [[ -n $BASE ]] && cold_row baseline "$BASE"
  cluster_down >/dev/null 2>&1
  exit 0
fi

if [[ -n $SUSTAIN ]]; then
  ns=bench-sus
  cluster_ensure_namespace "$ns" >/dev/null || fail "namespace"
  E2E_EXTENDER=$EXT e2e_start_extender ext-sus || fail "extender"
  scheduler_config "$CLUSTER_DIR/sched-sus.yaml" sched-sus "$E2E_URL"
  cluster_start_scheduler "$CLUSTER_DIR/sched-sus.yaml" sched-sus >/dev/null || fail "scheduler"
  pid=$(pgrep -f "identity ext-sus" | head -1)
  # RSS MiB, open files, threads of the extender, and how many of its open files are sockets
  usage() {
    echo "$(awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status") $(ls "/proc/$pid/fd" | wc -l)" \
      "$(ls "/proc/$pid/task" | wc -l) $(find "/proc/$pid/fd" -lname 'socket:*' 2>/dev/null | wc -l)"
  }
  # cumulative seconds of filter+prioritize, filter count, seconds of binds, bind count
  sums() {
    curl -sf "$E2E_URL/metrics" | awk '
      /^gpu_extender_request_duration_seconds_sum\{verb="(filter|prioritize)"/ { fp += $2 }
      /^gpu_extender_request_duration_seconds_count\{verb="filter"/ { n += $2 }
      /^gpu_extender_request_duration_seconds_sum\{verb="bind"/ { b += $2 }
      /^gpu_extender_request_duration_seconds_count\{verb="bind"/ { bn += $2 }
      END { printf "%.6f %d %.6f %d\n", fp, n, b, bn }'
  }
  heap() {  # MiB malloc holds for the program, MiB free in its arenas (/metrics)
    curl -sf "$E2E_URL/metrics" | awk '/^gpu_extender_heap_in_use_bytes/ { u = $2 } /^gpu_extender_heap_free_bytes/ { f = $2 }
      END { printf "%.1f %.1f", u / 1048576, f / 1048576 }'
  }
  peak() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }  # the highest RSS so far
  cpus() { echo "$(cpu_s gpu-extender) $(cpu_s kube-apiserver)"; }  # CPU s so far: extender, API server
  per_pod() {  # FROM_SUMS TO_SUMS FROM_CPUS TO_CPUS: CPU ms of the extender, of the API server, a bind in between
    awk -v a="$1" -v z="$2" -v c="$3" -v d="$4" 'BEGIN { split(a, x, " "); split(z, y, " "); split(c, p, " "); split(d, q, " ")
      n = y[4] - x[4]; printf "%.2f %.2f", (n > 0 ? (q[1] - p[1]) * 1000 / n : 0), (n > 0 ? (q[2] - p[2]) * 1000 / n : 0) }'
  }
  means() {  # FROM_SUMS TO_SUMS: mean ms of a filter+prioritize pair, of a bind, in between
    awk -v a="$1" -v z="$2" 'BEGIN { split(a, x, " "); split(z, y, " ")
      printf "%.3f %.2f", (y[2] > x[2] ? (y[1] - x[1]) / (y[2] - x[2]) * 1000 : 0), (y[4] > x[4] ? (y[3] - x[3]) / (y[4] - x[4]) * 1000 : 0) }'
  }
  gone() { [[ -z $(kubectl get pods -n "$ns" -o name 2>/dev/null) ]]; }
  round() {  # K
    load pods "$ns" "$PODS" gpu.scheduling/gpu sched-sus --prefix "r$1" || return 1
    load watch "$ns" "$PODS" "$CLUSTER_DIR/sus.json" --timeout 120 || return 1
    kubectl delete pods --all -n "$ns" --grace-period=0 --force --wait=false >/dev/null 2>&1
    cluster_wait 60 "round $1 deleted" gone
  }
  t0=$SECONDS
  SUMS=("0 0 0 0")
  round 0 || fail "the first round failed"
  SUMS+=("$(sums)")
  first_use=$(usage) first_kinds="$(load rss "$pid") $(heap) $(peak)"
  k=1 minute=1 mark=${SUMS[1]} cpu_mark=$(cpus) MINUTES=()
  while ((SECONDS - t0 < SUSTAIN)); do
    round "$k" || fail "round $k failed"
    SUMS+=("$(sums)")
    k=$((k + 1))
    # Once a minute: the extender's RSS, open files and threads, its verbs'
    # mean times and CPU a pod over the minute: a leak or a drift shows in their shape.
    if ((SECONDS - t0 >= minute * 60)); then
      cpu_now=$(cpus)
      cpu_pod=$(per_pod "$mark" "${SUMS[$k]}" "$cpu_mark" "$cpu_now")
      MINUTES+=("$minute $k $(usage) $(means "$mark" "${SUMS[$k]}") $(load rss "$pid") $(heap) $(peak) $cpu_pod")
      mark=${SUMS[$k]} cpu_mark=$cpu_now
      minute=$((minute + 1))
    fi
  done
  last_use=$(usage) last_kinds="$(load rss "$pid") $(heap) $(peak)"
  w=$(( k > 5 ? k - 5 : 1 ))   # the last five rounds
  echo "| after | rounds | binds | RSS MiB | open files | threads | sockets | filter+prioritize ms | bind ms |"
  echo "|---|---|---|---|---|---|---|---|---|"
  read -r r f th so <<<"$first_use"; read -r fp b <<<"$(means "${SUMS[0]}" "${SUMS[1]}")"
  echo "| round 1 | 1 | $PODS | $r | $f | $th | $so | $fp | $b |"
  read -r r f th so <<<"$last_use"; read -r fp b <<<"$(means "${SUMS[$w]}" "${SUMS[$k]}")"
  echo "| $((SECONDS - t0)) s (means: last $((k - w)) rounds) | $k | $((k * PODS)) | $r | $f | $th | $so | $fp | $b |"
  echo
  echo "At the end of each minute (verbs and CPU: over that minute; sockets: of the open files):"
  echo "| minute | rounds | RSS MiB | open files | threads | sockets | filter+prioritize ms | bind ms | CPU ms a pod: extender | API server |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${MINUTES[@]}" | awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $17, $18 }'
  # From minute 5 on: RSS against minute 5's (the goal: within 5 %), open
  # files and threads (constant), and the verbs' means of minutes 5-9
  # against the last five minutes' (no drift), and so the CPU a pod.
  printf '%s\n' "${MINUTES[@]}" | awk '$1 >= 5 {
      if (!n++) { r0 = $3; lo = hi = $3; flo = fhi = $4; tlo = thi = $5; slo = shi = $6 }
      if ($3 < lo) lo = $3; if ($3 > hi) hi = $3
      if ($4 < flo) flo = $4; if ($4 > fhi) fhi = $4
      if ($5 < tlo) tlo = $5; if ($5 > thi) thi = $5
      if ($6 < slo) slo = $6; if ($6 > shi) shi = $6
      fp[n] = $7; bd[n] = $8; ce[n] = $17; ca[n] = $18 }
    END {
      if (n < 2) { print "from minute 5 on: too short a run (--sustained 1800 for 30 minutes)"; exit }
      m = n < 5 ? n : 5
      for (i = 1; i <= m; i++) {
        a += fp[i]; b += bd[i]; c += fp[n - m + i]; d += bd[n - m + i]
        e += ce[i]; f += ce[n - m + i]; g += ca[i]; h += ca[n - m + i] }
      printf "from minute 5 on: RSS %s to %s MiB (%+.1f %% to %+.1f %% of minute 5'"'"'s %s); open files %s to %s (sockets %s to %s); threads %s to %s\n",
        lo, hi, (lo - r0) / r0 * 100, (hi - r0) / r0 * 100, r0, flo, fhi, slo, shi, tlo, thi
      printf "filter+prioritize ms: %.3f over minutes 5-%d, %.3f over the last %d; bind ms: %.1f, %.1f\n",
        a / m, 4 + m, c / m, m, b / m, d / m
      printf "CPU ms a pod: extender %.2f over minutes 5-%d, %.2f over the last %d; API server %.2f, %.2f\n",
        e / m, 4 + m, f / m, m, g / m, h / m }'
  echo
  echo "RSS MiB by kind of mapping, malloc's MiB (in use: held by the extender; free: kept in its arenas) and the highest RSS so far:"
  echo "| when | main heap | threads' heaps | threads' stacks | other anonymous | files | malloc in use | malloc free | RSS peak |"
  echo "|---|---|---|---|---|---|---|---|---|"
  echo "| round 1 | ${first_kinds// / | } |"
  printf '%s\n' "${MINUTES[@]}" | awk '{ printf "| minute %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $9, $10, $11, $12, $13, $14, $15, $16 }'
  echo "| end | ${last_kinds// / | } |"
  cluster_down >/dev/null 2>&1
  exit 0
fi

# one_row NAME: the row of that name (see the top of this file).
one_row() {
  case $1 in
    plain) run_row plain example.com/gpu ;;
    extender) CHECK=extender run_row extender gpu.scheduling/gpu "$EXT" ;;
    keep-all) CHECK=extender EXT_FLAGS="--filter-keeps-best 0" run_row "$1" gpu.scheduling/gpu "$EXT" ;;
    keep-*) CHECK=extender EXT_FLAGS="--filter-keeps-best ${1#keep-} --keep-all-for-preferences=false" \
      run_row "$1" gpu.scheduling/gpu "$EXT" ;;
    floor) run_row floor gpu.scheduling/gpu "$FLOOR_BIN" ;;
    proxy-1) CHECK=extender run_row proxy-1 gpu.scheduling/gpu "$EXT" 1 ;;
    proxy-2) CHECK=extender run_row proxy-2 gpu.scheduling/gpu "$EXT" 2 ;;
    baseline) CHECK=extender run_row baseline gpu.scheduling/gpu "$BASE" ;;
    gpushare | hami) CHECK=$1 PEER=$1 run_row "$1" "$(peer_resource "$1")" "${PEER_BIN[$1]}" ;;
  esac
}
ROUNDS_FILE=$CLUSTER_DIR/rounds.jsonl
: >"$ROUNDS_FILE"
n=${#ROW_ORDER[@]}
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  for ((i = 0; i < n; i++)); do one_row "${ROW_ORDER[(i + ROUND - 1) % n]}"; done
done

echo
echo "Every round (ROW-rN: round N), in the order they ran:"
echo "| row | bound | pods/s | start-to-bound p50/p99 s | API writes/pod | scheduling attempt ms | filter ms | prioritize ms | bind ms | binds refused | ledger 409s | connections refused | Events posted/dropped | filters held | choices expired/uncounted | CPU s: apiserver/etcd/scheduler/extender | double allocations / unrecorded |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "API requests per pod, by verb and resource:"
printf '  %s\n' "${REQUESTS[@]}"
echo
echo "Prioritize requests, by where their ratings came from:"
printf '  %s\n' "${RATINGS[@]}"
echo
echo "bench-e2e: $NODES nodes x 8 GPUs, $PODS $WORKLOAD per row, $ROUNDS rounds ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
load table "$ROUNDS_FILE" || fail "no summary"
[[ -n ${BENCH_E2E_ROUNDS_OUT:-} ]] && cp "$ROUNDS_FILE" "$BENCH_E2E_ROUNDS_OUT"
cluster_down >/dev/null 2>&1
exit 0
