#!/usr/bin/env python3
"""Helpers of bench/e2e.sh (python3 stdlib only). Talks to the API
server named by CLUSTER_API_URL with the token in CLUSTER_ADMIN_TOKEN_FILE and
the CA in CLUSTER_CA_FILE (as bench/e2e.sh exports them).

  e2e_load.py nodes N [--gpus 8] [--threads 16] [--peers gpushare,hami] [--preferred P]
      creates fake nodes bench-0..N-1, Ready, advertising N GPUs both as
      gpu.scheduling/gpu and as example.com/gpu, each with its GpuNodeStatus
      (H100s in two NVLink islands). --preferred P: every P-th node
      (bench-0, bench-P, ...) is labelled bench/preferred=true. --peers adds what each peer extender
      reads (bench/peers/): gpushare: capacity aliyun.com/gpu-count (the
      GPUs) and aliyun.com/gpu-mem (80 a GPU); hami: capacity nvidia.com/gpu
      and the annotations its device plugin writes, hami.io/node-nvidia-register
      (the devices: uuid GPU-NODE-K, 81559 MiB, split count 10, 100 cores)
      and hami.io/node-handshake (Requesting_TIME, as its scheduler leaves it).
  e2e_load.py pods NS COUNT RESOURCE SCHEDULER [--threads 16] [--prefix p] [--groups G] [--mixed SEED]
      creates COUNT pods p-0.. in NS, each asking for 1 of RESOURCE (or
      NAME=QTY,NAME=QTY... for several limits), for SCHEDULER; labelled
      gpu.scheduling/managed=true as the webhook would. --mixed SEED: a
      mixed workload instead (MIX, in an order drawn with SEED): whole GPUs
      of 1, 2, 4 and 8, shares (16384 MiB and 25 % of one GPU), pods of a
      GpuClaim of 4 GPUs on one NVLink island (Required, 300 GB/s; a claim
      each, p-topo-J) and members of gangs of 4 one-GPU pods (a PodGroup
      scheduling.x-k8s.io/v1alpha1 each, p-gang-J, minMember 4). RESOURCE
      example.com/gpu makes their plain counterparts instead (whole
      example.com/gpu: a share as 1, a claim as its 4, gang members as
      independent pods; no claims, no PodGroups). --groups G: pod i is
      labelled bench/group=g<i % G> and prefers (preferredDuringScheduling
      pod anti-affinity, weight 100, topologyKey kubernetes.io/hostname) no
      node that holds a pod of its group (G Deployments whose replicas
      spread over hosts); and prefers (preferredDuringScheduling node
      affinity, weight 100) a node labelled bench/preferred=true.
  e2e_load.py honoured NS
      prints the shares of the bound pods of NS whose --groups preferences
      were honoured: no other pod of its group on its node (anti-affinity),
      and a node labelled bench/preferred=true (node affinity).
  e2e_load.py check NS KIND [--gpus 8]
      reads what the extender of KIND recorded on the bound pods of NS and
      prints the double allocations: pods placed on a device beyond its
      capacity (a device two whole-GPU pods were both given), plus bound pods
      that record no device (or one not on their node), and then the
      number of bound pods and of gangs partly bound (pods labelled
      scheduling.x-k8s.io/pod-group: some bound, some not). KIND: extender
      (gpu.scheduling/allocated, node:ids; a device given whole holds
      nothing else, shares, gpu.scheduling/shared-memory-mib and
      -core-percent, add up to its memory and 100 %; a pod whose record is
      not what it asked, or a claim pod's GPUs not on one island, counts as
      unrecorded), gpushare (annotations
      ALIYUN_COM_GPU_MEM_IDX, _POD and _DEV), hami
      (hami.io/vgpu-devices-allocated: uuid,type,MiB,cores per device).
  e2e_load.py selftest
      runs check's counting on made-up pods (a GPU given twice, shares
      over a GPU's memory or compute, records not as asked, a claim across
      islands, a gang partly bound, and their sound counterparts) and exits
      1 if a count is not the one it must be; bench/e2e.sh runs it first.
  e2e_load.py watch NS COUNT OUT [--timeout 600]
      watches the pods of NS and notes when each is bound; once COUNT are
      bound (or at the timeout) writes a JSON report to OUT: bound, first
      and last binding (seconds since the watch began), the rate,
      (bound - 1) / (last - first), and bound_at, each binding's wall-clock
      time (time.time()). Writes OUT.ready once the watch runs.
  e2e_load.py latency WATCH_OUT START
      prints p50 and p99 seconds from START (wall clock: when the scheduler
      was started, all pods pending) to each pod's binding, from a watch's OUT.
  e2e_load.py table ROUNDS_FILE [PODS]
      the summary of bench/e2e.sh's rounds (a JSON object a line, one per
      row and round): per row the median pods/s and its range, the medians
      of the per-round ratios to plain and to floor, latency, CPU ms per
      pod by component, API writes per pod and the verbs' mean times.
  e2e_load.py writes
      prints the API server's count of write requests so far (POST, PUT,
      PATCH, DELETE; from its /metrics).
  e2e_load.py requests [BEFORE_FILE PODS]
      prints the API server's request counts so far, a line "VERB RESOURCE
      COUNT" each (RESOURCE with /subresource; from its /metrics). With
      BEFORE_FILE (an earlier output) and PODS: the requests since then per
      pod instead, the most frequent first, those of 0.01 or more.
  e2e_load.py reserved NS PER_NODE NODES [--threads 16]
      what a running cluster holds: on each node bench-0..NODES-1, PER_NODE
      bound one-GPU pods in NS (annotation gpu.scheduling/allocated, label
      gpu.scheduling/managed) and the node's ledger Lease in gpu-system
      recording them, devices 0..PER_NODE-1; bench-0 gets one pod fewer.
  e2e_load.py drained NS [--timeout 120]
      waits until NS has no pods left and no ledger in gpu-system holds a
      reservation (the extender released them all); exits 1 at the timeout.
  e2e_load.py cold URL NODES OUT [--timeout 120]
      polls a just started extender: writes to OUT the seconds from the call
      until /readyz answers 200, and until a filter of a one-GPU pod naming
      every node passes exactly bench-0 (the first correct answer).
  e2e_load.py rss PID
      prints the process's RSS MiB by kind of mapping (/proc/PID/smaps): main
      heap, threads' heaps (glibc's 64 MiB-aligned arenas), threads' stacks
      (after a one-page guard), other anonymous memory (the extender's slab,
      large blocks), files (the program and its libraries).
"""
import json
import math
import os
import random
import ssl
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

