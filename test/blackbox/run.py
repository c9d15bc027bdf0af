#!/usr/bin/env python3
"""Black-box tests: start the real gpu-extender binary and talk HTTP(S) to it.

Usage: test/blackbox/run.py build/gpu-extender
Ends with a line "N passed, N failed"; exits 1 if anything failed.
"""
import http.client
import json
import os
import re
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/gpu-extender"))
DEMO = os.path.join(ROOT, "config/demo-inventory.json")
EXAMPLES = os.path.join(ROOT, "examples")
results = {"passed": 0, "failed": 0}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One gpu-extender serve process on a free port."""

    def __init__(self, *args, tls=None, inventory=DEMO):
        self.port = free_port()
        self.debug_port = free_port()
        self.tls = tls
        cmd = [BIN, "serve", "--inventory", inventory, "--listen", f"127.0.0.1:{self.port}",
               "--debug-listen", f"127.0.0.1:{self.debug_port}"] + list(args)
        if tls:
            cmd += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if self.request("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("server did not start: " + self.output())

    def conn(self):
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls[2])
            return http.client.HTTPSConnection("localhost", self.port, timeout=10, context=ctx)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read().decode(), dict(r.getheaders())
        finally:
            c.close()

    def post(self, path, body):
        status, text, _ = self.request("POST", path, body, {"Content-Type": "application/json"})
        return status, json.loads(text)

    def debug(self, path):
        """GET on the /debug listener (plain HTTP, loopback): status and body."""
        c = http.client.HTTPConnection("127.0.0.1", self.debug_port, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def test(fn):
    try:
        fn()
        results["passed"] += 1
        print(f"PASS {fn.__name__}")
    except Exception:
        results["failed"] += 1
        print(f"FAIL {fn.__name__}")
        traceback.print_exc()
    return fn


def example(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        return json.load(f)


def pod(name, limits=None, annotations=None):
    meta = {"name": name, "namespace": "ml", "uid": "uid-" + name}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": limits or {}}}]}}


NODES = ["gpu-h100-a", "gpu-a100-b", "gpu-l4-c", "gpu-mi300x-d", "gpu-max-e", "gpu-t4-f", "cpu-g"]


@test
def help_documents_every_flag():
    out = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ["--inventory", "--listen", "--url-prefix", "--policy", "--max-body", "--config",
                 "--resource-gpu", "--tls-cert", "--kubeconfig", "--log-level"]:
        assert flag in out, flag
    r = subprocess.run([BIN, "serve", "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown flag '--bogus'" in r.stderr, r.stderr
    r = subprocess.run([BIN, "serve", "--inventory", "/nonexistent.json", "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "/nonexistent.json" in r.stderr, r.stderr


@test
def health_version_metrics():
    s = Server()
    try:
        assert s.request("GET", "/healthz")[:2] == (200, "ok\n")
        assert s.request("GET", "/readyz")[0] == 200
        st, body, _ = s.request("GET", "/version")
        assert st == 200 and "version" in json.loads(body)
        s.post("/filter", example("filter.json"))
        st, body, hdr = s.request("GET", "/metrics")
        assert st == 200 and hdr["Content-Type"].startswith("text/plain")
        assert 'gpu_extender_requests_total{verb="filter"} 1' in body, body
        assert 'gpu_extender_request_duration_seconds_bucket{verb="filter",le="+Inf"} 1' in body
        assert "gpu_extender_cache_nodes 7" in body
        assert "gpu_extender_cache_devices 34" in body
        heap = float(re.search(r"^gpu_extender_heap_in_use_bytes (\S+)$", body, re.M).group(1))
        # AddressSanitizer's malloc is not glibc's: mallinfo2 reads 0 there.
        assert heap > 1e6 or "ASAN_OPTIONS" in os.environ, heap
    finally:
        assert s.stop() == 0, s.output()


@test
def filter_example_passes_the_best_node_unless_the_pod_prefers():
    """As shipped (filterKeepsBest 1): the one node binpack rates best of the
    five that fit, the same reasons for the others; a pod that states a soft
    preference gets every node that fits."""
    s = Server()
    try:
        st, r = s.post("/filter", example("filter.json"))
        assert st == 200 and r["Error"] == "", r
        assert r["NodeNames"] == ["gpu-l4-c"], r
        assert r["FailedAndUnresolvableNodes"]["gpu-t4-f"] == "node has 2 matching GPUs, claim needs 4"
        body = example("filter.json")
        body["Pod"].setdefault("spec", {})["affinity"] = {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]}}
        st, r = s.post("/filter", body)
        assert set(r["NodeNames"]) == {"gpu-h100-a", "gpu-a100-b", "gpu-l4-c", "gpu-mi300x-d", "gpu-max-e"}, r
    finally:
        s.stop()


@test
def filter_example_gives_nodes_and_reasons():
    s = Server("--filter-keeps-best", "0")
    try:
        st, r = s.post("/filter", example("filter.json"))
        assert st == 200
        assert r["Error"] == ""
        assert set(r["NodeNames"]) == {"gpu-h100-a", "gpu-a100-b", "gpu-l4-c", "gpu-mi300x-d", "gpu-max-e"}, r
        assert r["FailedAndUnresolvableNodes"]["gpu-t4-f"] == "node has 2 matching GPUs, claim needs 4"
        assert "no GpuNodeStatus" in r["FailedAndUnresolvableNodes"]["cpu-g"]
        st, r = s.post("/filter", example("filter-claim.json"))
        assert r["NodeNames"] == ["gpu-h100-a"], r
        assert r["FailedAndUnresolvableNodes"]["gpu-mi300x-d"] == "no nvidia GPU (node has 8 amd)"
        # The claim that needs 4 on one island: the A100 node has an unhealthy GPU in nvlink-1.
        st, r = s.post("/filter", {"Pod": pod("isl", annotations={"gpu.scheduling/claim": "four-on-one-island"}),
                                   "NodeNames": NODES})
        assert "gpu-a100-b" in r["NodeNames"] and "gpu-l4-c" in r["FailedAndUnresolvableNodes"], r
    finally:
        s.stop()


@test
def url_prefix_and_both_paths():
    s = Server("--url-prefix", "/gpu-scheduler/")
    try:
        st, r = s.post("/gpu-scheduler/filter", example("filter.json"))
        assert st == 200 and r["Error"] == ""
        st, r = s.post("/filter", example("filter.json"))
        assert st == 200
        assert s.request("GET", "/gpu-scheduler/healthz")[0] == 200
    finally:
        s.stop()


@test
def bad_requests_get_clear_errors_and_server_survives():
    s = Server("--max-body", "65536")
    try:
        assert s.request("GET", "/nope")[0] == 404
        st, body, hdr = s.request("GET", "/filter")
        assert st == 405 and hdr.get("Allow") == "POST", (st, hdr)
        assert s.request("POST", "/healthz")[0] == 405
        for body in ["", "{", "[1,2]", '{"Pod":"x"}', '{"Pod":{},"NodeNames":"a"}', "\x00\xff"]:
            st, text, _ = s.request("POST", "/filter", body)
            assert st == 400, (body, st, text)
            assert json.loads(text)["Error"], text
        st, text, _ = s.request("POST", "/bind", '{"PodName":"x"}')
        assert st == 400
        # Oversized with a Content-Length: 413 before the body is read.
        big = "x" * 200000
        st, text, _ = s.request("POST", "/filter", big)
        assert st == 413 and "over the limit" in text, (st, text)
        # Oversized and chunked: refused too, and the server keeps serving.
        c = s.conn()
        c.putrequest("POST", "/filter")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        try:
            for _ in range(8):
                chunk = b"y" * 20000
                c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            c.send(b"0\r\n\r\n")
            status = c.getresponse().status
        except (ConnectionError, http.client.HTTPException) as e:
            status = repr(e)
        c.close()
        assert status == 413, status
        st, r = s.post("/filter", example("filter.json"))
        assert st == 200 and r["Error"] == ""
    finally:
        assert s.stop() == 0


@test
def nodes_form_echoes_full_objects():
    s = Server("--filter-keeps-best", "0")
    try:
        nodes = [{"metadata": {"name": n, "labels": {"x": n}}} for n in NODES]
        st, r = s.post("/filter", {"Pod": pod("p", {"gpu.scheduling/gpu": "1"}),
                                   "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None})
        assert r["NodeNames"] is None
        names = [n["metadata"]["name"] for n in r["Nodes"]["items"]]
        assert "gpu-h100-a" in names and "cpu-g" not in names
        assert r["Nodes"]["items"][0]["metadata"]["labels"]["x"] == names[0]
    finally:
        s.stop()


@test
def prioritize_binpack_vs_spread():
    s = Server()
    try:
        body = example("prioritize.json")
        st, r = s.post("/prioritize", body)
        scores = {h["Host"]: h["Score"] for h in r}
        assert scores == {"gpu-a100-b": 10}, scores   # nodes that score 0 are left out
        body["Pod"]["metadata"]["annotations"] = {"gpu.scheduling/policy": "spread"}
        st, r = s.post("/prioritize", body)
        scores = {h["Host"]: h["Score"] for h in r}
        assert "gpu-a100-b" not in scores and scores["gpu-h100-a"] == 10, scores
    finally:
        s.stop()


def bind(s, name, node):
    return s.post("/bind", {"PodName": name, "PodNamespace": "ml", "PodUID": "uid-" + name, "Node": node})[1]


@test
def bind_records_allocation_and_debug_view_shows_it():
    s = Server()
    try:
        s.post("/filter", {"Pod": pod("a", {"gpu.scheduling/gpu": "3"}), "NodeNames": NODES})
        assert bind(s, "a", "gpu-l4-c")["Error"] == ""
        st, body = s.debug("/debug/nodes?node=gpu-l4-c")
        node = json.loads(body)["nodes"][0]
        assert node["freeDevices"] == 1 and node["allocations"][0]["devices"] == "0,1,2", node
        # Its hostname label is its own name (nodes labelled alike share one array of labels).
        assert node["labels"]["kubernetes.io/hostname"] == "gpu-l4-c", node
        other = json.loads(s.debug("/debug/nodes?node=gpu-h100-a")[1])["nodes"][0]
        assert other["labels"]["kubernetes.io/hostname"] == "gpu-h100-a", other
        st, r = s.post("/filter", {"Pod": pod("b", {"gpu.scheduling/gpu": "2"}), "NodeNames": NODES})
        assert r["FailedNodes"]["gpu-l4-c"] == "gpu 0-3: 1 free, claim needs 2", r
        s.post("/filter", {"Pod": pod("c", {"gpu.scheduling/gpu": "2"}), "NodeNames": NODES})
        assert "no longer fits" in bind(s, "c", "gpu-l4-c")["Error"]
        assert s.debug("/debug/nodes?node=nope")[0] == 404
        # Not on the verb port: only on the loopback /debug listener.
        assert s.request("GET", "/debug/nodes")[0] == 404
    finally:
        s.stop()


@test
def debug_nodes_html_page_for_a_browser_json_for_the_rest():
    s = Server()
    try:
        hostile = 'x"><script>alert(1)</script>'
        for name, limits, node in [("a", {"gpu.scheduling/gpu": "2"}, "gpu-h100-a"),
                                   (hostile, {"gpu.scheduling/gpu": "1"}, "gpu-h100-a"),
                                   ("s", {"gpu.scheduling/gpu-memory": "8192", "gpu.scheduling/gpu-core": "30"}, "gpu-l4-c")]:
            s.post("/filter", {"Pod": pod(name, limits), "NodeNames": [node]})
            assert bind(s, name, node)["Error"] == "", name

        def get(path, accept=None):
            c = http.client.HTTPConnection("127.0.0.1", s.debug_port, timeout=10)
            try:
                c.request("GET", path, headers={"Accept": accept} if accept else {})
                r = c.getresponse()
                return r.status, r.getheader("Content-Type"), r.read().decode()
            finally:
                c.close()
        # JSON stays the default (curl's */*, no Accept at all) and ?format=json.
        for path, accept in [("/debug/nodes", None), ("/debug/nodes", "*/*"), ("/debug/nodes?format=json", "text/html")]:
            st, ctype, body = get(path, accept)
            assert st == 200 and ctype == "application/json", (path, accept, st, ctype)
            json.loads(body)
        # A browser's Accept, or ?format=html: the page.
        browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        for path, accept in [("/debug/nodes", browser), ("/debug/nodes?format=html", None)]:
            st, ctype, page = get(path, accept)
            assert st == 200 and ctype == "text/html; charset=utf-8", (path, st, ctype)
        assert page.startswith("<!DOCTYPE html>") and "<script" not in page, page[:200]
        assert 'data-holder="ml/x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page
        assert 'data-holder="ml/a"' in page and ">ml/s 8192 MiB, 30%<" in page
        assert 'data-node="gpu-l4-c"' in page and 'data-node="cpu-g"' not in page
        assert "1 node without GPUs not shown" in page, page
        st, ctype, one = get("/debug/nodes?format=html&node=gpu-l4-c")
        assert st == 200 and 'data-node="gpu-l4-c"' in one and 'data-node="gpu-h100-a"' not in one
        assert get("/debug/nodes?format=html&node=nope")[0] == 404
        st, _, body = get("/debug/nodes?format=xml")
        assert st == 400 and "format must be html or json" in body, body
    finally:
        s.stop()


@test
def concurrent_binds_over_http_exactly_one_wins():
    s = Server()
    try:
        # gpu-l4-c has 4 GPUs: 12 pods of 4 GPUs race for them.
        won = []
        def go(i):
            name = f"race-{i}"
            s.post("/filter", {"Pod": pod(name, {"gpu.scheduling/gpu": "4"}), "NodeNames": ["gpu-l4-c"]})
            if bind(s, name, "gpu-l4-c")["Error"] == "":
                won.append(name)
        threads = [threading.Thread(target=go, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, won
        # Shared: 25% each on the 4 free H100s... use the T4 node: one usable GPU, 4 x 25% fit.
        won.clear()
        def share(i):
            name = f"share-{i}"
            s.post("/filter", {"Pod": pod(name, {"gpu.scheduling/gpu-core": "25", "gpu.scheduling/gpu-memory": "1024"}),
                               "NodeNames": ["gpu-t4-f"]})
            if bind(s, name, "gpu-t4-f")["Error"] == "":
                won.append(name)
        threads = [threading.Thread(target=share, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 4, won
        node = json.loads(s.debug("/debug/nodes?node=gpu-t4-f")[1])["nodes"][0]
        assert node["devices"][0]["usedCorePercent"] == 100.0 and node["devices"][1]["sharedHolders"] == 0
    finally:
        s.stop()


@test
def preempt_answers_meta_form():
    s = Server()
    try:
        s.post("/filter", {"Pod": pod("low", {"gpu.scheduling/gpu": "4"}), "NodeNames": ["gpu-l4-c"]})
        assert bind(s, "low", "gpu-l4-c")["Error"] == ""
        st, r = s.post("/preempt", {"Pod": pod("high", {"gpu.scheduling/gpu": "2"}),
                                    "NodeNameToVictims": {"gpu-l4-c": {"Pods": [{"metadata": {"uid": "uid-low"}}],
                                                                        "NumPDBViolations": 0}},
                                    "NodeNameToMetaVictims": None})
        assert st == 200 and r == {"NodeNameToMetaVictims": {"gpu-l4-c": {"Pods": [{"UID": "uid-low"}],
                                                                          "NumPDBViolations": 0}}}, r
    finally:
        s.stop()


@test
def yaml_inventory_and_sighup_reload():
    with open(DEMO) as f:
        data = json.load(f)
    lines = ["apiVersion: v1", "kind: List", "items:"]
    # Write a small YAML by hand: two nodes.
    lines += ["- apiVersion: v1", "  kind: Node", "  metadata:", "    name: y1", "    labels: {zone: \"1\"}",
              "- apiVersion: gpu.scheduling/v1", "  kind: GpuNodeStatus", "  metadata: {name: y1}",
              "  spec: {nodeName: y1}", "  status:", "    devices:",
              "    - {id: 0, vendor: amd, model: AMD Instinct MI210, architecture: gfx90a, memoryMiB: 65536}"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    s = Server(inventory=path)
    try:
        st, r = s.post("/filter", {"Pod": pod("y", {"gpu.scheduling/gpu": "1"}), "NodeNames": ["y1"]})
        assert r["NodeNames"] == ["y1"], r
        with open(path, "w") as f:
            json.dump(data, f)
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while time.time() < deadline:
            if "gpu_extender_cache_nodes 7" in s.request("GET", "/metrics")[1]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("reload not seen: " + s.output())
    finally:
        s.stop()
        os.unlink(path)


@test
def tls_endpoint():
    d = tempfile.mkdtemp()
    ca_key, ca, key, csr, crt = (os.path.join(d, n) for n in ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt"))
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    def make_set(ca, ca_key, key, crt, cn):
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "1",
            "-subj", "/CN=" + cn)
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
        run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", crt,
            "-days", "1", "-extfile", ext)
    make_set(ca, ca_key, key, crt, "test-ca")
    s = Server("--tls-reload-interval", "1", tls=(crt, key, ca))
    try:
        st, r = s.post("/filter", example("filter.json"))
        assert st == 200 and r["Error"] == ""
        # Rotated in place (as a mounted Secret is): served from new connections on within the interval.
        new = [os.path.join(d, n) for n in ("ca2.crt", "ca2.key", "srv2.key", "srv2.crt")]
        make_set(*new, "test-ca-2")
        shutil.copy(new[2], key)
        shutil.copy(new[3], crt)
        s.tls = (crt, key, new[0])
        deadline = time.time() + 5
        while True:
            try:
                assert s.request("GET", "/healthz")[0] == 200
                break
            except ssl.SSLError:
                assert time.time() < deadline, "the rotated certificate was not served: " + s.output()
                time.sleep(0.1)
        assert "serving with the new certificate files" in s.output(), s.output()
    finally:
        s.stop()
    r = subprocess.run([BIN, "serve", "--inventory", DEMO, "--listen", "127.0.0.1:0", "--tls-cert", "/nope.pem",
                        "--tls-key", key], capture_output=True, text=True)
    assert r.returncode == 1 and "/nope.pem" in r.stderr, r.stderr


@test
def idle_connections_from_one_address_leave_others_served():
    """3000 connections from one address that send nothing (or half a header)
    take at most maxConnectionsPerAddress (2048) of the server; a client on
    another address is answered at once, and the server holds few fds; the
    ones past the limit are counted in /metrics and logged in one line, not
    one each; the server closes each of them once it went 10 s without a
    byte (no whole request yet), well before the 30 s a kept-alive
    connection may idle."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    s = Server()
    held = []
    try:
        for i in range(3000):
            held.append(socket.create_connection(("127.0.0.1", s.port), timeout=5))
            if i % 10 == 0:
                held[-1].send(b"POST /filter HTTP/1.1\r\nHost: x\r\n")   # slow loris
        t_held = time.time()
        time.sleep(0.5)
        fds = len(os.listdir("/proc/%d/fd" % s.proc.pid))
        assert fds < 2048 + 64, fds
        t0 = time.time()
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5, source_address=("127.0.0.2", 0))
        c.request("POST", "/filter", body=json.dumps(example("filter.json")),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())["Error"] == "", r.status
        t_answer = time.time()
        assert time.time() - t0 < 1.0, time.time() - t0
        c.request("GET", "/metrics")
        metrics = c.getresponse().read().decode()
        c.close()
        refused = [float(l.split()[-1]) for l in metrics.splitlines()
                   if l.startswith('gpu_extender_connections_refused_total{reason="connection_limit"}')]
        assert refused and refused[0] >= 3000 - 2048, refused
        lines = s.output().count("connections refused at the connection limit")
        assert lines == 1, s.output()[-2000:]
        # The header timeout: every held connection is closed by the server within 10 s (+2 s slack).
        deadline = t_held + 12
        sel = selectors.DefaultSelector()
        for c in held:
            sel.register(c, selectors.EVENT_READ)
        left = len(held)
        while left and time.time() < deadline:
            for key, _ in sel.select(0.5):
                try:
                    closed = not key.fileobj.recv(4096)
                except OSError:
                    closed = True
                if closed:
                    sel.unregister(key.fileobj)
                    left -= 1
        sel.close()
        assert not left, "%d connections still open after 12 s" % left
        print("  .. 3000 idle connections from one address: at most %d fds held, %d refused (one log line);"
              " another address answered in %.0f ms; all closed by the server %.1f s after they went quiet"
              % (fds, refused[0], (t_answer - t0) * 1000, time.time() - t_held))
    finally:
        for c in held:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert s.stop() == 0


