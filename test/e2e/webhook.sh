#!/usr/bin/env bash
# The real kube-apiserver calls the extender's mutating admission webhook
# (HTTPS /mutate, AdmissionReview v1) for real pod creations:
#   - a GPU pod gets the four visible-devices env vars as downward-API
#     fieldRefs in every container and init container (this suite runs with
#     webhook.visibleDevicesEnv on; deploy/ turns it off for the device
#     plugin) and the label gpu.scheduling/managed=true; a legacy share
#     (gpu + gpu-memory) is turned into gpu-share;
#   - a claim-only pod gets its GpuClaim's count of gpu or gpu-share, or the
#     marker resource gpu.scheduling/claim when the claim cannot be read;
#   - a plain pod is sent to the webhook and comes back untouched; pods in
#     kube-system or labelled gpu.scheduling/webhook=disabled are not sent;
#   - a pod that selects GPUs itself (env, ephemeral container, CDI or
#     allocation annotation, on CREATE and UPDATE) is refused by the webhook,
#     and by deploy/base/08-admission-policy.yaml also where the webhook is not
#     asked (opt-out label) or is down; a privileged kube-system pod is exempt;
#   - deploy/base/08-admission-policy.yaml refuses, for real users (impersonated:
#     a namespace editor, a namespace admin), changes of the labels and
#     annotation the reservation rests on, except by the extender's service
#     account; mounts into the NVIDIA runtime's device list and hostPaths of
#     GPU devices outside trusted namespaces; GPU pods with spec.nodeName;
#   - with the webhook down, failurePolicy Ignore lets pods be created.
# The webhook configuration is deploy/base/05-webhook.yaml itself, with only its
# clientConfig switched from the in-cluster Service to https://127.0.0.1:PORT
# (there are no Services without kube-proxy). The serving certificate is
# signed by the harness's cluster CA for IP 127.0.0.1.
#
#   test/e2e/webhook.sh          (E2E_EXTENDER=path overrides build/gpu-extender)
#
# Ends with "webhook: N passed, N failed"; nonzero on any failure. The
# harness traps stop every process it started.
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

NS=webhook-e2e
IMAGE=registry.k8s.io/pause:3.10
t_start=$SECONDS

bail() {  # a step the rest depends on failed: say why, count it, stop
  echo "FAIL $*"
  E2E_FAILED=$((E2E_FAILED + 1))
  echo "webhook.sh took $((SECONDS - t_start))s"
  e2e_summary
  exit 1
}

# ---- preflight: the binary must serve the webhook -------------------------
[[ -x $E2E_EXTENDER ]] || bail "no executable $E2E_EXTENDER (run make)"
if ! "$E2E_EXTENDER" serve --help 2>&1 | grep -q -- '--webhook-listen'; then
  bail "'gpu-extender serve --help' does not list --webhook-listen: this build has no webhook settings"
fi

cluster_up || bail "cluster_up (the real control plane did not start)"
cluster_ensure_namespace "$NS" >/dev/null || bail "namespace $NS"

# ---- a serving certificate for 127.0.0.1, signed by the cluster CA ---------
WH=$CLUSTER_DIR/webhook
mkdir -p "$WH"
make_cert() {
  cluster_make_cert "$WH" tls "/CN=gpu-extender-webhook" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1" &&
    openssl verify -CAfile "$CLUSTER_CA_FILE" "$WH/tls.crt" >/dev/null
}
make_cert || bail "signing the webhook's serving certificate with CLUSTER_CA_FILE/CLUSTER_CA_KEY"

# ---- the extender (standalone inventory) with its webhook on a free port ----
mapfile -t PORTS < <("$CLUSTER_BIN/freeport" 2)
HTTP_PORT=${PORTS[0]:-} WH_PORT=${PORTS[1]:-}
[[ -n $HTTP_PORT && -n $WH_PORT ]] || bail "no free ports"
WH_URL=https://127.0.0.1:$WH_PORT/mutate
cluster_spawn gpu-extender "$E2E_EXTENDER" serve --inventory config/demo-inventory.json \
  --listen "127.0.0.1:$HTTP_PORT" --webhook-listen "127.0.0.1:$WH_PORT" \
  --webhook-cert "$WH/tls.crt" --webhook-key "$WH/tls.key" --tls-reload-interval 1 --log-level debug
EXT_PID=$CLUSTER_LAST_PID

PROBE='{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"probe-1","operation":"DELETE","object":null}}'
probe() {  # curl verifies the certificate against the cluster CA (no -k)
  curl -sS --max-time 2 --cacert "$CLUSTER_CA_FILE" -H 'Content-Type: application/json' \
    -d "$PROBE" "$WH_URL" | grep -q '"uid":"probe-1"'
}
if ! cluster_wait 15 "the webhook on $WH_URL" probe >/dev/null 2>&1; then
  if cluster_alive gpu-extender; then
    why="the extender runs but nothing answers on $WH_URL: is the webhook wired into src/serve.c (--webhook-listen)?"
  else
    why="the extender exited"
  fi
  echo "--- extender log:"; tail -15 "$(cluster_log gpu-extender)"
  bail "$why"
