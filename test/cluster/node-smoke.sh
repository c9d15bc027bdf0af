#!/usr/bin/env bash
# Smoke test of the harness's real node (cluster_node_up: containerd, runc,
# CNI bridge, kubelet on this machine): the node registers Ready with the
# machine's address; a busybox pod runs, and `kubectl logs` and `kubectl
# exec` reach it through the API server and kubelet; a pod that asks for no
# GPU sees no /dev/nvidia*; pods survive restarts of kubelet and of
# containerd, and new pods start after them; the teardown leaves no process,
# mount, cgroup, bridge or host path behind. Needs root.
#
#   test/cluster/node-smoke.sh
#
# Ends with "N passed, N failed"; exits nonzero on any failure.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
passed=0 failed=0
t_start=$SECONDS

pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() {  # DESC CMD...
  local desc=$1 out; shift
  if out=$("$@" 2>&1); then pass "$desc"; else fail "$desc"; [[ -z $out ]] || sed 's/^/    /' <<<"$out" | tail -15; fi
}
summary() {
  echo "node-smoke.sh took $((SECONDS - t_start))s"
  echo "node-smoke: $passed passed, $failed failed"
}
bail() {  # DESC: a step the rest needs failed; hand the counts to the parent
  fail "$1"
  echo "$passed $failed" >"$results_file"
  exit 1
}

if (($(id -u) != 0)); then
  fail "node-smoke.sh needs root (mounts, cgroups, a bridge)"
  summary
  exit 1
fi

# The cluster runs in a child shell, so that the parent can check after its
# teardown (its EXIT trap) that nothing is left.
cluster_dir_file=$(mktemp "${TMPDIR:-/tmp}/gpu-node-smoke.XXXXXX")
results_file=$(mktemp "${TMPDIR:-/tmp}/gpu-node-smoke-results.XXXXXX")
trap 'rm -f "$cluster_dir_file" "$results_file"' EXIT
FAKE=/var/lib/gpu-extender-fake

