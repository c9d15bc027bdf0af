#!/usr/bin/env bash
# The capacity cache in cluster mode against a real control plane (the
# extender's reflectors: list with paging, watch with bookmarks, relist on 410,
# backoff, readiness and auth errors):
#   1. create, relabel, update and delete Nodes, GpuNodeStatuses and GpuClaims:
#      the filter's answer changes within a second (the delays are printed);
#   2. kube-apiserver killed and restarted mid-watch, with changes just before,
#      while it is down (written straight into etcd) and just after: the cache
#      converges to exactly the API server's state; restarts are counted; the
#      extender stays up and serves from its cache meanwhile;
#   3. a compacted resourceVersion: the extender's watch resumes after the API
#      server restarted and etcd was compacted, gets "too old resource version"
#      (an ERROR event with code 410), relists, and so recovers a deletion it
#      never saw an event for;
#   4. a wrong token, a rotated token file that turns wrong and then right
#      again, and an identity without RBAC: not ready with the reason, one clear
#      log line, no crash, ready again once fixed;
#   5. a paged relist (600 GpuNodeStatuses, pages of 500) that keeps breaking off
#      in its second page: the cache keeps every object meanwhile.
# Helpers: test/e2e/cache_util.py (filter polling, cache/API comparison,
# metrics, direct etcd access, a TCP proxy that can cut the extender off).
#
#   test/e2e/run.sh test/e2e/cache.sh
#   CACHE_SCENARIOS="1 3" bash test/e2e/cache.sh      # a subset
#   CACHE_POLL_MS=5 ...                               # poll the filter every 5 ms, not 50
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

E2E_SCENARIOS=${CACHE_SCENARIOS:-1 2 3 4 5}
T_START=$SECONDS
CU=test/e2e/cache_util.py
cu() { python3 "$CU" "$@"; }
# A command line that runs a lib.sh/cluster.sh function in a fresh bash (for
# cache_util.py, which times the command it runs).
LIBSH=(bash -c '. test/cluster/cluster.sh && . test/e2e/lib.sh && "$@"' libsh)

# A private TMPDIR: the cluster's directory is not where other runs' clean-ups look.
CACHE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-e2e-cache.XXXXXX") || exit 1
export TMPDIR=$CACHE_TMP
e2e_setup || { echo "cache: 0 passed, 1 failed (cluster setup)"; rmdir "$CACHE_TMP" 2>/dev/null; exit 1; }
# cluster_up's EXIT trap, and then the private TMPDIR.
trap 'cluster_down; rmdir "$CACHE_TMP" 2>/dev/null' EXIT
WORK=$CLUSTER_DIR/cache
mkdir -p "$WORK"
: >"$WORK/delays"

# ---- helpers -------------------------------------------------------------------

# change LABEL URL NODES EXPECT [--gpus N | --claim NS/NAME] -- CMD...: run the
# write CMD and wait (1 s at most, polling every CACHE_POLL_MS, 50 ms, from before
# CMD starts) until the extender's answer
# for the first of NODES is EXPECT (pass, reject:TEXT, absent: then URL is the
# extender's /debug listener); the delay is
# kept for the summary.
change() {
  local label=$1; shift
  local out rc
  out=$(cu watch-change --timeout 1 --interval "$(awk "BEGIN { print ${CACHE_POLL_MS:-50} / 1000 }")" "$@"); rc=$?
  echo "$out"
  ((rc == 0)) && printf '%-36s %s\n' "$label" "$out" >>"$WORK/delays"
  return $rc
}
last_delay() { e2e_note "$(tail -1 "$WORK/delays" | sed 's/  */ /g')"; }

# A GpuClaim in namespace ml: claim NAME COUNT [MATCH_LABELS_JSON] writes its
# manifest to $WORK/claim-NAME.json and prints that path; apply it with kubectl.
claim() {
  local sel="" f=$WORK/claim-$1.json
  [[ -n ${3:-} ]] && sel=",\"selector\":{\"matchLabels\":$3}"
  cat >"$f" <<EOF
{"apiVersion":"gpu.scheduling/v1","kind":"GpuClaim","metadata":{"name":"$1","namespace":"ml"},
 "spec":{"devices":{"count":$2}$sel}}
EOF
  echo "$f"
}

# filter_says URL NODES TEXT [FILTER FLAGS...]: the filter's answer for NODES has TEXT.
filter_says() {
  local url=$1 nodes=$2 text=$3; shift 3
  cu filter "$url" "$nodes" "$@" | grep -qF -- "$text"
}

