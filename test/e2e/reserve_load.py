#!/usr/bin/env python3
"""Load for test/e2e/reserve.sh.

  reserve_load.py pods NS PREFIX SPEC [--selector K=V] [--scheduler NAME] [--managed-every N]
      prints a v1 List of pods (for kubectl create -f -). SPEC is a comma list
      of COUNTxKIND: "100xgpu1,50xgpu2,30xshared" where KIND is gpu1 / gpu2 / gpu4
      (exclusive GPUs) or shared (gpu-core 30, gpu-memory 20000). Every Nth
      pod gets the label gpu.scheduling/managed=true (watched by the
      extenders, as the webhook would label it); the others are found through
      their reservation Leases and the reaper's lookups.

  reserve_load.py binds PODS_JSON URLS NODES [--threads 16] [--rounds 20]
      kube-scheduler's part without kube-scheduler: for every pod in
      PODS_JSON (kubectl get pods -o json), from THREADS threads, POST /filter
      then /bind to a randomly chosen extender of URLS (comma list), on a
      random node of those the filter passed. A bind that fails while the
      filter still passes some node is retried (as kube-scheduler would), up
      to ROUNDS times; a pod the filter rejects everywhere is done. After a
      request that fails in transport (the extender was killed) the client
      waits for /readyz (as a Service would only route to a ready replica)
      and tries the pod again, until --deadline seconds have passed; pods
      whose name starts with "ra-" are abandoned instead (a bind cut off and
      never retried: only the reaper can release what it reserved).
      Prints a JSON report: {"bound": {pod: node}, "failed": {pod: last error},
      "binds": n, "bind_errors": n, "filters": n, "cut": n}.

  reserve_load.py inject NS POD NODES
      what a bind killed right after its ledger write leaves behind: an
      exclusive reservation of a free GPU, on a random one of NODES (comma
      list) that has one, for the (unbound) pod, in the node's ledger (a
      resourceVersion-checked replace, retried on conflicts) and as the pod's
      reservation Lease. Prints "NODE DEVICE".

  reserve_load.py drop NS POD NODE
      a ledger that lost an entry: the pod's entry is taken out of NODE's
      ledger (a resourceVersion-checked replace, retried on conflicts); its
      reservation Lease stays.
      Uses kubectl (KUBECONFIG) as admin.
"""
import hashlib
import json
import random
import sys
import subprocess
import threading
import time
import urllib.request

KINDS = {
    "gpu1": {"gpu.scheduling/gpu": "1"},
    "gpu2": {"gpu.scheduling/gpu": "2"},
    "gpu4": {"gpu.scheduling/gpu": "4"},
    "shared": {"gpu.scheduling/gpu-core": "30", "gpu.scheduling/gpu-memory": "20000"},
}


def cmd_pods(argv):
    ns, prefix, spec = argv[0], argv[1], argv[2]
    opts = dict(zip(argv[3::2], argv[4::2]))
    sched = opts.get("--scheduler", "gpu-scheduler")
    every = int(opts.get("--managed-every", "0"))
    sel = opts.get("--selector")
    order = []
    for part in spec.split(","):
        n, kind = part.split("x", 1)
        order += [kind] * int(n)
    random.Random(7).shuffle(order)   # mixed sizes, the same each run
    items = []
    for i, kind in enumerate(order):
        labels = {"e2e": prefix, "kind": kind}
        if every and i % every == 0:
            labels["gpu.scheduling/managed"] = "true"
        spec = {"schedulerName": sched, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"limits": KINDS[kind]}}]}
        if sel:
            k, v = sel.split("=", 1)
            spec["nodeSelector"] = {k: v}
        items.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "%s-%03d" % (prefix, i), "namespace": ns, "labels": labels},
                      "spec": spec})
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def cmd_binds(argv):
    pods = json.load(open(argv[0]))["items"]
    urls = argv[1].split(",")
    nodes = argv[2].split(",")
    opts = dict(zip(argv[3::2], argv[4::2]))
    threads = int(opts.get("--threads", "16"))
    rounds = int(opts.get("--rounds", "20"))
    deadline = time.time() + float(opts.get("--deadline", "60"))
    lock = threading.Lock()
    work = list(pods)
    random.shuffle(work)
    out = {"bound": {}, "failed": {}, "binds": 0, "bind_errors": 0, "filters": 0, "retried": 0, "cut": 0}

    def one(pod):
        md = pod["metadata"]
        name = md["name"]
        err = "never tried"
        for attempt in range(rounds):
            rng = random.Random()
            f = post(rng.choice(urls) + "/filter", {"Pod": pod, "NodeNames": nodes})
            with lock:
                out["filters"] += 1
            ok = f.get("NodeNames") or []
            if not ok:
                err = "filter: no node fits: %s %s" % (json.dumps(f.get("FailedNodes"))[:200],
                                                       json.dumps(f.get("FailedAndUnresolvableNodes"))[:200])
                break
            node = rng.choice(ok)
            b = post(rng.choice(urls) + "/bind", {"PodName": name, "PodNamespace": md["namespace"],
                                                  "PodUID": md["uid"], "Node": node})
            with lock:
                out["binds"] += 1
                if b.get("Error"):
                    out["bind_errors"] += 1
                    if attempt:
                        out["retried"] += 1
            if not b.get("Error"):
                with lock:
                    out["bound"][name] = node
                return
            err = b["Error"]
        with lock:
            out["failed"][name] = err

    def wait_ready(until):
        while time.time() < until:
            try:
                ok = all(urllib.request.urlopen(u + "/readyz", timeout=2).status == 200 for u in urls)
                if ok:
                    return
            except Exception:
                pass
            time.sleep(0.1)

    def worker():
        while True:
            with lock:
                if not work:
                    return
                pod = work.pop()
            while True:
                try:
                    one(pod)
                    break
                except Exception as e:   # transport: the extender is down; try again
                    name = pod["metadata"]["name"]
                    with lock:
                        out["cut"] += 1
                    if name.startswith("ra-") or time.time() > deadline:
                        with lock:
                            out["failed"][name] = "abandoned: %r" % e
                        break
                    wait_ready(deadline)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    json.dump(out, sys.stdout)