@test
def hostile_bodies_get_bounded_answers():
    s = Server()
    rss = lambda: int([l for l in open("/proc/%d/status" % s.proc.pid) if l.startswith("VmRSS:")][0].split()[1]) // 1024
    took = {}
    try:
        rss0 = rss()
        # A 1 GB body announced: 413 from the header alone, without waiting for it.
        t0 = time.time()
        c = s.conn()
        c.putrequest("POST", "/filter")
        c.putheader("Content-Length", str(1 << 30))
        c.endheaders()
        r = c.getresponse()
        assert r.status == 413 and time.time() - t0 < 1.0, (r.status, time.time() - t0)
        took["1 GB Content-Length: 413"] = time.time() - t0
        c.close()
        # 10,000-deep nesting and invalid UTF-8 in a name: 400.
        for what, body in [("10,000-deep nesting: 400", b"[" * 10000 + b"]" * 10000),
                           ("invalid UTF-8: 400", b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["gpu-\xff\xfe"]}')]:
            t0 = time.time()
            st, text, _ = s.request("POST", "/filter", body)
            assert st == 400 and json.loads(text)["Error"] and time.time() - t0 < 1.0, (st, text[:200])
            took[what] = time.time() - t0
        # A filter naming 100,000 nodes (none known): every one unresolvable, answered in bounded time.
        names = ["node-%06d" % i for i in range(100000)]
        t0 = time.time()
        st, r = s.post("/filter", {"Pod": pod("p", {"gpu.scheduling/gpu": "1"}), "NodeNames": names})
        assert st == 200 and not r["NodeNames"] and len(r["FailedAndUnresolvableNodes"]) == 100000, (st, r.get("Error"))
        assert time.time() - t0 < 5.0, time.time() - t0
        took["filter naming 100,000 nodes: 200, all unresolvable"] = time.time() - t0
        # A bind for a pod nobody asked about: a clear error, nothing bound.
        t0 = time.time()
        st, r = s.post("/bind", {"PodName": "ghost", "PodNamespace": "ml", "PodUID": "no-such-uid", "Node": "gpu-l4-c"})
        assert st == 200 and r["Error"], r
        took["bind for a pod that does not exist: an Error"] = time.time() - t0
        # The server answers as before, and its memory stayed bounded.
        st, r = s.post("/filter", example("filter.json"))
        assert st == 200 and r["Error"] == ""
        rss1 = rss()
        assert rss1 < rss0 + 256, (rss0, rss1)
        for what, secs in took.items():
            print("  .. %s in %.0f ms" % (what, secs * 1000))
        print("  .. RSS %d MiB before, %d MiB after" % (rss0, rss1))
    finally:
        assert s.stop() == 0


@test
def sigterm_waits_for_inflight_and_exits_zero():
    s = Server()
    body = json.dumps({"Pod": pod("p", {"gpu.scheduling/gpu": "1"}), "NodeNames": NODES * 2000})
    out = {}
    def slow():
        out["r"] = s.request("POST", "/filter", body)
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.02)
    rc = s.stop()
    t.join()
    assert rc == 0, s.output()
    assert "shutting down" in s.output()
    assert out["r"][0] == 200, out