gns_patch() {  # NODE JSON_PATCH
  kubectl patch gpunodestatus "$1" --type=json -p "$2" >/dev/null
}

# converge DEBUG_URL...: the caches of these extenders (at their /debug
# listeners) hold exactly the API server's
# Nodes and GpuNodeStatuses (within 30 s: reconnects back off up to a few seconds).
converge() {
  kubectl get nodes -o json >"$WORK/nodes.json" && kubectl get gpunodestatuses -o json >"$WORK/gns.json" ||
    { echo "cannot read the API server"; return 1; }
  local u rc=0
  : >"$WORK/last_note"
  for u in "$@"; do
    cu converge "$u" "$WORK/nodes.json" "$WORK/gns.json" --timeout 30 | tee -a "$WORK/last_note"
    ((PIPESTATUS[0] == 0)) || rc=1
  done
  return $rc
}

metric() { cu metric "$@" 2>/dev/null || echo -1; }   # URL NAME [RESOURCE]

# A kubeconfig for the extender identity with another server or credentials:
# kubeconfig_variant OUT [--server URL] [--token T | --token-file F]
kubeconfig_variant() {
  local out=$1 server=$CLUSTER_API_URL cred="tokenFile: $CLUSTER_EXTENDER_TOKEN_FILE"; shift
  while (($#)); do
    case $1 in
      --server) server=$2 ;;
      --token) cred="token: $2" ;;
      --token-file) cred="tokenFile: $2" ;;
    esac
    shift 2
  done
  sed -e "s#server: .*#server: $server#" -e "s#tokenFile: .*#$cred#" "$CLUSTER_EXTENDER_KUBECONFIG" >"$out"
  chmod 600 "$out"
}

# start_proxy NAME: a TCP proxy to the API server (cache_util.py proxy); sets
# PROXY_URL and PROXY_CTL (its control port).
start_proxy() {
  rm -f "$WORK/$1.ports"
  cluster_spawn "$1" python3 "$CU" proxy "127.0.0.1:$CLUSTER_API_PORT" "$WORK/$1.ports" || return 1
  cluster_wait 10 "proxy $1" test -s "$WORK/$1.ports" || return 1
  local lp cp
  read -r lp cp <"$WORK/$1.ports"
  PROXY_URL=https://127.0.0.1:$lp
  PROXY_CTL=$cp
}

# spawn_extender NAME KUBECONFIG: an extender that may never become ready; sets URL_<NAME>.
spawn_extender() {
  local port
  port=$(e2e_free_port) || return 1
  cluster_spawn "$1" "$E2E_EXTENDER" serve --kubeconfig "$2" --listen "127.0.0.1:$port" --identity "$1" || return 1
  printf -v "URL_${1//-/_}" '%s' "http://127.0.0.1:$port"
  cluster_wait 10 "$1 /healthz" curl -sf "http://127.0.0.1:$port/healthz"
}

