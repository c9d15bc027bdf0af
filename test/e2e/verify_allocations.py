#!/usr/bin/env python3
"""Checks the reservations in a live cluster against the pods and the GPUs.

Reads three JSON documents (paths, or '-' for none):
  --leases  kubectl get lease -A -o json
  --pods    kubectl get pods -A -o json
  --gns     kubectl get gpunodestatuses -o json

and checks, printing one line per problem and a summary line last:

  1. no device id is in two reservations of one node when one is exclusive
     (in the ledgers, and separately in the bound pods' annotations: the
     pods are what really runs, so a double allocation there is the bug
     that matters even if a ledger lost an entry);
  2. shared devices: summed memory and compute never exceed the device's
     capacity from the GpuNodeStatus (ledgers and pods alike);
  3. a pod is in at most one ledger;
  4. every bound, unfinished GPU pod's gpu.scheduling/allocated annotation
     matches its ledger entry (same node, same ids);
  5. with --settled (after the reaper's bound): every ledger entry belongs to
     an existing, unfinished pod bound to that node, and has a reservation
     Lease when its pod is outside the extender's pod watch (no
     gpu.scheduling/managed=true label: only the Lease tells the extender
     that such a pod went); every reservation Lease belongs to an existing
     pod whose ledger entry it repeats;
  6. with --full-use NS: no pending GPU pod of NS could fit on a node of
     --nodes as the ledgers leave it ("every GPU used that could be").

Prints "summary: {json}" with the counts (pods bound, GPUs used, ...).
Exit status 1 when any check failed.
"""
import argparse
import json
import re
import sys
from collections import defaultdict

LEDGER_LABEL = "gpu.scheduling/ledger"
PLACE_PREFIX = "gang-"       # uid of a gang's place (a reserved slot no member took yet)
RES_LABEL = "gpu.scheduling/reservation"
ANN_NODE = "gpu.scheduling/node"
ANN_RES = "gpu.scheduling/reservations"
ANN_ALLOC = "gpu.scheduling/allocated"
ANN_MEM = "gpu.scheduling/shared-memory-mib"
ANN_CORE = "gpu.scheduling/shared-core-percent"
R_GPU, R_MEM, R_CORE = "gpu.scheduling/gpu", "gpu.scheduling/gpu-memory", "gpu.scheduling/gpu-core"
CORE_FULL = 1000   # milli-GPU


def load(path):
    if not path or path == "-":
        return {"items": []}
    with open(path) as f:
        return json.load(f)


SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}


def qty(v):
    """A resource.Quantity as the API server prints it ("20000" comes back as "20k")."""
    v = str(v)
    for suf in ("Ki", "Mi", "Gi", "Ti", "m", "k", "M", "G", "T"):
        if v.endswith(suf):
            return float(v[:-len(suf)]) * SUFFIX[suf]
    return float(v)


def pod_request(pod):
    """(count, mode, memMiB, coreMilli) of a pod's GPU request, None when it asks none,
    'claim' when it asks through a GpuClaim (size unknown here)."""
    ann = pod["metadata"].get("annotations") or {}
    spec = pod.get("spec", {})

    def total(containers):
        out = defaultdict(float)
        for c in containers or []:
            res = c.get("resources") or {}
            src = dict(res.get("requests") or {})
            src.update(res.get("limits") or {})
            for k in (R_GPU, R_MEM, R_CORE):
                if k in src:
                    out[k] += qty(src[k])
        return out

    t = total(spec.get("containers"))
    for ic in spec.get("initContainers") or []:
        one = total([ic])
        for k, v in one.items():
            t[k] = max(t[k], v)
    if not any(t.values()):
        return "claim" if "gpu.scheduling/claim" in ann else None
    if t[R_MEM] or t[R_CORE]:
        return (int(t[R_GPU]) or 1, "Shared", int(t[R_MEM]), int(t[R_CORE] * 10))
    return (int(t[R_GPU]), "Exclusive", 0, 0)


def watched(pod):
    """Whether the extender's pod watch (its default podSelector) follows the pod."""
    return (pod["metadata"].get("labels") or {}).get("gpu.scheduling/managed") == "true"


