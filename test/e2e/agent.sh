#!/usr/bin/env bash
# gpu-agent publishing into a real API server (test/cluster), as the
# gpu-agent ServiceAccount with only the RBAC in deploy/base/03-rbac.yaml; then
# the extender scheduling onto what it published.
#
#   test/e2e/agent.sh            (needs build/gpu-agent and build/gpu-extender)
#
# The vendor tools are shell scripts that print the recorded outputs in
# test/fixtures/agent (an 8x A100 NVLink node), and they are the only
# programs on the agent's PATH. Checks: RBAC denial gives a clear message;
# `run --once` creates the GpuNodeStatus (owned by the Node) and sets the
# node labels, removing agent labels that no longer apply and leaving an
# operator's; a second run updates in place; the long-running agent shows a
# GPU going unhealthy within a few seconds, survives SIGHUP and stops on
# SIGTERM; the extender passes n1 for 2 GPUs and does not count the
# unhealthy one; an unreachable API server gives one log line, backoff and
# one "recovered" line; deleting the Node deletes its status; the extender's
# counts in the status (status.allocation) survive the agent's update.
# Ends with "agent: N passed, N failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

AGENT=${E2E_AGENT:-$E2E_ROOT/build/gpu-agent}
FIX=$E2E_ROOT/test/fixtures/agent
for b in "$AGENT" "$E2E_EXTENDER"; do
  [[ -x $b ]] || { echo "agent: 0 passed, 1 failed (no $b: run make)"; exit 1; }
done
T0=$SECONDS

e2e_setup || { echo "agent: 0 passed, 1 failed (cluster setup)"; exit 1; }
cluster_create_gpu_node n1 >/dev/null || { echo "agent: 0 passed, 1 failed (node n1)"; exit 1; }
# an operator's label under our prefix, and an agent label that no longer applies
kubectl label node n1 gpu.scheduling/managed=true gpu.scheduling/amd.count=2 >/dev/null

# ---- fake vendor tools: nvidia-smi answering from files we can change ----
TOOLS=$CLUSTER_DIR/tools
mkdir -p "$TOOLS"
# the recorded 8x A100 query plus the health column the agent reads
# (ecc.errors.uncorrected.volatile.total); healthy_query BAD makes GPU BAD report ECC errors
healthy_query() {
  awk -v bad="${1:--1}" 'NR == 1 {print $0 ", ecc.errors.uncorrected.volatile.total"; next}
    {split($0, a, ","); print $0 ", " (a[1] + 0 == bad ? 4 : 0)}' \
    "$FIX/nvidia/a100-sxm4-80gb-8gpu.query.csv" >"$TOOLS/query.csv.tmp" && mv "$TOOLS/query.csv.tmp" "$TOOLS/query.csv"
}
healthy_query
cat >"$TOOLS/nvidia-smi" <<EOF
#!/bin/sh
case "\$1" in
--query-gpu=*) exec /bin/cat '$TOOLS/query.csv' ;;
-L) exec /bin/cat '$FIX/nvidia/a100-sxm4-80gb-8gpu.list.txt' ;;
topo) exec /bin/cat '$FIX/nvidia/a100-sxm4-80gb-8gpu.topo.txt' ;;
*) exit 2 ;;
esac
EOF
chmod +x "$TOOLS/nvidia-smi"

# agent ARGS...: the agent with only the fake tools on PATH
agent() { env -i PATH="$TOOLS" "$AGENT" "$@"; }
OUT=$CLUSTER_DIR/agent-once.log

# py FILE EXPR...: each Python expression must be true of the JSON in FILE
# (d = the object, s = status, devs = status.devices, labels = metadata.labels)
py() {
  python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d.get("status", {}) or {}
env = {"d": d, "s": s, "devs": s.get("devices", []), "labels": d.get("metadata", {}).get("labels", {})}
for e in sys.argv[2:]:
    try:
        ok = eval(e, env)
    except Exception as x:
        print("%s raised %r" % (e, x)); sys.exit(1)
    if not ok:
        print("not true: %s" % e); sys.exit(1)
PY
}
get_json() { kubectl get "$1" "$2" -o json >"$CLUSTER_DIR/$3.json" 2>/dev/null; }

