#!/usr/bin/env bash
# The documented install and uninstall, on a fresh cluster: the harness's
# control plane and this machine as a real kubelet node (containerd, runc,
# 8 fake GPUs), the image of `make image` imported into its containerd, and
#
#   1. `kubectl apply -k` of deploy/ (through test/node/local, as `make
#      cluster` does: deploy/ with only the harness's network changed) in one
#      pass; deploy/'s own Job makes the certificates (gpu-extender certs),
#      fills the webhook's caBundle, and the product rolls out; the programs
#      in the image (gpu-extender, gpu-agent, kubectl-gpu) print the version
#      deploy/ tags it with;
#   2. the certificates are kept: the renewal CronJob run now, and the apply
#      again, change no Secret and no caBundle;
#   3. the webhook self-check of docs/webhook-certificates.md, run as written;
#   4. a GPU pod runs with its devices;
#   5. the uninstall block of docs/operations.md, run as written, while that
#      pod runs: the pod keeps running with its devices, a new GPU pod is
#      placed nowhere, and nothing of the product is left but what the docs
#      list as kept on purpose.
#
#   test/e2e/install.sh            (root; make all first)
#
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh
. test/node/deploy.sh

NS=ml
VERSION=$(cat VERSION)
CERT_SECRETS="gpu-extender-ca gpu-extender-webhook-tls gpu-extender-client-ca gpu-scheduler-extender-client"

if (($(id -u) != 0)); then
  echo "install.sh needs root (a real kubelet node)"
  echo "install: 0 passed, 1 failed"
  exit 1
fi

# doc_block FILE PATTERN: the first ```sh block of FILE that contains PATTERN.
doc_block() {
  python3 - "$1" "$2" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for block in re.findall(r"```sh\n(.*?)```", text, re.S):
    if sys.argv[2] in block:
        sys.stdout.write(block)
        sys.exit(0)
sys.exit("no sh block with %r in %s" % (sys.argv[2], sys.argv[1]))
PY
}

# ---- set-up: control plane, default scheduler, the node -----------------------------

t0=$SECONDS
setup() {
  cluster_up || return 1
  KUBECTL="$CLUSTER_BIN/kubectl --kubeconfig=$CLUSTER_KUBECONFIG"
  node_start_default_scheduler >/dev/null || return 1
  cluster_node_up || return 1
  cluster_fake_gpus "$NODE_FAKE_ROOT" 8
}
if ! setup; then
  e2e_check "the control plane and the real node come up" false
  e2e_summary
  exit 1
fi
e2e_note "control plane and node up in $((SECONDS - t0))s"
# A check runs in a subshell: its figures are kept here and printed at the end.
note() { echo "$*" >>"$CLUSTER_DIR/install-notes"; }
product_logs() {
  ((E2E_FAILED)) || return 0
  local p
  for p in gpu-extender-certs gpu-agent gpu-extender; do
    echo "---- $p"
    kubectl -n gpu-system logs -l "app.kubernetes.io/name=$p" --tail=30 2>/dev/null
  done
}
cluster_add_cleanup product_logs

secret_versions() {  # NAME=resourceVersion of each certificate Secret
  local s
  for s in $CERT_SECRETS; do
    echo "$s=$(kubectl -n gpu-system get secret "$s" -o 'jsonpath={.metadata.resourceVersion}')"
  done
}
ca_bundle() { kubectl get mutatingwebhookconfiguration gpu-env-injector -o 'jsonpath={.webhooks[0].clientConfig.caBundle}'; }
secret_field() {  # SECRET KEY: the decoded field
  kubectl -n gpu-system get secret "$1" -o "jsonpath={.data.${2//./\\.}}" | base64 -d
}

# ---- 1. one apply on the fresh cluster ------------------------------------------------