def serve_fails(*args, timeout=10):
    """Runs serve with args that must not start it: (exit status, stderr)."""
    r = subprocess.run([BIN, "serve"] + list(args), capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stderr


def write_tmp(text, suffix=".json"):
    f = tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False)
    f.write(text)
    f.close()
    return f.name


@test
def usage_errors_exit_2_before_the_inventory_loads():
    # Each of these used to start loading /nonexistent.json (exit 1) or to fail later.
    for args, want in [(["--listen", "127.0.0.1:x"], "--listen"),
                       (["--tls-cert", "/etc/hostname"], "--tls-cert needs --tls-key"),
                       (["--tls-key", "/etc/hostname"], "--tls-key needs --tls-cert"),
                       (["--url-prefix", "gpu"], "must start with '/'"),
                       (["--webhook-listen", "127.0.0.1:0"], "--webhook-listen needs --webhook-cert"),
                       (["--reap-interval", "0"], "--reap-interval")]:
        rc, err = serve_fails("--inventory", "/nonexistent.json", *args)
        assert rc == 2 and want in err and "nonexistent" not in err, (args, rc, err)


@test
def tls_files_that_do_not_load_name_the_flag_and_file():
    rc, err = serve_fails("--inventory", DEMO, "--listen", "127.0.0.1:0", "--debug-listen", "",
                          "--tls-cert", "/etc/hostname", "--tls-key", "/etc/hostname")
    assert rc == 1, (rc, err)
    assert "--tls-cert /etc/hostname" in err and "--tls-key /etc/hostname" in err, err
    assert "no PEM" in err, err