check_daemonset_valid() {
  kubectl apply --dry-run=server -f deploy/base/06-agent.yaml >/dev/null
}
e2e_check "deploy/base/06-agent.yaml is accepted by the API server (dry run)" check_daemonset_valid

# ---- RBAC: without its binding the agent is refused, and says why ----
check_rbac_denied() {
  kubectl delete clusterrolebinding gpu-agent >/dev/null || return 1
  cluster_wait 10 "agent forbidden" bash -c '! "$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_AGENT_KUBECONFIG" auth can-i patch nodes | grep -q yes' || return 1
  local rc=0
  agent run --once --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --node n1 >"$OUT" 2>&1 || rc=$?
  kubectl apply -f deploy/base/03-rbac.yaml >/dev/null || return 1
  [[ $rc == 1 ]] || { echo "exit status $rc, want 1"; cat "$OUT"; return 1; }
  grep -q 'HTTP 403.*RBAC' "$OUT" || { echo "no RBAC hint:"; cat "$OUT"; return 1; }
  [[ -z $(kubectl get gns n1 --ignore-not-found -o name) ]] || { echo "a status was written anyway"; return 1; }
  cluster_wait 10 "agent allowed again" bash -c '"$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_AGENT_KUBECONFIG" auth can-i patch nodes | grep -q yes'
}
e2e_check "without RBAC: exit 1 and a message naming RBAC" check_rbac_denied

check_least_privilege() {
  local verb
  # pods: the device plugin watches the pods bound to its node
  for verb in "update gpunodestatuses.gpu.scheduling" "create gpunodestatuses.gpu.scheduling" "patch nodes" \
    "list pods --all-namespaces" "watch pods --all-namespaces"; do
    [[ $(kubectl_as agent auth can-i $verb 2>/dev/null) == yes ]] || { echo "cannot $verb"; return 1; }
  done
  for verb in "delete gpunodestatuses.gpu.scheduling" "list gpunodestatuses.gpu.scheduling" "get nodes" "list nodes" \
    "update nodes" "update pods" "delete pods" "create pods/binding" "get secrets -n gpu-system"; do
    [[ $(kubectl_as agent auth can-i $verb 2>/dev/null) == no ]] || { echo "may $verb"; return 1; }
  done
}
e2e_check "the agent's RBAC is only what it needs" check_least_privilege

# ---- one round as the gpu-agent identity ----
check_once() {
  agent run --once --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --node n1 >"$OUT" 2>&1 ||
    { echo "exit status $?"; cat "$OUT"; return 1; }
  grep -q 'msg="created GpuNodeStatus"' "$OUT" || { cat "$OUT"; return 1; }
}
e2e_check "run --once as gpu-agent: exit 0, created" check_once

check_gns() {
  get_json gns n1 gns && get_json node n1 node || return 1
  local uid
  uid=$(kubectl get node n1 -o 'jsonpath={.metadata.uid}')
  py "$CLUSTER_DIR/gns.json" \
    'd["apiVersion"] == "gpu.scheduling/v1" and d["kind"] == "GpuNodeStatus"' \
    'd["metadata"]["name"] == "n1" and d["spec"]["nodeName"] == "n1"' \
    's["total"] == 8 and [x["id"] for x in devs] == list(range(8))' \
    'all(x["vendor"] == "nvidia" and x["model"] == "NVIDIA A100-SXM4-80GB" and x["memoryMiB"] == 81920 for x in devs)' \
    'all(x["health"] == "Healthy" and x["island"] == "nvlink-0" for x in devs)' \
    'devs[7]["uuid"] == "GPU-2545335d-3baa-188c-36b5-f645e39e1923"' \
    's["vendors"]["nvidia"]["state"] == "ok" and s["agentVersion"] and s["lastUpdated"].endswith("Z")' \
    "[(r['kind'], r['name'], r['uid']) for r in d['metadata']['ownerReferences']] == [('Node', 'n1', '$uid')]"
}
e2e_check "GpuNodeStatus n1: 8 healthy A100s on one island, owned by Node n1" check_gns

