#!/usr/bin/env bash
# Only kube-scheduler may call the verbs: the extender serves them over TLS
# and asks every client for a certificate of the client CA (--client-ca).
#   - /healthz, /readyz, /version and /metrics answer without one (probes,
#     Prometheus);
#   - filter, prioritize, bind, preempt and /debug/nodes answer 401 without a
#     certificate, with one of another CA, and with one of the right CA that
#     is not for client authentication; a bind refused so binds nothing;
#   - a real kube-scheduler configured with tlsConfig (certFile, keyFile,
#     caFile), as deploy/07-scheduler.yaml is, places and binds a GPU pod;
#   - an extender whose verbs answer anyone on a non-loopback address says so
#     at start.
# Certificates are made here, signed by the harness's cluster CA (the rogue
# one by a CA of its own).
#
#   test/e2e/mtls.sh          (E2E_EXTENDER=path overrides build/gpu-extender)
#
# Ends with "mtls: N passed, N failed"; nonzero on any failure.
set -u
cd "$(dirname "$0")/../.."
. test/cluster/cluster.sh
. test/e2e/lib.sh

t_start=$SECONDS
e2e_setup || { echo "mtls: 0 passed, 1 failed (cluster setup)"; exit 1; }
e2e_gpu_node gpu-m 4

PKI=$CLUSTER_DIR/mtls
cluster_make_cert "$PKI" server "/CN=gpu-extender" "basicConstraints=critical,CA:FALSE" \
  "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1" &&
  cluster_make_cert "$PKI" scheduler "/CN=gpu-scheduler" &&
  cluster_make_cert "$PKI" serveronly "/CN=not-a-client" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" &&
  (
    set -e
    cd "$PKI"
    ec() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "$@" 2>/dev/null; }
    ec -x509 -keyout rogue-ca.key -out rogue-ca.crt -subj /CN=rogue-ca -days 2
    ec -keyout rogue.key -out rogue.csr -subj /CN=gpu-scheduler
    printf 'extendedKeyUsage=clientAuth\n' >rogue.ext
    openssl x509 -req -in rogue.csr -CA rogue-ca.crt -CAkey rogue-ca.key -CAcreateserial -out rogue.crt \
      -days 2 -extfile rogue.ext 2>/dev/null
  ) || { echo "mtls: 0 passed, 1 failed (certificates)"; exit 1; }

PORT=$(e2e_free_port)
URL=https://127.0.0.1:$PORT
cluster_spawn ext "$E2E_EXTENDER" serve --kubeconfig "$CLUSTER_EXTENDER_KUBECONFIG" --listen "127.0.0.1:$PORT" \
  --identity ext --tls-cert "$PKI/server.crt" --tls-key "$PKI/server.key" --client-ca "$CLUSTER_CA_FILE"

call() {  # METHOD PATH [CURL ARGS...]: the HTTP status ("000": no answer, or the TLS handshake failed)
  local m=$1 p=$2; shift 2
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$CLUSTER_CA_FILE" -X "$m" \
    -H 'Content-Type: application/json' "$URL$p" "$@"
}
ready() { [[ $(call GET /readyz) == 200 ]]; }
cluster_wait 30 "the extender ready over TLS" ready || { echo "mtls: 0 passed, 1 failed (extender)"; exit 1; }

FILTER='{"Pod":{"metadata":{"name":"x","namespace":"ml","uid":"u1"},"spec":{"containers":[{"name":"c","resources":{"limits":{"gpu.scheduling/gpu":"1"}}}]}},"NodeNames":["gpu-m"]}'

check_open() {
  local p st
  for p in /healthz /readyz /version /metrics; do
    st=$(call GET "$p")
    [[ $st == 200 ]] || { echo "GET $p without a client certificate: $st"; return 1; }
  done
}
e2e_check "probes and metrics answer without a client certificate" check_open

