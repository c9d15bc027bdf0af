#!/usr/bin/env bash
# Upgrade and downgrade in place, with GPU pods and a gang running: the
# harness's control plane and this machine as a real kubelet node (8 fake
# GPUs), as install.sh.
#
#   0. the release RELEASE_COMMIT (v0.2.0) is built from this clone with its
#      own `make image`, once, into $GPU_EXTENDER_CACHE/release-<commit>/
#      (a commit missing from the clone fails the suite: `git fetch --tags`);
#   1. it is installed with its own deploy/ (through its own test/node/local),
#      and runs two GPU pods and a gang (a PodGroup of two);
#   2. upgrade: `kubectl apply -k` of this tree's deploy/ (test/node/local)
#      with this tree's image: no pod failed, restarted or replaced, every
#      reservation kept as it was (ledgers against the pods:
#      verify_allocations.py), the new programs read what the old one wrote
#      without a complaint, a pod the release reserved is released by this
#      version, and a new pod and a new gang are placed (with the format
#      versions this version writes);
#   3. downgrade: the release's deploy/ again, the same checks the other way
#      round: the release reads and releases what this version wrote.
#
#   test/e2e/upgrade.sh            (root; make all first)
#   RELEASE_COMMIT=<commit>        another release to start from
#
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh
. test/node/deploy.sh

RELEASE_COMMIT=${RELEASE_COMMIT:-ac3819b}   # v0.2.0, the first release
NS=ml
VERSION=$(cat VERSION)
CACHE=${GPU_EXTENDER_CACHE:-$HOME/.cache/gpu-extender}
REL=$CACHE/release-$RELEASE_COMMIT

if (($(id -u) != 0)); then
  echo "upgrade.sh needs root (a real kubelet node)"
  echo "upgrade: 0 passed, 1 failed"
  exit 1
fi

t0=$SECONDS

# ---- 0. the release, built once ------------------------------------------------------

# Its source (git archive of the commit), its build and its image under $REL;
# $REL/ok (the full commit) once all of it is there.
release_build() {
  local full
  full=$(git rev-parse --verify -q "$RELEASE_COMMIT^{commit}") || {
    echo "release commit $RELEASE_COMMIT is not in this clone: fetch it (git fetch --tags origin; a shallow clone has no history)"
    return 1
  }
  [[ -f $REL/ok && $(cat "$REL/ok") == "$full" && -d $REL/src ]] && return 0
  rm -rf "$REL" "$REL.tmp" && mkdir -p "$REL.tmp/src" || return 1
  git archive "$full" | tar -x -C "$REL.tmp/src" || return 1
  make -C "$REL.tmp/src" -j2 image >"$REL.tmp/build.log" 2>&1 || { tail -20 "$REL.tmp/build.log"; return 1; }
  mv "$REL.tmp" "$REL" && echo "$full" >"$REL/ok"
}
tb=$SECONDS
if ! out=$(release_build 2>&1); then
  echo "FAIL the release $RELEASE_COMMIT builds with its own make image"
  sed 's/^/    /' <<<"$out" | tail -20
  echo "upgrade: 0 passed, 1 failed"
  exit 1
fi
REL_VERSION=$(cat "$REL/src/VERSION")
REL_IMAGE=$REL/src/build/image/gpu-extender-$REL_VERSION.tar
# The release's test/node/local, and the rollout setting this harness needs
# (hostNetwork pods: the old one's ports free first) where it lacks it.
mkdir -p "$REL/harness"
cat >"$REL/harness/kustomization.yaml" <<'EOF'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../src/test/node/local
patches:
- patch: |-
    {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"gpu-extender","namespace":"gpu-system"},
     "spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":0,"maxUnavailable":1}}}}
- patch: |-
    {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"gpu-scheduler","namespace":"gpu-system"},
     "spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":0,"maxUnavailable":1}}}}
EOF
e2e_note "release $RELEASE_COMMIT ($REL_VERSION) ready in $((SECONDS - tb))s (cached in $REL)"

# ---- set-up: control plane, the node, both images ---------------------------------------