fi
e2e_check "the webhook answers AdmissionReview over TLS (certificate verified against the cluster CA)" probe
check_bad_review() {
  local out
  out=$(curl -sS --max-time 2 --cacert "$CLUSTER_CA_FILE" -w ' %{http_code}' -d 'not json' "$WH_URL")
  [[ $out == *'"Error"'*' 400' ]] || { echo "$out"; return 1; }
  out=$(curl -sS --max-time 2 --cacert "$CLUSTER_CA_FILE" -w ' %{http_code}' \
    -d '{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u-9"}}' "$WH_URL")
  [[ $out == *'"uid":"u-9","allowed":false,"status":{"code":400'*' 200' ]] || { echo "$out"; return 1; }
  probe   # and the next request is served
}
e2e_check "a malformed review gets an error (400 / allowed:false), and the webhook keeps serving" check_bad_review

# ---- register deploy/base/05-webhook.yaml, pointed at 127.0.0.1 ------------------
e2e_check "deploy/base/05-webhook.yaml is accepted by the API server" \
  kubectl apply -f deploy/base/05-webhook.yaml
CA_B64=$(base64 -w0 "$CLUSTER_CA_FILE")
e2e_check "clientConfig switched to $WH_URL with caBundle = the cluster CA" \
  kubectl patch mutatingwebhookconfiguration gpu-env-injector --type=json \
  -p "[{\"op\":\"replace\",\"path\":\"/webhooks/0/clientConfig\",\"value\":{\"url\":\"$WH_URL\",\"caBundle\":\"$CA_B64\"}}]"

# ---- pod checks -------------------------------------------------------------
cat >"$WH/check.py" <<'PY'
"""check.py MODE [ARGS]: reads a Pod (JSON) on stdin; exit 0 when it matches."""
import json, sys

VARS = {
    "CUDA_VISIBLE_DEVICES": "gpu.scheduling/cuda-visible-devices",
    "NVIDIA_VISIBLE_DEVICES": "gpu.scheduling/nvidia-visible-devices",
    "ROCR_VISIBLE_DEVICES": "gpu.scheduling/rocr-visible-devices",
    "ZE_AFFINITY_MASK": "gpu.scheduling/ze-affinity-mask",
}
pod = json.load(sys.stdin)
mode, args = sys.argv[1], sys.argv[2:]
spec, meta = pod.get("spec", {}), pod.get("metadata", {})
problems = []

def containers():
    return [("initContainers", c) for c in spec.get("initContainers") or []] + \
           [("containers", c) for c in spec.get("containers") or []]

def injected(kind, c):
    env = c.get("env") or []
    for var, ann in VARS.items():
        found = [e for e in env if e.get("name") == var]
        if len(found) != 1:
            problems.append("%s %s: %d entries for %s" % (kind, c["name"], len(found), var))
            continue
        e = found[0]
        fr = (e.get("valueFrom") or {}).get("fieldRef") or {}
        want = "metadata.annotations['%s']" % ann
        if fr.get("fieldPath") != want or fr.get("apiVersion", "v1") != "v1":
            problems.append("%s %s: %s fieldRef is %s, want %s" % (kind, c["name"], var, fr, want))

def marker(c, name="gpu.scheduling/claim"):
    res = c.get("resources") or {}
    return [(res.get(k) or {}).get(name) for k in ("limits", "requests")]

labels = meta.get("labels") or {}
if mode == "gpu":              # args: the container with the user's OTHER variable
    user_ctr = args[0]
    for kind, c in containers():
        injected(kind, c)
        if marker(c) != [None, None]:
            problems.append("%s has the marker resource: %s" % (c["name"], marker(c)))
    others = [e for c in spec["containers"] if c["name"] == user_ctr for e in c.get("env") or [] if e["name"] == "OTHER"]
    if [e.get("value") for e in others] != ["x"]:
        problems.append("the user's OTHER variable changed: %s" % others)
    if labels.get("gpu.scheduling/managed") != "true" or labels.get("app") != "train":
        problems.append("labels: %s" % labels)
elif mode == "claim":
    for kind, c in containers():
        injected(kind, c)
    if marker(spec["containers"][0]) != ["1", "1"]:
        problems.append("first container's marker (limits, requests): %s" % marker(spec["containers"][0]))
    for c in spec["containers"][1:]:
        if marker(c) != [None, None]:
            problems.append("%s has the marker too" % c["name"])
    if labels.get("gpu.scheduling/managed") != "true":
        problems.append("labels: %s" % labels)
