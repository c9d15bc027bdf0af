#!/usr/bin/env bash
# `kubectl gpu` (build/kubectl-gpu, found by kubectl on PATH) against a real
# control plane with the extender and kube-scheduler placing real pods on
# fake GPU nodes:
#   1. `nodes`: each node's counts equal those worked out from the ledgers and
#      GpuNodeStatus (test/e2e/kubectl_check.py); the table shows them;
#   2. `node NAME`: each device's holders are the ledger's; the grid shows them;
#      the GPU page (/debug/nodes, and `node NAME -o html`) loaded in headless
#      Chromium: each device's state and holders, coloured as the legend says,
#      are the ledgers' (test/e2e/html_check.py), a GPU model with markup
#      shows as text; kubectl-gpu runs from the
#      image's tree (deploy/image/rootfs.sh);
#   3. `pods` (-n, -A): every bound GPU pod's devices are its ledger entry's;
#   4. `why`: a pod too large for any node, one that waits for GPUs held by
#      others, a gang member waiting for its gang (a coscheduling PodGroup's,
#      and one of Kubernetes' own API: members needed from its minCount);
#   5. -o yaml is the -o json document; --context and --kubeconfig pick the
#      credentials, KUBECONFIG otherwise;
#   6. the ledger and the agent disagree (a held GPU reported unhealthy, one
#      missing from GpuNodeStatus): the plugin says so;
#   7. the extender down: the same answers;
#   8. a user with only `view` in one namespace (through deploy/12's
#      aggregated ClusterRole): its own pods' GPUs, nothing of another
#      tenant's; with view in gpu-system too, the other tenant's reservations
#      as "other";
#   9. `kubectl get gns`: the extender's counts (status.allocation) equal the
#      ledgers' within a period, free again once the pods go, a burst of binds
#      costs a few writes (printed beside the binds), a restart writes nothing.
#
#   test/e2e/run.sh test/e2e/kubectl.sh
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

PLUGIN_DIR=$E2E_ROOT/build
[[ -x $PLUGIN_DIR/kubectl-gpu ]] || { echo "kubectl: 0 passed, 1 failed (make build/kubectl-gpu first)"; exit 1; }
# Kubernetes' own gang API served (a gang of it in 4).
e2e_k8s_gang_api || { echo "kubectl: 0 passed, 1 failed (K8S_VERSION)"; exit 1; }
e2e_setup || { echo "kubectl: 0 passed, 1 failed (cluster setup)"; exit 1; }
kubectl apply -f deploy/base/10-crd-podgroup.yaml -f deploy/base/12-kubectl-gpu-rbac.yaml >/dev/null &&
  cluster_wait 30 "PodGroup CRD established" kubectl wait --for=condition=Established --timeout=1s \
    crd/podgroups.scheduling.x-k8s.io >/dev/null || { echo "kubectl: 0 passed, 1 failed (CRDs)"; exit 1; }
cluster_ensure_namespace team-b
WORK=$CLUSTER_DIR/kubectl
mkdir -p "$WORK"

# k1: 8 H100s on two NVLink islands; k2: 4 A100s of 40 GiB.
e2e_gpu_node k1 8 "NVIDIA H100 80GB HBM3" 2
e2e_gpu_node k2 4 "NVIDIA A100-SXM4-40GB" 0 40960
e2e_start_extender ext --reap-interval 2 || { echo "kubectl: 0 passed, 1 failed (extender)"; exit 1; }
e2e_start_scheduler sched "$E2E_URL" || { echo "kubectl: 0 passed, 1 failed (scheduler)"; exit 1; }

# kgpu ARGS...: the plugin as kubectl runs it, with the admin's kubeconfig from KUBECONFIG.
kgpu() { PATH=$PLUGIN_DIR:$PATH KUBECONFIG=$CLUSTER_KUBECONFIG "$CLUSTER_BIN/kubectl" gpu "$@"; }
bound() { [[ -n $(e2e_pod_node "$1" "$2") ]]; }
# snapshot: the ledgers, GpuNodeStatus and pods now, for kubectl_check.py.
snapshot() {
  kubectl get lease -A -o json >"$WORK/leases.json" && kubectl get gpunodestatuses -o json >"$WORK/gns.json" &&
    kubectl get pods -A -o json >"$WORK/pods.json"
}
# gns_edit NODE PYTHON: rewrite the node's GpuNodeStatus devices (d: the list).
# A read and a resourceVersion-checked replace, read again on a conflict (the
# extender patches its counts into the same object), as the agent does.
gns_edit() {
  local try
  for try in 1 2 3 4 5; do
    kubectl get gpunodestatus "$1" -o json | python3 -c "
import json, sys
g = json.load(sys.stdin); d = g['status']['devices']
$2
g['status']['total'] = len(d)
print(json.dumps(g))" | kubectl replace -f - >/dev/null 2>"$WORK/gns-edit.err" && return 0
    grep -q Conflict "$WORK/gns-edit.err" || { cat "$WORK/gns-edit.err"; return 1; }
  done
  cat "$WORK/gns-edit.err"
  return 1
}
check() { python3 test/e2e/kubectl_check.py --leases "$WORK/leases.json" --gns "$WORK/gns.json" --pods "$WORK/pods.json" "$@"; }

