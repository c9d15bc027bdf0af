# The product on the harness's real node, as `make cluster` and the e2e
# suite test/e2e/node.sh deploy it: deploy/ through the overlay
# test/node/local, with the harness's certificates. Sourced after
# test/cluster/cluster.sh, once cluster_up and cluster_node_up have run.
#
#   node_start_default_scheduler
#                          the cluster's own kube-scheduler (pods of other
#                          schedulers, and the product's own pods)
#   node_deploy_product    namespace, the ConfigMap the hostNetwork pods read
#                          the API server's address from, the webhook's
#                          serving certificate (harness CA) and Secret (also
#                          the verb port's), the client CA and gpu-scheduler's
#                          client certificate,
#                          `kubectl apply -k test/node/local`, the caBundle
#   node_wait_product      the extender, the agent and gpu-scheduler rolled
#                          out, and the node's GpuNodeStatus published
#   NODE_FAKE_ROOT         where cluster_fake_gpus makes the fake GPUs (the
#                          overlay's --tools-dir and --device-root)

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
  local ns=gpu-system svc=gpu-extender.gpu-system.svc
  kubectl apply -f "$_NODE_REPO/deploy/00-namespace.yaml" >/dev/null || return 1
  cluster_ensure_namespace "$ns" >/dev/null || return 1
  # In-cluster configuration of the hostNetwork pods (test/node/local).
  kubectl create configmap gpu-cluster-api -n "$ns" \
    --from-literal=KUBERNETES_SERVICE_HOST=127.0.0.1 \
    --from-literal=KUBERNETES_SERVICE_PORT="$CLUSTER_API_PORT" >/dev/null || return 1
  # The webhook's serving certificate, signed by the harness CA
  # (docs/webhook-certificates.md); the caBundle is set after the apply.
  cluster_make_cert "$CLUSTER_DIR/webhook" tls "/CN=$svc" \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" "subjectAltName=DNS:$svc,DNS:$svc.cluster.local,DNS:gpu-extender.$ns" || return 1
  kubectl create secret tls gpu-extender-webhook-tls -n "$ns" \
    --cert="$CLUSTER_DIR/webhook/tls.crt" --key="$CLUSTER_DIR/webhook/tls.key" >/dev/null || return 1
  # The verb port's client CA and gpu-scheduler's client certificate (harness CA;
  # the extender serves the verbs with the webhook's certificate).
  cluster_make_cert "$CLUSTER_DIR/webhook" scheduler-client "/CN=gpu-scheduler" || return 1
  kubectl create secret generic gpu-extender-client-ca -n "$ns" --from-file=ca.crt="$CLUSTER_CA_FILE" >/dev/null ||
    return 1
  kubectl create secret generic gpu-scheduler-extender-client -n "$ns" \
    --from-file=tls.crt="$CLUSTER_DIR/webhook/scheduler-client.crt" \
    --from-file=tls.key="$CLUSTER_DIR/webhook/scheduler-client.key" --from-file=ca.crt="$CLUSTER_CA_FILE" >/dev/null ||
    return 1
  kubectl apply -k "$_NODE_OVERLAY" >/dev/null || return 1
  kubectl patch mutatingwebhookconfiguration gpu-env-injector --type=json -p \
    "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$(base64 -w0 "$CLUSTER_CA_FILE")\"}]" \
    >/dev/null
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