elif mode == "resource":       # args: the first container's RESOURCE and COUNT, in limits and requests; RESOURCE absent
    name, count, gone = args
    if marker(spec["containers"][0], name) != [count, count]:
        problems.append("%s (limits, requests): %s" % (name, marker(spec["containers"][0], name)))
    if marker(spec["containers"][0], gone) != [None, None]:
        problems.append("%s still there: %s" % (gone, marker(spec["containers"][0], gone)))
elif mode == "untouched":       # no reference to our annotations (a user's own value may be there)
    for kind, c in containers():
        refs = [e["name"] for e in c.get("env") or [] if e.get("name") in VARS and "valueFrom" in e]
        if refs:
            problems.append("%s %s got env %s" % (kind, c["name"], refs))
        if marker(c) != [None, None]:
            problems.append("%s has the marker resource" % c["name"])
    if "gpu.scheduling/managed" in labels:
        problems.append("labels: %s" % labels)
else:
    problems.append("unknown mode " + mode)
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY

pod_is() {  # NS NAME MODE [ARGS...]
  local ns=$1 name=$2; shift 2
  kubectl -n "$ns" get pod "$name" -o json | python3 "$WH/check.py" "$@"
}

# A GPU pod: a GPU resource on one container, an init container, and a
# container with a variable of its own.
gpu_pod() {  # NS NAME [EXTRA_LABELS_JSON]
  cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$2","namespace":"$1","labels":{"app":"train"${3:-}}},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "initContainers":[{"name":"init","image":"$IMAGE"}],
   "containers":[
     {"name":"main","image":"$IMAGE","resources":{"limits":{"gpu.scheduling/gpu":"1"}}},
     {"name":"side","image":"$IMAGE","env":[{"name":"OTHER","value":"x"}]}]}}
JSON
}
plain_pod() {  # NS NAME
  cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$2","namespace":"$1"},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"$IMAGE","resources":{"limits":{"cpu":"100m"}}}]}}
JSON
}

# The API server starts calling a new webhook configuration within a moment
# (an informer); a server-side dry run shows when it does, and exercises
# sideEffects: None (dry runs are sent only to side-effect-free webhooks).
dry_run_injected() {
  gpu_pod "$NS" dry | kubectl create --dry-run=server -o json -f - | python3 "$WH/check.py" gpu side
}
e2e_check "a server-side dry run of a GPU pod is mutated (sideEffects None)" \
  cluster_wait 20 "the API server calling the webhook" dry_run_injected

create() { kubectl create -f - >/dev/null; }

gpu_pod "$NS" gpu | create
e2e_check "GPU pod: every container and init container has the four env vars as fieldRefs, the user's own kept, label managed=true" \
  pod_is "$NS" gpu gpu side

create <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"claim","namespace":"$NS","annotations":{"gpu.scheduling/claim":"pair"}},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"$IMAGE"},{"name":"second","image":"$IMAGE","resources":{"limits":{"cpu":"1"}}}]}}
JSON
e2e_check "claim-only pod, claim not found: marker resource gpu.scheduling/claim=1 in the first container's limits and requests, env vars, label" \
  pod_is "$NS" claim claim

# Claims the webhook can read (the demo inventory's, in namespace ml) give
# kubelet a real count, so that its record names the devices.
cluster_ensure_namespace ml >/dev/null
claim_pod() {  # NAME CLAIM
  cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"ml","annotations":{"gpu.scheduling/claim":"$2"}},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,"containers":[{"name":"main","image":"$IMAGE"}]}}
JSON
}
claim_pod pair two-h100-nvlink | create
e2e_check "claim-only pod, Exclusive GpuClaim of 2: gpu.scheduling/gpu=2, no marker" \
  pod_is ml pair resource gpu.scheduling/gpu 2 gpu.scheduling/claim
claim_pod slice shared-slice | create
e2e_check "claim-only pod, Shared GpuClaim: gpu.scheduling/gpu-share=1, no marker" \
  pod_is ml slice resource gpu.scheduling/gpu-share 1 gpu.scheduling/claim
create <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"legacy-share","namespace":"$NS"},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,"containers":[{"name":"main","image":"$IMAGE",
   "resources":{"limits":{"gpu.scheduling/gpu":"1","gpu.scheduling/gpu-memory":"4096"}}}]}}
JSON
e2e_check "legacy share (gpu + gpu-memory): turned into gpu-share=1, gpu removed" \
  pod_is "$NS" legacy-share resource gpu.scheduling/gpu-share 1 gpu.scheduling/gpu