@test
def boolean_flags_take_a_separate_false():
    s = Server("--log-json", "false", "--webhook-visible-devices-env", "false")
    try:
        assert s.request("GET", "/healthz")[0] == 200
    finally:
        assert s.stop() == 0
    assert 'msg="serving"' in s.output(), s.output()   # logfmt, not JSON


@test
def inventory_numbers_are_checked_with_their_path():
    inv = json.load(open(DEMO))
    gns = [i for i, it in enumerate(inv["items"]) if it["kind"] == "GpuNodeStatus"][1]
    for field, value, want in [("memoryMiB", -5, "status.devices[1].memoryMiB must be a non-negative integer, not -5"),
                               ("memoryMiB", 1.5, "status.devices[1].memoryMiB must be a non-negative integer, not 1.5"),
                               ("memoryMiB", "80Gi", "status.devices[1].memoryMiB must be a non-negative integer"),
                               ("total", -1, "status.total must be a non-negative integer, not -1")]:
        bad = json.loads(json.dumps(inv))
        if field == "total":
            bad["items"][gns]["status"]["total"] = value
        else:
            bad["items"][gns]["status"]["devices"][1][field] = value
        path = write_tmp(json.dumps(bad))
        try:
            rc, err = serve_fails("--inventory", path, "--listen", "127.0.0.1:0", "--debug-listen", "")
        finally:
            os.unlink(path)
        assert rc == 1 and f"items[{gns}] (GpuNodeStatus " in err and want in err, (field, value, err)


