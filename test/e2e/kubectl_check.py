#!/usr/bin/env python3
"""Checks `kubectl gpu -o json` against the ledgers, GpuNodeStatus and pods read with kubectl.

  kubectl_check.py nodes --leases L --gns G --pods P OUT
  kubectl_check.py node NAME --leases L --gns G --pods P [--readable NS] OUT
  kubectl_check.py pods --leases L --pods P [--readable NS] OUT

--readable NS: the plugin's reader can read only NS's pods, so every other
holder must show as "other" and no other namespace may appear anywhere.
Prints what differs; exit status 1 when anything does.
"""
import argparse
import json
import sys


def ledgers(path):
    out = {}
    for lease in json.load(open(path))["items"]:
        ann = lease["metadata"].get("annotations") or {}
        if (lease["metadata"].get("labels") or {}).get("gpu.scheduling/ledger") != "true":
            continue
        out[ann["gpu.scheduling/node"]] = json.loads(ann.get("gpu.scheduling/reservations") or "[]")
    return out


def holder(e, pods, readable):
    if readable is not None and e["namespace"] != readable:
        return "other"
    if e["uid"].startswith("gang-"):
        return "%s/%s (gang place)" % (e["namespace"], e["pod"])
    if (e["namespace"], e["pod"]) not in pods:
        return "%s/%s (no such pod)" % (e["namespace"], e["pod"])
    return "%s/%s" % (e["namespace"], e["pod"])


def counts(devs, entries):
    whole, shared = set(), set()
    for e in entries:
        (shared if e["mode"] == "Shared" else whole).update(e["devices"])
    c = {"total": len(devs), "whole": 0, "shared": 0, "free": 0, "unhealthy": 0}
    for d in devs:
        i = d["id"]
        if d.get("health") != "Healthy":
            c["unhealthy"] += 1
        if i in whole:
            c["whole"] += 1
        elif i in shared:
            c["shared"] += 1
        elif d.get("health") == "Healthy" and not d.get("inUseBy"):
            c["free"] += 1
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what")
    ap.add_argument("args", nargs="+")
    ap.add_argument("--leases", required=True)
    ap.add_argument("--gns")
    ap.add_argument("--pods", required=True)
    ap.add_argument("--readable")
    a = ap.parse_intermixed_args()
    led = ledgers(a.leases)
    podlist = json.load(open(a.pods))["items"]
    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in podlist}
    gns = {}
    if a.gns:
        for g in json.load(open(a.gns))["items"]:
            gns[(g.get("spec") or {}).get("nodeName") or g["metadata"]["name"]] = g["status"].get("devices") or []
    out_text = open(a.args[-1]).read()
    out = json.loads(out_text)
    bad = []
    if a.readable:
        for ns in {p[0] for p in pods} | {e["namespace"] for es in led.values() for e in es}:
            if ns != a.readable and ('"%s/' % ns in out_text or '"%s"' % ns in out_text):
                bad.append("namespace %s appears in the output of a reader of %s only" % (ns, a.readable))
    if a.what == "nodes":
        got = {it["node"]: it for it in out["items"]}
        for node, devs in gns.items():
            want = counts(devs, led.get(node, []))
            have = {k: got.get(node, {}).get(k) for k in want}
            if want != have:
                bad.append("%s: ledgers and agent say %s, the plugin %s" % (node, want, have))
            if len(led.get(node, [])) != got.get(node, {}).get("reservations"):
                bad.append("%s: %d reservations, the plugin %s" % (node, len(led.get(node, [])),
                                                                   got.get(node, {}).get("reservations")))
    elif a.what == "node":
        node = a.args[0]
        entries = led.get(node, [])
        for d in out["devices"]:
            want = sorted(holder(e, pods, a.readable) for e in entries if d["id"] in e["devices"])
            have = sorted(h["holder"] for h in d["holders"])
            if want != have:
                bad.append("%s GPU %d: ledger holders %s, the plugin %s" % (node, d["id"], want, have))
        want = sorted((holder(e, pods, a.readable), ",".join(map(str, e["devices"]))) for e in entries)
        have = sorted((r["holder"], r["devices"]) for r in out["reservations"])
        if want != have:
            bad.append("%s reservations: ledger %s, the plugin %s" % (node, want, have))
    elif a.what == "pods":
        byuid = {e["uid"]: (node, e) for node, es in led.items() for e in es}
        for it in out["items"]:
            p = pods[(it["namespace"], it["name"])]
            uid = p["metadata"]["uid"]
            if not p["spec"].get("nodeName"):
                continue
            if uid not in byuid:
                if a.readable is None:
                    bad.append("%s/%s: bound, no ledger entry" % (it["namespace"], it["name"]))
                continue
            node, e = byuid[uid]
            ids = ",".join(map(str, e["devices"]))
            if (it["node"], it["devices"]) != (node, ids):
                bad.append("%s/%s: ledger %s:%s, the plugin %s:%s" % (it["namespace"], it["name"], node, ids,
                                                                      it["node"], it["devices"]))
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