mutate_calls() {
  curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk '$1 == "gpu_extender_requests_total{verb=\"mutate\"}" {print $2}'
}
before=$(mutate_calls)
plain_pod "$NS" plain | create
check_plain() {
  pod_is "$NS" plain untouched || return 1
  local after
  after=$(mutate_calls)
  [[ -n $before && -n $after ]] && ((after > before)) || { echo "mutate calls: before=$before after=$after"; return 1; }
}
e2e_check "plain pod: sent to the webhook and left untouched" check_plain

cluster_ensure_namespace kube-system >/dev/null
gpu_pod kube-system sys | create
e2e_check "GPU pod in kube-system is not sent (namespaceSelector)" pod_is kube-system sys untouched
gpu_pod "$NS" optout ',"gpu.scheduling/webhook":"disabled"' | create
e2e_check "GPU pod labelled gpu.scheduling/webhook=disabled is not sent (objectSelector)" pod_is "$NS" optout untouched

# ---- no pod selects GPUs itself ----------------------------------------------
selecting_pod() {  # NS NAME VAR [EXTRA_LABELS_JSON] [SECURITY_CONTEXT_JSON]
  cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$2","namespace":"$1","labels":{"app":"x"${4:-}}},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "containers":[{"name":"main","image":"$IMAGE","env":[{"name":"$3","value":"all"}]${5:-}}]}}
JSON
}
refused() {  # WANT_IN_MESSAGE: creating the pod on stdin fails with that in the error
  local out
  if out=$(kubectl create -f - 2>&1); then echo "created: $out"; return 1; fi
  [[ $out == *"$1"* ]] || { echo "refused, but: $out"; return 1; }
}
check_env_refused() {
  local v
  for v in NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES GPU_DEVICE_ORDINAL ZE_AFFINITY_MASK; do
    selecting_pod "$NS" "sel-$(tr _ - <<<"${v,,}")" "$v" | refused "admission webhook \"env.gpu.scheduling.io\" denied the request: container main sets $v itself" || return 1
  done
}
e2e_check "webhook: a pod setting any GPU-selecting variable itself is refused, saying what to do" check_env_refused
check_ephemeral_refused() {
  local out
  out=$(kubectl -n "$NS" patch pod plain --subresource=ephemeralcontainers --type=strategic -p \
    "{\"spec\":{\"ephemeralContainers\":[{\"name\":\"dbg\",\"image\":\"$IMAGE\",\"env\":[{\"name\":\"CUDA_VISIBLE_DEVICES\",\"value\":\"0\"}]}]}}" 2>&1) &&
    { echo "added: $out"; return 1; }
  [[ $out == *"container dbg sets CUDA_VISIBLE_DEVICES itself"* ]] || { echo "$out"; return 1; }
}
e2e_check "webhook: an ephemeral container that sets CUDA_VISIBLE_DEVICES is refused (pods/ephemeralcontainers UPDATE)" \
  check_ephemeral_refused
check_annotation_refused() {
  local out
  out=$(kubectl -n "$NS" annotate pod plain gpu.scheduling/allocated=n:0,1 2>&1) && { echo "annotated: $out"; return 1; }
  [[ $out == *"gpu.scheduling/allocated is written by the gpu-scheduler's binding only"* ]] || { echo "$out"; return 1; }
  out=$(kubectl -n "$NS" annotate pod plain cdi.k8s.io/gpu=nvidia.com/gpu=all 2>&1) && { echo "annotated: $out"; return 1; }
  [[ $out == *"asks the runtime for CDI devices"* ]] || { echo "$out"; return 1; }
  kubectl -n "$NS" annotate pod plain note=fine >/dev/null   # other annotations still change
}
e2e_check "webhook: an UPDATE that adds an allocation or CDI annotation is refused; others pass" check_annotation_refused

# The policy: the same rules, with no webhook asked.
e2e_check "deploy/base/08-admission-policy.yaml (ValidatingAdmissionPolicy + binding) is accepted" \
  kubectl apply -f deploy/base/08-admission-policy.yaml
policy_refuses_optout() {
  selecting_pod "$NS" optout-sel NVIDIA_VISIBLE_DEVICES ',"gpu.scheduling/webhook":"disabled"' |
    refused "ValidatingAdmissionPolicy 'gpu-scheduling-devices' with binding 'gpu-scheduling-devices' denied request: container main sets a GPU-selecting variable itself"
}
e2e_check "policy: a pod that opted out of the webhook and sets NVIDIA_VISIBLE_DEVICES=all is refused" \
  cluster_wait 20 "the API server enforcing the policy" policy_refuses_optout
check_system_pods() {
  selecting_pod kube-system dcgm NVIDIA_VISIBLE_DEVICES '' ',"securityContext":{"privileged":true}' | create || return 1
  selecting_pod kube-system notpriv NVIDIA_VISIBLE_DEVICES | refused "sets a GPU-selecting variable itself" || return 1
  selecting_pod "$NS" privhere NVIDIA_VISIBLE_DEVICES '' ',"securityContext":{"privileged":true}' |
    refused "sets NVIDIA_VISIBLE_DEVICES itself"
}
e2e_check "policy: a privileged pod in kube-system may set it; an unprivileged one there, or a privileged one elsewhere, may not" \
  check_system_pods
