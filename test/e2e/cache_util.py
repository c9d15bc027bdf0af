#!/usr/bin/env python3
"""Helpers for test/e2e/cache.sh (python3 stdlib only).

  watch-change URL NODES EXPECT [--gpus N | --claim NS/NAME] [--timeout S] [--interval S] -- CMD...
      Runs CMD (a write to the API server), then asks the extender every
      INTERVAL seconds (POST /filter, or GET /debug/nodes for EXPECT=absent)
      until the answer for the first of NODES (comma-separated) matches EXPECT:
        pass            the node passes the filter
        reject:TEXT     the node is rejected with a reason containing TEXT
        absent          the node is not in /debug/nodes
      Prints the delay from CMD's end (and from its start); fails after TIMEOUT.
  filter URL NODES [--gpus N | --claim NS/NAME]
      Prints the filter reply.
  converge URL NODES_JSON GNS_JSON [--timeout S]
      Polls GET /debug/nodes until the cache holds exactly the API server's
      Nodes and GpuNodeStatuses (labels, devices, health, inUseBy); prints the
      differences on failure.
  metric URL NAME [RESOURCE]
      Prints the value of a metric (summed over labels unless RESOURCE).
  etcd ETCD_URL revision | compact | delete KEY | unhealthy GNS_NAME DEVICE_ID
      Direct etcd access over its JSON gateway (the API server may be down):
      the current revision; a physical compaction at the current revision;
      delete a key; mark a device of a GpuNodeStatus Unhealthy in place.
  proxy TARGET_HOST:PORT PORT_FILE
      A TCP proxy (TLS passes through) with a control server; writes
      "LISTEN_PORT CONTROL_PORT" to PORT_FILE. Control: GET /cut (close the
      open connections), /hold (cut, and close new connections at once),
      /open (forward again), /budget?bytes=N (from now on, cut every
      connection each time N more bytes went from the API server to the
      clients, all connections together; 0: off), /stats (JSON).
  proxyctl CONTROL_PORT cut|hold|open|stats|budget?bytes=N
  track URL METRIC OUT
      Samples a metric of the extender every 20 ms until OUT.stop exists, then
      writes "MIN MAX SAMPLES" to OUT.
"""
import base64
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from faultproxy import quiet_close   # (this directory: the fault proxy of faults.sh)


def http_json(url, body=None, timeout=5):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


# ---- the extender -------------------------------------------------------------


def pod_for(args):
    _, vals = split_opts(args, ("--gpus", "--claim", "--timeout", "--interval"))
    gpus, claim = vals.get("--gpus", "2"), vals.get("--claim")
    meta = {"name": "cache-probe", "namespace": "ml"}
    if claim:
        ns, name = claim.split("/", 1)
        meta["namespace"] = ns
        meta["annotations"] = {"gpu.scheduling/claim": name}
        limits = {"gpu.scheduling/claim": "1"}
    else:
        limits = {"gpu.scheduling/gpu": gpus}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def ask_filter(url, nodes, pod):
    return http_json(url + "/filter", {"Pod": pod, "NodeNames": nodes})


def verdict(reply, node):
    """('pass', '') or ('reject', reason)."""
    if node in (reply.get("NodeNames") or []):
        return "pass", ""
    for k in ("FailedNodes", "FailedAndUnresolvableNodes"):
        if node in (reply.get(k) or {}):
            return "reject", reply[k][node]
    return "missing", ""


def debug_nodes(url):
    return {n["name"]: n for n in http_json(url + "/debug/nodes")["nodes"]}


def split_opts(argv, flags):
    """Positional arguments, and the values of --flags (each takes one value)."""
    pos, vals, i = [], {}, 0
    while i < len(argv):
        if argv[i] in flags:
            vals[argv[i]] = argv[i + 1]
            i += 2
        else:
            pos.append(argv[i])
            i += 1
    return pos, vals