# The workload: ml has two whole-GPU pods, a share, a gang of 3 with 2 members;
# team-b has one pod of 4 GPUs; ml/big asks 16 (more than any node has).
e2e_pod ml train '{"gpu.scheduling/gpu":"2"}'
e2e_pod ml infer '{"gpu.scheduling/gpu-memory":"8192","gpu.scheduling/gpu-core":"30"}'
e2e_pod team-b rival '{"gpu.scheduling/gpu":"4"}'
e2e_pod ml big '{"gpu.scheduling/gpu":"16"}'
kubectl apply -f - >/dev/null <<'JSON'
{"apiVersion":"scheduling.x-k8s.io/v1alpha1","kind":"PodGroup","metadata":{"name":"job","namespace":"ml"},"spec":{"minMember":3}}
JSON
for i in 0 1; do
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"job-$i","namespace":"ml","labels":{"scheduling.x-k8s.io/pod-group":"job"}},
 "spec":{"schedulerName":"gpu-scheduler","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/gpu":"1"}}}]}}
JSON
done
# A gang of Kubernetes' own API with 2 of its 3 members: a Workload's pod group
# (1.35, spec.workloadRef) or a scheduling.k8s.io PodGroup (1.36 on, spec.schedulingGroup).
if ((E2E_K8S_MINOR >= 36)); then
  kubectl apply -f - >/dev/null <<'JSON'
{"apiVersion":"scheduling.k8s.io/v1beta1","kind":"PodGroup","metadata":{"name":"native","namespace":"ml"},
 "spec":{"schedulingPolicy":{"gang":{"minCount":3}}}}
JSON
  NATIVE_REF='"schedulingGroup":{"podGroupName":"native"}'
else
  kubectl apply -f - >/dev/null <<'JSON'
{"apiVersion":"scheduling.k8s.io/v1alpha1","kind":"Workload","metadata":{"name":"native","namespace":"ml"},
 "spec":{"podGroups":[{"name":"workers","policy":{"gang":{"minCount":3}}}]}}
JSON
  NATIVE_REF='"workloadRef":{"name":"native","podGroup":"workers"}'
fi
for i in 0 1; do
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"native-$i","namespace":"ml"},
 "spec":{"schedulerName":"gpu-scheduler","terminationGracePeriodSeconds":0,$NATIVE_REF,
   "containers":[{"name":"main","image":"registry.k8s.io/pause:3.10","resources":{"limits":{"gpu.scheduling/gpu":"1"}}}]}}
JSON
done
placed() { for p in ml/train ml/infer team-b/rival; do bound "${p%/*}" "${p#*/}" || return 1; done; }
cluster_wait 30 "the pods bound" placed || { echo "kubectl: 0 passed, 1 failed (pods not bound)"; exit 1; }
# A pod that waits for GPUs held by others: all of k2's 4 A100s (rival holds 4 of the GPUs somewhere).
e2e_pod ml waits '{"gpu.scheduling/gpu":"8"}'
sleep 2
snapshot

# ---- 1. nodes ----
check_nodes() {
  kgpu nodes -o json >"$WORK/nodes.json" || return 1
  check nodes "$WORK/nodes.json" || return 1
  kgpu nodes >"$WORK/nodes.txt" || return 1
  grep -qE '^NODE +GPUS +WHOLE +SHARED +FREE +UNHEALTHY +FRAG +MODELS$' "$WORK/nodes.txt" &&
    grep -qE '^k1 +8 ' "$WORK/nodes.txt" && grep -qE '^k2 +4 .*NVIDIA A100-SXM4-40GB$' "$WORK/nodes.txt" ||
    { cat "$WORK/nodes.txt"; return 1; }
  # Not on a terminal: no colour.
  ! grep -q $'\033' "$WORK/nodes.txt"
}
e2e_check "kubectl gpu nodes: counts per node equal the ledgers' and the agents'" check_nodes