@test
def inventory_json_errors_give_line_and_column():
    path = write_tmp('{"items": [\n  {"kind": "Node",\n   "metadata": {"name": "a"} x\n]}\n')
    try:
        rc, err = serve_fails("--inventory", path, "--listen", "127.0.0.1:0", "--debug-listen", "")
    finally:
        os.unlink(path)
    assert rc == 1 and "line 3, column 30" in err, err


@test
def empty_inventory_is_warned():
    path = write_tmp('{"kind": "List", "items": []}')
    try:
        s = Server(inventory=path)
        s.stop()
    finally:
        os.unlink(path)
    assert "level=warn" in s.output() and "no nodes" in s.output(), s.output()


@test
def bind_body_that_is_not_json_says_so():
    s = Server()
    try:
        for body in ["x{", "", "[1]"]:
            st, text, _ = s.request("POST", "/bind", body)
            assert st == 400 and "not a JSON object" in json.loads(text)["Error"], (body, st, text)
    finally:
        s.stop()


@test
def docs_list_every_flag_as_help_prints_it():
    for cmd, doc in [([BIN, "serve", "--help=markdown"], "docs/configuration.md"),
                     ([BIN, "simulate", "--help=markdown"], "docs/configuration.md"),
                     ([os.path.join(os.path.dirname(BIN), "gpu-agent"), "--help=markdown"], "docs/configuration.md")]:
        table = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        assert table.startswith("| flag |"), table[:200]
        text = open(os.path.join(ROOT, doc)).read()
        assert table in text, f"{doc} does not hold the table that `{' '.join(cmd[1:])}` prints; paste it in"