check_refused() {  # CURL ARGS...: every verb and /debug refuse this caller
  local st v
  for v in filter prioritize bind preempt; do
    st=$(call POST "/$v" -d "$FILTER" "$@")
    [[ $st == 401 ]] || { echo "POST /$v ($*): $st"; return 1; }
  done
  st=$(call GET /debug/nodes "$@")
  [[ $st == 401 ]] || { echo "GET /debug/nodes ($*): $st"; return 1; }
}
e2e_check "the verbs and /debug refuse a caller without a client certificate" check_refused
e2e_check "... a client certificate of another CA" check_refused --cert "$PKI/rogue.crt" --key "$PKI/rogue.key"
e2e_check "... a certificate of the client CA not made for client authentication" \
  check_refused --cert "$PKI/serveronly.crt" --key "$PKI/serveronly.key"

check_plain_http() {
  local st
  st=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST -d "$FILTER" "http://127.0.0.1:$PORT/filter")
  [[ $st != 200 ]] || { echo "plain HTTP to the TLS port answered 200"; return 1; }
}
e2e_check "plain HTTP to the verb port gets no answer" check_plain_http

# A pod no scheduler takes: a bind for it from a caller without a certificate.
e2e_pod ml loose '{"gpu.scheduling/gpu":"1"}' '' nobody
check_bind_refused() {
  local uid st
  uid=$(kubectl -n ml get pod loose -o jsonpath='{.metadata.uid}')
  st=$(call POST /bind -d "{\"PodName\":\"loose\",\"PodNamespace\":\"ml\",\"PodUID\":\"$uid\",\"Node\":\"gpu-m\"}")
  [[ $st == 401 ]] || { echo "bind without a certificate: $st"; return 1; }
  sleep 1
  [[ -z $(e2e_pod_node ml loose) ]] || { echo "the pod was bound"; return 1; }
}
e2e_check "a bind from a caller without a certificate binds nothing" check_bind_refused

check_with_cert() {
  local st
  st=$(call POST /filter -d "$FILTER" --cert "$PKI/scheduler.crt" --key "$PKI/scheduler.key")
  [[ $st == 200 ]] || { echo "filter with kube-scheduler's certificate: $st"; return 1; }
}
e2e_check "with kube-scheduler's client certificate the verbs answer" check_with_cert

# kube-scheduler as deploy/07-scheduler.yaml configures it: https, tlsConfig.
SCONF=$CLUSTER_DIR/mtls-scheduler.yaml
sed -e "s#http://127.0.0.1:8888#$URL#" \
  -e "s#^  enableHTTPS: false#  enableHTTPS: true\n  tlsConfig:\n    certFile: $PKI/scheduler.crt\n    keyFile: $PKI/scheduler.key\n    caFile: $CLUSTER_CA_FILE#" \
  config/scheduler-config.yaml >"$SCONF"
cluster_start_scheduler "$SCONF" sched >/dev/null || { echo "FAIL kube-scheduler did not start"; }
e2e_pod ml placed '{"gpu.scheduling/gpu":"2"}'
check_scheduled() {
  cluster_wait 30 "pod placed bound" bound_placed || { kubectl -n ml describe pod placed | tail -5; return 1; }
  [[ $(e2e_ann ml placed gpu.scheduling/allocated) == gpu-m:* ]] ||
    { echo "allocated=$(e2e_ann ml placed gpu.scheduling/allocated)"; return 1; }
}
bound_placed() { [[ $(e2e_pod_node ml placed) == gpu-m ]]; }
e2e_check "kube-scheduler with its client certificate places and binds a GPU pod through the extender" check_scheduled

# The warning for verbs open to anyone (standalone on the demo inventory).
check_warning() {
  local p log
  p=$(e2e_free_port)
  log=$CLUSTER_DIR/open-extender.log
  timeout 3 "$E2E_EXTENDER" serve --inventory config/demo-inventory.json --listen "0.0.0.0:$p" >"$log" 2>&1
  grep -q 'the verbs answer any caller' "$log" || { echo "no warning on 0.0.0.0"; return 1; }
  p=$(e2e_free_port)
  timeout 3 "$E2E_EXTENDER" serve --inventory config/demo-inventory.json --listen "127.0.0.1:$p" >"$log" 2>&1
  ! grep -q 'the verbs answer any caller' "$log" || { echo "a warning on loopback"; return 1; }
}
e2e_check "an extender whose verbs answer anyone on a non-loopback address warns at start" check_warning

echo "mtls.sh took $((SECONDS - t_start))s"
e2e_summary