(
  # shellcheck source=cluster.sh
  . "$here/cluster.sh"

  cluster_up || bail "cluster_up"
  echo "$CLUSTER_DIR" >"$cluster_dir_file"
  t0=$SECONDS
  cluster_node_up || bail "cluster_node_up"
  pass "cluster_node_up: node $CLUSTER_NODE_NAME Ready in $((SECONDS - t0))s"

  node_field() { kubectl get node "$CLUSTER_NODE_NAME" -o "jsonpath=$1"; }
  check "the node's addresses are InternalIP $CLUSTER_NODE_IP and Hostname $CLUSTER_NODE_NAME" bash -c \
    "[[ \$(kubectl get node $CLUSTER_NODE_NAME -o 'jsonpath={range .status.addresses[*]}{.type}={.address} {end}') == 'InternalIP=$CLUSTER_NODE_IP Hostname=$CLUSTER_NODE_NAME ' ]]"
  runtime=$(node_field '{.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kubeletVersion}')
  check "the node runs containerd 2.x and kubelet $CLUSTER_K8S_VERSION ($runtime)" \
    bash -c "[[ '$runtime' == 'containerd://2.'*' $CLUSTER_K8S_VERSION' ]]"
  check "the node has no taints" bash -c "[[ -z \$(kubectl get node $CLUSTER_NODE_NAME -o 'jsonpath={.spec.taints}') ]]"
  check "kubelet's client identity is system:node:$CLUSTER_NODE_NAME" bash -c \
    "openssl x509 -in '$CLUSTER_NODE_DIR/pki/kubelet-client.crt' -noout -subject | grep -q 'O = system:nodes, CN = system:node:$CLUSTER_NODE_NAME'"
  check "the node has its Lease" cluster_wait 30 "Lease kube-node-lease/$CLUSTER_NODE_NAME" \
    kubectl get lease -n kube-node-lease "$CLUSTER_NODE_NAME"

  # Fake GPUs exist on the host; a pod that asks for nothing must not see any.
  fake_gpus() {
    cluster_fake_gpus "$FAKE" 8 && [[ $(ls "$FAKE/dev" | wc -l) == 10 ]] &&
      [[ $("$FAKE/bin/nvidia-smi" -L | wc -l) == 8 ]] && [[ $(stat -c %t:%T "$FAKE/dev/nvidia7") == c3:7 ]]
  }
  check "cluster_fake_gpus makes 8 fake devices (char 195:N) and a working nvidia-smi" fake_gpus

  pod() {  # NAME: a busybox pod bound to the node (no scheduler needed)
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  nodeName: $CLUSTER_NODE_NAME
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: $CLUSTER_BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'echo hello from \$(hostname); exec sleep 100000']
EOF
  }
  running() { [[ $(kubectl get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null) == Running ]]; }
  container_id() { kubectl get pod "$1" -o 'jsonpath={.status.containerStatuses[0].containerID}'; }

  pod bb1
  t0=$SECONDS
  if cluster_wait 60 "pod bb1 Running" running bb1; then
    pass "a busybox pod reaches Running in $((SECONDS - t0))s"
  else
    kubectl describe pod bb1 | tail -15
    bail "a busybox pod reaches Running"
  fi
  check "the pod has an address from 10.244.0.0/24" bash -c \
    "[[ \$(kubectl get pod bb1 -o 'jsonpath={.status.podIP}') == 10.244.0.* ]]"
  check "kubectl logs shows its output" bash -c "kubectl logs bb1 | grep -q 'hello from bb1'"
  check "kubectl exec runs a command in it" bash -c "[[ \$(kubectl exec bb1 -- cat /proc/1/cmdline | tr '\\0' ' ') == 'sleep 100000 ' ]]"
  check "a pod that asks for nothing sees no /dev/nvidia*" bash -c \
    "out=\$(kubectl exec bb1 -- sh -c 'ls -d /dev/nvidia* 2>/dev/null; echo done'); [[ \$out == done ]]"
  check "its service-account token is mounted (kube-root-ca.crt published)" \
    kubectl exec bb1 -- test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt

  id_before=$(container_id bb1)
  t0=$SECONDS
  check "cluster_kubelet_restart" cluster_kubelet_restart
  echo "kubelet restarted in $((SECONDS - t0))s"
  check "after the kubelet restart the pod is still Running in the same container" bash -c \
    "[[ \$(kubectl get pod bb1 -o 'jsonpath={.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}') == 'Running $id_before 0' ]]"
  pod bb2
  check "after the kubelet restart a new pod starts" cluster_wait 60 "pod bb2 Running" running bb2

  t0=$SECONDS
  check "cluster_containerd_restart" cluster_containerd_restart
  echo "containerd restarted in $((SECONDS - t0))s"
  check "after the containerd restart kubectl exec still reaches the pod" \
    cluster_wait 30 "exec into bb1" kubectl exec bb1 -- true
  pod bb3
  check "after the containerd restart a new pod starts" cluster_wait 60 "pod bb3 Running" running bb3

  # The teardown itself: cluster_node_down alone, then the parent checks the
  # host after cluster_down.
  t0=$SECONDS
  check "cluster_node_down" cluster_node_down
  echo "cluster_node_down took $((SECONDS - t0))s"
  check "the Node object is gone" cluster_wait_gone 30 node "$(hostname | tr '[:upper:]' '[:lower:]')"

  echo "$passed $failed" >"$results_file"
  # The EXIT trap set by cluster_up tears the rest down.
)
sub_rc=$?
read -r passed failed <"$results_file" 2>/dev/null || { passed=0; failed=1; }
[[ $sub_rc == 0 ]] || { [[ $failed -gt 0 ]] || failed=1; }

# What the node put on the host must be gone, whatever the run did.
dir=$(cat "$cluster_dir_file" 2>/dev/null)
if [[ -n $dir ]]; then
  left=$(pgrep -a -f -- "$dir")
  if [[ -z $left ]]; then pass "no harness process is left (kubelet, containerd, shims)"; else
    fail "no harness process is left"; echo "$left"; fi
  pods=$(cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/*/cgroup.procs \
    /sys/fs/cgroup/*/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/*/cgroup.procs 2>/dev/null)
  if [[ -z $pods ]]; then pass "no container process is left"; else fail "no container process is left: $pods"; fi
  mounts=$(awk -v d="$dir" '$5 ~ "^/var/lib/kubelet" || index($5, d) == 1 || $5 ~ "^/run/containerd" {print $5}' /proc/self/mountinfo)
  if [[ -z $mounts ]]; then pass "no mount is left"; else fail "no mount is left: $mounts"; fi
  cgroups=$(ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods 2>/dev/null)
  if [[ -z $cgroups ]]; then pass "no kubepods cgroup is left"; else fail "no kubepods cgroup is left: $cgroups"; fi
  if ip link show cni0 >/dev/null 2>&1; then fail "the bridge cni0 is removed"; else pass "the bridge cni0 is removed"; fi
  paths=$(ls -d /var/lib/kubelet /run/containerd /run/gpu-extender-test-node "$FAKE" "$dir" 2>/dev/null)
  if [[ -z $paths ]]; then pass "kubelet's root, /run/containerd, the fake GPUs and the cluster dir are removed"; else
    fail "host paths are removed: $paths"; fi
fi
summary
((failed == 0))
