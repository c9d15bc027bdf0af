# The product on the harness's real node, as `make cluster` and the e2e
# suites test/e2e/node.sh and install.sh deploy it: deploy/ through the
# overlay test/node/local, certificates by deploy/'s own Job. Sourced after
# test/cluster/cluster.sh, once cluster_up and cluster_node_up have run.
#
#   node_start_default_scheduler
#                          the cluster's own kube-scheduler (pods of other
#                          schedulers, and the product's own pods)
#   node_deploy_product    the node's label gpu.scheduling/gpu-node=true,
#                          `kubectl apply -k test/node/local` (deploy/ as the
#                          docs install it, on the harness's network), the
#                          ConfigMap the hostNetwork pods read the API
#                          server's address from; waits for deploy/'s
#                          certificate Job (node_wait_certs)
#   node_wait_product      the extender, the agent and gpu-scheduler rolled
#                          out, and the node's GpuNodeStatus published
#   NODE_OVERLAY           the overlay node_deploy_product applied: test/node/local,
#                          or, when the cluster runs another Kubernetes release
#                          than the kube-scheduler image deploy/ names, an
#                          overlay of it in $CLUSTER_DIR that sets that image's
#                          tag to the cluster's (kustomize images:, as
#                          docs/install.md tells users to)
#   NODE_FAKE_ROOT         where cluster_fake_gpus makes the fake GPUs (the
#                          overlay's --device-root); node_deploy_product adds
#                          host-bin/nvidia-smi, the host's nvidia-smi as the
#                          agent sees it

NODE_FAKE_ROOT=/var/lib/gpu-extender-fake
_NODE_OVERLAY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/local
_NODE_REPO=$(cd "$_NODE_OVERLAY/../../.." && pwd)

node_start_default_scheduler() {
  cat >"$CLUSTER_DIR/default-scheduler.yaml" <<'EOF'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
EOF
  cluster_start_scheduler "$CLUSTER_DIR/default-scheduler.yaml" default
}

node_deploy_product() {
  local ns=gpu-system
  node_fake_host_tools || return 1
  # Without Node Feature Discovery, the GPU nodes get the operator's label
  # (docs/install.md); the agent runs only there.
  kubectl label node "$CLUSTER_NODE_NAME" gpu.scheduling/gpu-node=true --overwrite >/dev/null || return 1
  # The install of docs/install.md, in one pass on the fresh cluster.
  node_overlay || return 1
  kubectl apply -k "$NODE_OVERLAY" >/dev/null || return 1
  # In-cluster configuration of the hostNetwork pods (test/node/local); they
  # wait for it (CreateContainerConfigError, retried by kubelet).
  kubectl create configmap gpu-cluster-api -n "$ns" \
    --from-literal=KUBERNETES_SERVICE_HOST=127.0.0.1 \
    --from-literal=KUBERNETES_SERVICE_PORT="$CLUSTER_API_PORT" >/dev/null || return 1
  # deploy/'s Job makes the certificates and fills the caBundle.
  node_wait_certs
}

# node_overlay: sets NODE_OVERLAY (see above) for the cluster's release.
node_overlay() {
  local tag
  NODE_OVERLAY=$_NODE_OVERLAY
  tag=$(awk '$1 == "image:" && $2 ~ /^registry.k8s.io\/kube-scheduler:/ {sub(/.*:/, "", $2); print $2; exit}' \
    "$_NODE_REPO/deploy/base/07-scheduler.yaml")
  [[ -n $tag ]] || { _cluster_err "no kube-scheduler image in deploy/base/07-scheduler.yaml"; return 1; }
  if [[ $tag != "$CLUSTER_K8S_VERSION" ]]; then
    NODE_OVERLAY=$CLUSTER_DIR/overlay-$CLUSTER_K8S_VERSION
    mkdir -p "$NODE_OVERLAY" || return 1
    cat >"$NODE_OVERLAY/kustomization.yaml" <<EOF || return 1
# test/node/local with kube-scheduler of the cluster's release (test/node/deploy.sh)
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$NODE_OVERLAY" "$_NODE_OVERLAY")
images:
- name: registry.k8s.io/kube-scheduler
  newTag: $CLUSTER_K8S_VERSION
EOF
  fi
  export NODE_OVERLAY
}

# node_wait_certs: deploy/'s certificate Job completed.
node_wait_certs() {
  kubectl -n gpu-system wait --for=condition=complete job -l app.kubernetes.io/name=gpu-extender-certs \
    --timeout=180s >/dev/null || {
    kubectl -n gpu-system get jobs,pods -o wide >&2
    kubectl -n gpu-system logs -l app.kubernetes.io/name=gpu-extender-certs --tail=20 >&2
    _cluster_err "the certificate Job did not complete"
    return 1
  }
}

# The fake GPUs' nvidia-smi as a host's own: test/node/local mounts
# NODE_FAKE_ROOT/host-bin at the agent's /host/usr/local/bin, where the agent
# finds it and runs it chrooted into its host mounts. This one runs with the
# host's /bin/sh (the host's loader and libraries, through deploy/'s mounts)
# and, like the real one, needs a /proc and opens /dev/nvidiactl first: a
# device cgroup that refuses the GPU device files (EPERM; the fake device has
# no driver, so an allowed open gives ENXIO) fails detection. Then it prints
# cluster_fake_gpus's recorded outputs.
node_fake_host_tools() {
  local d=$NODE_FAKE_ROOT
  [[ -x $d/bin/nvidia-smi && -c $d/dev/nvidiactl ]] || { _cluster_err "no fake GPUs in $d (cluster_fake_gpus)"; return 1; }
  mkdir -p "$d/host-bin" || return 1
  cat >"$d/host-bin/nvidia-smi" <<EOF || return 1
#!/bin/sh
# Fake nvidia-smi of the test node's host (test/node/deploy.sh).
[ -r /proc/self/stat ] || { echo "nvidia-smi: no /proc" >&2; exit 9; }
if ! msg=\$( { : <$d/dev/nvidiactl; } 2>&1 ); then
  case \$msg in
  *"No such device or address"*) ;;
  *) echo "nvidia-smi: cannot open /dev/nvidiactl: \$msg" >&2; exit 9 ;;
  esac
fi
exec $d/bin/nvidia-smi "\$@"
EOF
  chmod 0755 "$d/host-bin/nvidia-smi"
}

_node_gns_total() {  # NODE COUNT: the GpuNodeStatus of NODE reports COUNT devices
  [[ $(kubectl get gpunodestatus "$1" -o 'jsonpath={.status.total}' 2>/dev/null) == "$2" ]]
}

node_wait_product() {
  local what
  for what in deployment/gpu-extender deployment/gpu-scheduler daemonset/gpu-agent; do
    kubectl rollout status -n gpu-system "$what" --timeout=120s >/dev/null ||
      { kubectl get pods -n gpu-system -o wide >&2; _cluster_err "$what did not roll out"; return 1; }
  done
  cluster_wait 60 "the GpuNodeStatus of $CLUSTER_NODE_NAME with 8 devices" _node_gns_total "$CLUSTER_NODE_NAME" 8
}