# What the fake nodes advertise to the peer extenders (nodes --peers).
GPUSHARE_MEM = 80      # aliyun.com/gpu-mem a GPU (GiB, as gpushare's device plugin counts)
GPU_MIB = 81559        # MiB a device of the bench nodes, an H100 80GB as nvidia-smi gives it
HAMI_MEM = GPU_MIB
HAMI_SPLIT = 10        # tasks a device (HAMi's deviceSplitCount default)

# Unset for the commands that need no API server (table).
API = os.environ.get("CLUSTER_API_URL", "")
TOKEN = open(os.environ["CLUSTER_ADMIN_TOKEN_FILE"]).read().strip() if API else ""
CTX = ssl.create_default_context(cafile=os.environ["CLUSTER_CA_FILE"]) if API else None


def request(method, path, body=None, ctype="application/json", timeout=30, raw=False):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(API + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, context=CTX, timeout=timeout) as r:
        out = r.read()
        return out if raw else json.loads(out)


def opts(argv, defaults):
    o = dict(defaults)
    for k, v in zip(argv[::2], argv[1::2]):
        o[k.lstrip("-")] = v
    return o


def parallel(fn, items, threads):
    with ThreadPoolExecutor(max_workers=threads) as ex:
        for _ in ex.map(fn, items):
            pass