check_labels() {
  get_json node n1 node || return 1
  py "$CLUSTER_DIR/node.json" \
    'labels["gpu.scheduling/present"] == "true"' \
    'labels["gpu.scheduling/vendor"] == "nvidia"' \
    'labels["gpu.scheduling/count"] == "8" and labels["gpu.scheduling/nvidia.count"] == "8"' \
    'labels["gpu.scheduling/model"] == "NVIDIA-A100-SXM4-80GB"' \
    'labels["gpu.scheduling/memory-mib"] == "81920"' \
    'labels["gpu.scheduling/architecture"] == "ampere"' \
    'labels["gpu.scheduling/fast-interconnect"] == "true" and labels["gpu.scheduling/mig"] == "false"' \
    '"gpu.scheduling/amd.count" not in labels' \
    'labels["gpu.scheduling/managed"] == "true" and labels["kubernetes.io/hostname"] == "n1"'
}
e2e_check "node labels set; a stale agent label removed, the operator's kept" check_labels

check_update() {
  local uid rv
  uid=$(kubectl get gns n1 -o 'jsonpath={.metadata.uid}')
  rv=$(kubectl get gns n1 -o 'jsonpath={.metadata.resourceVersion}')
  # lastUpdated has one-second resolution, and the API server keeps the
  # resourceVersion on a PUT that changes nothing: let the clock move on
  sleep 1.1
  agent run --once --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --node n1 >"$OUT" 2>&1 || { cat "$OUT"; return 1; }
  grep -q 'msg="updated GpuNodeStatus"' "$OUT" || { cat "$OUT"; return 1; }
  [[ $(kubectl get gns n1 -o 'jsonpath={.metadata.uid}') == "$uid" ]] || { echo "recreated"; return 1; }
  [[ $(kubectl get gns n1 -o 'jsonpath={.metadata.resourceVersion}') != "$rv" ]] || { echo "not written"; return 1; }
}
e2e_check "a second run updates the same object (resourceVersion-checked PUT)" check_update

check_once_bad_node() {
  local rc=0
  agent run --once --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --node no-such-node >"$OUT" 2>&1 || rc=$?
  [[ $rc == 1 ]] && grep -q 'node no-such-node does not exist' "$OUT" &&
    [[ -z $(kubectl get gns no-such-node --ignore-not-found -o name) ]] || { echo "rc=$rc"; cat "$OUT"; return 1; }
}
e2e_check "run --once for a missing Node: exit 1, clear message, no status" check_once_bad_node

# ---- the long-running agent: a GPU going unhealthy shows within seconds ----
cluster_spawn agent env -i PATH="$TOOLS" "$AGENT" run --interval 1 \
  --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --node n1
AGENT_LOG=$(cluster_log agent)
gpu3_unhealthy() {
  get_json gns n1 gns3 && py "$CLUSTER_DIR/gns3.json" \
    'devs[3]["health"] == "Unhealthy" and "ECC" in devs[3]["healthReason"]' \
    'sum(x["health"] == "Healthy" for x in devs) == 7'
}
check_unhealthy() {
  cluster_wait 10 "agent running" grep -q 'msg="gpu-agent running"' "$AGENT_LOG" || { cat "$AGENT_LOG"; return 1; }
  local t=$SECONDS
  healthy_query 3
  cluster_wait 5 "GPU 3 Unhealthy in the API server" gpu3_unhealthy || { tail -5 "$AGENT_LOG"; return 1; }
  echo "shown after $((SECONDS - t)) s"
}
e2e_check "GPU 3 unhealthy (ECC errors) shows within 5 s with --interval 1" check_unhealthy

