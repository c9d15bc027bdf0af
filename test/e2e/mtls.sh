#!/usr/bin/env bash
# Only kube-scheduler may call the verbs: the extender serves them over TLS
# and asks every client for a certificate of the client CA (--client-ca).
#   - /healthz, /readyz, /version and /metrics answer without one (probes,
#     Prometheus);
#   - filter, prioritize, bind and preempt answer 401 without a certificate,
#     with one of another CA, and with one of the right CA that is not for
#     client authentication; a bind refused so binds nothing;
#   - /debug/nodes is not on the verb port, only on its loopback listener;
#   - a real kube-scheduler configured with tlsConfig (certFile, keyFile,
#     caFile), as deploy/base/07-scheduler.yaml is, places and binds a GPU pod;
#   - the serving certificate and then the client CA are rotated in place
#     while kube-scheduler places 30 pods: each is served from new
#     connections on within the reload interval (1 s) plus 2 s, every pod is
#     bound, no device twice;
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
DPORT=$(e2e_free_port)
URL=https://127.0.0.1:$PORT
# The files the extender serves with, rotated in place below (as a mounted Secret is).
LIVE=$PKI/live
mkdir -p "$LIVE" && cp "$PKI/server.crt" "$LIVE/tls.crt" && cp "$PKI/server.key" "$LIVE/tls.key" &&
  cp "$CLUSTER_CA_FILE" "$LIVE/client-ca.crt" || { echo "mtls: 0 passed, 1 failed (certificates)"; exit 1; }
cluster_spawn ext "$E2E_EXTENDER" serve --kubeconfig "$CLUSTER_EXTENDER_KUBECONFIG" --listen "127.0.0.1:$PORT" \
  --identity ext --tls-cert "$LIVE/tls.crt" --tls-key "$LIVE/tls.key" --client-ca "$LIVE/client-ca.crt" \
  --tls-reload-interval 1 --debug-listen "127.0.0.1:$DPORT" --log-level debug

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

check_refused() {  # CURL ARGS...: every verb refuses this caller
  local st v
  for v in filter prioritize bind preempt; do
    st=$(call POST "/$v" -d "$FILTER" "$@")
    [[ $st == 401 ]] || { echo "POST /$v ($*): $st"; return 1; }
  done
}
e2e_check "the verbs refuse a caller without a client certificate" check_refused
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

check_debug() {
  local st
  st=$(call GET /debug/nodes --cert "$PKI/scheduler.crt" --key "$PKI/scheduler.key")
  [[ $st == 404 ]] || { echo "GET /debug/nodes on the verb port: $st"; return 1; }
  curl -s --max-time 5 "http://127.0.0.1:$DPORT/debug/nodes?node=gpu-m" | grep -q '"name":"gpu-m"' ||
    { echo "no gpu-m on the /debug listener"; return 1; }
}
e2e_check "/debug/nodes is not on the verb port, only on its loopback listener" check_debug

# kube-scheduler as deploy/base/07-scheduler.yaml configures it: https, tlsConfig.
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