def cmd_nodes(argv):
    n = int(argv[0])
    o = opts(argv[1:], {"gpus": "8", "threads": "16"})
    gpus = int(o["gpus"])
    peers = set(filter(None, o.get("peers", "").split(",")))
    preferred = int(o.get("preferred", 0))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def one(i):
        name = "bench-%d" % i
        meta = {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}
        if preferred and i % preferred == 0:
            meta["labels"]["bench/preferred"] = "true"
        res = {"cpu": "64", "memory": "512Gi", "pods": "110",
               "gpu.scheduling/gpu": str(gpus), "example.com/gpu": str(gpus)}
        if "gpushare" in peers:
            res.update({"aliyun.com/gpu-count": str(gpus), "aliyun.com/gpu-mem": str(GPUSHARE_MEM * gpus)})
        if "hami" in peers:
            res["nvidia.com/gpu"] = str(gpus)
            meta["annotations"] = {
                # as HAMi's device plugin registers the devices (device.DeviceInfo, JSON)
                "hami.io/node-nvidia-register": json.dumps([{
                    "id": "GPU-%s-%d" % (name, k), "index": k, "count": HAMI_SPLIT, "devmem": HAMI_MEM,
                    "devcore": 100, "type": "NVIDIA H100 80GB HBM3", "mode": "hami-core", "health": True}
                    for k in range(gpus)]),
                # as HAMi's scheduler leaves it once it has asked (time.DateTime, local time)
                "hami.io/node-handshake": "Requesting_" + time.strftime("%Y-%m-%d %H:%M:%S")}
        request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": meta})
        request("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {
            "capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake node (no kubelet)", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}]}}, ctype="application/merge-patch+json")
        devs = [{"id": k, "uuid": "GPU-%s-%d" % (name, k), "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
                 "architecture": "hopper", "memoryMiB": GPU_MIB, "driverVersion": "550.54.15",
                 "health": "Healthy", "inUseBy": [], "island": "nvlink-%d" % (k * 2 // gpus),
                 "bandwidthGBps": 900} for k in range(gpus)]
        request("POST", "/apis/gpu.scheduling/v1/gpunodestatuses", {
            "apiVersion": "gpu.scheduling/v1", "kind": "GpuNodeStatus", "metadata": {"name": name},
            "spec": {"nodeName": name}, "status": {"total": gpus, "devices": devs}})

    parallel(one, range(n), int(o["threads"]))


# The mixed workload (pods --mixed), per 100 pods: whole GPUs of 1, 2, 4
# and 8; shares of a quarter GPU; a GpuClaim of 4 GPUs on one NVLink island;
# members of gangs of GANG_SIZE one-GPU pods. At 1000 nodes x 8 GPUs, 2000
# pods take 2985 GPUs with the extender (4 shares a GPU), 3360 in plain
# (a share as a whole GPU): 0.37 and 0.42 of the 8000.
MIX = (("gpu1", 37), ("gpu2", 15), ("gpu4", 8), ("gpu8", 2), ("share", 25), ("topo", 5), ("gang", 8))
GANG_SIZE = 4
SHARE_MIB, SHARE_CORE = 16384, 25    # a quarter of an H100 80GB, a quarter of its compute
TOPO_COUNT, TOPO_GBPS = 4, 300       # the bench nodes: two NVLink islands of 4 GPUs, 900 GB/s
GANG_LABEL = "scheduling.x-k8s.io/pod-group"


def mixed_kinds(count, seed):
    """The kind of pod i of COUNT, in a fixed order drawn with SEED: each
    kind's share of COUNT rounded down (gang members to whole gangs), the
    rest one-GPU pods."""
    kinds = []
    for kind, pct in MIX[1:]:
        n = count * pct // 100
        if kind == "gang":
            n -= n % GANG_SIZE
        kinds += [kind] * n
    kinds += ["gpu1"] * (count - len(kinds))
    random.Random(seed).shuffle(kinds)
    return kinds


def mixed_spec(kind, j, plain, prefix):
    """(limits, annotations, labels) of a pod of KIND, the j-th of its kind.
    plain: its counterpart for kube-scheduler alone, whole example.com/gpu
    (a share as 1, the claim as its count, a gang's members as independent
    pods)."""
    whole = {"gpu1": 1, "gpu2": 2, "gpu4": 4, "gpu8": 8, "share": 1, "topo": TOPO_COUNT, "gang": 1}[kind]
    if plain:
        return {"example.com/gpu": str(whole)}, {}, {}
    if kind == "share":   # as the webhook leaves a share: gpu-share 1 added
        return {"gpu.scheduling/gpu-memory": str(SHARE_MIB), "gpu.scheduling/gpu-core": str(SHARE_CORE),
                "gpu.scheduling/gpu-share": "1"}, {}, {}
    if kind == "topo":    # as the webhook leaves a claim-only pod: the claim's count
        return {"gpu.scheduling/gpu": str(whole)}, {"gpu.scheduling/claim": "%s-topo-%d" % (prefix, j)}, {}
    if kind == "gang":
        return {"gpu.scheduling/gpu": "1"}, {}, {GANG_LABEL: "%s-gang-%d" % (prefix, j // GANG_SIZE)}
    return {"gpu.scheduling/gpu": str(whole)}, {}, {}


def mixed_objects(ns, kinds, prefix, threads):
    """The GpuClaims of the topology pods and the PodGroups of the gangs."""
    topo = kinds.count("topo")
    gangs = kinds.count("gang") // GANG_SIZE

    def claim(j):
        request("POST", "/apis/gpu.scheduling/v1/namespaces/%s/gpuclaims" % ns, {
            "apiVersion": "gpu.scheduling/v1", "kind": "GpuClaim",
            "metadata": {"name": "%s-topo-%d" % (prefix, j), "namespace": ns},
            "spec": {"devices": {"count": TOPO_COUNT, "exclusivity": "Exclusive"},
                     "topology": {"mode": "Required", "minBandwidthGBps": TOPO_GBPS}}})

    def group(j):
        request("POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/%s/podgroups" % ns, {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "%s-gang-%d" % (prefix, j), "namespace": ns},
            "spec": {"minMember": GANG_SIZE, "scheduleTimeoutSeconds": 300}})

    parallel(claim, range(topo), threads)
    parallel(group, range(gangs), threads)


def cmd_pods(argv):
    ns, count, resource, sched = argv[0], int(argv[1]), argv[2], argv[3]
    o = opts(argv[4:], {"threads": "16", "prefix": "p"})
    kinds = mixed_kinds(count, int(o["mixed"])) if "mixed" in o else None
    plain = resource == "example.com/gpu"
    seen = {}
    per_pod = []   # (limits, annotations, labels) of pod i with --mixed
    for k in kinds or []:
        per_pod.append(mixed_spec(k, seen.get(k, 0), plain, o["prefix"]))
        seen[k] = seen.get(k, 0) + 1
    if kinds and not plain:
        mixed_objects(ns, kinds, o["prefix"], int(o["threads"]))

    if "=" in resource:
        limits = dict(kv.split("=", 1) for kv in resource.split(","))
    else:
        limits = {resource: "1"}

    groups = int(o.get("groups", 0))

    def one(i):
        labels = {"gpu.scheduling/managed": "true"}
        meta = {"name": "%s-%d" % (o["prefix"], i), "namespace": ns, "labels": labels}
        lim = limits
        if kinds:
            lim, ann, more = per_pod[i]
            labels.update(more)
            if ann:
                meta["annotations"] = ann
        spec = {"schedulerName": sched, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"limits": lim}}]}
        if groups:
            labels["bench/group"] = "g%d" % (i % groups)
            spec["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
                    "matchLabels": {"bench/group": labels["bench/group"]}}}}]},
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100, "preference": {"matchExpressions": [{
                        "key": "bench/preferred", "operator": "In", "values": ["true"]}]}}]}}
        request("POST", "/api/v1/namespaces/%s/pods" % ns, {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                             "spec": spec})

    parallel(one, range(count), int(o["threads"]))