install() {
  local t=$SECONDS
  node_deploy_product || return 1
  local tc=$SECONDS
  node_wait_product || return 1
  note "kubectl apply -k to certificates made in $((tc - t))s, to the product rolled out in $((SECONDS - t))s"
}
e2e_check "kubectl apply -k deploy/ installs everything in one pass on a fresh cluster, the Job makes the certificates" install

certs_made() {
  local s d
  d=$CLUSTER_DIR/certs-check
  mkdir -p "$d"
  for s in $CERT_SECRETS; do
    [[ $(kubectl -n gpu-system get secret "$s" -o 'jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}') == gpu-extender-certs ]] ||
      { echo "no Secret $s made by gpu-extender certs"; return 1; }
  done
  ca_bundle | base64 -d >"$d/bundle.crt"
  secret_field gpu-extender-ca ca.crt | cmp -s - "$d/bundle.crt" || { echo "caBundle is not the CA's bundle"; return 1; }
  secret_field gpu-extender-webhook-tls tls.crt >"$d/tls.crt"
  secret_field gpu-scheduler-extender-client tls.crt >"$d/client.crt"
  secret_field gpu-extender-client-ca ca.crt | cmp -s - "$d/bundle.crt" || { echo "the client CA is not the bundle"; return 1; }
  openssl verify -CAfile "$d/bundle.crt" -purpose sslserver -verify_hostname gpu-extender.gpu-system.svc "$d/tls.crt" &&
    openssl verify -CAfile "$d/bundle.crt" -purpose sslclient "$d/client.crt"
}
e2e_check "four Secrets, the caBundle and the client CA agree; the serving certificate names the Service, the client one is for clients" certs_made

versions() {
  local tag got b
  tag=$(kubectl kustomize deploy/ | awk '$1 == "image:" && $2 ~ /^gpu-extender:/ {sub(/.*:/, "", $2); print $2; exit}')
  [[ $tag == "$VERSION" ]] || { echo "deploy/ tags the image $tag, VERSION is $VERSION"; return 1; }
  [[ $(kubectl -n gpu-system get deployment gpu-extender -o 'jsonpath={.spec.template.spec.containers[0].image}') == "gpu-extender:$VERSION" ]] ||
    { echo "the extender does not run gpu-extender:$VERSION"; return 1; }
  # every overlay renders, with the image and the certificate Job of this version
  local d jobs images want
  for d in deploy deploy/overlays/every-node deploy/overlays/monitoring deploy/overlays/without-podgroup-crd \
    deploy/overlays/cert-manager test/node/local; do
    jobs=$(kubectl kustomize "$d" | grep -c "name: gpu-extender-certs-$VERSION$")
    images=$(kubectl kustomize "$d" | grep -c "image: gpu-extender:$VERSION$")
    want="1 4"
    [[ $d == */cert-manager ]] && want="0 2"   # no Job, no CronJob
    [[ "$jobs $images" == "$want" ]] || { echo "$d: $jobs certificate Jobs of $VERSION, $images images of it"; return 1; }
  done
  for b in gpu-extender gpu-agent kubectl-gpu; do
    got=$(kubectl -n gpu-system exec deployment/gpu-extender -- "/usr/local/bin/$b" --version) || return 1
    [[ $(awk '{print $2}' <<<"$got") == "$VERSION" ]] || { echo "$b in the image says: $got"; return 1; }
  done
  note "gpu-extender:$VERSION runs; in it: $got"
}
e2e_check "the image is gpu-extender:VERSION, as deploy/ and every overlay name it (and the Job), and its programs (kubectl-gpu too) print that version" versions

