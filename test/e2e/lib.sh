#!/usr/bin/env bash
# Helpers shared by the end-to-end tests (sourced after test/cluster/cluster.sh).
#
#   e2e_check NAME CMD...      run CMD; count and print a PASS/FAIL line
#   e2e_summary                print "N passed, N failed"; exit status 1 on failures
#   e2e_want N                 true when scenario N is among $E2E_SCENARIOS
#   e2e_note TEXT...           print a figure the run measured ("  .. TEXT"), not a check
#   e2e_setup                  cluster up, deploy/ CRDs and RBAC, namespace ml
#   e2e_gns NODE COUNT [MODEL [ISLANDS [MEMORY_MIB]]]
#                              create/replace a GpuNodeStatus: COUNT NVIDIA devices,
#                              ISLANDS equal NVLink islands (0: none)
#   e2e_gpu_node NODE COUNT ...  a fake Node plus its GpuNodeStatus
#   e2e_start_extender NAME [FLAGS...]
#                              gpu-extender serve in cluster mode as the extender
#                              identity on a free port; waits for /readyz; sets
#                              E2E_PORT_<NAME>, E2E_URL and E2E_DEBUG_URL (its
#                              /debug listener) of the last one
#   e2e_start_scheduler NAME URL [CONFIG]
#                              kube-scheduler with config/scheduler-config.yaml pointed at URL
#   e2e_pod NS NAME LIMITS_JSON [ANNOTATIONS_JSON] [SCHEDULER]
#                              create a pod (schedulerName gpu-scheduler by default)
#   e2e_pod_node NS NAME       print spec.nodeName ("" if unbound)
#   e2e_ann NS NAME KEY        print an annotation of the pod
#   e2e_k8s_gang_api           before e2e_setup: serve Kubernetes' own gang API and
#                              turn kube-scheduler's gang plugin on, as the release
#                              this run uses (K8S_VERSION) wants; sets E2E_K8S_MINOR

E2E_PASSED=0
E2E_FAILED=0
E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
E2E_EXTENDER=${E2E_EXTENDER:-$E2E_ROOT/build/gpu-extender}

e2e_check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    E2E_PASSED=$((E2E_PASSED + 1))
    echo "PASS $name"
  else
    E2E_FAILED=$((E2E_FAILED + 1))
    echo "FAIL $name"
    [[ -n $out ]] && sed 's/^/    /' <<<"$out" | tail -20
  fi
}

e2e_summary() {
  echo "$(basename "$0" .sh): $E2E_PASSED passed, $E2E_FAILED failed"
  ((E2E_FAILED == 0))
}

e2e_want() { [[ " $E2E_SCENARIOS " == *" $1 "* ]]; }

# e2e_count_bound NS: how many pods of NS are bound to a node.
e2e_count_bound() {
  kubectl -n "$1" get pods -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c .
}

# e2e_verify DIR [flags]: every Lease, pod and GpuNodeStatus now, saved in DIR,
# checked by test/e2e/verify_allocations.py with the flags; its output is
# printed and kept in DIR/verify.txt; the status is the verifier's.
e2e_verify() {
  local d=$1; shift
  mkdir -p "$d"
  kubectl get lease -A -o json >"$d/leases.json" && kubectl get pods -A -o json >"$d/pods.json" &&
    kubectl get gpunodestatuses -o json >"$d/gns.json" || { echo "cannot read the cluster"; return 1; }
  python3 test/e2e/verify_allocations.py --leases "$d/leases.json" --pods "$d/pods.json" --gns "$d/gns.json" \
    "$@" >"$d/verify.txt"
  local rc=$?
  cat "$d/verify.txt"
  return $rc
}

# e2e_reaper_bounds BIND_TIMEOUT REAP_INTERVAL: short reaper settings, so that
# its work shows within a suite. Sets those two, EXT_FLAGS (the extender's
# flags for them) and REAP_BOUND: a reservation whose bind died is gone within
# that many seconds of the bind's last attempt (older than bind-timeout, +1 in
# whole seconds; the next pass, a reap interval +1 s pause after a wake-up;
# +1 s for the pass and for looking).
e2e_reaper_bounds() {
  BIND_TIMEOUT=$1 REAP_INTERVAL=$2
  EXT_FLAGS=(--reap-interval "$REAP_INTERVAL" --bind-timeout "$BIND_TIMEOUT")
  REAP_BOUND=$((BIND_TIMEOUT + 1 + 2 * REAP_INTERVAL + 1))
}
e2e_note() { echo "  .. $*"; }