def cmd_watch(argv):
    ns, count, out = argv[0], int(argv[1]), argv[2]
    o = opts(argv[3:], {"timeout": "600"})
    deadline = time.monotonic() + float(o["timeout"])
    t0 = time.monotonic()
    bound = {}
    wall = []
    listed = request("GET", "/api/v1/namespaces/%s/pods" % ns)
    for p in listed["items"]:
        if p["spec"].get("nodeName"):
            bound[p["metadata"]["name"]] = 0.0
    rv = listed["metadata"]["resourceVersion"]
    open(out + ".ready", "w").close()
    while len(bound) < count and time.monotonic() < deadline:
        left = max(1, int(deadline - time.monotonic()))
        req = urllib.request.Request(API + "/api/v1/namespaces/%s/pods?watch=1&resourceVersion=%s&timeoutSeconds=%d"
                                     % (ns, rv, left))
        req.add_header("Authorization", "Bearer " + TOKEN)
        try:
            with urllib.request.urlopen(req, context=CTX, timeout=left + 5) as r:
                for line in r:
                    ev = json.loads(line)
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    name = obj["metadata"]["name"]
                    if obj["spec"].get("nodeName") and name not in bound:
                        bound[name] = time.monotonic() - t0
                        wall.append(time.time())
                        if len(bound) >= count:
                            break
        except OSError:
            continue
    times = sorted(v for v in bound.values() if v > 0)
    rep = {"bound": len(bound), "wanted": count, "bound_at": sorted(wall)}
    if len(times) >= 2:
        rep.update(first=times[0], last=times[-1], rate=(len(times) - 1) / (times[-1] - times[0]))
    with open(out, "w") as f:
        json.dump(rep, f)