check_policy_annotation() {
  local out
  out=$(kubectl -n "$NS" annotate pod optout gpu.scheduling/device-uuids=GPU-x 2>&1) && { echo "annotated: $out"; return 1; }
  [[ $out == *"ValidatingAdmissionPolicy"*"gpu.scheduling/device-uuids is written by the gpu-scheduler's binding only"* ]] ||
    { echo "$out"; return 1; }
}
e2e_check "policy: an UPDATE of an opted-out pod that sets an allocation annotation is refused" check_policy_annotation
check_policy_mixed() {
  refused "asks gpu.scheduling/gpu together with gpu-memory or gpu-core" <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"mixed","namespace":"$NS","labels":{"gpu.scheduling/webhook":"disabled"}},
 "spec":{"containers":[{"name":"main","image":"$IMAGE","resources":{"limits":{"gpu.scheduling/gpu":"1","gpu.scheduling/gpu-core":"20"}}}]}}
JSON
}
e2e_check "policy: an opted-out pod asking gpu with gpu-core is refused (the webhook did not make it a share)" check_policy_mixed

# ---- what the reservation rests on, and devices by mounts -------------------
# The same policy file's rules against real users: alice may edit pods in
# $NS, nsadmin may do anything there (the rules of the aggregated edit and
# admin roles, which need kube-controller-manager to be filled, written as
# Roles); the extender's service account is given pod edits there only so
# that it may try. Pods labelled gpu.scheduling/webhook=disabled are judged
# by the policies alone.
POLICY_META="ValidatingAdmissionPolicy 'gpu-scheduling-pod-metadata' with binding 'gpu-scheduling-pod-metadata' denied request"
POLICY_DEV="ValidatingAdmissionPolicy 'gpu-scheduling-devices' with binding 'gpu-scheduling-devices' denied request"
EXT_SA=system:serviceaccount:gpu-system:gpu-extender
kubectl -n "$NS" create role pod-editor --verb=get,list,watch,create,update,patch,delete --resource=pods >/dev/null
kubectl -n "$NS" create role ns-admin --verb='*' --resource='*.*' >/dev/null
kubectl -n "$NS" create rolebinding alice-edit --role=pod-editor --user=alice >/dev/null
kubectl -n "$NS" create rolebinding nsadmin-admin --role=ns-admin --user=nsadmin >/dev/null
kubectl -n "$NS" create rolebinding extender-edit --role=pod-editor --user="$EXT_SA" >/dev/null
managed_pod() {  # NAME [EXTRA_LABELS_JSON]: a pod with the labels and annotation the extender reads
  cat <<JSON | create
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"$NS",
   "labels":{"gpu.scheduling/managed":"true","scheduling.x-k8s.io/pod-group":"g"${2:-}},
   "annotations":{"gpu.scheduling/claim":"pair"}},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,"containers":[{"name":"main","image":"$IMAGE"}]}}
JSON
}
fails_with() {  # WANT CMD...: CMD fails and says WANT
  local want=$1 out; shift
  if out=$("$@" 2>&1); then echo "allowed: $* -> $out"; return 1; fi
  [[ $out == *"$want"* ]] || { echo "refused, but: $out"; return 1; }
}
managed_pod meta1 ',"gpu.scheduling/webhook":"disabled"'
meta_policy_loaded() {
  fails_with "$POLICY_META" kubectl --as=alice -n "$NS" label --dry-run=server pod meta1 gpu.scheduling/managed- >/dev/null
}
check_meta_refused() {
  cluster_wait 20 "the metadata policy in force" meta_policy_loaded >/dev/null || meta_policy_loaded || return 1
  local who
  for who in alice nsadmin; do
    fails_with "$POLICY_META: label gpu.scheduling/managed cannot change after the pod is created" \
      kubectl --as=$who -n "$NS" label pod meta1 gpu.scheduling/managed- || return 1
    fails_with "label gpu.scheduling/managed cannot change" \
      kubectl --as=$who -n "$NS" label --overwrite pod meta1 gpu.scheduling/managed=false || return 1
    fails_with "label scheduling.x-k8s.io/pod-group cannot change" \
      kubectl --as=$who -n "$NS" label pod meta1 scheduling.x-k8s.io/pod-group- || return 1
    fails_with "annotation gpu.scheduling/claim cannot change" \
      kubectl --as=$who -n "$NS" annotate --overwrite pod meta1 gpu.scheduling/claim=other || return 1
  done
  # not through pods/status either, not even by the cluster admin
  fails_with "label gpu.scheduling/managed cannot change" kubectl -n "$NS" patch pod meta1 --subresource=status \
    --type=json -p '[{"op":"remove","path":"/metadata/labels/gpu.scheduling~1managed"}]' || return 1
  kubectl --as=alice -n "$NS" label pod meta1 team=a >/dev/null || { echo "another label refused"; return 1; }
  [[ $(kubectl -n "$NS" get pod meta1 -o jsonpath='{.metadata.labels.gpu\.scheduling/managed}') == true ]]
}
e2e_check "policy: a pod's managed and pod-group labels and claim annotation cannot be changed or removed by its owner or the namespace admin (nor through pods/status); other labels can" \
  check_meta_refused