check_hup_term() {
  local pid
  pid=$(awk '$1 == "agent" {p = $2} END {print p}' "$CLUSTER_DIR/pids")
  kill -HUP "$pid" && sleep 1.2 || return 1
  cluster_alive agent || { echo "died on SIGHUP"; tail -5 "$AGENT_LOG"; return 1; }
  kill -TERM "$pid" || return 1
  cluster_wait 5 "agent stopped" bash -c "! kill -0 $pid 2>/dev/null" || return 1
  grep -q 'msg="stopping on signal"' "$AGENT_LOG" || { tail -5 "$AGENT_LOG"; return 1; }
  ! grep -q 'level=error' "$AGENT_LOG" || { grep 'level=error' "$AGENT_LOG"; return 1; }
}
e2e_check "SIGHUP: a round, still running; SIGTERM: clean stop" check_hup_term

# ---- the extender schedules on what the agent published ----
FILTER_OUT=$CLUSTER_DIR/filter.json
filter() {  # GPUS -> the extender's answer in $FILTER_OUT
  curl -sf -o "$FILTER_OUT" "$E2E_URL/filter" -H 'Content-Type: application/json' -d @- <<JSON
{"Pod":{"metadata":{"name":"p$1","namespace":"ml","uid":"uid-p$1"},
 "spec":{"containers":[{"name":"main","resources":{"limits":{"gpu.scheduling/gpu":"$1"}}}]}},
 "Nodes":null,"NodeNames":["n1"]}
JSON
}
check_filter_passes() {
  filter 2 || return 1
  py "$FILTER_OUT" 'd["NodeNames"] == ["n1"]' 'not d.get("FailedNodes")' || { cat "$FILTER_OUT"; return 1; }
}
check_unhealthy_not_counted() {
  filter 7 && py "$FILTER_OUT" 'd["NodeNames"] == ["n1"]' || { cat "$FILTER_OUT"; return 1; }
  # unresolvable: preempting pods would not make a sick GPU usable
  filter 8 && py "$FILTER_OUT" 'not d.get("NodeNames")' \
    '"7 of 8" in (d.get("FailedAndUnresolvableNodes") or {}).get("n1", "")' || { cat "$FILTER_OUT"; return 1; }
}
# The extender's counts in n1's GpuNodeStatus (status.allocation): the agent's
# update keeps them, so the extender has nothing to write again.
summary_writes() { curl -s "$E2E_URL/metrics" | awk '$1 == "gpu_extender_node_summary_writes_total{result=\"written\"}" {print $2}'; }
check_counts_kept() {
  counted() { get_json gns n1 gnsc && py "$CLUSTER_DIR/gnsc.json" 's["allocation"]["free"] == 7' 's["allocation"]["unhealthy"] == 1'; }
  cluster_wait 5 "the extender's counts in n1's GpuNodeStatus" counted || { cat "$CLUSTER_DIR/gnsc.json"; return 1; }
  local w0 rv
  w0=$(summary_writes) rv=$(kubectl get gns n1 -o 'jsonpath={.metadata.resourceVersion}')
  sleep 1.1   # (lastUpdated moves on: the agent's update is a real write)
  agent run --once --kubeconfig "$CLUSTER_AGENT_KUBECONFIG" --node n1 >"$OUT" 2>&1 || { cat "$OUT"; return 1; }
  grep -q 'msg="updated GpuNodeStatus"' "$OUT" || { cat "$OUT"; return 1; }
  [[ $(kubectl get gns n1 -o 'jsonpath={.metadata.resourceVersion}') != "$rv" ]] || { echo "not written"; return 1; }
  get_json gns n1 gnsc && py "$CLUSTER_DIR/gnsc.json" 's["allocation"]["free"] == 7' || { cat "$CLUSTER_DIR/gnsc.json"; return 1; }
  sleep 2.5   # two passes of the extender
  [[ $(summary_writes) == "$w0" ]] || { echo "the extender wrote again: $w0 -> $(summary_writes)"; return 1; }
  echo "writes: $w0"
}
# Every node passed (filterKeepsBest 0): these checks probe the filter with
# pods that never bind, and as shipped (1) each probe's choice would count
# for its pod until a bind, 5 s at most (docs/api.md).
if e2e_start_extender ext --node-summary-interval 1 --filter-keeps-best 0; then
  wait_gns_in_cache() { filter 7 && py "$FILTER_OUT" 'd["NodeNames"] == ["n1"]'; }
  cluster_wait 10 "the extender to see n1's GPUs" wait_gns_in_cache
  e2e_check "extender: a pod asking for 2 GPUs passes n1" check_filter_passes
  e2e_check "extender: 7 fit, 8 do not (the unhealthy GPU is not counted)" check_unhealthy_not_counted
  e2e_check "the extender's counts (free 7, unhealthy 1) in n1's GpuNodeStatus within a period; the agent's update keeps them and the extender does not write again" check_counts_kept