def cmd_watch_change(argv):
    sep = argv.index("--")
    cmd = argv[sep + 1:]
    pos, vals = split_opts(argv[:sep], ("--timeout", "--interval", "--gpus", "--claim"))
    url, nodes, expect = pos[0], pos[1].split(","), pos[2]
    timeout = float(vals.get("--timeout", 1.0))
    interval = float(vals.get("--interval", 0.05))
    pod = pod_for(argv[:sep])
    node = nodes[0]

    def matches():
        if expect == "absent":
            return node not in debug_nodes(url), "present in /debug/nodes"
        v, why = verdict(ask_filter(url, nodes, pod), node)
        if expect == "pass":
            return v == "pass", "%s %s" % (v, why)
        if expect.startswith("reject:"):
            return v == "reject" and expect[7:] in why, "%s %s" % (v, why)
        raise SystemExit("bad EXPECT " + expect)

    ok, last = matches()
    if ok:
        print("%s: already %s before the write (the test is wrong)" % (node, expect))
        return 1
    # Poll from before the write starts, so that a change that shows before the
    # write command has even returned is timed too.
    seen = {"t": None, "last": last, "polls": 0}
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                ok, last = matches()
            except (OSError, ValueError) as e:
                ok, last = False, "error: %s" % e
            seen["polls"] += 1
            if ok:
                seen["t"] = time.monotonic()
                return
            seen["last"] = last
            time.sleep(interval)

    t_start = time.monotonic()
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
    t0 = time.monotonic()
    if rc:
        stop.set()
        print("the write failed: %s (exit %d)" % (" ".join(cmd), rc))
        return 1
    th.join(timeout=max(0.0, t0 + timeout - time.monotonic()))
    stop.set()
    t = seen["t"]
    took = (t0 - t_start) * 1000
    if t is None:
        print("%s not %s %.0f ms after the write; last answer: %s" %
              (node, expect, (time.monotonic() - t0) * 1000, seen["last"]))
        return 1
    if t <= t0:
        print("%s -> %s before the write command returned (%d ms after it started; it took %d ms; %d polls)" %
              (node, expect, (t - t_start) * 1000, took, seen["polls"]))
    else:
        print("%s -> %s %d ms after the write returned (%d ms after it started; it took %d ms; %d polls)" %
              (node, expect, (t - t0) * 1000, (t - t_start) * 1000, took, seen["polls"]))
    return 0


def cmd_filter(argv):
    print(json.dumps(ask_filter(argv[0], argv[1].split(","), pod_for(argv[2:]))))
    return 0


def api_state(nodes_json, gns_json):
    with open(nodes_json) as f:
        nodes = {n["metadata"]["name"]: n for n in json.load(f)["items"]}
    with open(gns_json) as f:
        gns = {}
        for g in json.load(f)["items"]:
            gns[(g.get("spec") or {}).get("nodeName") or g["metadata"]["name"]] = g
    return nodes, gns


def differences(cache, nodes, gns):
    diffs = []
    for name in sorted(set(cache) | set(nodes) | set(gns)):
        c = cache.get(name)
        if c is None:
            diffs.append("%s: in the API server, not in the cache" % name)
            continue
        if c["hasNode"] != (name in nodes):
            diffs.append("%s: hasNode=%s but the Node %s" % (name, c["hasNode"], "exists" if name in nodes else "does not"))
        if c["hasGpuNodeStatus"] != (name in gns):
            diffs.append("%s: hasGpuNodeStatus=%s but the GpuNodeStatus %s" %
                         (name, c["hasGpuNodeStatus"], "exists" if name in gns else "does not"))
        if name in nodes:
            want = nodes[name]["metadata"].get("labels") or {}
            if c["labels"] != want:
                diffs.append("%s: labels %s, API %s" % (name, c["labels"], want))
        if name in gns:
            want = {d["id"]: d for d in (gns[name].get("status") or {}).get("devices") or []}
            have = {d["id"]: d for d in c["devices"]}
            if set(want) != set(have):
                diffs.append("%s: devices %s, API %s" % (name, sorted(have), sorted(want)))
            for i in sorted(set(want) & set(have)):
                w, h = want[i], have[i]
                if w.get("uuid") != h["uuid"] or w.get("health", "Healthy") != h["health"]:
                    diffs.append("%s: device %d %s/%s, API %s/%s" %
                                 (name, i, h["uuid"], h["health"], w.get("uuid"), w.get("health")))
                if bool(w.get("inUseBy")) != h["externallyUsed"]:
                    diffs.append("%s: device %d externallyUsed=%s, API inUseBy=%s" %
                                 (name, i, h["externallyUsed"], w.get("inUseBy")))
    return diffs


def cmd_converge(argv):
    url, nodes_json, gns_json = argv[:3]
    timeout = float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else 20.0
    nodes, gns = api_state(nodes_json, gns_json)
    t0 = time.monotonic()
    while True:
        try:
            diffs = differences(debug_nodes(url), nodes, gns)
        except (OSError, urllib.error.URLError, ValueError) as e:
            diffs = ["cannot read /debug/nodes: %s" % e]
        if not diffs:
            print("cache == API server (%d nodes, %d GpuNodeStatuses) after %.1f s" %
                  (len(nodes), len(gns), time.monotonic() - t0))
            return 0
        if time.monotonic() - t0 > timeout:
            print("cache differs from the API server after %.0f s:" % timeout)
            for d in diffs:
                print("  " + d)
            return 1
        time.sleep(0.1)


def cmd_metric(argv):
    url, name = argv[0], argv[1]
    res = argv[2] if len(argv) > 2 else None
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, _, val = line.rpartition(" ")
        metric = key.split("{", 1)[0]
        if metric != name:
            continue
        if res is not None and 'resource="%s"' % res not in key:
            continue
        total += float(val)
    print("%g" % total)
    return 0