def finished(pod):
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leases", required=True)
    ap.add_argument("--pods", required=True)
    ap.add_argument("--gns", required=True)
    ap.add_argument("--ledger-ns", default="gpu-system")
    ap.add_argument("--settled", action="store_true",
                    help="the reaper's bound has passed: no stale ledger entries or Leases allowed")
    ap.add_argument("--full-use", metavar="NS", action="append", default=[],
                    help="pending GPU pods of NS must not fit anywhere on --nodes")
    ap.add_argument("--nodes", default="", help="comma-separated nodes for --full-use and the counts")
    ap.add_argument("--skip-pending", metavar="REGEX", default=None,
                    help="pending pods whose name matches are nobody's to schedule (not counted by --full-use)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()

    problems = []

    def bad(msg):
        problems.append(msg)

    # ---- devices ----
    devices = {}   # node -> {id: {"mib":, "healthy":}}
    for g in load(a.gns)["items"]:
        node = (g.get("spec") or {}).get("nodeName") or g["metadata"]["name"]
        devices[node] = {d["id"]: {"mib": d.get("memoryMiB", 0), "healthy": d.get("health") == "Healthy"}
                         for d in (g.get("status") or {}).get("devices") or []}

    # ---- pods ----
    pods = {}
    for p in load(a.pods)["items"]:
        pods[p["metadata"]["uid"]] = p

    # ---- ledgers and reservation Leases ----
    ledgers = {}       # node -> [entry]
    res_leases = {}    # uid (owner) -> lease
    where = defaultdict(list)   # uid -> [node]
    for l in load(a.leases)["items"]:
        md = l["metadata"]
        labels = md.get("labels") or {}
        anns = md.get("annotations") or {}
        if labels.get(LEDGER_LABEL) == "true" and md.get("namespace") == a.ledger_ns:
            node = anns.get(ANN_NODE)
            try:
                entries = json.loads(anns.get(ANN_RES) or "[]")
            except ValueError:
                bad("ledger %s: %s is not JSON" % (md["name"], ANN_RES))
                continue
            ledgers[node] = entries
            for e in entries:
                where[e["uid"]].append(node)
        elif labels.get(RES_LABEL) == "true":
            owners = [o for o in md.get("ownerReferences") or [] if o.get("kind") == "Pod"]
            if not owners:
                bad("reservation Lease %s/%s has no owning pod" % (md["namespace"], md["name"]))
                continue
            # One reservation Lease per pod and node.
            res_leases[(owners[0]["uid"], anns.get(ANN_NODE))] = l

    for uid, nodes in where.items():
        if len(nodes) > 1:
            bad("pod uid %s is reserved on several nodes: %s" % (uid, ",".join(nodes)))

    def check_usage(kind, node, holders):
        """holders: [(who, mode, ids, mem, core)] on one node."""
        devs = devices.get(node)
        use = defaultdict(lambda: {"excl": [], "shared": [], "mem": 0, "core": 0})
        for who, mode, ids, mem, core in holders:
            if len(set(ids)) != len(ids):
                bad("%s %s: %s holds a device twice: %s" % (kind, node, who, ids))
            for d in ids:
                if devs is not None and d not in devs:
                    bad("%s %s: %s holds device %s that the GpuNodeStatus does not list" % (kind, node, who, d))
                u = use[d]
                if mode == "Shared":
                    u["shared"].append(who)
                    u["mem"] += mem
                    u["core"] += core
                else:
                    u["excl"].append(who)
        for d, u in sorted(use.items()):
            if len(u["excl"]) > 1 or (u["excl"] and u["shared"]):
                bad("DOUBLE ALLOCATION (%s) %s gpu %s: exclusive %s, shared %s"
                    % (kind, node, d, u["excl"], u["shared"]))
            if u["shared"]:
                cap = devs[d]["mib"] if devs and d in devs else None
                if u["core"] > CORE_FULL:
                    bad("OVERCOMMIT (%s) %s gpu %s: core %d/1000 by %s" % (kind, node, d, u["core"], u["shared"]))
                if cap is not None and u["mem"] > cap:
                    bad("OVERCOMMIT (%s) %s gpu %s: memory %d/%d MiB by %s"
                        % (kind, node, d, u["mem"], cap, u["shared"]))
        return use

    # 1+2 on the ledgers
    ledger_use = {}
    for node, entries in ledgers.items():
        ledger_use[node] = check_usage("ledger", node, [
            ("%s/%s" % (e["namespace"], e["pod"]), e.get("mode", "Exclusive"), list(e["devices"]),
             e.get("memoryMiB", 0), e.get("coreMilli", 0)) for e in entries])

    # 1+2 on the bound pods' annotations; 4: annotation == ledger entry
    by_node = defaultdict(list)
    bound_gpu_pods = 0
    for uid, p in pods.items():
        node = p.get("spec", {}).get("nodeName")
        req = pod_request(p)
        if not node or req is None or finished(p):
            continue
        bound_gpu_pods += 1
        name = "%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"])
        ann = p["metadata"].get("annotations") or {}
        alloc = ann.get(ANN_ALLOC)
        if not alloc or ":" not in alloc:
            bad("pod %s is bound to %s without a %s annotation" % (name, node, ANN_ALLOC))
            continue
        anode, ids = alloc.rsplit(":", 1)
        ids = [int(x) for x in ids.split(",") if x]
        if anode != node:
            bad("pod %s is on %s but its %s says %s" % (name, node, ANN_ALLOC, alloc))
        mode, mem, core = "Exclusive", 0, 0
        if req != "claim":
            count, mode, mem, core = req
            if len(ids) != count:
                bad("pod %s asked %d GPUs, holds %s" % (name, count, alloc))
        if ANN_MEM in ann or ANN_CORE in ann:
            mode, mem, core = "Shared", int(ann.get(ANN_MEM, "0")), int(ann.get(ANN_CORE, "0")) * 10
        by_node[node].append((name, mode, ids, mem, core))
        mine = [e for e in ledgers.get(node, []) if e["uid"] == uid]
        if not mine:
            bad("pod %s is bound to %s holding %s but no ledger entry of %s records it (ledgers: %s)"
                % (name, node, alloc, node, ",".join(where.get(uid, [])) or "none"))
        elif sorted(mine[0]["devices"]) != sorted(ids):
            bad("pod %s: annotation %s but ledger entry devices %s" % (name, alloc, mine[0]["devices"]))
    for node, holders in by_node.items():
        check_usage("pods", node, holders)

    # 5: nothing stale after the reaper's bound
    stale = 0
    if a.settled:
        for node, entries in ledgers.items():
            for e in entries:
                if e["uid"].startswith(PLACE_PREFIX):
                    continue   # a gang's place: no pod yet; released by its own timeout (gang.sh checks it)
                p = pods.get(e["uid"])
                who = "%s/%s" % (e["namespace"], e["pod"])
                why = None
                if p is None:
                    why = "the pod does not exist"
                elif finished(p):
                    why = "the pod is %s" % p["status"]["phase"]
                elif p["spec"].get("nodeName") != node:
                    why = "the pod is bound to %r" % (p["spec"].get("nodeName") or "")
                if why:
                    stale += 1
                    bad("LEAK ledger %s holds %s (uid %s, devices %s, since %s): %s"
                        % (node, who, e["uid"], e["devices"], e.get("since"), why))
                elif (e["uid"], node) not in res_leases and not watched(p):
                    bad("ledger %s entry %s (a pod outside the pod watch) has no reservation Lease" % (node, who))
        for (uid, ln), l in res_leases.items():
            md = l["metadata"]
            p = pods.get(uid)
            if p is None:
                bad("LEAK reservation Lease %s/%s of a pod that does not exist" % (md["namespace"], md["name"]))
                continue
            if finished(p):
                bad("LEAK reservation Lease %s/%s of a %s pod" % (md["namespace"], md["name"], p["status"]["phase"]))
                continue
            if ln not in where.get(uid, []):
                bad("LEAK reservation Lease %s/%s (node %s) without a ledger entry there" % (md["namespace"], md["name"], ln))

    # ---- counts, and 6: every GPU used that could be ----
    nodes = [n for n in a.nodes.split(",") if n] or sorted(devices)
    free = {}
    used = 0
    total = 0
    for node in nodes:
        devs = devices.get(node, {})
        use = ledger_use.get(node, {})
        fr = []
        for d, info in sorted(devs.items()):
            if not info["healthy"]:
                continue
            total += 1
            u = use.get(d)
            if u and (u["excl"] or u["shared"]):
                used += 1
            fr.append((d, 0 if u and u["excl"] else info["mib"] - (u["mem"] if u else 0),
                       0 if u and u["excl"] else CORE_FULL - (u["core"] if u else 0),
                       not (u and (u["excl"] or u["shared"]))))
        free[node] = fr
    pending = defaultdict(int)
    could_fit = 0
    for uid, p in pods.items():
        ns = p["metadata"]["namespace"]
        if ns not in a.full_use or p["spec"].get("nodeName") or finished(p):
            continue
        if p["metadata"].get("deletionTimestamp"):
            continue
        if a.skip_pending and re.search(a.skip_pending, p["metadata"]["name"]):
            continue
        req = pod_request(p)
        if req in (None, "claim"):
            continue
        count, mode, mem, core = req
        pending["%s x%d" % (mode, count)] += 1
        for node in nodes:
            if mode == "Exclusive":
                fits = sum(1 for d in free[node] if d[3]) >= count
            else:
                fits = sum(1 for d in free[node] if d[1] >= mem and d[2] >= core) >= count
            if fits:
                could_fit += 1
                if could_fit <= 10:
                    bad("UNUSED pod %s/%s (%s x%d) is pending but fits on %s (free: %s)"
                        % (ns, p["metadata"]["name"], mode, count, node,
                           [(d[0], d[1], d[2]) for d in free[node] if d[1] > 0]))
                break
    if could_fit > 10:
        bad("... %d pending pods in all could fit" % could_fit)

    summary = {
        "bound_gpu_pods": bound_gpu_pods,
        "ledger_entries": sum(len(e) for e in ledgers.values()),
        "reservation_leases": len(res_leases),
        "gpus_used": used, "gpus_total": total,
        "pending": dict(pending),
        "stale": stale,
        "problems": len(problems),
    }
    for m in problems:
        print(m)
    print("summary: " + json.dumps(summary, sort_keys=True))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