# ---- 2. node NAME ----
check_node() {
  local n
  for n in k1 k2; do
    kgpu node "$n" -o json >"$WORK/node-$n.json" && check node "$n" "$WORK/node-$n.json" || return 1
  done
  kgpu node k1 >"$WORK/node-k1.txt" && kgpu node k2 >"$WORK/node-k2.txt" && kgpu nodes -o wide >"$WORK/nodes-wide.txt" || return 1
  grep -qE '^  nvlink-0 +\[0 ' "$WORK/node-k1.txt" && grep -q '^ID  *MODEL  *MEMORY  *ISLAND  *HEALTH  *USED  *HOLDERS' "$WORK/node-k1.txt" ||
    { cat "$WORK/node-k1.txt"; return 1; }
  ! kgpu node nosuch >/dev/null 2>&1
}
e2e_check "kubectl gpu node NAME: each device's holders are the ledger's" check_node

# ---- 2b. the GPU page in a browser ----
# browse URL OUT: the DOM headless Chromium (Debian's, TEST_PKGS) builds from
# the page: what a person's browser shows, with its own Accept header.
browse() {
  local t0=$SECONDS
  timeout 90 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chromium" \
    --dump-dom "$1" >"$2" 2>"$WORK/chromium.log" || { tail -5 "$WORK/chromium.log"; return 1; }
  echo "$((SECONDS - t0))" >>"$WORK/chromium.seconds"
  grep -q 'data-node=' "$2" || { echo "$1: no node in the page"; head -c 600 "$2"; return 1; }
}
html_check() { python3 test/e2e/html_check.py --leases "$WORK/html-leases.json" --gns "$WORK/html-gns.json" "$@"; }
check_html() {
  command -v chromium >/dev/null || { echo "no chromium (make deps installs TEST_PKGS)"; return 1; }
  # The extender's cache follows the ledgers within moments: a fresh read of both, a few tries.
  local try
  for try in 1 2 3; do
    kubectl get lease -A -o json >"$WORK/html-leases.json" && kubectl get gpunodestatuses -o json >"$WORK/html-gns.json" &&
      kubectl get pods -A -o json >"$WORK/html-pods.json" || return 1
    browse "$E2E_DEBUG_URL/debug/nodes" "$WORK/debug-nodes.dom" || return 1
    html_check "$WORK/debug-nodes.dom" >"$WORK/html-check.txt" && break
    ((try == 3)) && { cat "$WORK/html-check.txt"; return 1; }
    sleep 1
  done
  cat "$WORK/html-check.txt"
  # Programs still get JSON from the same address.
  curl -sf "$E2E_DEBUG_URL/debug/nodes" | python3 -c 'import json,sys; assert json.load(sys.stdin)["nodes"]' || return 1
  # The plugin draws the same page from the ledgers.
  local n
  for n in k1 k2; do
    kgpu node "$n" -o html >"$WORK/node-$n.html" || return 1
    browse "file://$WORK/node-$n.html" "$WORK/node-$n.dom" &&
      html_check --pods "$WORK/html-pods.json" --node "$n" "$WORK/node-$n.dom" || return 1
  done
  ! kgpu pods -o html >/dev/null 2>&1 || { echo "pods -o html accepted"; return 1; }
  # A model name with markup (the agent publishes what the vendor tool says): text on the page, never markup.
  local evil='<img src=x onerror=alert(1)><b>x</b>&amp;'
  gns_edit k2 "[x.update(model='$evil') for x in d]" || return 1
  cluster_wait 20 "the extender sees the new model" bash -c \
    "curl -sf '$E2E_DEBUG_URL/debug/nodes?node=k2' | grep -qF '<img src=x'" || return 1
  browse "$E2E_DEBUG_URL/debug/nodes?node=k2" "$WORK/evil.dom" && kgpu node k2 -o html >"$WORK/evil.html" &&
    browse "file://$WORK/evil.html" "$WORK/evil-kgpu.dom" || return 1
  python3 - "$evil" "$WORK/evil.dom" "$WORK/evil-kgpu.dom" <<'PY' || return 1
import sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = set(), ""
    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
    def handle_data(self, data):
        self.text += data
for f in sys.argv[2:]:
    p = P()
    p.feed(open(f).read())
    assert not p.tags & {"img", "b", "script"}, (f, p.tags)
    assert sys.argv[1] in p.text, (f, "the model's text is not shown as written")
PY
  gns_edit k2 "d[:] = [g for g in json.load(open('$WORK/html-gns.json'))['items'] if g['metadata']['name'] == 'k2'][0]['status']['devices']" ||
    return 1
  cluster_wait 20 "the extender sees the model back" bash -c \
    "! curl -sf '$E2E_DEBUG_URL/debug/nodes?node=k2' | grep -qF '<img src=x'" || return 1
  # A picture for people (build/e2e-cluster/kubectl/debug-nodes.png).
  timeout 90 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chromium" --window-size=1280,1100 \
    --screenshot="$WORK/debug-nodes.png" "$E2E_DEBUG_URL/debug/nodes" >/dev/null 2>&1 && [[ -s $WORK/debug-nodes.png ]]
}
e2e_check "the GPU page (/debug/nodes in headless Chromium, kubectl gpu node -o html) shows each device's holders as the ledgers do" check_html
[[ -s $WORK/chromium.seconds ]] && e2e_note "headless Chromium loads: $(paste -sd' ' "$WORK/chromium.seconds") s"