AGENT = os.path.join(os.path.dirname(BIN), "gpu-agent")
MONITORING = os.path.join(ROOT, "deploy/overlays/monitoring")
# Metrics of other programs the rules or the dashboard may name.
EXTERNAL_METRICS = {
    "apiserver_admission_webhook_fail_open_count": "kube-apiserver",
    "kube_node_status_capacity": "kube-state-metrics",
    "kube_node_status_allocatable": "kube-state-metrics",
}


def metric_table(cmd):
    """The families a program's `metrics` command prints: name -> (type, [labels], [values])."""
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    fams = {}
    for line in out.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        names, _, values = cells[2].partition(": ")
        labels = [] if names == "none" else [n.strip("` ") for n in names.split(",")]
        fams[cells[0].strip("`")] = (cells[1], labels, [v.strip("` ") for v in values.split(",")] if values else [])
    assert fams, out
    return out, fams


def all_metric_families():
    fams = dict(metric_table([BIN, "metrics"])[1])
    fams.update(metric_table([AGENT, "metrics"])[1])
    return fams


@test
def docs_metrics_md_is_what_the_programs_print():
    text = open(os.path.join(ROOT, "docs/metrics.md")).read()
    for cmd in [[BIN, "metrics"], [AGENT, "metrics"]]:
        table, fams = metric_table(cmd)
        assert table.startswith("| metric |"), table[:200]
        assert table in text, f"docs/metrics.md does not hold the table that `{' '.join(cmd)}` prints; paste it in"