setup() {
  cluster_up || return 1
  KUBECTL="$CLUSTER_BIN/kubectl --kubeconfig=$CLUSTER_KUBECONFIG"
  node_start_default_scheduler >/dev/null || return 1
  cluster_node_up || return 1    # imports this tree's image
  cluster_ctr images import "$REL_IMAGE" >/dev/null || return 1
  cluster_fake_gpus "$NODE_FAKE_ROOT" 8
}
if ! setup; then
  e2e_check "the control plane and the real node come up" false
  e2e_summary
  exit 1
fi
e2e_note "control plane and node up in $((SECONDS - t0))s"
WORK=$CLUSTER_DIR/upgrade
mkdir -p "$WORK"
note() { echo "$*" >>"$WORK/notes"; }
product_logs() {
  ((E2E_FAILED)) || return 0
  local p
  for p in gpu-extender gpu-agent; do
    echo "---- $p"
    kubectl -n gpu-system logs -l "app.kubernetes.io/name=$p" --tail=30 2>/dev/null
  done
}
cluster_add_cleanup product_logs

# ---- helpers ---------------------------------------------------------------------------

gpu_pod() {  # NAME GPUS [GROUP]: a busybox pod on the real node that sleeps (of PodGroup GROUP)
  local labels='{}'
  [[ -n ${3:-} ]] && labels="{\"scheduling.x-k8s.io/pod-group\":\"$3\"}"
  kubectl apply -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"$NS","labels":$labels},
 "spec":{"schedulerName":"gpu-scheduler","restartPolicy":"Never","terminationGracePeriodSeconds":0,
   "nodeSelector":{"gpu-extender.test/real-node":"true"},
   "containers":[{"name":"main","image":"$CLUSTER_BUSYBOX_IMAGE","imagePullPolicy":"Never",
     "command":["sh","-c","ls /dev | grep '^nvidia[0-9]'; exec sleep 100000"],
     "resources":{"limits":{"gpu.scheduling/gpu":"$2"}}}]}}