def quantile(v, q):
    """The q-quantile of v (nearest rank), None when v is empty."""
    v = sorted(v)
    if not v:
        return None
    k = max(0, min(len(v) - 1, int(-(-q * len(v) // 1)) - 1))
    return v[k]


def cmd_latency(argv):
    rep = json.load(open(argv[0]))
    start = float(argv[1])
    lat = [t - start for t in rep.get("bound_at", [])]
    p50, p99 = quantile(lat, 0.5), quantile(lat, 0.99)
    print("-" if p50 is None else "%.2f" % p50, "-" if p99 is None else "%.2f" % p99)


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


CPU_PARTS = ("apiserver", "etcd", "scheduler", "extender")

# Student's t, 0.95 one-sided (a 90 % two-sided interval), by degrees of freedom.
T90 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)


def t90(df):
    return T90[df - 1] if df <= len(T90) else 1.66


def ratio_interval(ratios):
    """The geometric mean of per-round ratios with its 90 % interval (t on
    the logs), and how many rounds would make that interval +-5 % at the
    same round-to-round spread; None when under two rounds."""
    logs = [math.log(x) for x in ratios if x and x > 0]
    n = len(logs)
    if n < 2:
        return None
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t90(n - 1) * sd / math.sqrt(n)
    need = next((k for k in range(2, 1000) if t90(k - 1) * sd / math.sqrt(k) <= math.log(1.05)), None)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), need


def resolution_table(rows, round_ratios, cpu_all):
    """What this run can tell apart: each row's per-round ratios to plain
    and floor (and the extender's to the baseline build), as a geometric
    mean with a 90 % interval, and the rounds the same spread would need
    for +-5 %."""
    lines = []
    for ref in ("plain", "floor", "baseline"):
        for row in rows if ref != "baseline" else ["extender"]:
            cells = []
            for of in (lambda r: num(r["rate"]), cpu_all):
                iv = ratio_interval(round_ratios(row, ref, of))
                cells.append("-" if iv is None else "%.2f (%.2f-%.2f) | %s" % (
                    iv[0], iv[1], iv[2], iv[3] if iv[3] else "> 999"))
            if cells != ["-", "-"]:
                lines.append("| %s / %s | %s | %s |" % (row, ref, cells[0], cells[1]))
    if not lines:
        return
    print()
    print("| ratio | pods/s: geometric mean (90 % interval) | rounds for +-5 % | CPU a pod: geometric mean "
          "(90 % interval) | rounds for +-5 % |")
    print("|---|---|---|---|---|")
    for line in lines:
        print(line)
    print("ratio: the geometric mean of the per-round ratios, its 90 % interval from Student's t on their logs;")
    print("rounds for +-5 %: how many rounds, at this run's round-to-round spread, would narrow that interval to")
    print("+-5 %: what this machine needs to tell a 5 % difference apart")


def cmd_table(argv):
    recs = [json.loads(line) for line in open(argv[0]) if line.strip()]
    rows, by = [], {}
    for r in recs:
        if r["row"] not in by:
            rows.append(r["row"])
            by[r["row"]] = {}
        by[r["row"]][int(r["round"])] = r

    def cpu_all(r):
        return sum(num(r["cpu_" + p]) or 0.0 for p in CPU_PARTS)

    def round_ratios(row, ref, of):
        if ref not in by or row == ref:
            return []
        return [of(by[row][k]) / of(by[ref][k]) for k in by[row] if k in by[ref] and of(by[row][k]) and of(by[ref][k])]

    def ratio_to(row, ref, of=lambda r: num(r["rate"])):
        return median(round_ratios(row, ref, of))

    print("| row | rounds | bound | pods/s median | min-max | spread | / plain | / floor | start-to-bound p50 / p99 s "
          "| CPU ms/pod apiserver / etcd / scheduler / extender | CPU ms/pod all | CPU / floor | API writes/pod "
          "| filter / prioritize / bind ms | double allocations | honoured: anti-affinity / node affinity |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        rr = [by[row][k] for k in sorted(by[row])]
        rates = [num(r["rate"]) or 0.0 for r in rr]
        med = median(rates)
        spread = (max(rates) - min(rates)) / med * 100 if med else None
        cpu = [median(num(r["cpu_" + p]) for r in rr) for p in CPU_PARTS]
        total = median(cpu_all(r) for r in rr)
        verbs = " / ".join(fmt(median(num(r[v]) for r in rr), "%.2f") for v in ("filter_ms", "prioritize_ms", "bind_ms"))
        # summed over the rounds; "-" for a row whose pods record no devices
        dbl = [num(r.get("double")) for r in rr]
        unrec = sum(num(r.get("unrecorded")) or 0 for r in rr)
        double = "-" if all(d is None for d in dbl) else "%d%s" % (sum(d or 0 for d in dbl),
                                                                   " (+%d unrecorded)" % unrec if unrec else "")
        partial = [num(r.get("partial_gangs")) for r in rr]
        if double != "-" and any(g is not None for g in partial):   # --mixed: gangs checked too
            double += ", gangs partly bound %d" % sum(g or 0 for g in partial)
        print("| %s | %d | %d-%d/%s | %s | %s-%s | %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s | %s |" % (
            row, len(rr), min(int(r["bound"]) for r in rr), max(int(r["bound"]) for r in rr), rr[0]["pods"],
            fmt(med), fmt(min(rates)), fmt(max(rates)), fmt(spread, "%.0f %%"),
            fmt(ratio_to(row, "plain"), "%.2f"), fmt(ratio_to(row, "floor"), "%.2f"),
            fmt(median(num(r["lat_p50"]) for r in rr), "%.2f"), fmt(median(num(r["lat_p99"]) for r in rr), "%.2f"),
            " / ".join(fmt(c, "%.2f") for c in cpu), fmt(total, "%.2f"), fmt(ratio_to(row, "floor", cpu_all), "%.2f"),
            fmt(median(num(r["writes"]) for r in rr), "%.2f"), verbs, double,
            fmt(median(num(r.get("apart")) for r in rr), "%.3f") + " / " +
            fmt(median(num(r.get("preferred")) for r in rr), "%.3f")))
    resolution_table(rows, round_ratios, cpu_all)
    print()
    print("spread: (max - min) / median of the row's rounds, what the same build moves from round to round;")
    print("/ plain, / floor: the median over rounds of the row's pods/s over that round's plain (floor) row;")
    print("CPU / floor: the same for CPU ms per pod, all four components;")
    print("start-to-bound: from the row's scheduler start (all its pods pending) to each pod's binding;")
    print("CPU: utime + stime from /proc/PID/stat, before and after the row's scheduling, per pod bound;")
    print("double allocations: over all rounds, pods placed on a device beyond its capacity as the row's extender")
    print("recorded it (+ bound pods that record no device of their node, or not what they asked); - where the pods")
    print("record no devices; with --mixed also the gangs of which some members were bound and others not;")
    print("honoured (--keep-curve): medians over rounds of the shares of bound pods with no other pod of their group")
    print("on their node (their preferred pod anti-affinity), and on a node labelled bench/preferred (their preferred")
    print("node affinity); - without it")


def request_counts():
    counts = {}
    for line in request("GET", "/metrics", raw=True).decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        kv = dict(p.split("=", 1) for p in labels[len("apiserver_request_total{"):-1].split(",") if "=" in p)
        kv = {k: v.strip('"') for k, v in kv.items()}
        key = "%s %s%s" % (kv.get("verb", "?"), kv.get("resource", "?"),
                           "/" + kv["subresource"] if kv.get("subresource") else "")
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def cmd_events_settled(argv):
    """Waits until the API server's count of Events written has stood still
    for a second (the recorders of a row have posted what its binds caused),
    at most --timeout seconds; prints the seconds waited."""
    o = opts(argv, {"timeout": "60"})
    t0 = last_change = time.time()
    last = None
    while time.time() - t0 < float(o["timeout"]):
        c = request_counts()
        n = c.get("POST events", 0.0) + c.get("PATCH events", 0.0)
        if n != last:
            last, last_change = n, time.time()
        elif time.time() - last_change >= 1.0:
            break
        time.sleep(0.2)
    print("%.1f" % (time.time() - t0))


def cmd_writes(argv):
    print(int(sum(n for key, n in request_counts().items() if key.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))))


def cmd_requests(argv):
    now = request_counts()
    if not argv:
        for key, n in sorted(now.items()):
            print(key, int(n))
        return
    before = {}
    for line in open(argv[0]):
        verb, resource, n = line.split()
        before[verb + " " + resource] = float(n)
    pods = float(argv[1])
    per = sorted(((n - before.get(k, 0.0)) / pods, k) for k, n in now.items())
    print(", ".join("%s %.2f" % (k, v) for v, k in reversed(per) if v >= 0.01))


def cmd_reserved(argv):
    ns, per, n = argv[0], int(argv[1]), int(argv[2])
    o = opts(argv[3:], {"threads": "16"})
    since = int(time.time())

    def one(i):
        node = "bench-%d" % i
        entries = []
        for k in range(per - (1 if i == 0 else 0)):
            name = "r-%d-%d" % (i, k)
            pod = request("POST", "/api/v1/namespaces/%s/pods" % ns, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": {"gpu.scheduling/managed": "true"},
                             "annotations": {"gpu.scheduling/allocated": "%s:%d" % (node, k)}},
                "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"limits": {"gpu.scheduling/gpu": "1"}}}]}})
            entries.append({"uid": pod["metadata"]["uid"], "namespace": ns, "pod": name, "mode": "Exclusive",
                            "devices": [k], "memoryMiB": 0, "coreMilli": 0, "since": since})
        request("POST", "/apis/coordination.k8s.io/v1/namespaces/gpu-system/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "gpu-ledger." + node, "namespace": "gpu-system",
                         "labels": {"gpu.scheduling/ledger": "true"},
                         "annotations": {"gpu.scheduling/node": node,
                                         "gpu.scheduling/reservations": json.dumps(entries)}},
            "spec": {"holderIdentity": "bench"}})

    parallel(one, range(n), int(o["threads"]))


