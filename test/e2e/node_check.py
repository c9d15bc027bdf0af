#!/usr/bin/env python3
"""Checks for test/e2e/node.sh: what a pod on the real node sees, against
what the extender bound (the pod's annotations), what kubelet recorded (its
PodResources API, read with `gpu-agent podresources`) and how kubelet was
told to deliver it (the Allocate answer kept in kubelet's checkpoint).

  node_check.py devices NS POD [--resource gpu|gpu-share|claim] [--delivery devices|volume-mounts|cdi]
  node_check.py disjoint NS POD NS POD
  node_check.py none NS POD
  node_check.py agent-mounts

The test pods print their view once at start (see node.sh): a line
`devices=nvidia0 nvidia1 `, a line `mounts=...`, then their GPU variables.
agent-mounts: the running agent pod (deploy/base/06-agent.yaml) mounts no hostPath
of /, and every mount is read-only but the device plugin's own directories:
in its spec, and in its container's mount table on this node (submounts too
where kubelet reports recursiveReadOnly Enabled).
Each check prints what it compared and exits 1 with the difference.
Environment: KUBECTL (with --kubeconfig), AGENT (gpu-agent), CHECKPOINT
(kubelet's device-plugin checkpoint).
"""
import base64
import json
import os
import subprocess
import sys

KUBECTL = os.environ.get("KUBECTL", "kubectl").split()
AGENT = os.environ.get("AGENT", "build/gpu-agent")
CHECKPOINT = os.environ.get("CHECKPOINT", "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
RESOURCES = {"gpu": "gpu.scheduling/gpu", "gpu-share": "gpu.scheduling/gpu-share", "claim": "gpu.scheduling/claim"}


def fail(msg):
    print(msg)
    sys.exit(1)


def kubectl(*args):
    return subprocess.run(KUBECTL + list(args), check=True, capture_output=True, text=True).stdout


def pod(ns, name):
    return json.loads(kubectl("-n", ns, "get", "pod", name, "-o", "json"))


def view(ns, name):
    """What the container printed: its /dev/nvidiaN minors, its mounts, its variables."""
    out = {"devices": set(), "mounts": set(), "env": {}}
    for line in kubectl("-n", ns, "logs", name).splitlines():
        if line.startswith("devices="):
            out["devices"] = {int(w[6:]) for w in line[8:].split() if w[6:].isdigit()}
        elif line.startswith("mounts="):
            out["mounts"] = set(line[7:].split())
        elif "=" in line:
            k, v = line.split("=", 1)
            out["env"][k] = v
    return out


def binding(p):
    ann = p["metadata"].get("annotations", {})
    alloc = ann.get("gpu.scheduling/allocated", "")
    if ":" not in alloc:
        fail("pod %s has no allocation annotation: %r" % (p["metadata"]["name"], ann))
    ids = [int(x) for x in alloc.split(":", 1)[1].split(",")]
    uuids = ann.get("gpu.scheduling/device-uuids", "").split(",")
    return ids, uuids


def recorded(ns, name, resource):
    """kubelet's PodResources record of the pod: device ids of resource, over its containers."""
    out = subprocess.run([AGENT, "podresources"], check=True, capture_output=True, text=True).stdout
    ids = []
    for line in out.splitlines():
        e = json.loads(line)
        if e["namespace"] == ns and e["pod"] == name and e["resource"] == resource:
            ids += e["deviceIds"]
    return ids


def allocate_answers(uid):
    """The Allocate answers kubelet keeps for the pod (raw protobuf bytes), by resource."""
    with open(CHECKPOINT) as f:
        data = json.load(f)["Data"]
    out = {}
    for e in data.get("PodDeviceEntries") or []:
        if e.get("PodUID") == uid:
            out.setdefault(e["ResourceName"], []).append(base64.b64decode(e.get("AllocResp") or ""))
    return out


def check_devices(ns, name, short, delivery):
    resource = RESOURCES[short]
    p = pod(ns, name)
    if p["status"].get("phase") != "Running":
        fail("pod %s/%s is %s" % (ns, name, p["status"].get("phase")))
    ids, uuids = binding(p)
    v = view(ns, name)
    # the fake devices' minors are their indexes, which are the ids on this node
    if v["devices"] != set(ids):
        fail("the container sees /dev/nvidia%s, the binding says %s" % (sorted(v["devices"]), ids))
    cuda = v["env"].get("CUDA_VISIBLE_DEVICES", "")
    if sorted(cuda.split(",")) != sorted(uuids):
        fail("CUDA_VISIBLE_DEVICES=%s, the binding says %s" % (cuda, uuids))
    rec = recorded(ns, name, resource)
    if short == "gpu" and sorted(rec) != sorted(uuids):
        fail("kubelet's PodResources record %s, the binding says %s" % (rec, uuids))
    if short == "gpu-share" and sorted({r.split("::")[0] for r in rec}) != sorted(uuids):
        fail("kubelet's PodResources record slots %s, the binding says %s" % (rec, uuids))
    if short == "claim" and (len(rec) != 1 or not rec[0].startswith("claim-")):
        fail("kubelet's PodResources record %s, expected one claim ticket" % rec)
    answers = b"".join(allocate_answers(p["metadata"]["uid"]).get(resource, []))
    if not answers:
        fail("kubelet's checkpoint has no Allocate answer for the pod's %s" % resource)
    cdi = [("gpu.scheduling/gpu=" + u).encode() for u in uuids]
    specs = b"/var/lib/gpu-extender-fake/dev/nvidia" in answers
    if delivery == "cdi":
        if specs or not all(c in answers for c in cdi):
            fail("the Allocate answer should name CDI devices %s and no device files" % cdi)
        if v["env"].get("NVIDIA_VISIBLE_DEVICES") != "void":
            fail("NVIDIA_VISIBLE_DEVICES=%r under CDI" % v["env"].get("NVIDIA_VISIBLE_DEVICES"))
    else:
        if not specs or any(c in answers for c in cdi):
            fail("the Allocate answer should carry device files and no CDI names")
    if delivery == "volume-mounts":
        if v["mounts"] != set(uuids) or v["env"].get("NVIDIA_VISIBLE_DEVICES") != "/var/run/nvidia-container-devices":
            fail("volume mounts %s and NVIDIA_VISIBLE_DEVICES=%r, the binding says %s" %
                 (sorted(v["mounts"]), v["env"].get("NVIDIA_VISIBLE_DEVICES"), uuids))
    elif v["mounts"]:
        fail("unexpected volume mounts %s" % sorted(v["mounts"]))
    print("%s/%s: /dev/nvidia%s = binding %s = kubelet %s (%s)" %
          (ns, name, sorted(v["devices"]), ids, rec, delivery))
    return v


# What deploy/base/06-agent.yaml may write on the host: the device plugin's sockets and the CDI spec.
AGENT_WRITABLE = {"/var/lib/kubelet/device-plugins", "/var/run/cdi"}


def container_pid(container_id):
    """The main process of a running container (by its id in /proc/PID/cgroup)."""
    cid = container_id.split("://", 1)[-1]
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % d) as f:
                if cid in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return min(pids) if pids else None