check_meta_extender() {
  kubectl --as="$EXT_SA" -n "$NS" label pod meta1 gpu.scheduling/managed- >/dev/null || return 1
  [[ -z $(kubectl -n "$NS" get pod meta1 -o jsonpath='{.metadata.labels.gpu\.scheduling/managed}') ]]
}
e2e_check "policy: the extender's service account may change them" check_meta_extender
check_meta_webhook() {  # the webhook's layer on a pod it is sent
  fails_with "admission webhook \"env.gpu.scheduling.io\" denied the request: label gpu.scheduling/managed cannot change" \
    kubectl --as=alice -n "$NS" label pod gpu gpu.scheduling/managed-
}
e2e_check "webhook: the same refusal as a second layer" check_meta_webhook

mount_pod() {  # NS NAME VOLUME_JSON MOUNT_PATH [EXTRA_LABELS_JSON] [SECURITY_CONTEXT_JSON]
  cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$2","namespace":"$1","labels":{"app":"m"${5:-}}},
 "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,"volumes":[{"name":"v",$3}],
   "containers":[{"name":"main","image":"$IMAGE","volumeMounts":[{"name":"v","mountPath":"$4"}]${6:-}}]}}
JSON
}
OPTOUT=',"gpu.scheduling/webhook":"disabled"'
PRIVILEGED=',"securityContext":{"privileged":true}'
check_mounts_refused() {
  mount_pod "$NS" m1 '"hostPath":{"path":"/dev/null"}' /var/run/nvidia-container-devices/all "$OPTOUT" |
    refused "$POLICY_DEV: container main mounts a volume inside the NVIDIA runtime's device list" || return 1
  mount_pod "$NS" m2 '"emptyDir":{}' //var/run/./nvidia-container-devices/GPU-0/ "$OPTOUT" |
    refused "container main mounts a volume inside the NVIDIA runtime's device list" || return 1
  mount_pod "$NS" m3 '"hostPath":{"path":"/dev/nvidia0"}' /gpu "$OPTOUT" |
    refused "$POLICY_DEV: volume v (/dev/nvidia0) is a hostPath of GPU devices" || return 1
  mount_pod "$NS" m4 '"hostPath":{"path":"/dev//./dri/"}' /dri "$OPTOUT" |
    refused "volume v (/dev//./dri/) is a hostPath of GPU devices" || return 1
  mount_pod "$NS" m5 '"hostPath":{"path":"/dev/nvidia0"}' /gpu |
    refused "admission webhook \"env.gpu.scheduling.io\" denied the request: volume v is hostPath /dev/nvidia0" || return 1
  mount_pod "$NS" m6 '"hostPath":{"path":"/dev/null"}' /dev-null "$OPTOUT" | create   # not a GPU
}
e2e_check "policy: hostPath /dev/null at /var/run/nvidia-container-devices/all, hostPath /dev/nvidia0 and /dev/dri are refused, saying why (and by the webhook too)" \
  check_mounts_refused
check_mounts_trusted() {
  mount_pod kube-system tm1 '"hostPath":{"path":"/dev/null"}' /var/run/nvidia-container-devices/all "" "$PRIVILEGED" |
    create || return 1
  mount_pod kube-system tm2 '"hostPath":{"path":"/dev/nvidia0"}' /gpu "" "$PRIVILEGED" | create || return 1
  mount_pod kube-system tm3 '"hostPath":{"path":"/dev/nvidia0"}' /gpu | refused "$POLICY_DEV: volume v (/dev/nvidia0)"
}
e2e_check "policy: both are allowed for a privileged pod in a trusted namespace (kube-system), not for an unprivileged one" \
  check_mounts_trusted
check_node_name() {
  refused "$POLICY_DEV: spec.nodeName gpu-x with GPU resources: a pod that names its node skips the scheduler" <<JSON || return 1
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pinned","namespace":"$NS","labels":{"gpu.scheduling/webhook":"disabled"}},
 "spec":{"nodeName":"gpu-x","containers":[{"name":"main","image":"$IMAGE","resources":{"limits":{"gpu.scheduling/gpu":"1"}}}]}}