# ---- etcd -------------------------------------------------------------------------


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def cmd_etcd(argv):
    url, op = argv[0], argv[1]
    if op == "revision":
        print(http_json(url + "/v3/kv/range", {"key": b64("\0")})["header"]["revision"])
        return 0
    if op == "compact":
        rev = int(http_json(url + "/v3/kv/range", {"key": b64("\0")})["header"]["revision"])
        http_json(url + "/v3/kv/compaction", {"revision": rev, "physical": True}, timeout=30)
        print(rev)
        return 0
    if op == "delete":
        r = http_json(url + "/v3/kv/deleterange", {"key": b64(argv[2])})
        if int(r.get("deleted", 0)) != 1:
            print("etcd: %s was not there" % argv[2])
            return 1
        return 0
    if op == "unhealthy":
        key = "/registry/gpu.scheduling/gpunodestatuses/" + argv[2]
        r = http_json(url + "/v3/kv/range", {"key": b64(key)})
        if not r.get("kvs"):
            print("etcd: no %s" % key)
            return 1
        obj = json.loads(base64.b64decode(r["kvs"][0]["value"]))
        for d in obj["status"]["devices"]:
            if d["id"] == int(argv[3]):
                d["health"] = "Unhealthy"
        http_json(url + "/v3/kv/put", {"key": b64(key), "value": b64(json.dumps(obj))})
        return 0
    raise SystemExit("etcd: unknown op " + op)


# ---- a TCP proxy with a kill switch -------------------------------------------------


class Proxy:
    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.lock = threading.Lock()
        self.conns = set()
        self.held = False
        self.accepted = 0
        self.refused = 0
        self.cuts = 0
        self.budget = 0       # > 0: cut every connection once this many bytes went to the clients
        self.spent = 0
        self.budget_cuts = 0

    def pump(self, src, dst, pair, downstream):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                over = False
                if downstream:
                    with self.lock:
                        if self.budget:
                            left = self.budget - self.spent
                            if len(data) >= left:
                                data, over = data[:max(left, 0)], True
                                self.spent = 0
                                self.budget_cuts += 1
                            else:
                                self.spent += len(data)
                dst.sendall(data)
                if over:
                    self.cut()
                    break
        except OSError:
            pass
        self.close(pair)

    def close(self, pair):
        with self.lock:
            self.conns.discard(pair)
        for s in pair:
            quiet_close(s)

    def serve(self, lsock):
        while True:
            c, _ = lsock.accept()
            with self.lock:
                held = self.held
                if held:
                    self.refused += 1
                else:
                    self.accepted += 1
            if held:
                c.close()
                continue
            try:
                u = socket.create_connection(self.target, timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            pair = (c, u)
            with self.lock:
                self.conns.add(pair)
            threading.Thread(target=self.pump, args=(c, u, pair, False), daemon=True).start()
            threading.Thread(target=self.pump, args=(u, c, pair, True), daemon=True).start()

    def cut(self):
        with self.lock:
            pairs = list(self.conns)
            self.cuts += 1
        for p in pairs:
            self.close(p)
        return len(pairs)


def cmd_proxy(argv):
    target, port_file = argv[0], argv[1]
    p = Proxy(target)
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(128)

    class Control(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/cut":
                out = {"closed": p.cut()}
            elif self.path == "/hold":
                with p.lock:
                    p.held = True
                out = {"closed": p.cut()}
            elif self.path == "/open":
                with p.lock:
                    p.held = False
                out = {}
            elif self.path.startswith("/budget?bytes="):
                with p.lock:
                    p.budget, p.spent = int(self.path.split("=", 1)[1]), 0
                out = {}
            elif self.path == "/stats":
                out = {}
            else:
                self.send_error(404)
                return
            with p.lock:
                out.update(active=len(p.conns), accepted=p.accepted, refused=p.refused, held=p.held,
                           budget=p.budget, budget_cuts=p.budget_cuts)
            body = (json.dumps(out) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    ctl = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Control)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d %d\n" % (lsock.getsockname()[1], ctl.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    threading.Thread(target=p.serve, args=(lsock,), daemon=True).start()
    ctl.serve_forever()
    return 0


def cmd_proxyctl(argv):
    with urllib.request.urlopen("http://127.0.0.1:%s/%s" % (argv[0], argv[1]), timeout=5) as r:
        sys.stdout.write(r.read().decode())
    return 0


def cmd_track(argv):
    url, name, out = argv[0], argv[1], argv[2]
    lo, hi, n = None, None, 0
    while not os.path.exists(out + ".stop"):
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + " "):
                        v = float(line.split()[1])
                        lo = v if lo is None else min(lo, v)
                        hi = v if hi is None else max(hi, v)
                        n += 1
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    with open(out + ".tmp", "w") as f:
        f.write("%g %g %d\n" % (lo if lo is not None else -1, hi if hi is not None else -1, n))
    os.rename(out + ".tmp", out)
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmds = {"watch-change": cmd_watch_change, "filter": cmd_filter, "converge": cmd_converge,
            "metric": cmd_metric, "etcd": cmd_etcd, "proxy": cmd_proxy, "proxyctl": cmd_proxyctl, "track": cmd_track}
    if sys.argv[1] not in cmds:
        print(__doc__)
        return 2
    return cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