def kubectl(args, stdin=None):
    r = subprocess.run(["kubectl"] + args, input=stdin, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def cmd_inject(argv):
    ns, pod, nodes = argv[0], argv[1], argv[2].split(",")
    random.shuffle(nodes)
    rc, out, err = kubectl(["-n", ns, "get", "pod", pod, "-o", "json"])
    if rc:
        sys.exit("inject: " + err)
    p = json.loads(out)
    uid = p["metadata"]["uid"]
    for node in nodes:
        if inject_on(ns, pod, uid, node):
            return
    sys.exit("inject: no free GPU on %s" % ",".join(nodes))


def cmd_drop(argv):
    ns, pod, node = argv[0], argv[1], argv[2]
    rc, out, err = kubectl(["-n", ns, "get", "pod", pod, "-o", "json"])
    if rc:
        sys.exit("drop: " + err)
    uid = json.loads(out)["metadata"]["uid"]
    for attempt in range(20):
        rc, out, err = kubectl(["-n", "gpu-system", "get", "lease", "gpu-ledger." + node, "-o", "json"])
        if rc:
            sys.exit("drop: " + err)
        lease = json.loads(out)
        anns = lease["metadata"]["annotations"]
        entries = json.loads(anns.get("gpu.scheduling/reservations") or "[]")
        kept = [e for e in entries if e["uid"] != uid]
        if len(kept) == len(entries):
            sys.exit("drop: %s holds nothing in the ledger of %s" % (pod, node))
        anns["gpu.scheduling/reservations"] = json.dumps(kept, separators=(",", ":"))
        rc, out, err = kubectl(["replace", "-f", "-"], json.dumps(lease))
        if rc == 0:
            return
        if "the object has been modified" not in err and "Conflict" not in err:
            sys.exit("drop: " + err)
        time.sleep(0.1)
    sys.exit("drop: too many conflicts")


def inject_on(ns, pod, uid, node):
    rc, out, err = kubectl(["get", "gpunodestatus", node, "-o", "json"])
    if rc:
        sys.exit("inject: " + err)
    ids = [d["id"] for d in json.loads(out)["status"]["devices"]]
    for attempt in range(20):
        rc, out, err = kubectl(["-n", "gpu-system", "get", "lease", "gpu-ledger." + node, "-o", "json"])
        if rc and "NotFound" not in err:
            sys.exit("inject: " + err)
        # A node nothing was ever reserved on has no ledger yet: create it,
        # as the extender's first reservation there would.
        lease = json.loads(out) if rc == 0 else {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "gpu-ledger." + node, "namespace": "gpu-system",
                         "labels": {"gpu.scheduling/ledger": "true"},
                         "annotations": {"gpu.scheduling/node": node}},
            "spec": {"holderIdentity": "e2e-inject"}}
        anns = lease["metadata"]["annotations"]
        entries = json.loads(anns.get("gpu.scheduling/reservations") or "[]")
        used = {d for e in entries for d in e["devices"]}
        free = [i for i in ids if i not in used]
        if not free:
            return False
        entries.append({"uid": uid, "namespace": ns, "pod": pod, "mode": "Exclusive", "devices": [free[0]],
                        "memoryMiB": 0, "coreMilli": 0, "since": int(time.time())})
        anns["gpu.scheduling/reservations"] = json.dumps(entries, separators=(",", ":"))
        rc, out, err = kubectl(["replace" if "resourceVersion" in lease["metadata"] else "create", "-f", "-"],
                               json.dumps(lease))
        if rc == 0:
            break
        if not any(m in err for m in ("the object has been modified", "Conflict", "AlreadyExists")):
            sys.exit("inject: " + err)
        time.sleep(0.1)
    else:
        sys.exit("inject: too many conflicts")
    res = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "gpu-reservation.%s.%s" % (uid, hashlib.sha256(node.encode()).hexdigest()[:16]),
                        "namespace": ns,
                        "labels": {"gpu.scheduling/reservation": "true"},
                        "annotations": {"gpu.scheduling/node": node,
                                        "gpu.scheduling/allocated": "%s:%d" % (node, free[0])},
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]},
           "spec": {"holderIdentity": "%s/%s" % (ns, pod)}}
    rc, out, err = kubectl(["create", "-f", "-"], json.dumps(res))
    if rc:
        sys.exit("inject: " + err)
    print(node, free[0])
    return True


if __name__ == "__main__":
    {"pods": cmd_pods, "binds": cmd_binds, "inject": cmd_inject, "drop": cmd_drop}[sys.argv[1]](sys.argv[2:])