def cmd_drained(argv):
    ns = argv[0]
    o = opts(argv[1:], {"timeout": "120"})
    deadline = time.monotonic() + float(o["timeout"])
    pods = held = None
    while time.monotonic() < deadline:
        pods = len(request("GET", "/api/v1/namespaces/%s/pods?limit=1" % ns)["items"])
        leases = request("GET", "/apis/coordination.k8s.io/v1/namespaces/gpu-system/leases"
                         "?labelSelector=gpu.scheduling%2Fledger%3Dtrue")["items"]
        held = sum(len(json.loads((l["metadata"].get("annotations") or {}).get("gpu.scheduling/reservations") or "[]"))
                   for l in leases)
        if not pods and not held:
            return
        time.sleep(0.5)
    sys.exit("drained: after %s s, pods in %s: %s, reservations in ledgers: %s" % (o["timeout"], ns, pods, held))


def cmd_cold(argv):
    url, n, out = argv[0], int(argv[1]), argv[2]
    o = opts(argv[3:], {"timeout": "120"})
    t0 = time.monotonic()
    deadline = t0 + float(o["timeout"])
    body = json.dumps({"Pod": {"metadata": {"name": "probe", "namespace": "default", "uid": "cold-probe"},
                               "spec": {"containers": [{"name": "c", "resources": {
                                   "limits": {"gpu.scheduling/gpu": "1"}}}]}},
                       "NodeNames": ["bench-%d" % i for i in range(n)]}).encode()
    ready = correct = None
    while time.monotonic() < deadline and correct is None:
        try:
            if ready is None:
                with urllib.request.urlopen(url + "/readyz", timeout=5) as r:
                    if r.status == 200:
                        ready = time.monotonic() - t0
            else:
                req = urllib.request.Request(url + "/filter", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as r:
                    if json.loads(r.read()).get("NodeNames") == ["bench-0"]:
                        correct = time.monotonic() - t0
        except OSError:
            pass
        if correct is None:
            time.sleep(0.05)
    with open(out, "w") as f:
        json.dump({"ready": ready, "correct": correct}, f)


def cmd_rss(argv):
    kinds = dict(heap=0, arenas=0, stacks=0, anon=0, files=0)
    kind = prev = None
    for line in open("/proc/%s/smaps" % argv[0]):
        f = line.split()
        if "-" in f[0] and len(f) >= 5 and ":" in f[3]:   # a mapping's first line
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            path = f[5] if len(f) > 5 else ""
            if path == "[heap]":
                kind = "heap"
            elif path.startswith("/"):
                kind = "files"
            elif lo % (64 << 20) == 0:
                kind = "arenas"
            elif prev and prev[1] == lo and prev[1] - prev[0] == 4096 and prev[2] == "---p":
                kind = "stacks"
            else:
                kind = "anon"
            prev = (lo, hi, f[1])
        elif f[0] == "Rss:" and kind:
            kinds[kind] += int(f[1])
    print(" ".join("%.1f" % (kinds[k] / 1024) for k in ("heap", "arenas", "stacks", "anon", "files")))


def list_all(path):
    items, cont = [], ""
    while True:
        r = request("GET", path + ("&" if "?" in path else "?") + "limit=500" + ("&continue=" + cont if cont else ""))
        items += r["items"]
        cont = r["metadata"].get("continue")
        if not cont:
            return items


def cmd_honoured(argv):
    pods = [p for p in list_all("/api/v1/namespaces/%s/pods" % argv[0]) if p["spec"].get("nodeName")]
    on = {}
    for p in pods:
        key = (p["metadata"]["labels"].get("bench/group"), p["spec"]["nodeName"])
        on[key] = on.get(key, 0) + 1
    alone = sum(1 for p in pods if on[(p["metadata"]["labels"].get("bench/group"), p["spec"]["nodeName"])] == 1)
    labelled = {n["metadata"]["name"] for n in list_all("/api/v1/nodes?labelSelector=bench%2Fpreferred%3Dtrue")}
    there = sum(1 for p in pods if p["spec"]["nodeName"] in labelled)
    print("%.3f %.3f" % (alone / len(pods), there / len(pods)) if pods else "- -")


def over_capacity(devices, cap):
    """devices: {key: [amount, ...]}; cap(key), or cap: what the device holds.
    Pods beyond the capacity of their device, in any order: the double allocations."""
    over = 0
    for key, amounts in devices.items():
        used, limit = 0, cap(key) if callable(cap) else cap
        for a in amounts:
            used += a
            if used > limit:
                over += 1
    return over


def cmd_check(argv):
    ns, kind = argv[0], argv[1]
    o = opts(argv[2:], {"gpus": "8"})
    if kind not in ("extender", "gpushare", "hami"):
        sys.exit("check: no kind %s" % kind)
    over, bad, bound, partial = check_pods(list_all("/api/v1/namespaces/%s/pods" % ns), kind, int(o["gpus"]))
    print(over + bad, over, bad, bound, partial)


def check_pods(every, kind, gpus):
    """(double allocations, pods unrecorded or not as asked, pods bound,
    gangs partly bound) of the pods EVERY as the extender of KIND recorded
    them (cmd_check)."""
    pods = [p for p in every if p["spec"].get("nodeName")]
    devices, bad = {}, 0
    for p in pods:
        node = p["spec"]["nodeName"]
        ann = p["metadata"].get("annotations") or {}
        try:
            if kind == "extender":
                where, ids = ann["gpu.scheduling/allocated"].split(":", 1)
                if where != node:
                    raise ValueError(where)
                ids = [int(d) for d in ids.split(",")]
                share = extender_share(p, ann, len(ids))
                if "gpu.scheduling/claim" in ann and len({d * 2 // gpus for d in ids}) > 1:
                    raise ValueError("islands")   # the bench's claims want one island (two of gpus/2)
                for d in ids:
                    if not 0 <= d < gpus:
                        raise ValueError(d)
                    devices.setdefault((node, d), []).append(share)
            elif kind == "gpushare":
                idx, mem, dev = (int(ann[k]) for k in ("ALIYUN_COM_GPU_MEM_IDX", "ALIYUN_COM_GPU_MEM_POD",
                                                       "ALIYUN_COM_GPU_MEM_DEV"))
                if not 0 <= idx < gpus or dev != GPUSHARE_MEM:
                    raise ValueError(idx)
                devices.setdefault((node, idx), []).append(mem)
            elif kind == "hami":
                n = 0
                for ctr in ann["hami.io/vgpu-devices-allocated"].split(";"):
                    for d in filter(None, ctr.split(":")):
                        uuid, _, mem, cores = d.split(",")
                        if not uuid.startswith("GPU-%s-" % node):
                            raise ValueError(uuid)
                        # memory, tasks and cores: each has its own capacity
                        devices.setdefault((uuid, "mem"), []).append(int(mem))
                        devices.setdefault((uuid, "tasks"), []).append(1)
                        devices.setdefault((uuid, "cores"), []).append(int(cores))
                        n += 1
                if not n:
                    raise ValueError("none")
        except (KeyError, ValueError):
            bad += 1
    if kind == "hami":
        caps = {"mem": HAMI_MEM, "tasks": HAMI_SPLIT, "cores": 100}
        over = max(over_capacity({k: v for k, v in devices.items() if k[1] == what}, lambda k: caps[k[1]])
                   for what in caps)
    elif kind == "extender":
        over = sum(extender_over(v) for v in devices.values())
    else:
        over = over_capacity(devices, GPUSHARE_MEM if kind == "gpushare" else 1)
    return over, bad, len(pods), partial_gangs(every)


def cmd_selftest(argv):
    """check_pods on made-up pods of the extender, each case with the
    counts it must give: what a wrong checker would miss fails here."""
    def pod(node, alloc=None, lim=None, ann=None, gang=None):
        a = dict(ann or {})
        if alloc is not None:
            a["gpu.scheduling/allocated"] = alloc
        return {"metadata": {"annotations": a, "labels": {GANG_LABEL: gang} if gang else {}},
                "spec": {"nodeName": node, "containers": [{"resources": {"limits": lim or {"gpu.scheduling/gpu": "1"}}}]}}
    share = {"gpu.scheduling/gpu-memory": str(SHARE_MIB), "gpu.scheduling/gpu-core": str(SHARE_CORE),
             "gpu.scheduling/gpu-share": "1"}
    shared = {"gpu.scheduling/shared-memory-mib": str(SHARE_MIB), "gpu.scheduling/shared-core-percent": str(SHARE_CORE)}
    half = {"gpu.scheduling/gpu-memory": "40000", "gpu.scheduling/gpu-share": "1"}
    halved = {"gpu.scheduling/shared-memory-mib": "40000", "gpu.scheduling/shared-core-percent": "0"}
    core = {"gpu.scheduling/gpu-core": "25", "gpu.scheduling/gpu-share": "1"}
    cored = {"gpu.scheduling/shared-memory-mib": "0", "gpu.scheduling/shared-core-percent": "25"}
    claim = {"gpu.scheduling/claim": "c"}
    four = {"gpu.scheduling/gpu": "4"}
    cases = [
        ("whole GPUs apart", [pod("n", "n:0"), pod("n", "n:1,2", {"gpu.scheduling/gpu": "2"})], (0, 0, 2, 0)),
        ("a GPU given whole twice", [pod("n", "n:0"), pod("n", "n:0,1", {"gpu.scheduling/gpu": "2"})], (1, 0, 2, 0)),
        ("four quarter shares fill a GPU", [pod("n", "n:3", share, shared)] * 4, (0, 0, 4, 0)),
        ("a fifth share over its compute", [pod("n", "n:3", core, cored)] * 5, (1, 0, 5, 0)),
        ("three shares over its memory", [pod("n", "n:3", half, halved)] * 3, (1, 0, 3, 0)),
        ("a share on a GPU given whole", [pod("n", "n:3"), pod("n", "n:3", share, shared)], (1, 0, 2, 0)),
        ("a share recorded as a whole GPU", [pod("n", "n:3", share)], (0, 1, 1, 0)),
        ("a share recorded with another amount", [pod("n", "n:3", share, halved)], (0, 1, 1, 0)),
        ("fewer GPUs than asked", [pod("n", "n:3", four)], (0, 1, 1, 0)),
        ("no record, another node's", [pod("n"), pod("n", "m:1")], (0, 2, 2, 0)),
        ("a claim on one island", [pod("n", "n:4,5,6,7", four, claim)], (0, 0, 1, 0)),
        ("a claim across islands", [pod("n", "n:2,3,4,5", four, claim)], (0, 1, 1, 0)),
        ("gangs whole or waiting", [pod("n", "n:0", gang="a"), pod("n", "n:1", gang="a"),
                                    pod(None, gang="b"), pod(None, gang="b")], (0, 0, 2, 0)),
        ("a gang partly bound", [pod("n", "n:0", gang="a"), pod(None, gang="a")], (0, 0, 1, 1)),
    ]
    failed = 0
    for name, pods, want in cases:
        got = check_pods(pods, "extender", 8)
        if got != want:
            failed += 1
            print("check selftest: %s: got %s, want %s" % (name, got, want), file=sys.stderr)
    # The table's intervals: none from one round, none wide from equal rounds, t on the logs otherwise.
    intervals = [("one round", [2.0], None), ("equal rounds", [1.0, 1.0, 1.0], (1.0, 1.0, 1.0, 2)),
                 ("halved and doubled", [0.5, 2.0], (1.0, math.exp(-4.3765), math.exp(4.3765), None))]
    for name, ratios, want in intervals:
        got = ratio_interval(ratios)
        if (got is None) != (want is None) or (got and (got[3] != want[3] or
                                                          any(abs(math.log(g / w)) > 1e-3 for g, w in zip(got[:3], want[:3])))):
            failed += 1
            print("check selftest: interval of %s: got %s, want %s" % (name, got, want), file=sys.stderr)
    print("check selftest: %d passed, %d failed" % (len(cases) + len(intervals) - failed, failed))
    sys.exit(1 if failed else 0)


def extender_share(pod, ann, n):
    """What this extender recorded on a pod: None for whole GPUs, (MiB,
    percent) on each GPU for a share. What the pod asked (its whole count,
    or its share's memory and compute) must be what was recorded; else
    ValueError, counted with the pods that record no device."""
    lim = {}
    for c in pod["spec"]["containers"]:
        for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
            lim[k] = lim.get(k, 0) + int(v)
    if "gpu.scheduling/shared-memory-mib" in ann:
        got = (int(ann["gpu.scheduling/shared-memory-mib"]), int(ann["gpu.scheduling/shared-core-percent"]))
        if got != (lim.get("gpu.scheduling/gpu-memory", 0), lim.get("gpu.scheduling/gpu-core", 0)) \
                or n != lim.get("gpu.scheduling/gpu-share", 1):
            raise ValueError(got)
        return got
    if lim.get("gpu.scheduling/gpu", 1) != n or "gpu.scheduling/gpu-memory" in lim or "gpu.scheduling/gpu-core" in lim:
        raise ValueError(n)
    return None


def extender_over(on_device):
    """The pods of one device beyond what it holds: a device given whole
    holds that one pod and nothing else; shares add up to its memory
    (MiB) and its compute (100 %)."""
    whole = sum(1 for s in on_device if s is None)
    if whole:
        return len(on_device) - 1
    return max(over_capacity({0: [s[0] for s in on_device]}, GPU_MIB),
               over_capacity({0: [s[1] for s in on_device]}, 100))


def partial_gangs(pods):
    """Gangs (pods labelled scheduling.x-k8s.io/pod-group) of which some
    members are bound and others not: a gang goes all or none."""
    bound, members = {}, {}
    for p in pods:
        g = (p["metadata"].get("labels") or {}).get(GANG_LABEL)
        if g:
            members[g] = members.get(g, 0) + 1
            bound[g] = bound.get(g, 0) + (1 if p["spec"].get("nodeName") else 0)
    return sum(1 for g in members if 0 < bound[g] < members[g])


def main():
    cmds = {"nodes": cmd_nodes, "pods": cmd_pods, "watch": cmd_watch, "writes": cmd_writes, "events-settled": cmd_events_settled,
            "requests": cmd_requests, "reserved": cmd_reserved,
            "latency": cmd_latency, "table": cmd_table, "drained": cmd_drained, "cold": cmd_cold,
            "rss": cmd_rss, "check": cmd_check, "selftest": cmd_selftest, "honoured": cmd_honoured}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