# ---- 2c. the plugin in the image ----
# deploy/image/rootfs.sh's tree (what `make image` packs) holds kubectl-gpu
# and every library it loads: run there (chroot, as root) against this cluster.
check_image_plugin() {
  local root=$WORK/rootfs
  deploy/image/rootfs.sh "$root" "$E2E_ROOT/build" 2>/dev/null || return 1
  [[ -x $root/usr/local/bin/kubectl-gpu ]] || { echo "no kubectl-gpu in the image"; return 1; }
  # The admin's kubeconfig with its CA and token file copied in beside it (paths relative to it).
  local ca tok
  ca=$(awk '$1 == "certificate-authority:" {print $2}' "$CLUSTER_KUBECONFIG")
  tok=$(awk '$1 == "tokenFile:" {print $2}' "$CLUSTER_KUBECONFIG")
  cp "$ca" "$root/tmp/ca.crt" && cp "$tok" "$root/tmp/token" || return 1
  sed -e 's#certificate-authority: .*#certificate-authority: ca.crt#' -e 's#tokenFile: .*#tokenFile: token#' \
    "$CLUSTER_KUBECONFIG" >"$root/tmp/kubeconfig" || return 1
  local out
  if (($(id -u) == 0)); then
    out=$(chroot "$root" /usr/local/bin/kubectl-gpu nodes --kubeconfig /tmp/kubeconfig) || return 1
  else
    # Without root: the tree's own loader and libraries.
    local lib=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
    out=$("$root/lib64/ld-linux-x86-64.so.2" --library-path "$lib" "$root/usr/local/bin/kubectl-gpu" nodes \
      --kubeconfig "$root/tmp/kubeconfig") || return 1
  fi
  [[ $out == "$(kgpu nodes)" ]] || { echo "in the image: $out"; return 1; }
}
e2e_check "kubectl-gpu is in the image's tree (deploy/image/rootfs.sh) and runs from there against the cluster" check_image_plugin

# ---- 3. pods ----
check_pods() {
  kgpu pods -n ml -o json >"$WORK/pods-ml.json" && check pods "$WORK/pods-ml.json" || return 1
  kgpu pods -A -o json >"$WORK/pods-all.json" && check pods "$WORK/pods-all.json" || return 1
  python3 - "$WORK/pods-ml.json" "$WORK/pods-all.json" <<'PY' || return 1
import json, sys
ml = {(p["namespace"], p["name"]) for p in json.load(open(sys.argv[1]))["items"]}
al = {(p["namespace"], p["name"]) for p in json.load(open(sys.argv[2]))["items"]}
want = {("ml", n) for n in ("train", "infer", "big", "job-0", "job-1", "waits", "native-0", "native-1")}
assert ml == want, ml
assert al == want | {("team-b", "rival")}, al
PY
  kgpu pods -n ml >"$WORK/pods-ml.txt" && grep -qE '^ml +train +(Pending|Running) +k[12] +[0-9],[0-9] +2 whole ' "$WORK/pods-ml.txt" ||
    { cat "$WORK/pods-ml.txt"; return 1; }
}
e2e_check "kubectl gpu pods (-n, -A): each bound pod's devices are its ledger entry's" check_pods