e2e_k8s_gang_api() {
  local v
  v=$(. "$E2E_ROOT/test/cluster/k8s-version.sh" && echo "$K8S_VERSION") || return 1
  v=${v#v1.}
  E2E_K8S_MINOR=${v%%.*}
  if ((E2E_K8S_MINOR >= 37)); then
    # PodGroup objects (pods' spec.schedulingGroup): kube-scheduler reads v1beta1;
    # v1alpha3 too, so the extender must pick the newest. GangScheduling is GenericWorkload's.
    CLUSTER_APISERVER_FLAGS="--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
    CLUSTER_SCHEDULER_FLAGS="--feature-gates=GenericWorkload=true"
  else
    # 1.35: a Workload (v1alpha1) and pods' spec.workloadRef.
    CLUSTER_APISERVER_FLAGS="--runtime-config=scheduling.k8s.io/v1alpha1=true"
    CLUSTER_SCHEDULER_FLAGS="--feature-gates=GenericWorkload=true,GangScheduling=true"
  fi
  CLUSTER_APISERVER_FLAGS+=" --feature-gates=GenericWorkload=true"
  export CLUSTER_APISERVER_FLAGS CLUSTER_SCHEDULER_FLAGS E2E_K8S_MINOR
}

# When a check failed, the cluster's logs and the suite's files (CLUSTER_DIR/<suite>)
# outlive the cluster: copied to E2E_FAILED_LOGS; the last three suites' are kept.
e2e_keep_failed_logs() {
  ((E2E_FAILED > 0)) || return 0
  local root=${E2E_FAILED_LOGS:-/tmp/gpu-e2e-failed} suite to
  suite=$(basename "$0" .sh)
  to=$root/$suite-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$to" || return 0
  cp -r "$CLUSTER_DIR/logs" "$to/" 2>/dev/null
  [[ -d $CLUSTER_DIR/$suite ]] && cp -r "$CLUSTER_DIR/$suite" "$to/" 2>/dev/null
  echo "e2e: the logs of the failed checks are kept in $to" >&2
  ls -1dt "$root"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
}

e2e_setup() {
  cluster_up || return 1
  cluster_add_cleanup e2e_keep_failed_logs
  kubectl apply -f "$E2E_ROOT/deploy/base/00-namespace.yaml" -f "$E2E_ROOT/deploy/base/01-crd-gpuclaim.yaml" \
    -f "$E2E_ROOT/deploy/base/02-crd-gpunodestatus.yaml" -f "$E2E_ROOT/deploy/base/03-rbac.yaml" >/dev/null || return 1
  cluster_wait 30 "CRDs established" kubectl wait --for=condition=Established --timeout=1s \
    crd/gpuclaims.gpu.scheduling crd/gpunodestatuses.gpu.scheduling >/dev/null || return 1
  cluster_ensure_namespace ml
}

e2e_gns() {
  local node=$1 count=$2 model=${3:-NVIDIA H100 80GB HBM3} islands=${4:-1} mib=${5:-81559}
  python3 - "$node" "$count" "$model" "$islands" "$mib" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
node, count, model, islands, mib = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
devs = []
for i in range(count):
    d = {"id": i, "uuid": "GPU-%s-%d" % (node, i), "vendor": "nvidia", "model": model, "architecture": "hopper",
         "memoryMiB": mib, "driverVersion": "550.54.15", "health": "Healthy", "inUseBy": []}
    if islands:
        d["island"] = "nvlink-%d" % (i * islands // count)
        d["bandwidthGBps"] = 900
    devs.append(d)
print(json.dumps({"apiVersion": "gpu.scheduling/v1", "kind": "GpuNodeStatus", "metadata": {"name": node},
                  "spec": {"nodeName": node}, "status": {"total": count, "devices": devs}}))
PY
}

e2e_gpu_node() {
  local node=$1; shift
  cluster_create_gpu_node "$node" >/dev/null && e2e_gns "$node" "$@"
}

e2e_free_port() {
  "$CLUSTER_BIN/freeport" 2>/dev/null || python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

e2e_start_extender() {
  local name=$1; shift
  local port dport
  port=$(e2e_free_port) && dport=$(e2e_free_port) || return 1
  while [[ $dport == "$port" ]]; do dport=$(e2e_free_port) || return 1; done
  # (an older build, as bench/e2e.sh's baseline, has no /debug listener of its own)
  local debug=()
  "$E2E_EXTENDER" serve --help 2>/dev/null | grep -q -- --debug-listen && debug=(--debug-listen "127.0.0.1:$dport")
  # glibc's per-thread caches off, as deploy/base/04-extender.yaml runs it
  GLIBC_TUNABLES=glibc.malloc.tcache_count=0 cluster_spawn "$name" "$E2E_EXTENDER" serve --kubeconfig "$CLUSTER_EXTENDER_KUBECONFIG" \
    --listen "127.0.0.1:$port" "${debug[@]}" --identity "$name" "$@"
  printf -v "E2E_PORT_${name//-/_}" '%s' "$port"
  E2E_URL="http://127.0.0.1:$port"
  E2E_DEBUG_URL="http://127.0.0.1:$dport"
  cluster_wait 30 "$name ready" curl -sf "$E2E_URL/readyz" >/dev/null
}

e2e_start_scheduler() {
  local name=$1 url=$2 config=${3:-$E2E_ROOT/config/scheduler-config.yaml}
  local out="$CLUSTER_DIR/$name-config.yaml"
  sed "s#http://127.0.0.1:8888#$url#" "$config" >"$out"
  cluster_start_scheduler "$out" "$name" >/dev/null
}

e2e_pod() {
  local ns=$1 name=$2 limits=$3 ann=${4:-} sched=${5:-gpu-scheduler}
  [[ -n $ann ]] || ann='{}'
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$name","namespace":"$ns","annotations":$ann},
 "spec":{"schedulerName":"$sched","restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":$limits}}]}}
JSON
}

e2e_pod_node() {
  kubectl -n "$1" get pod "$2" -o 'jsonpath={.spec.nodeName}'
}

e2e_ann() {
  local key=${3//./\\.}
  kubectl -n "$1" get pod "$2" -o "jsonpath={.metadata.annotations.${key}}"
}