# ---- rotation while kube-scheduler places pods -----------------------------
e2e_gpu_node gpu-r 32
served_serial() {
  openssl s_client -connect "127.0.0.1:$PORT" -CAfile "$CLUSTER_CA_FILE" -cert "$PKI/scheduler.crt" \
    -key "$PKI/scheduler.key" </dev/null 2>/dev/null | openssl x509 -noout -serial 2>/dev/null
}
within() {  # SECONDS WHAT CMD...: CMD succeeds within SECONDS; notes how long it took
  local secs=$1 what=$2 t0=$SECONDS; shift 2
  until "$@"; do
    ((SECONDS - t0 <= secs)) || { echo "$what: not within ${secs}s"; return 1; }
    sleep 0.2
  done
  e2e_note "$what after $((SECONDS - t0)) s" >>"$CLUSTER_DIR/rotation-notes"
}
create_pods() { local i; for i in $(seq "$1" "$2"); do e2e_pod ml "rot-$i" '{"gpu.scheduling/gpu":"1"}'; done; }
serial_is() { [[ $(served_serial) == "$1" ]]; }
next_ca_accepted() { [[ $(call POST /filter -d "$FILTER" --cert "$PKI/next-client.crt" --key "$PKI/next-client.key") == 200 ]]; }
all_bound() {
  local i
  for i in $(seq 1 30); do [[ -n $(e2e_pod_node ml "rot-$i") ]] || return 1; done
}
check_rotation() {
  local old new rc=0 d=$CLUSTER_DIR/mtls-verify
  old=$(served_serial)
  create_pods 1 15 &
  # 1. the serving certificate: new key, same CA (the key file first, so a mismatched pair is seen)
  cluster_make_cert "$PKI" server2 "/CN=gpu-extender" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1" ||
    return 1
  new=$(openssl x509 -noout -serial -in "$PKI/server2.crt")
  [[ -n $old && $new != "$old" ]] || { echo "serials: served $old, new $new"; return 1; }
  cp "$PKI/server2.key" "$LIVE/tls.key" && sleep 1.5 && cp "$PKI/server2.crt" "$LIVE/tls.crt"
  within 3 "the renewed serving certificate served" serial_is "$new" || rc=1
  # 2. the client CA: a bundle of the old CA and a new one, as a CA rotation starts
  (
    set -e
    cd "$PKI"
    ec() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "$@" 2>/dev/null; }
    ec -x509 -keyout next-ca.key -out next-ca.crt -subj /CN=next-ca -days 2
    ec -keyout next-client.key -out next-client.csr -subj /CN=gpu-scheduler
    printf 'extendedKeyUsage=clientAuth\n' >next-client.ext
    openssl x509 -req -in next-client.csr -CA next-ca.crt -CAkey next-ca.key -CAcreateserial \
      -out next-client.crt -days 2 -extfile next-client.ext 2>/dev/null
    cat "$CLUSTER_CA_FILE" next-ca.crt >"$LIVE/client-ca.crt"
  ) || return 1
  within 3 "a client of the new CA accepted" next_ca_accepted || rc=1
  [[ $(call POST /filter -d "$FILTER" --cert "$PKI/rogue.crt" --key "$PKI/rogue.key") == 401 ]] ||
    { echo "the rogue CA's client is accepted"; rc=1; }
  create_pods 16 30
  wait
  within 60 "all 30 pods bound" all_bound || rc=1
  mkdir -p "$d" && kubectl get lease -A -o json >"$d/leases.json" && kubectl get pods -A -o json >"$d/pods.json" &&
    kubectl get gpunodestatuses -o json >"$d/gns.json" &&
    python3 test/e2e/verify_allocations.py --leases "$d/leases.json" --pods "$d/pods.json" --gns "$d/gns.json" ||
    rc=1
  [[ $(grep -c 'serving with the new certificate files.*server=verbs' "$(cluster_log ext)") -ge 2 ]] ||
    { echo "the reloads are not logged"; rc=1; }
  grep -q 'cannot load the changed certificate files.*do not match' "$(cluster_log ext)" ||
    { echo "the mismatched pair in between was not refused"; rc=1; }
  return $rc
}
e2e_check "serving certificate, then client CA rotated while kube-scheduler places 30 pods: new ones served, all bound, no device twice" \
  check_rotation
cat "$CLUSTER_DIR/rotation-notes" 2>/dev/null

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

# Every request was logged (debug level); no secret and no pod spec was.
check_log_clean() {
  local log token
  log=$(cluster_log ext)
  token=$(cat "$CLUSTER_EXTENDER_TOKEN_FILE")
  [[ $(grep -c 'msg="request"' "$log") -gt 30 ]] || { echo "too few requests logged to judge"; return 1; }
  ! grep -qF -- "$token" "$log" || { echo "the API token is in the log"; return 1; }
  ! grep -q 'PRIVATE KEY\|BEGIN CERTIFICATE' "$log" || { echo "key or certificate text in the log"; return 1; }
  ! grep -q '"containers"\|"spec":' "$log" || { echo "a pod spec in the log"; return 1; }
}
e2e_check "the extender's log (every request at debug level) holds no token, key or pod spec" check_log_clean

echo "mtls.sh took $((SECONDS - t_start))s"
e2e_summary