JSON
}
gang() {  # NAME: a PodGroup of two, and its members NAME-0, NAME-1 (1 GPU each)
  kubectl apply -f - >/dev/null <<JSON || return 1
{"apiVersion":"scheduling.x-k8s.io/v1alpha1","kind":"PodGroup","metadata":{"name":"$1","namespace":"$NS"},
 "spec":{"minMember":2,"scheduleTimeoutSeconds":60}}
JSON
  gpu_pod "$1-0" 1 "$1" && gpu_pod "$1-1" 1 "$1"
}
all_running() {  # NAME...: every one Running
  local p
  for p in "$@"; do
    [[ $(kubectl -n "$NS" get pod "$p" -o 'jsonpath={.status.phase}' 2>/dev/null) == Running ]] || return 1
  done
}
wait_running() { cluster_wait 90 "pods $* Running" all_running "$@"; }
# The test pods as they are: name uid phase restarts, one line each.
pods_state() {
  kubectl -n "$NS" get pods -o json | python3 -c '
import json, sys
for p in sorted(json.load(sys.stdin)["items"], key=lambda p: p["metadata"]["name"]):
    st = (p.get("status") or {}).get("containerStatuses") or [{}]
    print(p["metadata"]["name"], p["metadata"]["uid"], p["status"].get("phase"), st[0].get("restartCount", 0))'
}
# Every ledger entry: node uid devices, one line each (sorted).
ledger_entries() {
  kubectl -n gpu-system get lease -l gpu.scheduling/ledger=true -o json | python3 -c '
import json, sys
rows = []
for l in json.load(sys.stdin)["items"]:
    a = l["metadata"].get("annotations") or {}
    for e in json.loads(a.get("gpu.scheduling/reservations") or "[]"):
        rows.append("%s %s %s" % (a.get("gpu.scheduling/node"), e["uid"], ",".join(map(str, sorted(e["devices"])))))
print("\n".join(sorted(rows)))'
}
pod_uid() { kubectl -n "$NS" get pod "$1" -o 'jsonpath={.metadata.uid}'; }
entry_gone() { ! ledger_entries | grep -q " $1 "; }
entries_gone() {  # UID...: no ledger entry of any of them
  local rows u
  rows=$(ledger_entries)
  for u in "$@"; do grep -q " $u " <<<"$rows" && return 1; done
  return 0
}
image_of() { kubectl -n gpu-system get "$1" -o 'jsonpath={.spec.template.spec.containers[0].image}'; }
running_version() {  # VERSION: the extender and the agent run it, rolled out and ready
  [[ $(image_of deployment/gpu-extender) == "gpu-extender:$1" && $(image_of daemonset/gpu-agent) == "gpu-extender:$1" ]] ||
    { echo "images: $(image_of deployment/gpu-extender) $(image_of daemonset/gpu-agent)"; return 1; }
  node_wait_product || return 1
  local got
  got=$(kubectl -n gpu-system exec deployment/gpu-extender -- /usr/local/bin/gpu-extender --version) || return 1
  [[ $(awk '{print $2}' <<<"$got") == "$1" ]] || { echo "the extender says: $got"; return 1; }
}
# Lines of the product's logs since its pods started that say it could not read something.
complaints() {
  local p
  for p in gpu-extender gpu-agent; do
    kubectl -n gpu-system logs -l "app.kubernetes.io/name=$p" --tail=-1 2>/dev/null |
      grep -iE 'cannot read a (ledger|pod)|newer format|not a format version|newer than this program' | sed "s/^/$p: /"
  done
}
# The pods and ledgers kept as they were in SNAP (pods_state, ledger_entries), and consistent.
kept() {  # SNAP-NAME
  local now
  now=$(pods_state)
  [[ $now == "$(cat "$WORK/$1.pods")" ]] || { echo "pods before:"; cat "$WORK/$1.pods"; echo "after:"; echo "$now"; return 1; }
  awk '$3 != "Running" || $4 != 0 {print; bad=1} END {exit bad}' <<<"$now" || { echo "^ not running, or restarted"; return 1; }
  now=$(ledger_entries)
  [[ $now == "$(cat "$WORK/$1.ledgers")" ]] || { echo "ledgers before:"; cat "$WORK/$1.ledgers"; echo "after:"; echo "$now"; return 1; }
  e2e_verify "$WORK/$1-verify" --settled --nodes "$CLUSTER_NODE_NAME" >/dev/null || { cat "$WORK/$1-verify/verify.txt"; return 1; }
  local c
  c=$(complaints)
  [[ -z $c ]] || { echo "$c"; return 1; }
}
snapshot() { pods_state >"$WORK/$1.pods" && ledger_entries >"$WORK/$1.ledgers"; }

# ---- 1. the release installed, with GPU pods and a gang ------------------------------------

install_release() {
  local t=$SECONDS
  _NODE_OVERLAY=$REL/harness node_deploy_product || return 1
  running_version "$REL_VERSION" || return 1
  note "release $REL_VERSION installed in $((SECONDS - t))s"
}
e2e_check "the release ($REL_VERSION, commit $RELEASE_COMMIT) installs with its own deploy/ and image" install_release

release_pods() {
  cluster_ensure_namespace "$NS" >/dev/null || return 1
  gpu_pod old-two 2 && gpu_pod old-one 1 && gang old-gang || return 1
  wait_running old-two old-one old-gang-0 old-gang-1 || return 1
  e2e_verify "$WORK/release-verify" --settled --nodes "$CLUSTER_NODE_NAME" >/dev/null || { cat "$WORK/release-verify/verify.txt"; return 1; }
  [[ $(ledger_entries | wc -l) == 4 ]] || { ledger_entries; return 1; }
  snapshot release
}
e2e_check "the release runs two GPU pods and a gang of two (5 GPUs reserved, ledgers = pods)" release_pods

# ---- 2. upgrade in place ------------------------------------------------------------------