certs_rbac() {
  local sa=system:serviceaccount:gpu-system:gpu-extender-certs row want got bad=0
  while read -r want row; do
    got=$(kubectl auth can-i --as="$sa" $row 2>/dev/null)
    [[ $got == "$want" ]] || { echo "can-i $row: $got, wants $want"; bad=1; }
  done <<'ROWS'
yes get secret/gpu-extender-ca -n gpu-system
yes update secret/gpu-scheduler-extender-client -n gpu-system
yes create secrets -n gpu-system
yes patch mutatingwebhookconfigurations/gpu-env-injector
no list secrets -n gpu-system
no get secret/gpu-cluster-api -n gpu-system
no delete secret/gpu-extender-ca -n gpu-system
no get secrets -n kube-system
no create secrets -n default
no patch mutatingwebhookconfigurations/other-webhook
no patch validatingwebhookconfigurations/gpu-env-injector
no list pods -A
ROWS
  ((bad == 0))
}
e2e_check "the certificate Job's service account: its four Secrets and the one caBundle, nothing more (12 can-i rows)" certs_rbac

# ---- 2. re-running keeps valid certificates -------------------------------------------

keeps() {
  local before bundle
  before=$(secret_versions) bundle=$(ca_bundle)
  kubectl -n gpu-system create job certs-again --from=cronjob/gpu-extender-certs >/dev/null || return 1
  kubectl -n gpu-system wait --for=condition=complete job/certs-again --timeout=120s >/dev/null || return 1
  kubectl -n gpu-system logs job/certs-again | grep -q '"written":"0"' || { kubectl -n gpu-system logs job/certs-again; return 1; }
  node_overlay && kubectl apply -k "$NODE_OVERLAY" >/dev/null || return 1
  [[ $(secret_versions) == "$before" ]] || { echo "Secrets changed: $before -> $(secret_versions)"; return 1; }
  [[ $(ca_bundle) == "$bundle" ]] || { echo "the caBundle changed"; return 1; }
}
e2e_check "the renewal CronJob run now and the apply again keep every certificate and the caBundle" keeps

# ---- 3. the docs' webhook self-check ----------------------------------------------------

self_check() {
  local block out
  block=$(doc_block docs/webhook-certificates.md 'webhook-check') || return 1
  out=$(bash -c "$block") || { echo "$out"; return 1; }
  [[ $out == *'"gpu.scheduling/managed":"true"'* ]] || { echo "the self-check printed: $out"; return 1; }
  note "self-check: $out"
}
e2e_check "the webhook self-check of docs/webhook-certificates.md prints the webhook's label" self_check

# ---- 4. a GPU pod runs -----------------------------------------------------------------------

gpu_pod() {  # NAME: a 2-GPU busybox pod on the real node that prints its devices and sleeps
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"$NS"},
 "spec":{"schedulerName":"gpu-scheduler","restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "nodeSelector":{"gpu-extender.test/real-node":"true"},
   "containers":[{"name":"main","image":"$CLUSTER_BUSYBOX_IMAGE","imagePullPolicy":"Never",
     "command":["sh","-c","echo \"devices=\$(ls /dev | grep '^nvidia[0-9]' | tr '\\\\n' ' ')\"; exec sleep 100000"],
     "resources":{"limits":{"gpu.scheduling/gpu":"2"}}}]}}
JSON
}
pod_phase() { kubectl -n "$NS" get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null; }
pod_devices() { kubectl -n "$NS" exec "$1" -- ls /dev 2>/dev/null | grep -c '^nvidia[0-9]'; }
gpu_runs() {
  cluster_ensure_namespace "$NS" >/dev/null && gpu_pod train || return 1
  cluster_wait 90 "pod train Running" bash -c "[[ \$($KUBECTL -n $NS get pod train -o 'jsonpath={.status.phase}') == Running ]]" ||
    return 1
  [[ $(pod_devices train) == 2 ]] || { echo "train sees $(pod_devices train) GPUs"; return 1; }
}
e2e_check "a 2-GPU pod runs with its two devices" gpu_runs

# ---- 5. the docs' uninstall, with the GPU pod running -------------------------------------

