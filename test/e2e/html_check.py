#!/usr/bin/env python3
"""Checks the GPU page (the DOM a headless browser dumped) against the ledgers and GpuNodeStatus.

  html_check.py --leases L --gns G [--pods P] [--node NAME] DOM

The page is /debug/nodes as the extender serves it to a browser, or
`kubectl gpu node NAME -o html` (--pods: the plugin marks a holder whose pod
is gone, --node: the page shows that node only). For each node the agents
report: a section with each device of its GpuNodeStatus, the models and
memory it lists; each device's state (free, held whole, shared, unhealthy,
used outside) and holders exactly the ledger's, written in the cell a
person reads; each holder coloured as the legend colours its pod or gang,
a device held whole in its holder's colour, and no two pods or gangs alike.
Prints what differs; exit status 1 when anything does.
"""
import argparse
import json
import re
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    """Node sections, their device cells (attributes, holders, text) and the legend."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.nodes, self.legend = {}, {}
        self.node = self.cell = self.holder = None
        self.text_of = None          # the dict whose "text" collects character data
        self.depth = 0               # open <div>s inside the current cell
        self.models = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "section" and "node" in cls:
            self.node = {"devices": {}, "models": ""}
            self.nodes[a["data-node"]] = self.node
        elif tag == "p" and "models" in cls and self.node is not None:
            self.models = self.node
        elif tag == "li" and a.get("data-group"):
            self.legend[a["data-group"]] = a.get("data-color")
        elif tag == "div" and "gpu" in cls and self.node is not None:
            self.cell = {"state": a.get("data-state"), "style": a.get("style", ""), "holders": [], "text": ""}
            self.node["devices"][int(a["data-device"])] = self.cell
            self.depth = 0
        elif tag == "div" and self.cell is not None:
            self.depth += 1
            if "h" in cls:
                self.holder = {"holder": a.get("data-holder"), "group": a.get("data-group"),
                               "style": a.get("style", ""), "text": ""}
                self.cell["holders"].append(self.holder)

    def handle_endtag(self, tag):
        if tag == "p":
            self.models = None
        elif tag == "section":
            self.node = None
        elif tag == "div" and self.cell is not None:
            if self.depth == 0:
                self.cell = None
            else:
                self.depth -= 1
                self.holder = None

    def handle_data(self, data):
        if self.models is not None:
            self.models["models"] += data
        if self.cell is not None:
            self.cell["text"] += data
        if self.holder is not None:
            self.holder["text"] += data


def background(style):
    m = re.search(r"background:\s*([^;]+)", style or "")
    return m.group(1).strip() if m else None


def ledgers(path):
    out = {}
    for lease in json.load(open(path))["items"]:
        md = lease["metadata"]
        if (md.get("labels") or {}).get("gpu.scheduling/ledger") != "true":
            continue
        ann = md.get("annotations") or {}
        out[ann["gpu.scheduling/node"]] = json.loads(ann.get("gpu.scheduling/reservations") or "[]")
    return out


def holder(e, pods):
    name = "%s/%s" % (e["namespace"], e["pod"])
    if e["uid"].startswith("gang-"):
        return name + " (gang place)"
    if pods is not None and (e["namespace"], e["pod"]) not in pods:
        return name + " (no such pod)"
    return name


def group(e):
    return "%s/%s" % (e["namespace"], e.get("gang") or e["pod"])


def check_device(node, d, got, entries, pods, legend, bad):
    where = "%s GPU %d" % (node, d["id"])
    mine = [e for e in entries if d["id"] in e["devices"]]
    want = sorted(holder(e, pods) for e in mine)
    have = sorted(h["holder"] for h in got["holders"])
    if want != have:
        bad.append("%s: holders %s, the ledger says %s" % (where, have, want))
    if d.get("health") != "Healthy":
        state = "unhealthy"
    elif d.get("inUseBy"):
        state = "external"
    elif any(e["mode"] != "Shared" for e in mine):
        state = "held"
    else:
        state = "shared" if mine else "free"
    if got["state"] != state:
        bad.append("%s: shown %s, is %s" % (where, got["state"], state))
    # What a person reads: the device and each holder, in the cell.
    if "GPU %d" % d["id"] not in got["text"] or any(h["holder"].split(" (")[0] not in h["text"] for h in got["holders"]):
        bad.append("%s: the cell reads %r" % (where, got["text"]))
    if state in ("free", "unhealthy") and state not in got["text"]:
        bad.append("%s: the cell does not say %s: %r" % (where, state, got["text"]))
    for h, e in zip(sorted(got["holders"], key=lambda h: h["holder"]), sorted(mine, key=lambda e: holder(e, pods))):
        if h["group"] != group(e):
            bad.append("%s: %s coloured as %s, not %s" % (where, h["holder"], h["group"], group(e)))
        if background(h["style"]) != legend.get(h["group"]) or not legend.get(h["group"]):
            bad.append("%s: %s is %s, the legend's %s is %s" % (where, h["holder"], background(h["style"]),
                                                                h["group"], legend.get(h["group"])))
    if state == "held":
        whole = [h for h in got["holders"] if not re.search(r" \d+ MiB, \d+%$", h["text"])]
        if not whole or background(got["style"]) != background(whole[0]["style"]):
            bad.append("%s: held whole but drawn %s" % (where, got["style"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dom")
    ap.add_argument("--leases", required=True)
    ap.add_argument("--gns", required=True)
    ap.add_argument("--pods")
    ap.add_argument("--node")
    a = ap.parse_args()
    page = Page()
    page.feed(open(a.dom).read())
    led = ledgers(a.leases)
    pods = None
    if a.pods:
        pods = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in json.load(open(a.pods))["items"]}
    gns = {}
    for g in json.load(open(a.gns))["items"]:
        gns[(g.get("spec") or {}).get("nodeName") or g["metadata"]["name"]] = g["status"].get("devices") or []
    bad = []
    want_nodes = {a.node} if a.node else {n for n, devs in gns.items() if devs}
    if set(page.nodes) != want_nodes:
        bad.append("nodes shown %s, want %s" % (sorted(page.nodes), sorted(want_nodes)))
    colours = [c for g, c in page.legend.items() if g]
    if len(set(colours)) != len(colours):
        bad.append("two pods or gangs share a colour: %s" % page.legend)
    held = 0
    for node in sorted(want_nodes & set(page.nodes)):
        shown = page.nodes[node]
        devs = gns.get(node, [])
        if sorted(shown["devices"]) != sorted(d["id"] for d in devs):
            bad.append("%s: devices %s, GpuNodeStatus lists %s" % (node, sorted(shown["devices"]),
                                                                   sorted(d["id"] for d in devs)))
            continue
        for d in devs:
            for want in (d.get("model", ""), "%d MiB" % d.get("memoryMiB", 0)):
                if want not in shown["models"]:
                    bad.append("%s: %r not in its models line %r" % (node, want, shown["models"]))
            check_device(node, d, shown["devices"][d["id"]], led.get(node, []), pods, page.legend, bad)
            held += bool(shown["devices"][d["id"]]["holders"])
    for line in bad:
        print(line)
    if not bad:
        print("html_check: %d nodes, %d devices held, %d pods or gangs in the legend: as the ledgers say" %
              (len(want_nodes), held, len(colours)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
