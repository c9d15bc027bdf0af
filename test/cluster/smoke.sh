#!/usr/bin/env bash
# Smoke test of the real control-plane harness (no extender involved):
# build or reuse the binaries, start etcd + kube-apiserver +
# kube-controller-manager, create two fake nodes, start kube-scheduler with a
# minimal KubeSchedulerConfiguration, check that a pod gets scheduled, that the
# garbage collector deletes a dependent of a deleted pod, that the extender's
# identity is an RBAC subject, and that teardown leaves no process behind.
#
#   test/cluster/smoke.sh
#
# Ends with "N passed, N failed"; exits nonzero on any failure.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
passed=0 failed=0
t_start=$SECONDS

pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() {  # DESC CMD...
  local desc=$1; shift
  if "$@" >/dev/null; then pass "$desc"; else fail "$desc"; fi
}
summary() {
  echo "smoke.sh took $((SECONDS - t_start))s"
  echo "$passed passed, $failed failed"
}
bail() {  # DESC: a step the rest needs failed; hand the counts to the parent
  fail "$1"
  echo "$passed $failed" >"$results_file"
  exit 1
}

# The cluster runs in a child shell, so that the parent can check after its
# teardown (its EXIT trap) that no process is left.
cluster_dir_file=$(mktemp "${TMPDIR:-/tmp}/gpu-smoke.XXXXXX")
results_file=$(mktemp "${TMPDIR:-/tmp}/gpu-smoke-results.XXXXXX")
trap 'rm -f "$cluster_dir_file" "$results_file"' EXIT

(
  # shellcheck source=cluster.sh
  . "$here/cluster.sh"

  t0=$SECONDS
  "$here/build.sh" || bail "build the control-plane binaries"
  echo "build.sh (build or cache check) took $((SECONDS - t0))s"

  t0=$SECONDS
  cluster_up || bail "cluster_up"
  pass "cluster_up (etcd, kube-apiserver, kube-controller-manager ready in $((SECONDS - t0))s)"
  echo "$CLUSTER_DIR" >"$cluster_dir_file"
  echo "API server: $CLUSTER_API_URL   dir: $CLUSTER_DIR"
  cluster_versions

  check "kube-apiserver reports $CLUSTER_K8S_VERSION" \
    bash -c '[[ $("$CLUSTER_BIN/kube-apiserver" --version) == "Kubernetes $CLUSTER_K8S_VERSION" ]]'
  check "server version over the API is $CLUSTER_K8S_VERSION" \
    bash -c '"$CLUSTER_BIN/kubectl" version -o json | grep -q "\"gitVersion\": \"$CLUSTER_K8S_VERSION\""'
  check "default ServiceAccount exists (service-account controller)" \
    kubectl get serviceaccount default -n default

  # Identities: RBAC applies to the extender's token.
  extender_is() { [[ $(kubectl_as extender auth whoami -o jsonpath='{.status.userInfo.username}') == "$1" ]]; }
  extender_can_list_nodes() {  # yes|no
    [[ $(kubectl_as extender auth can-i list nodes 2>/dev/null) == "$1" ]]
  }
  check "extender identity is system:serviceaccount:gpu-system:gpu-extender" \
    extender_is system:serviceaccount:gpu-system:gpu-extender
  check "extender cannot list nodes without RBAC" extender_can_list_nodes no
  kubectl create namespace gpu-system >/dev/null
  kubectl create serviceaccount gpu-extender -n gpu-system >/dev/null
  kubectl create clusterrole smoke-node-reader --verb=get,list,watch --resource=nodes >/dev/null
  kubectl create clusterrolebinding smoke-node-reader --clusterrole=smoke-node-reader \
    --serviceaccount=gpu-system:gpu-extender >/dev/null
  check "extender can list nodes once its ServiceAccount is bound" \
    cluster_wait 10 "RBAC for the extender" extender_can_list_nodes yes

  # Fake nodes.
  check "create node gpu-a1" cluster_create_gpu_node gpu-a1 gpu.scheduling/model=H100 --resource gpu.scheduling/gpu=8
  check "create node gpu-a2" cluster_create_gpu_node gpu-a2 gpu.scheduling/model=A100 --cpu 32 --memory 256Gi
  check "gpu-a1 allocatable has cpu, memory, pods, gpu" bash -c \
    '[[ $(kubectl get node gpu-a1 -o jsonpath="{.status.allocatable.cpu}/{.status.allocatable.memory}/{.status.allocatable.pods}/{.status.allocatable.gpu\.scheduling/gpu}") == 64/512Gi/110/8 ]]'
  check "nodes are Ready" bash -c \
    '[[ $(kubectl get nodes -o jsonpath="{range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{end}") == TrueTrue ]]'
  check "nodes have no taints" bash -c '[[ -z $(kubectl get nodes -o jsonpath="{.items[*].spec.taints}") ]]'
  check "extender identity sees both nodes" bash -c \
    '[[ $("$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_EXTENDER_KUBECONFIG" get nodes -o name | wc -l) == 2 ]]'

  # kube-scheduler with a minimal configuration (no extender).
  sched_cfg=$CLUSTER_DIR/smoke-scheduler.yaml
  cat >"$sched_cfg" <<'EOF'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
EOF
  t0=$SECONDS
  check "kube-scheduler starts and is ready" cluster_start_scheduler "$sched_cfg"
  echo "kube-scheduler ready in $((SECONDS - t0))s (port $(cluster_scheduler_port))"

  kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: smoke, namespace: default}