uninstall() {
  local block t=$SECONDS
  block=$(doc_block docs/operations.md 'kubectl delete -k deploy/') || return 1
  bash -c "set -e; $block" || { echo "the uninstall block failed"; return 1; }
  note "uninstalled in $((SECONDS - t))s"
}
e2e_check "the uninstall of docs/operations.md runs as written while a GPU pod runs" uninstall

pod_keeps() {
  local restarts
  sleep 5 & wait $!
  [[ $(pod_phase train) == Running ]] || { echo "train is $(pod_phase train)"; return 1; }
  restarts=$(kubectl -n "$NS" get pod train -o 'jsonpath={.status.containerStatuses[0].restartCount}')
  [[ $restarts == 0 ]] || { echo "train restarted $restarts times"; return 1; }
  [[ $(pod_devices train) == 2 ]] || { echo "train sees $(pod_devices train) GPUs"; return 1; }
}
e2e_check "the running GPU pod keeps running with its two devices, not restarted" pod_keeps

no_new_placement() {
  gpu_pod late || return 1
  sleep 5 & wait $!
  [[ $(pod_phase late) == Pending && -z $(e2e_pod_node "$NS" late) ]] ||
    { echo "late is $(pod_phase late) on '$(e2e_pod_node "$NS" late)'"; return 1; }
  kubectl -n "$NS" delete pod late --wait=false >/dev/null
}
e2e_check "a new GPU pod is placed nowhere (no gpu-scheduler)" no_new_placement

gpu_allocatable() {  # the node's allocatable gpu.scheduling/* that are not 0
  kubectl get node "$CLUSTER_NODE_NAME" -o json | python3 -c '
import json, sys
for k, v in json.load(sys.stdin)["status"].get("allocatable", {}).items():
    if k.startswith("gpu.scheduling/") and v != "0":
        print("allocatable %s=%s" % (k, v))'
}
nothing_left() {
  local left=() out kind
  local i
  for ((i = 0; i < 120; i++)); do [[ -z $(gpu_allocatable) ]] && break; sleep 0.5; done
  cluster_wait 60 "namespace gpu-system gone" _cluster_absent namespace gpu-system || left+=("namespace gpu-system")
  out=$(kubectl get crd -o name | grep -E 'gpu\.scheduling|podgroups\.scheduling\.x-k8s\.io') && left+=($out)
  for kind in clusterrole clusterrolebinding mutatingwebhookconfiguration validatingadmissionpolicy \
    validatingadmissionpolicybinding; do
    out=$(kubectl get "$kind" -o name | grep -E '/gpu-') && left+=($out)
  done
  out=$(kubectl -n kube-system get rolebinding -o name | grep gpu-) && left+=($out)
  out=$(kubectl get lease -A -l gpu.scheduling/reservation=true -o name) && [[ -n $out ]] && left+=($out)
  out=$(kubectl get node "$CLUSTER_NODE_NAME" -o json | python3 -c '
import json, sys
n = json.load(sys.stdin)
for k in n["metadata"].get("labels", {}):
    if k.startswith("gpu.scheduling/") and k != "gpu.scheduling/gpu-node":
        print("label " + k)')
  out+=$(gpu_allocatable)
  [[ -n $out ]] && left+=("$out")
  out=$(ls /var/lib/kubelet/device-plugins | grep gpu-scheduling) && left+=($out)
  ((${#left[@]} == 0)) || { printf 'left behind: %s\n' "${left[@]}"; return 1; }
  note "kept on purpose: the pod train and its annotations, the node label gpu.scheduling/gpu-node, the node's gpu.scheduling/* capacity at 0 (kubelet's)"
}
e2e_check "nothing of the product is left but what docs/operations.md lists as kept" nothing_left

kubectl -n "$NS" delete pod --all --grace-period=0 --force --wait=false >/dev/null 2>&1
while IFS= read -r line; do e2e_note "$line"; done <"$CLUSTER_DIR/install-notes" 2>/dev/null
e2e_note "the whole suite: $((SECONDS - t0))s"
e2e_summary