# ---- 4. why ----
jq_py() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
check_why() {
  kgpu why big -n ml -o json >"$WORK/why-big.json" || return 1
  [[ $(jq_py "$WORK/why-big.json" 'd["verdict"]') == "fits nowhere in the cluster, even on empty nodes"* ]] || { cat "$WORK/why-big.json"; return 1; }
  # Every node counted once under some reason, as the filter would reject it.
  [[ $(jq_py "$WORK/why-big.json" 'sum(r["nodes"] for r in d["reasons"]) == d["nodes"] and d["nodes"] >= 2') == True ]] || return 1
  kgpu why waits -n ml -o json >"$WORK/why-waits.json" || return 1
  [[ $(jq_py "$WORK/why-waits.json" 'd["verdict"]') == "no node has room now; 1 node would take it once GPUs there are freed" ]] ||
    { cat "$WORK/why-waits.json"; return 1; }
  kgpu why job-0 -n ml -o json >"$WORK/why-job.json" || return 1
  [[ $(jq_py "$WORK/why-job.json" '(d["gang"]["present"], d["gang"]["needed"], d["gang"]["bound"])') == "(2, 3, 0)" ]] || { cat "$WORK/why-job.json"; return 1; }
  kgpu why native-0 -n ml -o json >"$WORK/why-native.json" || return 1
  [[ $(jq_py "$WORK/why-native.json" '(d["gang"]["present"], d["gang"]["needed"], d["gang"]["bound"])') == "(2, 3, 0)" ]] || { cat "$WORK/why-native.json"; return 1; }
  kgpu why train -n ml -o json >"$WORK/why-train.json" &&
    [[ $(jq_py "$WORK/why-train.json" 'd["verdict"]') == "bound to k"* ]] || return 1
  kgpu why waits -n ml >"$WORK/why-waits.txt" && kgpu why job-0 -n ml >"$WORK/why-job.txt" && kgpu why big -n ml >"$WORK/why-big.txt"
}
e2e_check "kubectl gpu why: a pod too large, one waiting for GPUs, a gang member waiting for its gang (a PodGroup's; Kubernetes' own API's)" check_why

# ---- 5. -o yaml, --kubeconfig, --context ----
check_flags() {
  kgpu nodes -o yaml >"$WORK/nodes.yaml" || return 1
  python3 - "$WORK/nodes.yaml" "$WORK/nodes.json" <<'PY' || return 1
import json, sys, yaml
assert yaml.safe_load(open(sys.argv[1])) == json.load(open(sys.argv[2]))
PY
  kgpu nodes -o wide | grep -qE '^NODE +.* EXTERNAL +RESERVATIONS +FGD +ISSUES$' || return 1
  # A kubeconfig whose current context has no credentials, with the admin's as another context.
  local kc=$WORK/two-contexts.kubeconfig
  cp "$CLUSTER_KUBECONFIG" "$kc" && chmod 600 "$kc"
  "$CLUSTER_BIN/kubectl" --kubeconfig="$kc" config set-credentials nobody >/dev/null &&
    "$CLUSTER_BIN/kubectl" --kubeconfig="$kc" config set-context nobody --cluster=gpu-test --user=nobody >/dev/null &&
    "$CLUSTER_BIN/kubectl" --kubeconfig="$kc" config use-context nobody >/dev/null || return 1
  local admin
  admin=$("$CLUSTER_BIN/kubectl" --kubeconfig="$CLUSTER_KUBECONFIG" config current-context)
  ! PATH=$PLUGIN_DIR:$PATH KUBECONFIG=$kc "$CLUSTER_BIN/kubectl" gpu pods -n ml >/dev/null 2>&1 || { echo "anonymous read pods"; return 1; }
  PATH=$PLUGIN_DIR:$PATH KUBECONFIG=$kc "$CLUSTER_BIN/kubectl" gpu pods -n ml --context "$admin" | grep -q '^ml  *train ' || return 1
  PATH=$PLUGIN_DIR:$PATH KUBECONFIG=/nonexistent "$CLUSTER_BIN/kubectl" gpu pods -n ml --kubeconfig "$CLUSTER_KUBECONFIG" | grep -q '^ml  *train '
}
e2e_check "kubectl gpu -o yaml is the JSON document; --context, --kubeconfig and KUBECONFIG pick the credentials" check_flags