upgrade() {
  local t=$SECONDS
  kubectl apply -k test/node/local >/dev/null || return 1
  node_wait_certs && running_version "$VERSION" || return 1
  note "upgraded to $VERSION in $((SECONDS - t))s (apply to everything rolled out)"
}
e2e_check "upgrade: kubectl apply -k of this deploy/ ($VERSION) rolls everything out" upgrade
e2e_check "after the upgrade: no pod failed, restarted or replaced; every reservation as it was; nothing unreadable" kept release

after_upgrade() {
  local uid
  uid=$(pod_uid old-one)
  kubectl -n "$NS" delete pod old-one --wait=false >/dev/null || return 1
  gpu_pod new-one 1 && gang new-gang || return 1
  wait_running new-one new-gang-0 new-gang-1 || return 1
  cluster_wait 40 "the release's entry of old-one released" entry_gone "$uid" || return 1
  cluster_wait_gone 30 pod old-one "$NS" || return 1
  [[ $(e2e_ann "$NS" new-one gpu.scheduling/allocation-version) == 1 ]] ||
    { echo "new-one has no allocation-version 1"; return 1; }
  [[ -z $(e2e_ann "$NS" old-two gpu.scheduling/allocation-version) ]] || { echo "old-two gained a version"; return 1; }
  [[ $(kubectl -n gpu-system get lease -l gpu.scheduling/ledger=true \
    -o 'jsonpath={.items[*].metadata.annotations.gpu\.scheduling/ledger-version}') == 1 ]] ||
    { echo "the ledger does not say ledger-version 1"; return 1; }
  e2e_verify "$WORK/upgraded-verify" --settled --nodes "$CLUSTER_NODE_NAME" >/dev/null || { cat "$WORK/upgraded-verify/verify.txt"; return 1; }
  snapshot upgraded
}
e2e_check "after the upgrade: a pod the release reserved is released; a new pod and a new gang run (versions written)" after_upgrade

# ---- 3. downgrade to the release ------------------------------------------------------------

downgrade() {
  local t=$SECONDS
  kubectl apply -k "$REL/harness" >/dev/null || return 1
  running_version "$REL_VERSION" || return 1
  note "downgraded to $REL_VERSION in $((SECONDS - t))s"
}
e2e_check "downgrade: kubectl apply -k of the release's deploy/ rolls everything back" downgrade
e2e_check "after the downgrade: no pod failed, restarted or replaced; every reservation as it was; nothing unreadable" kept upgraded

after_downgrade() {
  local uid g0 g1 p
  uid=$(pod_uid new-one) g0=$(pod_uid old-gang-0) g1=$(pod_uid old-gang-1)
  kubectl -n "$NS" delete pod new-one old-gang-0 old-gang-1 --wait=false >/dev/null || return 1
  gpu_pod back-one 1 && gang back-gang || return 1
  wait_running back-one back-gang-0 back-gang-1 || return 1
  cluster_wait 40 "the entries of new-one, old-gang-0 and old-gang-1 released by the release" \
    entries_gone "$uid" "$g0" "$g1" || { ledger_entries; return 1; }
  for p in new-one old-gang-0 old-gang-1; do cluster_wait_gone 30 pod "$p" "$NS" || return 1; done
  e2e_verify "$WORK/back-verify" --settled --nodes "$CLUSTER_NODE_NAME" >/dev/null || { cat "$WORK/back-verify/verify.txt"; return 1; }
  all_running old-two new-gang-0 new-gang-1 back-one back-gang-0 back-gang-1 || { pods_state; return 1; }
  [[ $(ledger_entries | wc -l) == 6 ]] || { ledger_entries; return 1; }
  local c
  c=$(complaints)
  [[ -z $c ]] || { echo "$c"; return 1; }
}
e2e_check "after the downgrade: the release releases what this version reserved; a new pod and a new gang run" after_downgrade

kubectl -n "$NS" delete pod --all --grace-period=0 --force --wait=false >/dev/null 2>&1
while IFS= read -r line; do e2e_note "$line"; done <"$WORK/notes" 2>/dev/null
e2e_note "the whole suite: $((SECONDS - t0))s"
e2e_summary