# wait_readyz URL CODE SECONDS [TEXT]: /readyz answers CODE (and its body has TEXT).
wait_readyz() {
  local url=$1 want=$2 secs=$3 text=${4:-} start deadline body c
  start=$(date +%s%N)
  deadline=$((start + secs * 1000000000))
  while :; do
    body=$(curl -s -m 2 -w '\n%{http_code}' "$url/readyz")
    c=${body##*$'\n'} body=${body%$'\n'*}
    body=${body%$'\n'}
    if [[ $c == "$want" && $body == *"$text"* ]]; then
      echo "/readyz $c after $((($(date +%s%N) - start) / 1000000)) ms: $body" | tee "$WORK/last_note"
      return 0
    fi
    if (($(date +%s%N) > deadline)); then
      echo "/readyz still $c after ${secs}s: $body (wanted $want${text:+ with '$text'})"
      return 1
    fi
    sleep 0.1
  done
}

NOTE_FAILED=0
show_note() {  # the timing lines of the last wait_readyz or converge (when it passed)
  local l
  if ((E2E_FAILED == NOTE_FAILED)); then
    while IFS= read -r l; do e2e_note "${l:0:240}"; done <"$WORK/last_note" 2>/dev/null
  fi
  NOTE_FAILED=$E2E_FAILED
  rm -f "$WORK/last_note"
}

# monitor NAME URL: poll /healthz and /readyz every 0.2 s in the background;
# lines "EPOCH HEALTHZ READYZ [READYZ BODY]" go to its log (cluster_log NAME).
monitor() {
  cluster_spawn "$1" bash -c '
    u=$1
    while :; do
      h=$(curl -s -o /dev/null -m 1 -w "%{http_code}" "$u/healthz")
      r=$(curl -s -m 1 -w " %{http_code}" "$u/readyz")
      c=${r##* } b=${r% *}
      [[ $c == 200 ]] && b=""
      echo "$(date +%s.%N) $h $c ${b//$'\''\n'\''/ }"
      sleep 0.2
    done' monitor "$2"
}

# What a monitor saw: every /healthz 200; how long /readyz was not 200, and why.
monitor_report() {  # NAME
  awk '
    { n++; if ($2 != 200) bad++ }
    $3 != 200 { if (!down) { down = $1; why = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", why) } next }
    down { spells = spells sprintf(" %.1fs(%s)", $1 - down, why); total += $1 - down; down = 0 }
    END {
      if (down) spells = spells " unfinished(" why ")"
      printf "%d probes, %d /healthz failures; /readyz not ready:%s\n", n, bad, spells == "" ? " never" : spells
      exit bad > 0 || n < 5
    }' "$(cluster_log "$1")"
}

auth_lines() {  # NAME: the number of "credentials" / "RBAC" error lines in its log
  grep -c -E 'rejected our credentials|forbids what we need' "$(cluster_log "$1")"
}

# ================================================================================
# 1. Changes show within a second
# ================================================================================
e2e_gpu_node a1 4 || { echo "cache: 0 passed, 1 failed (nodes)"; exit 1; }
e2e_gpu_node a2 8
e2e_start_extender ext || { echo "cache: 0 passed, 1 failed (extender)"; exit 1; }
URL=$E2E_URL
DEBUG=$E2E_DEBUG_URL

if e2e_want 1; then
  echo "== 1. changes reach the filter within a second"
  # Node and GpuNodeStatus created: from "no GpuNodeStatus" to passing.
  e2e_check "create Node + GpuNodeStatus: filter passes it within 1 s" \
    change "create Node+GpuNodeStatus -> pass" "$URL" c1,a1 pass --gpus 2 -- "${LIBSH[@]}" e2e_gpu_node c1 4
  last_delay

  # Node labels, through a GpuClaim's spec.selector.matchLabels.
  kubectl apply -f "$(claim red 1 '{"team":"red"}')" >/dev/null
  cluster_wait 5 "GpuClaim red in the cache" filter_says "$URL" c1 'claim wants team=red' --claim ml/red
  e2e_check "label a Node: a matchLabels claim passes it within 1 s" \
    change "label Node -> pass" "$URL" c1 pass --claim ml/red -- kubectl label node c1 team=red
  last_delay
  e2e_check "relabel the Node: the claim rejects it within 1 s" \
    change "relabel Node -> reject" "$URL" c1 reject:"team=blue" --claim ml/red -- kubectl label node c1 team=blue --overwrite
  last_delay

  # GpuNodeStatus updates: health and inUseBy.
  e2e_check "GpuNodeStatus device Unhealthy: a 4-GPU pod is rejected within 1 s" \
    change "device Unhealthy -> reject" "$URL" c1 reject:"unhealthy" --gpus 4 -- \
    kubectl patch gpunodestatus c1 --type=json -p '[{"op":"replace","path":"/status/devices/0/health","value":"Unhealthy"}]'
  last_delay
  e2e_check "GpuNodeStatus device Healthy again: passes within 1 s" \
    change "device Healthy -> pass" "$URL" c1 pass --gpus 4 -- \
    kubectl patch gpunodestatus c1 --type=json -p '[{"op":"replace","path":"/status/devices/0/health","value":"Healthy"}]'
  last_delay
  e2e_check "GpuNodeStatus device inUseBy a process: rejected within 1 s" \
    change "device inUseBy -> reject" "$URL" c1 reject:"held outside" --gpus 4 -- \
    kubectl patch gpunodestatus c1 --type=json -p '[{"op":"replace","path":"/status/devices/3/inUseBy","value":["pid 4242 (python)"]}]'
  last_delay

  # Deletions.
  e2e_check "delete the GpuNodeStatus: 'no GpuNodeStatus' within 1 s" \
    change "delete GpuNodeStatus -> reject" "$URL" c1 reject:"no GpuNodeStatus" --gpus 1 -- \
    kubectl delete gpunodestatus c1 --wait=false
  last_delay
  e2e_check "delete the Node: gone from /debug/nodes within 1 s" \
    change "delete Node -> gone" "$DEBUG" c1 absent -- kubectl delete node c1 --wait=false
  last_delay

  # GpuClaims: created, changed, deleted.
  e2e_check "GpuClaim created: the filter uses it within 1 s" \
    change "GpuClaim created -> pass" "$URL" a1 pass --claim ml/quad -- kubectl apply -f "$(claim quad 4)"
  last_delay
  e2e_check "GpuClaim changed (count 4 -> 8): rejected within 1 s" \
    change "GpuClaim count 8 -> reject" "$URL" a1 reject:"claim needs 8" --claim ml/quad -- \
    kubectl -n ml patch gpuclaim quad --type=merge -p '{"spec":{"devices":{"count":8}}}'
  last_delay
  e2e_check "GpuClaim changed: the 8-GPU node a2 passes" \
    filter_says "$URL" a2,a1 '"NodeNames": ["a2"]' --claim ml/quad
  e2e_check "GpuClaim deleted: 'not found' within 1 s" \
    change "GpuClaim deleted -> reject" "$URL" a1 reject:"not found" --claim ml/quad -- \
    kubectl -n ml delete gpuclaim quad --wait=false
  last_delay

  check_event_metrics() {
    local ev age
    ev=$(metric "$URL" gpu_extender_watch_events_total gpunodestatuses)
    age=$(metric "$URL" gpu_extender_newest_event_age_seconds nodes)
    echo "watch events (gpunodestatuses) $ev, newest node event ${age}s old"
    awk -v e="$ev" -v a="$age" 'BEGIN { exit !(e >= 4 && a >= 0 && a < 60) }'
  }
  e2e_check "metrics: watch events counted, newest event age" check_event_metrics
  e2e_check "cache == API server after the changes" converge "$DEBUG"
  show_note
fi

# ================================================================================
# 2. kube-apiserver killed and restarted mid-watch
# ================================================================================
if e2e_want 2; then
  echo "== 2. kube-apiserver restarted mid-watch"
  for n in r1 r2 r3; do e2e_gpu_node $n 4; done
  cluster_wait 10 "r1-r3 in the cache" filter_says "$URL" r3 '"r3"]'
  restarts0=$(metric "$URL" gpu_extender_watch_restarts_total gpunodestatuses)
  relists0=$(metric "$URL" gpu_extender_relists_total gpunodestatuses)
  ext_pid=$(_cluster_pid_of ext)
  monitor mon "$URL"
  sleep 0.5

  # Changes right before the API server dies (acknowledged, maybe not yet delivered).
  kubectl label node r1 phase=before >/dev/null
  e2e_gpu_node r4 2
  gns_patch r2 '[{"op":"replace","path":"/status/devices/1/health","value":"Unhealthy"}]'
  cluster_stop_apiserver --kill
  t_down=$(date +%s%N)
  e2e_note "kube-apiserver killed (SIGKILL)"

  # While it is down: the extender serves from its cache, and etcd changes under it.
  check_serving_while_down() {
    ! cluster_alive kube-apiserver || { echo "the API server is still running"; return 1; }
    local reply
    reply=$(cu filter "$URL" r3,a1 --gpus 2) || { echo "filter failed while the API server is down"; return 1; }
    echo "$reply"
    # Both fit; as shipped (filterKeepsBest 1) the filter passes the one it rates best, and fails neither.
    grep -qE '"NodeNames": \["(r3|a1)"\], "Nodes": null, "FailedNodes": \{\}, "FailedAndUnresolvableNodes": \{\}' <<<"$reply"
  }
  e2e_check "API server down: the extender still filters from its cache" check_serving_while_down
  change_etcd_while_down() {
    cu etcd "$CLUSTER_ETCD_URL" delete /registry/gpu.scheduling/gpunodestatuses/r3 &&
      cu etcd "$CLUSTER_ETCD_URL" unhealthy r1 2 &&
      cu etcd "$CLUSTER_ETCD_URL" delete /registry/minions/r2
  }
  e2e_check "while it is down, etcd changed directly: GpuNodeStatus r3 deleted, r1 device 2 Unhealthy, Node r2 deleted" \
    change_etcd_while_down
  sleep 1

  cluster_start_apiserver || { echo "cache: kube-apiserver did not come back"; e2e_summary; exit 1; }
  e2e_note "kube-apiserver back, $((($(date +%s%N) - t_down) / 1000000)) ms after it was killed"
  # Changes right after it is back.
  e2e_gpu_node r5 4
  kubectl delete gpunodestatus r4 --wait=false >/dev/null
  kubectl delete node r4 --wait=false >/dev/null
  kubectl label node r1 phase=after --overwrite >/dev/null

  e2e_check "after the restart the cache converges to the API server's state" converge "$DEBUG"
  show_note
  check_restart_counted() {
    local r l
    r=$(metric "$URL" gpu_extender_watch_restarts_total gpunodestatuses)
    l=$(metric "$URL" gpu_extender_relists_total gpunodestatuses)
    echo "gpunodestatuses: watch restarts $restarts0 -> $r, relists $relists0 -> $l" | tee "$WORK/last_note"
    ((r > restarts0))
  }
  e2e_check "watch restarts counted in /metrics" check_restart_counted
  show_note
  e2e_check "extender ready again after the restart" wait_readyz "$URL" 200 30
  show_note
  sleep 0.5
  check_no_crash() {
    [[ $(_cluster_pid_of ext) == "$ext_pid" ]] && cluster_alive ext || { echo "the extender died"; return 1; }
    monitor_report mon
  }
  e2e_check "extender never crashed: same process, /healthz 200 throughout" check_no_crash
  e2e_note "$(monitor_report mon)"
  cluster_kill mon
fi

# ================================================================================
# 3. A compacted resourceVersion (410) handled by a relist
# ================================================================================
if e2e_want 3; then
  echo "== 3. 410: a compacted resourceVersion makes the extender relist"
  # The extender reaches the API server through a proxy that can cut it off. While
  # it is cut off: a GpuNodeStatus and a Node are deleted (it misses the DELETED
  # events), the API server restarts (its watch cache now starts at the current
  # revision) and etcd is compacted at that revision. When the proxy lets it
  # through again its watches resume from resourceVersions older than both, and
  # the API server answers "too old resource version" (ERROR event, code 410).
  for n in g1 g2 g3; do e2e_gpu_node $n 4; done
  start_proxy px || { echo "cache: 0 passed, 1 failed (proxy)"; exit 1; }
  kubeconfig_variant "$WORK/proxy.kubeconfig" --server "$PROXY_URL"
  CLUSTER_EXTENDER_KUBECONFIG=$WORK/proxy.kubeconfig e2e_start_extender ext410 ||
    { echo "cache: ext410 did not start"; e2e_summary; exit 1; }
  URL410=$E2E_URL
  DEBUG410=$E2E_DEBUG_URL
  cluster_wait 10 "g3 in ext410's cache" filter_says "$URL410" g3 '"g3"]'
  relists_gns0=$(metric "$URL410" gpu_extender_relists_total gpunodestatuses)
  relists_nodes0=$(metric "$URL410" gpu_extender_relists_total nodes)
  log410=$(cluster_log ext410)
  mark=$(wc -l <"$log410")

  cu proxyctl "$PROXY_CTL" hold >/dev/null
  sleep 0.3
  kubectl delete gpunodestatus g1 --wait=false >/dev/null
  kubectl delete gpunodestatus g2 --wait=false >/dev/null
  kubectl delete node g2 --wait=false >/dev/null
  kubectl label node g3 gap=seen >/dev/null
  e2e_gpu_node g4 2
  cluster_stop_apiserver --kill
  cluster_start_apiserver || { echo "cache: kube-apiserver did not come back"; e2e_summary; exit 1; }
  rev=$(cu etcd "$CLUSTER_ETCD_URL" compact)
  e2e_note "etcd compacted at revision $rev (physical)"
  # The restarted API server answers 403 until its RBAC caches are filled; let the
  # extender back only when its identity is authorized, so that the 410 is what it meets.
  cluster_wait 30 "the extender identity authorized again" kubectl_as extender get gpunodestatuses
  e2e_check "ext410 still has the deleted GpuNodeStatus g1 (it was cut off)" \
    filter_says "$URL410" g1 '"g1"]'
  cu proxyctl "$PROXY_CTL" open >/dev/null

  check_410_logged() {
    local res
    for res in gpunodestatuses nodes; do
      cluster_wait 30 "a relist of $res after the 410" bash -c \
        "tail -n +$((mark + 1)) $log410 | grep 'watch expired; relisting' | grep -q 'resource=$res '" || return 1
    done
    tail -n +$((mark + 1)) "$log410" | grep -E 'resource=(nodes|gpunodestatuses) ' |
      grep -E 'watch expired; relisting|msg="listed"' | sed 's/^ts=[^ ]* //' | tee "$WORK/last_note"
    tail -n +$((mark + 1)) "$log410" | grep 'watch expired' | grep -q 'too old resource version'
  }
  e2e_check "410 (too old resource version) logged and relisted" check_410_logged
  show_note
  check_410_relists() {
    local g n
    g=$(metric "$URL410" gpu_extender_relists_total gpunodestatuses)
    n=$(metric "$URL410" gpu_extender_relists_total nodes)
    echo "relists: gpunodestatuses $relists_gns0 -> $g, nodes $relists_nodes0 -> $n" | tee "$WORK/last_note"
    ((g > relists_gns0 && n > relists_nodes0))
  }
  e2e_check "gpu_extender_relists_total grew beyond the first list" check_410_relists
  show_note
  e2e_check "deletions in the gap recovered by the relist: cache == API server" converge "$DEBUG410" "$DEBUG"
  show_note
  e2e_check "g1 (GpuNodeStatus deleted in the gap) now rejected" \
    filter_says "$URL410" g1 'no GpuNodeStatus'
  cluster_kill ext410
fi

# ================================================================================
# 4. Token problems
# ================================================================================
if e2e_want 4; then
  echo "== 4. wrong, rotated and unauthorized credentials"
  # (a) a wrong static token in the kubeconfig.
  kubeconfig_variant "$WORK/wrong.kubeconfig" --token "wrong-$(openssl rand -hex 8)"
  spawn_extender ext-wrong "$WORK/wrong.kubeconfig"
  e2e_check "(a) wrong token: /readyz 503 naming the credentials" \
    wait_readyz "$URL_ext_wrong" 503 10 "credentials"
  show_note
  check_wrong_log() {
    local n1 n2
    # The refusal counts after a 3 s grace (a restarting API server refuses for a moment).
    cluster_wait 8 "the credentials log line" grep -q 'rejected our credentials' "$(cluster_log ext-wrong)" ||
      { echo "no log line"; return 1; }
    n1=$(auth_lines ext-wrong)
    grep -m1 'rejected our credentials' "$(cluster_log ext-wrong)"
    sleep 3   # a few retries later: no new lines (one line per streak for all watches)
    n2=$(auth_lines ext-wrong)
    echo "credential error lines: $n1, 3 s later $n2 (6 watched resources, one client)" | tee "$WORK/last_note"
    ((n1 == 1 && n2 == 1))
  }
  e2e_check "(a) one clear log line for the streak, not one per retry or resource" check_wrong_log
  show_note
  check_wrong_alive() {
    [[ $(curl -s "$URL_ext_wrong/healthz") == ok ]] && curl -s "$URL_ext_wrong/metrics" | grep -q '^gpu_extender_ready 0' &&
      filter_says "$URL_ext_wrong" a1 'not ready'
  }
  e2e_check "(a) still alive: /healthz 200, /metrics ready 0, /filter refuses (not ready)" check_wrong_alive
  cluster_kill ext-wrong

  # (b) a token file that rotates to a wrong token and back. A token is checked
  # when a request starts: open watches go on with the old one until they end
  # (timeoutSeconds 300, or the API server restarts). So the extender reaches the
  # API server through a proxy whose connections we cut right after writing the
  # file: its reconnects carry the token it reads from the file then.
  start_proxy px-rot || { echo "cache: proxy failed"; e2e_summary; exit 1; }
  cp "$CLUSTER_EXTENDER_TOKEN_FILE" "$WORK/rotating.token"
  kubeconfig_variant "$WORK/rotating.kubeconfig" --server "$PROXY_URL" --token-file "$WORK/rotating.token"
  CLUSTER_EXTENDER_KUBECONFIG=$WORK/rotating.kubeconfig e2e_start_extender ext-rot
  URLROT=$E2E_URL
  DEBUGROT=$E2E_DEBUG_URL
  e2e_check "(b) tokenFile with the right token: ready" wait_readyz "$URLROT" 200 10
  show_note
  monitor mon-rot "$URLROT"
  sleep 0.5
  rot_lines0=$(auth_lines ext-rot)
  echo "wrong-$(openssl rand -hex 8)" >"$WORK/rotating.token.new" && mv "$WORK/rotating.token.new" "$WORK/rotating.token"
  sleep 1.1   # the file is looked at once a second
  cu proxyctl "$PROXY_CTL" cut >/dev/null
  e2e_check "(b) token file turned wrong: /readyz 503 within 5 s" \
    wait_readyz "$URLROT" 503 5 "credentials"
  show_note
  check_rot_log() {
    local n
    n=$(auth_lines ext-rot)
    echo "credential error lines: $rot_lines0 -> $n (6 watched resources, one client)" | tee "$WORK/last_note"
    grep 'rejected our credentials' "$(cluster_log ext-rot)" | head -2
    ((n == rot_lines0 + 1))
  }
  e2e_check "(b) one clear log line for the rejected token" check_rot_log
  show_note
  cp "$CLUSTER_EXTENDER_TOKEN_FILE" "$WORK/rotating.token.new" && mv "$WORK/rotating.token.new" "$WORK/rotating.token"
  e2e_check "(b) right token written back: ready again (backoff included)" wait_readyz "$URLROT" 200 30
  show_note
  e2e_check "(b) no crash: /healthz 200 throughout" monitor_report mon-rot
  e2e_check "(b) cache == API server after the streak" converge "$DEBUGROT"
  show_note
  cluster_kill mon-rot
  cluster_kill ext-rot

  # (c) an identity the API server knows but RBAC does not allow: 403.
  kubectl -n gpu-system create serviceaccount gpu-extender-norbac >/dev/null
  token=$(kubectl -n gpu-system create token gpu-extender-norbac --duration=1h)
  kubeconfig_variant "$WORK/norbac.kubeconfig" --token "$token"
  spawn_extender ext-norbac "$WORK/norbac.kubeconfig"
  e2e_check "(c) no RBAC: /readyz 503 with the 403" wait_readyz "$URL_ext_norbac" 503 10 "403"
  show_note
  e2e_check "(c) log line with the RBAC hint" cluster_wait 5 "RBAC hint" \
    grep -q 'forbids what we need (check the RBAC' "$(cluster_log ext-norbac)"
  grep -m1 'forbids what we need' "$(cluster_log ext-norbac)" | cut -c1-300 | sed 's/^/  .. /'
  kubectl create clusterrolebinding gpu-extender-norbac --clusterrole=gpu-extender \
    --serviceaccount=gpu-system:gpu-extender-norbac >/dev/null
  e2e_check "(c) RBAC granted: ready again" wait_readyz "$URL_ext_norbac" 200 40
  show_note
  e2e_check "(c) no crash" bash -c "[[ \$(curl -s $URL_ext_norbac/healthz) == ok ]]"
  cluster_kill ext-norbac
fi

# ================================================================================
# 5. A relist that breaks off after its first page loses nothing
# ================================================================================
if e2e_want 5; then
  echo "== 5. a paged relist that breaks off keeps the objects of the pages it missed"
  # 600 GpuNodeStatuses (8 GPUs each): the reflector lists them in two pages of
  # at most 500. A relist is forced (a 401 streak: wrong token, connections cut,
  # right token again) while the proxy cuts every connection each time a page and
  # a half went through, so every relist fails in its second page. The cache must
  # keep all 600 meanwhile (a relist that did not finish is no evidence that the
  # objects of the missing page are gone), and hold them all once it completes.
  BULK=600
  python3 - "$BULK" "$WORK/bulk" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
for part in range(3):
    items = []
    for k in range(part, n, 3):
        node = "bulk-%04d" % k
        devs = [{"id": i, "uuid": "GPU-%s-%d" % (node, i), "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
                 "architecture": "hopper", "memoryMiB": 81559, "driverVersion": "550.54.15", "health": "Healthy",
                 "inUseBy": [], "island": "nvlink-0", "bandwidthGBps": 900} for i in range(8)]
        items.append({"apiVersion": "gpu.scheduling/v1", "kind": "GpuNodeStatus",
                      "metadata": {"name": node, "labels": {"e2e": "bulk"}},
                      "spec": {"nodeName": node}, "status": {"total": 8, "devices": devs}})
    with open("%s-%d.json" % (out, part), "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
PY
  t0=$SECONDS
  # (wait for these pids only: a bare `wait` would wait for the cluster's processes too)
  pids=()
  for part in 0 1 2; do
    kubectl create -f "$WORK/bulk-$part.json" >/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  e2e_note "$BULK GpuNodeStatuses created in $((SECONDS - t0))s"
  # The proxy's budget counts every byte to ext-page. The main extender writes
  # each new node's GPU counts (nodeSummary, 20 a second): every write is a
  # watch event ext-page gets, and a burst of them moved the cut into a
  # relist's first page about one run in two. So they are waited out, and
  # ext-page writes none (each PATCH's answer is a whole GpuNodeStatus).
  bulk_counted() {
    kubectl get gpunodestatuses -l e2e=bulk -o json | python3 -c 'import json, sys
sys.exit(0 if all("allocation" in g["status"] for g in json.load(sys.stdin)["items"]) else 1)'
  }
  cluster_wait 90 "the counts of all $BULK bulk GpuNodeStatuses written" bulk_counted
  start_proxy px-page || { echo "cache: proxy failed"; e2e_summary; exit 1; }
  cp "$CLUSTER_EXTENDER_TOKEN_FILE" "$WORK/page.token"
  kubeconfig_variant "$WORK/page.kubeconfig" --server "$PROXY_URL" --token-file "$WORK/page.token"
  CLUSTER_EXTENDER_KUBECONFIG=$WORK/page.kubeconfig e2e_start_extender ext-page --node-summary-interval 0
  URLPAGE=$E2E_URL
  DEBUGPAGE=$E2E_DEBUG_URL
  devices_api=$(kubectl get gpunodestatuses -o json | python3 -c \
    'import json,sys; print(sum(len(g["status"]["devices"]) for g in json.load(sys.stdin)["items"]))')
  cluster_wait 20 "all $devices_api devices in ext-page's cache" bash -c \
    "[[ \$(python3 $CU metric $URLPAGE gpu_extender_cache_devices) == $devices_api ]]"
  page1=$(kubectl get --raw "/apis/gpu.scheduling/v1/gpunodestatuses?limit=500" | wc -c)
  logpage=$(cluster_log ext-page)
  mark=$(wc -l <"$logpage")
  rm -f "$WORK/track" "$WORK/track.stop"
  cluster_spawn track python3 "$CU" track "$URLPAGE" gpu_extender_cache_devices "$WORK/track"
  # The 401 streak: a relist follows it (the cache may have missed events meanwhile).
  echo "wrong-$(openssl rand -hex 8)" >"$WORK/page.token"
  sleep 1.1
  cu proxyctl "$PROXY_CTL" cut >/dev/null
  wait_readyz "$URLPAGE" 503 10 credentials >/dev/null
  # From now on every relist breaks off in its second page.
  cu proxyctl "$PROXY_CTL" "budget?bytes=$((page1 + 120000))" >/dev/null
  cp "$CLUSTER_EXTENDER_TOKEN_FILE" "$WORK/page.token"
  check_broken_relist() {
    cluster_wait 20 "a relist broken off in its second page" bash -c \
      "tail -n +$((mark + 1)) $logpage | grep 'list failed' | grep -q 'resource=gpunodestatuses.*continue='" || return 1
    sleep 2   # a few more broken relists (backoff)
    touch "$WORK/track.stop"
    cluster_wait 5 "the tracker's result" test -s "$WORK/track" || return 1
    local lo hi n broken
    read -r lo hi n <"$WORK/track"
    broken=$(tail -n +$((mark + 1)) "$logpage" | grep 'list failed' | grep -c 'resource=gpunodestatuses.*continue=')
    echo "$broken relists broke off in page 2; cached devices over $n samples: min $lo, max $hi (API: $devices_api)" |
      tee "$WORK/last_note"
    [[ ${lo%.*} == "$devices_api" ]]
  }
  e2e_check "relists broken off in page 2: no cached GpuNodeStatus dropped" check_broken_relist
  show_note
  cu proxyctl "$PROXY_CTL" "budget?bytes=0" >/dev/null
  e2e_check "the relist completes: ready again" wait_readyz "$URLPAGE" 200 40
  show_note
  e2e_check "cache == API server ($BULK+ GpuNodeStatuses)" converge "$DEBUGPAGE"
  show_note
  cluster_kill track 2>/dev/null
  cluster_kill ext-page
fi

# ---- the end -----------------------------------------------------------------------
e2e_check "the main extender is still the same, running process" cluster_alive ext
echo "filter delays (polled every ${CACHE_POLL_MS:-50} ms from before the write; the write is a kubectl command):"
sed 's/^/  /' "$WORK/delays"
echo "suite took $((SECONDS - T_START))s"
e2e_summary