def check_scrape(body, fams):
    """Each family of the table is in the scrape and nothing else is; labels and fixed values as listed."""
    seen = {}
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            seen[name] = typ
        elif line and not line.startswith("#"):
            series = line.rsplit(" ", 1)[0]
            name, _, labels = series.partition("{")
            base = name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[:-len(suffix)] in fams and fams[name[:-len(suffix)]][0] == "histogram":
                    base = name[:-len(suffix)]
            assert base in fams, f"/metrics serves {name}, which the metrics table lacks"
            typ, names, values = fams[base]
            for pair in filter(None, labels.rstrip("}").split('",')):
                k, _, v = pair.partition('="')
                v = v.rstrip('"')
                if k == "le" and typ == "histogram":
                    continue
                assert k in names, f"{series}: label {k} not in the table's {names}"
                assert not values or v in values, f"{series}: {k}={v} not in the table's {values}"
    assert set(seen) == set(fams), f"served but not in the table: {set(seen) - set(fams)}; " \
                                   f"in the table but not served: {set(fams) - set(seen)}"
    for name, typ in seen.items():
        assert fams[name][0] == typ, (name, typ, fams[name][0])


@test
def metrics_scrape_has_exactly_the_families_of_the_table():
    _, fams = metric_table([BIN, "metrics"])
    s = Server()
    try:
        s.post("/filter", example("filter.json"))
        st, body, _ = s.request("GET", "/metrics")
        assert st == 200, body
        check_scrape(body, fams)
        assert 'gpu_extender_node_gpus{node="gpu-h100-a",model=' in body, body
        assert 'gpu_extender_node_fragmentation_ratio{node="gpu-h100-a"} 0' in body, body
    finally:
        assert s.stop() == 0, s.output()