def mount_table(pid):
    """(mount point, per-mount options) of the process's mounts, as its root sees them."""
    out = []
    with open("/proc/%d/mountinfo" % pid) as f:
        for line in f:
            fields = line.split()
            out.append((fields[4].replace("\\040", " "), set(fields[5].split(","))))
    return out


def check_agent_mounts():
    items = json.loads(kubectl("-n", "gpu-system", "get", "pods", "-l", "app.kubernetes.io/name=gpu-agent",
                               "-o", "json"))["items"]
    running = [p for p in items if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    if len(running) != 1:
        fail("want one running agent pod, have %s" % [(p["metadata"]["name"], p["status"].get("phase")) for p in items])
    p = running[0]
    spec = p["spec"]
    hostpaths = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    root = [n for n, path in hostpaths.items() if os.path.normpath(path) == "/"]
    if root:
        fail("the agent mounts the host's / (volume %s)" % root)
    writable, readonly = [], {}
    for c in spec.get("initContainers", []) + spec["containers"]:
        for m in c.get("volumeMounts", []):
            if m.get("readOnly"):
                readonly[m["mountPath"]] = m["name"]
            elif m["mountPath"] in AGENT_WRITABLE:
                writable.append(m["mountPath"])
            else:
                fail("container %s mounts %s (volume %s, host path %s) writable" %
                     (c["name"], m["mountPath"], m["name"], hostpaths.get(m["name"], "-")))
    # the mount table of the running container: what the runtime really did
    st = p["status"]["containerStatuses"][0]
    rro = {m["mountPath"] for m in st.get("volumeMounts", []) if m.get("recursiveReadOnly") == "Enabled"}
    pid = container_pid(st["containerID"])
    if pid is None:
        fail("no process of container %s on this node" % st["containerID"])
    checked = 0
    for target, opts in mount_table(pid):
        for path in readonly:
            under = target.startswith(path.rstrip("/") + "/")
            if target == path or (under and path in rro):
                checked += 1
                if "ro" not in opts:
                    fail("%s is mounted read-write in the agent's container (%s; recursiveReadOnly %s)" %
                         (target, ",".join(sorted(opts)), "Enabled" if path in rro else "not enabled"))
    print("agent %s: %d hostPath volumes, none of /; writable: %s; %d mounts read-only (%d of them "
          "recursively), %d mount points checked in its mount table" %
          (p["metadata"]["name"], len(hostpaths), sorted(writable), len(readonly), len(rro & set(readonly)), checked))


def main(argv):
    if len(argv) >= 3 and argv[0] == "devices":
        short, delivery = "gpu", "devices"
        rest = argv[3:]
        while rest:
            if rest[0] == "--resource":
                short = rest[1]
            elif rest[0] == "--delivery":
                delivery = rest[1]
            rest = rest[2:]
        v = check_devices(argv[1], argv[2], short, delivery)
        if short == "gpu-share":
            env = v["env"]
            for k in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                      "GPU_SCHEDULING_SHARED_MEMORY_MIB", "GPU_SCHEDULING_SHARED_CORE_PERCENT"):
                print("  %s=%s" % (k, env.get(k)))
    elif len(argv) == 5 and argv[0] == "disjoint":
        a = set(binding(pod(argv[1], argv[2]))[1])
        b = set(binding(pod(argv[3], argv[4]))[1])
        if a & b:
            fail("both pods hold %s" % sorted(a & b))
        print("disjoint: %s and %s" % (sorted(a), sorted(b)))
    elif len(argv) == 3 and argv[0] == "none":
        v = view(argv[1], argv[2])
        gpu_env = {k: v for k, v in v["env"].items() if "VISIBLE" in k or k.startswith("CUDA_MPS")}
        if v["devices"] or v["mounts"] or any(gpu_env.values()):
            fail("a pod without a GPU request sees %s %s %s" % (sorted(v["devices"]), v["mounts"], gpu_env))
        print("%s/%s sees no GPU" % (argv[1], argv[2]))
    elif argv == ["agent-mounts"]:
        check_agent_mounts()
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