else
  e2e_check "extender ready" false
fi

# ---- an unreachable API server: one line, backoff, one line on recovery ----
DEAD_PORT=$(e2e_free_port)
sed "s#server: .*#server: https://127.0.0.1:$DEAD_PORT#" "$CLUSTER_AGENT_KUBECONFIG" >"$CLUSTER_DIR/dead.kubeconfig"
cluster_spawn agent-dead env -i PATH="$TOOLS" "$AGENT" run --interval 1 \
  --kubeconfig "$CLUSTER_DIR/dead.kubeconfig" --node n1
DEAD_LOG=$(cluster_log agent-dead)
check_dead_server() {
  cluster_wait 5 "a failure line" grep -q 'msg="cannot publish' "$DEAD_LOG" || { cat "$DEAD_LOG"; return 1; }
  sleep 3 & wait $!
  cluster_alive agent-dead || { echo "the agent died"; cat "$DEAD_LOG"; return 1; }
  local n
  n=$(grep -c 'level=error' "$DEAD_LOG")
  [[ $n == 1 ]] || { echo "$n error lines, want 1"; cat "$DEAD_LOG"; return 1; }
  grep 'level=error' "$DEAD_LOG" | grep -q 'retry_in_ms=' || return 1
}
e2e_check "API server unreachable: one error line, still running" check_dead_server

check_recovery() {
  # a TCP relay from the dead port to the real API server brings it "back"
  cluster_spawn relay python3 -c '
import socket, sys, threading
lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", int(sys.argv[1]))); lst.listen(16)
def pump(a, b):
    try:
        while True:
            x = a.recv(65536)
            if not x: break
            b.sendall(x)
    except OSError: pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
while True:
    c, _ = lst.accept()
    u = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
' "$DEAD_PORT" "$CLUSTER_API_PORT"
  cluster_wait 20 "publishing recovered" grep -q 'msg="publishing recovered"' "$DEAD_LOG" || { cat "$DEAD_LOG"; return 1; }
  [[ $(grep -c 'msg="publishing recovered"' "$DEAD_LOG") == 1 ]] || return 1
  [[ $(grep -c 'level=error' "$DEAD_LOG") == 1 ]] || { cat "$DEAD_LOG"; return 1; }
}
e2e_check "API server back: one 'recovered' line" check_recovery
cluster_kill agent-dead
cluster_kill relay

# ---- the status goes with its Node (ownerReference, garbage collector) ----
check_gc() {
  kubectl delete node n1 >/dev/null || return 1
  cluster_wait 30 "GpuNodeStatus n1 deleted by the garbage collector" \
    bash -c '[[ -z $("$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_KUBECONFIG" get gns n1 --ignore-not-found -o name) ]]'
}
e2e_check "deleting Node n1 deletes its GpuNodeStatus" check_gc

echo "agent: took $((SECONDS - T0)) s"
e2e_summary