JSON
  refused "spec.nodeName gpu-x with GPU resources" <<JSON || return 1
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pinned2","namespace":"$NS","labels":{"gpu.scheduling/webhook":"disabled"},
   "annotations":{"gpu.scheduling/claim":"pair"}},"spec":{"nodeName":"gpu-x","containers":[{"name":"main","image":"$IMAGE"}]}}
JSON
  create <<JSON   # no GPU: its own business
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pinned3","namespace":"$NS"},
 "spec":{"nodeName":"gpu-x","containers":[{"name":"main","image":"$IMAGE"}]}}
JSON
}
e2e_check "policy: a GPU pod created with spec.nodeName is refused with the reason; one without GPUs is not" check_node_name
check_node_status_write() {  # a node may write its pods' status, annotations included: not these
  create <<JSON || return 1
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pinned4","namespace":"$NS","annotations":{"gpu.scheduling/policy":"binpack"}},
 "spec":{"nodeName":"gpu-x","containers":[{"name":"main","image":"$IMAGE"}]}}
JSON
  # (straight to the API: kubectl would first GET pods/status, which a node may not)
  as_node() {  # MERGE_PATCH: prints the HTTP status and the body
    curl -s --cacert "$CLUSTER_CA_FILE" -H "Authorization: Bearer $CLUSTER_ADMIN_TOKEN" \
      -H "Impersonate-User: system:node:gpu-x" -H "Impersonate-Group: system:nodes" \
      -H "Content-Type: application/merge-patch+json" -X PATCH -w ' %{http_code}' -d "$1" \
      "$CLUSTER_API_URL/api/v1/namespaces/$NS/pods/pinned4/status"
  }
  local out
  out=$(as_node '{"metadata":{"annotations":{"gpu.scheduling/policy":"spread"}}}')
  [[ $out == *"$POLICY_META: annotation gpu.scheduling/policy cannot change"*" 403" ]] || { echo "$out"; return 1; }
  out=$(as_node '{"metadata":{"annotations":{"note":"n"}}}')
  [[ $out == *" 200" ]] || { echo "the node's own annotation refused: $out"; return 1; }
}
e2e_check "policy: a node (kubelet credentials) cannot change them through pods/status either" check_node_status_write
POLICY_BIND="ValidatingAdmissionPolicy 'gpu-scheduling-binding' with binding 'gpu-scheduling-binding' denied request"
check_binding_annotations() {  # a Binding copies its annotations onto the pod: only the extender's may carry ours
  create <<JSON || return 1
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"tobind","namespace":"$NS","labels":{"gpu.scheduling/webhook":"disabled"}},
 "spec":{"schedulerName":"nobody","containers":[{"name":"main","image":"$IMAGE"}]}}
JSON
  bind_as() {  # USER ANNOTATIONS_JSON: a dry-run Binding; prints the body and the HTTP status
    curl -s --cacert "$CLUSTER_CA_FILE" -H "Authorization: Bearer $CLUSTER_ADMIN_TOKEN" -H "Impersonate-User: $1" \
      -H "Content-Type: application/json" -X POST -w ' %{http_code}' \
      -d "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":\"tobind\",\"annotations\":$2},\"target\":{\"kind\":\"Node\",\"name\":\"gpu-x\"}}" \
      "$CLUSTER_API_URL/api/v1/namespaces/$NS/pods/tobind/binding?dryRun=All"
  }
  bind_refused() {
    local out
    out=$(bind_as system:kube-scheduler '{"gpu.scheduling/allocated":"gpu-x:0"}')
    [[ $out == *"$POLICY_BIND: a Binding that carries annotation gpu.scheduling/allocated"*" 403" ]] || { echo "$out"; return 1; }
  }
  cluster_wait 20 "the binding policy in force" bind_refused >/dev/null || bind_refused || return 1
  local out
  out=$(bind_as system:kube-scheduler '{"cdi.k8s.io/x":"gpu.scheduling/gpu=all"}')
  [[ $out == *"$POLICY_BIND"*" 403" ]] || { echo "cdi: $out"; return 1; }
  kubectl -n "$NS" create role binder --verb=create --resource=pods/binding >/dev/null &&
    kubectl -n "$NS" create rolebinding extender-binder --role=binder --user="$EXT_SA" >/dev/null || return 1
  out=$(bind_as "$EXT_SA" '{"gpu.scheduling/allocated":"gpu-x:0"}')
  [[ $out == *" 201" || $out == *" 200" ]] || { echo "the extender's binding refused: $out"; return 1; }
  out=$(bind_as system:kube-scheduler '{}')
  [[ $out != *"$POLICY_BIND"* ]] || { echo "a plain binding refused: $out"; return 1; }
  kubectl -n "$NS" delete pod tobind --wait=false >/dev/null
}
e2e_check "policy: a Binding carrying an allocation or CDI annotation is refused but from the extender's service account" \
  check_binding_annotations

