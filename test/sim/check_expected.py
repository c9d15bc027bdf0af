#!/usr/bin/env python3
"""Checks the simulator against the FGD paper's cached per-seed results.

For a few traces (default and variants), runs the benchmark's baselines,
FGD and fgd-balanced over a few seeds and checks, at 100 % arrived workload:
  - each baseline's and FGD's median unallocated GPU % lies within the spread
    of the paper's 10 seeds (min..max, widened by a quarter of that range plus
    0.05 points: Go's math/rand cannot be reproduced, so our seeds are other
    draws from the same protocol);
  - fgd-balanced (learning the task mix online) leaves fewer GPUs unallocated
    than FGD (which is given the whole trace's mix, as in the paper): a lower
    median, and lower on most seeds (the arrival order is the same for both).
And, on the default trace with a gang mix (--gangs), for each seed: the same
gangs in both placements, none of them ever holding a GPU idle or deadlocked
gang-aware, and member-by-member holding GPUs idle.
Ends with "N passed, N failed"; exits 1 on any failure.

usage: check_expected.py [BINARY] [--seeds N] [--traces a,b,c] [--data DIR] [--no-gangs]
Python 3 standard library only.
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PAPER = {  # our name -> the paper's sc_policy
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
OURS = "fgd-balanced"


def published(path):
    """{(trace, paper policy): [unallocated % at 100 per seed]}."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            trace = row["workload"].replace("openb_pod_list_", "")
            out.setdefault((trace, row["sc_policy"]), []).append(100.0 - float(row["100"]))
    return out


def simulate(binary, data, trace, policies, seeds):
    cmd = [binary, "simulate",
           "--nodes", os.path.join(data, "openb", "openb_node_list_gpu_node.csv"),
           "--pods", os.path.join(data, "openb", "openb_pod_list_%s.csv" % trace),
           "--seeds", str(seeds), "--format", "csv"]
    for p in policies:
        cmd += ["--policy", p]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), res.stderr.strip()))
    out = {}
    for row in csv.DictReader(io.StringIO(res.stdout)):
        if row["arrived_pct"] == "100":
            out.setdefault(row["policy"], {})[int(row["seed"])] = float(row["unallocated_gpu_pct"])
    return out


GANG_ARGS = ["--policy", "binpack", "--gangs", "0.2", "--tune", "3", "--load", "1.0"]


def simulate_gangs(binary, data, seeds):
    """{(seed, placement): csv row} of the gang replay on the default trace."""
    cmd = [binary, "simulate",
           "--nodes", os.path.join(data, "openb", "openb_node_list_gpu_node.csv"),
           "--pods", os.path.join(data, "openb", "openb_pod_list_default.csv"),
           "--seeds", str(seeds), "--format", "csv"] + GANG_ARGS
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), res.stderr.strip()))
    return {(int(r["seed"]), r["placement"]): r for r in csv.DictReader(io.StringIO(res.stdout))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default=os.path.join(ROOT, "build", "gpu-extender"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--traces", default="default,cpu050,gpushare40,gpuspec10,multigpu30")
    ap.add_argument("--data", default=os.path.join(ROOT, "test", "data"))   # test/data/SOURCE.md
    ap.add_argument("--no-gangs", action="store_true", help="skip the gang mix check")
    args = ap.parse_args()

    pub = published(os.path.join(args.data, "fgd-expected-results", "analysis_allo_discrete.csv"))
    passed = failed = 0
    t0 = time.time()

    def check(ok, line):
        nonlocal passed, failed
        print("%s  %s" % ("ok  " if ok else "FAIL", line))
        if ok:
            passed += 1
        else:
            failed += 1

    for trace in filter(None, args.traces.split(",")):
        try:
            got = simulate(args.binary, args.data, trace, list(PAPER) + [OURS], args.seeds)
        except (RuntimeError, OSError) as e:
            check(False, "%s: %s" % (trace, e))
            continue
        med = {p: statistics.median(v.values()) for p, v in got.items()}
        for ours, theirs in PAPER.items():
            seeds = pub.get((trace, theirs))
            if not seeds:
                check(False, "%s %s: no published results" % (trace, ours))
                continue
            lo, hi = min(seeds), max(seeds)
            slack = 0.25 * (hi - lo) + 0.05
            check(lo - slack <= med[ours] <= hi + slack,
                  "%-11s %-12s median %6.2f  published %6.2f..%6.2f (median %.2f)"
                  % (trace, ours, med[ours], lo, hi, statistics.median(seeds)))
        fgd, bal = got["fgd"], got[OURS]
        wins = sum(1 for s in fgd if bal[s] < fgd[s])
        check(med[OURS] < med["fgd"] and wins * 2 > len(fgd),
              "%-11s %-12s median %6.2f  vs fgd %6.2f (better on %d of %d seeds)"
              % (trace, OURS, med[OURS], med["fgd"], wins, len(fgd)))

    if not args.no_gangs:
        try:
            got = simulate_gangs(args.binary, args.data, 2)
        except (RuntimeError, OSError) as e:
            got = None
            check(False, "gangs: %s" % e)
        for seed in sorted({s for s, _ in got or {}}):
            aware, members = got[(seed, "gang-aware")], got[(seed, "member-by-member")]
            check(int(aware["gangs"]) > 0 and aware["gangs"] == members["gangs"]
                  and float(aware["idle_gpu_pct"]) == 0 and int(aware["gangs_deadlocked"]) == 0
                  and float(members["idle_gpu_pct"]) > 0,
                  "gangs seed %d: %s gangs; idle %% gang-aware %s, member-by-member %s; "
                  "deadlocked gang-aware %s"
                  % (seed, aware["gangs"], aware["idle_gpu_pct"], members["idle_gpu_pct"],
                     aware["gangs_deadlocked"]))

    print("# %.0f s" % (time.time() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