# ---- 6. ledger and agent disagree ----
check_disagree() {
  local node ids first
  node=$(e2e_pod_node ml train); ids=$(e2e_ann ml train gpu.scheduling/allocated); ids=${ids#*:}; first=${ids%%,*}
  gns_edit "$node" "[x.update(health='Unhealthy') for x in d if x['id'] == $first]" || return 1
  kgpu nodes >"$WORK/disagree.txt" || return 1
  kgpu node "$node" >"$WORK/disagree-unhealthy.txt" || return 1
  grep -q "^! $node: ledger: ml/train holds GPU $first, which the agent reports Unhealthy" "$WORK/disagree.txt" ||
    { cat "$WORK/disagree.txt"; return 1; }
  gns_edit "$node" "d[:] = [x for x in d if x['id'] != $first]" || return 1
  kgpu node "$node" >"$WORK/disagree-node.txt" || return 1
  grep -q "^! ledger: ml/train holds GPU $first, which the agent does not list" "$WORK/disagree-node.txt" ||
    { cat "$WORK/disagree-node.txt"; return 1; }
  # Back as it was (the snapshot's status).
  gns_edit "$node" "d[:] = [g for g in json.load(open('$WORK/gns.json'))['items'] if g['metadata']['name'] == '$node'][0]['status']['devices']" ||
    return 1
  kgpu nodes | grep -q '^!' && { echo "still disagreeing after the GpuNodeStatus came back"; return 1; }
  return 0
}
e2e_check "kubectl gpu says so when the ledger and the agent disagree (held GPU unhealthy, missing)" check_disagree

# ---- 7. the extender down ----
check_down() {
  cluster_kill ext >/dev/null 2>&1
  ! curl -sf "$E2E_URL/readyz" >/dev/null 2>&1 || { echo "the extender still answers"; return 1; }
  snapshot
  kgpu nodes -o json >"$WORK/nodes-down.json" && check nodes "$WORK/nodes-down.json" || return 1
  python3 - "$WORK/nodes.json" "$WORK/nodes-down.json" <<'PY' || return 1
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["items"] == b["items"], (a["items"], b["items"])
PY
  kgpu pods -A -o json >"$WORK/pods-down.json" && check pods "$WORK/pods-down.json"
}
e2e_check "kubectl gpu answers the same with the extender down (it reads the API server only)" check_down

# ---- 8. a tenant with view in one namespace ----
# viewer NAME NAMESPACE...: a ServiceAccount of ml with the view role in each namespace; prints its kubeconfig.
viewer() {
  local name=$1; shift
  kubectl -n ml create serviceaccount "$name" >/dev/null || return 1
  local ns
  for ns in "$@"; do
    kubectl -n "$ns" create rolebinding "$name-view" --clusterrole=view --serviceaccount="ml:$name" >/dev/null || return 1
  done
  local tok=$WORK/$name.token kc=$WORK/$name.kubeconfig
  kubectl -n ml create token "$name" --duration=1h >"$tok" || return 1
  _cluster_kubeconfig "$kc" "$name" "$name" "tokenFile: $tok"
  # The context's namespace is the plugin's default namespace, as kubectl's.
  sed -i 's/context: {cluster: gpu-test,/context: {namespace: ml, cluster: gpu-test,/' "$kc"
  echo "$kc"
}
check_tenant() {
  local kc
  kc=$(viewer tenant ml) || return 1
  local as=system:serviceaccount:ml:tenant
  cluster_wait 30 "view aggregated" bash -c "[[ \$(\"$CLUSTER_BIN/kubectl\" --kubeconfig=\"$CLUSTER_KUBECONFIG\" auth can-i list gpuclaims -n ml --as=$as) == yes ]]" || return 1
  [[ $(kubectl auth can-i list leases -n gpu-system --as=$as) == no ]] || { echo "a tenant reads the ledgers"; return 1; }
  [[ $(kubectl auth can-i list pods -n team-b --as=$as) == no ]] || return 1
  # A gang's size for why: Workloads (1.35's view lacks them), PodGroups (1.36 on).
  [[ $(kubectl auth can-i list workloads.scheduling.k8s.io -n ml --as=$as) == yes ]] || { echo "a tenant cannot list Workloads"; return 1; }
  kt() { PATH=$PLUGIN_DIR:$PATH KUBECONFIG=$kc "$CLUSTER_BIN/kubectl" gpu "$@"; }
  kt pods -o json >"$WORK/tenant-pods.json" || return 1
  check pods --readable ml "$WORK/tenant-pods.json" || return 1
  kt pods >"$WORK/tenant-pods.txt" && grep -qE '^ml +train +\S+ +k[12] +[0-9],[0-9] ' "$WORK/tenant-pods.txt" || { cat "$WORK/tenant-pods.txt"; return 1; }
  kt pods -A >"$WORK/tenant-pods-all.txt" 2>&1 && { echo "-A allowed to a tenant"; return 1; }
  grep -q 'forbidden\|HTTP 403' "$WORK/tenant-pods-all.txt" || { cat "$WORK/tenant-pods-all.txt"; return 1; }
  kt nodes >"$WORK/tenant-nodes.txt" 2>&1 || { cat "$WORK/tenant-nodes.txt"; return 1; }
  grep -q 'note: GpuNodeStatus not readable' "$WORK/tenant-nodes.txt" && ! grep -q 'team-b\|rival' "$WORK/tenant-nodes.txt" ||
    { cat "$WORK/tenant-nodes.txt"; return 1; }
  # With view in gpu-system too: the ledgers, other tenants' reservations anonymous.
  kc=$(viewer ops ml gpu-system) || return 1
  local node
  node=$(e2e_pod_node team-b rival)
  kt() { PATH=$PLUGIN_DIR:$PATH KUBECONFIG=$kc "$CLUSTER_BIN/kubectl" gpu "$@"; }
  cluster_wait 30 "ops reads the ledgers" bash -c "[[ \$(\"$CLUSTER_BIN/kubectl\" --kubeconfig=\"$CLUSTER_KUBECONFIG\" auth can-i list leases -n gpu-system --as=system:serviceaccount:ml:ops) == yes ]]" || return 1
  kt node "$node" -n ml -o json >"$WORK/ops-node.json" || return 1
  check node "$node" --readable ml "$WORK/ops-node.json" || return 1
  grep -q '"holder":[[:space:]]*"other"' "$WORK/ops-node.json" || { cat "$WORK/ops-node.json"; return 1; }
  kt node "$node" -n ml >"$WORK/ops-node.txt" && kt nodes -n ml -o json >"$WORK/ops-nodes.json" || return 1
  ! grep -q 'team-b\|rival' "$WORK/ops-node.txt" "$WORK/ops-nodes.json"
}
e2e_check "a user with view in ml: its pods' GPUs, nothing of team-b's; with view in gpu-system, team-b's as \"other\"" check_tenant

# ---- 9. kubectl get gns: the extender's counts with the reservations ----
# The extender back (period 2 s): the columns of `kubectl get gns` (status.allocation,
# written by the extender's background writer) equal the ledgers' counts (kubectl gpu
# nodes, checked against the ledgers in 1) within a period; a burst of binds costs a
# few writes, not one a bind; deleting the pods brings the columns back to free; a
# restarted extender writes nothing that is already there.
PERIOD=2
# gns_cols FILE: `kubectl get gns -o wide` as NODE ALLOCATED WHOLE SHARED FREE UNHEALTHY PODS lines.
gns_cols() {
  kubectl get gns -o wide >"$1.txt" || return 1
  python3 - "$1.txt" >"$1" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = lines[0]
cols = ["NAME", "TOTAL", "ALLOCATED", "FREE", "UNHEALTHY", "WHOLE", "SHARED", "PODS", "MODEL", "VENDOR", "COUNTED", "AGE"]
starts = [head.index(c) for c in cols]
assert starts == sorted(starts), head
for l in lines[1:]:
    f = {c: l[a:b].strip() for c, a, b in zip(cols, starts, starts[1:] + [None])}
    print(f["NAME"], f["ALLOCATED"], f["WHOLE"], f["SHARED"], f["FREE"], f["UNHEALTHY"], f["PODS"])
PY
}
# The same from kubectl gpu nodes (the ledgers and GpuNodeStatus).
ledger_cols() {
  kgpu nodes -o json | python3 -c '
import json, sys
for n in json.load(sys.stdin)["items"]:
    if n["agent"]:
        print(n["node"], n["whole"] + n["shared"], n["whole"], n["shared"], n["free"], n["unhealthy"], n["reservations"])' >"$1"
}
cols_match() { gns_cols "$WORK/gns-cols" && ledger_cols "$WORK/ledger-cols" && diff "$WORK/ledger-cols" "$WORK/gns-cols"; }
# within BOUND seconds; prints how long it took
match_within() {
  local t0=$SECONDS
  cluster_wait "$1" "kubectl get gns equal to the ledgers" cols_match >/dev/null || { cols_match; cat "$WORK/gns-cols.txt"; return 1; }
  echo "$((SECONDS - t0))"
}
writes() { curl -s "$E2E_URL/metrics" | awk '$1 == "gpu_extender_node_summary_writes_total{result=\"written\"}" {print $2}'; }
binds() { curl -s "$E2E_URL/metrics" | awk '$1 == "gpu_extender_binds_total{result=\"ok\"}" {print $2}'; }
# ext_on_port NAME: the extender again, on the first one's port (kube-scheduler's
# configuration names it), with the period above.
ext_on_port() {
  cluster_spawn "$1" "$E2E_EXTENDER" serve --kubeconfig "$CLUSTER_EXTENDER_KUBECONFIG" --listen "127.0.0.1:$E2E_PORT_ext" \
    --debug-listen "" --identity "$1" --reap-interval 2 --node-summary-interval $PERIOD &&
    cluster_wait 30 "$1 ready" curl -sf "$E2E_URL/readyz" >/dev/null
}
check_gns_columns() {
  local took
  took=$(match_within $((PERIOD * 2 + 3))) || return 1
  kubectl get gns >"$WORK/gns-table.txt" && head -1 "$WORK/gns-table.txt" |
    grep -qE '^NAME +TOTAL +ALLOCATED +FREE +UNHEALTHY +MODEL +COUNTED +AGE$' || { cat "$WORK/gns-table.txt"; return 1; }
  # every pod gone: back to free, within a period (plus the reaper's pass and the watch)
  kubectl delete pods --all -n ml --grace-period=0 --force --wait=false >/dev/null 2>&1 &&
    kubectl delete pods --all -n team-b --grace-period=0 --force --wait=false >/dev/null 2>&1 || return 1
  local t0=$SECONDS
  all_free() {
    gns_cols "$WORK/gns-free" && [[ $(awk '$2 != 0 || $7 != 0' "$WORK/gns-free") == "" ]] &&
      grep -qE '^k1 0 0 0 8 0 0$' "$WORK/gns-free" && grep -qE '^k2 0 0 0 4 0 0$' "$WORK/gns-free"
  }
  cluster_wait 20 "the columns back to free" all_free || { cat "$WORK/gns-free.txt"; return 1; }
  echo "kubectl get gns equal to the ledgers ${took}s after the extender started; back to free $((SECONDS - t0))s after the pods were deleted (reaper pass, then a ${PERIOD}s period)" >"$WORK/gns-figures"
  # a burst: 40 shares bound in a few seconds
  local w0 b0 i pids=()
  w0=$(writes) b0=$(binds)
  for i in $(seq 1 40); do
    e2e_pod ml "burst-$i" '{"gpu.scheduling/gpu-memory":"1024","gpu.scheduling/gpu-core":"5"}' &
    pids+=($!)
  done
  wait "${pids[@]}"
  local t1=$SECONDS
  cluster_wait 60 "the burst bound" bash -c "[[ \$(\"$CLUSTER_BIN/kubectl\" --kubeconfig=\"$CLUSTER_KUBECONFIG\" -n ml get pods -o 'jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 40 ]]" || return 1
  local bound_in=$((SECONDS - t1))
  took=$(match_within $((PERIOD + 3))) || return 1
  local w1 b1
  w1=$(writes) b1=$(binds)
  echo "burst: $((b1 - b0)) binds (all bound within ${bound_in}s), $((w1 - w0)) GpuNodeStatus writes (2 nodes, a ${PERIOD}s period); columns equal to the ledgers ${took}s after the last bind was seen" >>"$WORK/gns-figures"
  ((b1 - b0 == 40)) || { echo "binds $b0 -> $b1"; return 1; }
  (((w1 - w0) * 4 <= b1 - b0)) || { echo "writes $w0 -> $w1 for $((b1 - b0)) binds"; return 1; }
  grep -qE '^k[12] [1-9][0-9]* 0 [1-9]' "$WORK/gns-cols" || { cat "$WORK/gns-cols.txt"; return 1; }
}
# a restarted extender writes nothing that is already there; an update that
# drops the counts (as an agent older than them does) is undone within a period
check_gns_restart() {
  sleep $((PERIOD * 2 + 1))
  [[ $(writes) == 0 ]] || { echo "the restarted extender wrote $(writes) times"; return 1; }
  cols_match || return 1
  kubectl get gns k2 -o json | python3 -c 'import json,sys; g=json.load(sys.stdin); g["status"].pop("allocation"); print(json.dumps(g))' |
    kubectl replace -f - >/dev/null || return 1
  match_within $((PERIOD + 3)) >/dev/null || return 1
  [[ $(writes) == 1 ]] || { echo "the extender wrote $(writes) times, want 1"; return 1; }
}
# (started here, not inside a check: a check's output is read until every process it started closes it)
if ext_on_port ext2; then
  e2e_check "kubectl get gns: allocated, free and unhealthy are the ledgers' within a period, free again after the pods go; a burst of 40 binds costs a few writes" check_gns_columns
  while read -r line; do e2e_note "$line"; done <"$WORK/gns-figures" 2>/dev/null
  cluster_kill ext2 >/dev/null 2>&1
  if ext_on_port ext3; then
    e2e_check "kubectl get gns: a restarted extender writes nothing already there; counts an update dropped are written again" check_gns_restart
  else
    e2e_check "the extender restarted (ext3)" false
  fi
else
  e2e_check "the extender back for kubectl get gns (ext2)" false
fi

# Real output, for docs/kubectl-gpu.md.
if [[ -n ${KGPU_SHOW:-} ]]; then
  for f in html-check.txt nodes.txt nodes-wide.txt node-k1.txt node-k2.txt pods-ml.txt why-big.txt why-waits.txt why-job.txt disagree.txt \
    disagree-unhealthy.txt disagree-node.txt tenant-pods.txt tenant-nodes.txt ops-node.txt; do
    echo "==== $f"; cat "$WORK/$f"
  done
  # The GPU page and its picture, for the docs.
  cp "$WORK/debug-nodes.png" "$WORK/node-k1.html" "$E2E_ROOT/build/" 2>/dev/null
fi
e2e_summary