# ---- certificate rotation while pods are created ----------------------------
# A new serving certificate (new key) is written over the files the webhook
# serves with, as a renewed Secret is; pods created meanwhile are all mutated
# (none admitted unchanged), and new connections get the new certificate
# within the reload interval (1 s here) plus a second.
served_serial() {
  openssl s_client -connect "127.0.0.1:$WH_PORT" -CAfile "$CLUSTER_CA_FILE" </dev/null 2>/dev/null |
    openssl x509 -noout -serial 2>/dev/null
}
check_rotation() {
  local old new i t0 bad=0
  old=$(served_serial)
  [[ -n $old ]] || { echo "no certificate served"; return 1; }
  for i in $(seq 1 20); do gpu_pod "$NS" "rot-$i" | kubectl create -f - >/dev/null & done
  make_cert || return 1
  new=$(openssl x509 -noout -serial -in "$WH/tls.crt")
  [[ $new != "$old" ]] || { echo "the new certificate has the old serial"; return 1; }
  t0=$SECONDS
  until [[ $(served_serial) == "$new" ]]; do
    ((SECONDS - t0 <= 3)) || { echo "still serving $old"; wait; return 1; }
    sleep 0.2
  done
  e2e_note "the renewed certificate served $((SECONDS - t0)) s after it was written" >"$WH/rotation-note"
  for i in $(seq 21 30); do gpu_pod "$NS" "rot-$i" | kubectl create -f - >/dev/null & done
  wait
  for i in $(seq 1 30); do pod_is "$NS" "rot-$i" gpu side >/dev/null || { echo "rot-$i not mutated"; bad=1; }; done
  ((bad == 0)) && grep -q 'serving with the new certificate files.*server=webhook' "$(cluster_log gpu-extender)"
}
e2e_check "webhook certificate renewed while 30 GPU pods are created: all mutated, the new one served within 3 s" \
  check_rotation
cat "$WH/rotation-note" 2>/dev/null

# ---- the webhook down: failurePolicy Ignore ---------------------------------
# Hung first (stopped: the kernel accepts the connection, nobody answers), so
# the API server waits timeoutSeconds (5) and then admits the pod unchanged.
check_hung() {
  local t0=$SECONDS rc=0
  kill -STOP "$EXT_PID" || return 1
  plain_pod "$NS" plain-hung | kubectl create -f - >/dev/null || rc=1
  kill -CONT "$EXT_PID"
  local took=$((SECONDS - t0))
  ((rc == 0)) || return 1
  ((took >= 4 && took <= 15)) || { echo "took ${took}s, want about timeoutSeconds (5)"; return 1; }
  pod_is "$NS" plain-hung untouched
}
e2e_check "webhook hung: a pod is created after timeoutSeconds (failurePolicy Ignore)" check_hung
cluster_kill gpu-extender
webhook_down() { ! cluster_alive gpu-extender && ! curl -s --max-time 1 --cacert "$CLUSTER_CA_FILE" -d x "$WH_URL"; }
e2e_check "the extender is stopped" webhook_down
create_timed() {  # NAME KIND: create a pod while the webhook is down, in well under the timeout
  local t0=$SECONDS
  "${2}_pod" "$NS" "$1" | kubectl create -f - >/dev/null || return 1
  ((SECONDS - t0 <= 4)) || { echo "took $((SECONDS - t0))s"; return 1; }
}
e2e_check "webhook down: a plain pod is still created (failurePolicy Ignore)" create_timed plain-down plain
check_gpu_down() { create_timed gpu-down gpu && pod_is "$NS" gpu-down untouched; }
e2e_check "webhook down: a GPU pod is created too, without the env vars (the documented trade-off)" check_gpu_down
policy_when_down() { selecting_pod "$NS" down-sel NVIDIA_VISIBLE_DEVICES | refused "ValidatingAdmissionPolicy"; }
e2e_check "webhook down: the policy still refuses a pod that sets NVIDIA_VISIBLE_DEVICES=all" policy_when_down
e2e_check "the API server logged that it failed open" \
  grep -q 'failing open.*env.gpu.scheduling.io\|env.gpu.scheduling.io.*failing open' "$(cluster_log kube-apiserver)"

# The webhook saw every pod above whole (debug level logs each request): none is in its log.
check_log_clean() {
  local log
  log=$(cluster_log gpu-extender)
  [[ $(grep -c 'path=/mutate' "$log") -gt 30 ]] || { echo "too few reviews logged to judge"; return 1; }
  ! grep -q '"containers"\|"spec":\|PRIVATE KEY' "$log" || { echo "a pod spec or key in the log"; return 1; }
}
e2e_check "the webhook's log (every review at debug level) holds no pod spec or key" check_log_clean

echo "webhook.sh took $((SECONDS - t_start))s"
e2e_summary