def promql_selectors(expr):
    """(metric, [(label, op, value)]) for each metric a PromQL expression names."""
    e = re.sub(r"\$\{?\w+\}?", "x", expr)                    # Grafana variables
    found, matchers = [], {}
    for m in re.finditer(r'([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}', e):
        matchers.setdefault(m.group(1), []).extend(re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', m.group(2)))
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)
    e = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    keywords = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}
    for name in re.findall(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()", e):
        if name not in keywords:
            found.append((name, matchers.get(name, [])))
    return found


def check_names(where, expr, fams):
    for name, matchers in promql_selectors(expr):
        if name in EXTERNAL_METRICS:
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        fam = fams.get(name) or (fams.get(base) if fams.get(base, ("",))[0] == "histogram" else None)
        assert fam, f"{where}: {name} is in no metrics table (docs/metrics.md) nor EXTERNAL_METRICS"
        for label, op, value in matchers:
            assert label in fam[1] or (label == "le" and fam[0] == "histogram"), f"{where}: {name} has no label {label}"
            if op in ("=", "!=") and fam[2] and label == fam[1][0]:
                assert value in fam[2], f"{where}: {name}{{{label}{op}\"{value}\"}}: not one of {fam[2]}"
    return len(promql_selectors(expr))


@test
def monitoring_rules_pass_promtool_and_name_only_served_metrics():
    assert promql_selectors('histogram_quantile(0.99, sum by (verb, le) (rate(a_b{x="y"}[5m]))) / c and d') == \
        [("a_b", [("x", "=", "y")]), ("c", []), ("d", [])]
    text = open(os.path.join(MONITORING, "alerts.yaml")).read()
    spec = text[text.index("\nspec:\n") + 7:]
    rules = "".join(l[2:] + "\n" for l in spec.splitlines())
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(rules)
    try:
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    fams = all_metric_families()
    exprs = re.findall(r"^\s*expr:\s*(.+)$", rules, re.M)
    assert len(exprs) >= 15 and all(check_names(f"alerts.yaml: {e}", e, fams) for e in exprs), exprs
    dash = json.load(open(os.path.join(MONITORING, "dashboard.json")))
    n = 0
    for p in dash["panels"]:
        for t in p.get("targets", []):
            n += check_names(f"dashboard.json panel {p['title']!r}", t["expr"], fams)
    assert n >= 20, n
    kust = open(os.path.join(MONITORING, "kustomization.yaml")).read()
    assert "grafana_dashboard" in kust and "dashboard.json" in kust and "alerts.yaml" in kust, kust


@test
def make_e2e_installs_the_test_packages_and_port_moves_debug():
    # A fresh machine: the test packages' stamp is missing, and `make e2e` must install them.
    out = subprocess.run(["make", "-n", "-C", ROOT, "e2e", "TEST_DEPS_STAMP=/nonexistent/.deps-test"],
                         capture_output=True, text=True).stdout
    assert "dpkg-query" in out and "runc" in out, out[-2000:]
    out = subprocess.run(["make", "-n", "-C", ROOT, "run", "PORT=9000"], capture_output=True, text=True).stdout
    assert "--listen 127.0.0.1:9000" in out and "--debug-listen 127.0.0.1:9001" in out, out[-2000:]


print(f"blackbox: {results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