spec:
  containers:
  - name: c
    image: registry.invalid/pause:none
    resources: {requests: {cpu: 100m, memory: 64Mi}}
EOF
  check "pod is created" kubectl get pod smoke -n default
  t0=$SECONDS
  if cluster_wait 30 "pod default/smoke to be scheduled" cluster_pod_node default smoke; then
    node=$(cluster_pod_node default smoke)
    pass "pod scheduled to $node in $((SECONDS - t0))s"
    check "pod went to a fake node" bash -c "[[ $node == gpu-a1 || $node == gpu-a2 ]]"
  else
    fail "pod gets spec.nodeName"
    kubectl describe pod smoke -n default | tail -20
    tail -5 "$(cluster_log scheduler)" | cut -c1-400
  fi

  # A second scheduler instance for another profile name.
  cat >"$CLUSTER_DIR/smoke-scheduler-2.yaml" <<'EOF'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: second-scheduler
EOF
  check "second kube-scheduler instance starts" cluster_start_scheduler "$CLUSTER_DIR/smoke-scheduler-2.yaml" second
  kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: smoke-2, namespace: default}
spec:
  schedulerName: second-scheduler
  nodeSelector: {gpu.scheduling/model: A100}
  containers:
  - {name: c, image: registry.invalid/pause:none}
EOF
  check "second scheduler binds its pod to gpu-a2" \
    cluster_wait 30 "pod default/smoke-2 on gpu-a2" bash -c '[[ $(kubectl get pod smoke-2 -o jsonpath="{.spec.nodeName}") == gpu-a2 ]]'
  check "stop the second scheduler" cluster_stop_scheduler second
  check "second scheduler is gone" bash -c '! ps -e -o args= | grep -F -- "$CLUSTER_DIR/scheduler-second/" | grep -v grep'

  # Garbage collector: a ConfigMap owned by the pod goes when the pod goes.
  uid=$(kubectl get pod smoke -n default -o jsonpath='{.metadata.uid}')
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: smoke-owned
  namespace: default
  ownerReferences:
  - {apiVersion: v1, kind: Pod, name: smoke, uid: "$uid"}
data: {k: v}
EOF
  check "owned ConfigMap is created" kubectl get configmap smoke-owned -n default
  check "pod is deleted (forced: no kubelet)" cluster_delete_pod default smoke
  t0=$SECONDS
  if cluster_wait_gone 60 configmap smoke-owned default; then
    pass "garbage collector deleted the owned ConfigMap in $((SECONDS - t0))s"
  else
    fail "garbage collector deletes the owned ConfigMap"
    tail -5 "$(cluster_log kube-controller-manager)" | cut -c1-400
  fi

  # A spawned helper process is part of the teardown too.
  cluster_spawn smoke-sleeper sleep 1000
  check "spawned helper is alive" cluster_alive smoke-sleeper

  echo "$passed $failed" >"$results_file"
  # The EXIT trap set by cluster_up tears everything down.
)
sub_rc=$?
read -r passed failed <"$results_file" 2>/dev/null || { passed=0; failed=1; }
[[ $sub_rc == 0 ]] || { [[ $failed -gt 0 ]] || failed=1; }

# Teardown checks, outside the cluster's shell.
dir=$(cat "$cluster_dir_file" 2>/dev/null)
if [[ -n $dir ]]; then
  if pgrep -f -- "$dir" >/dev/null; then
    fail "no harness process is left after teardown"
    pgrep -a -f -- "$dir"
  else
    pass "no harness process is left after teardown"
  fi
  if [[ -e $dir ]]; then fail "cluster dir $dir removed"; else pass "cluster dir removed"; fi
  bin=$(. "$here/k8s-version.sh"; echo "${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}/k8s-$K8S_VERSION/bin")
  others=$(pgrep -a -f -- "^$bin/" || true)
  if [[ -n $others ]]; then
    echo "note: other clusters from this cache are running (not this test's):"
    echo "$others"
  fi
fi
summary
((failed == 0))
