#!/usr/bin/env python3
"""Writes a one-layer OCI image archive (an OCI image layout in a tar) from a
root file system directory, reproducibly: the same tree gives the same bytes,
so the same image digest, and importing it again changes nothing.

  ocilayout.py OUT.tar NAME ROOTFS [--entrypoint JSON] [--cmd JSON]
               [--user USER] [--env K=V]... [--workdir DIR]

NAME is the full reference (e.g. registry.k8s.io/pause:3.10.1); it goes into
index.json as io.containerd.image.name (what `ctr images import` names the
image) and, as its tag, org.opencontainers.image.ref.name (the OCI spec's
annotation). Every entry of the layer has mtime 0 and owner 0:0, entries
are sorted, and the layer is an uncompressed tar, so its digest is also its
diff_id. Hard links become separate files. Standard library only.
"""
import argparse
import hashlib
import io
import json
import os
import stat
import sys
import tarfile


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def tarinfo(name, st=None, **kw):
    ti = tarfile.TarInfo(name)
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    if st is not None:
        ti.mode = stat.S_IMODE(st.st_mode)
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def layer_tar(root):
    """The tree under root as tar bytes: parents before children, sorted."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            for name in sorted(dirnames + filenames):
                path = os.path.join(dirpath, name)
                arc = name if rel == "." else os.path.join(rel, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    tar.addfile(tarinfo(arc, st, type=tarfile.SYMTYPE, linkname=os.readlink(path)))
                elif stat.S_ISDIR(st.st_mode):
                    tar.addfile(tarinfo(arc, st, type=tarfile.DIRTYPE))
                elif stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as f:
                        tar.addfile(tarinfo(arc, st, size=st.st_size), f)
                else:
                    sys.exit("ocilayout: %s: only files, directories and symlinks" % path)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description="one-layer OCI image archive from a directory")
    ap.add_argument("out")
    ap.add_argument("name")
    ap.add_argument("rootfs")
    ap.add_argument("--entrypoint", type=json.loads)
    ap.add_argument("--cmd", type=json.loads)
    ap.add_argument("--user")
    ap.add_argument("--workdir")
    ap.add_argument("--env", action="append",
                    default=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    a = ap.parse_args()
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"

    blobs = {}

    def blob(media_type, data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer = blob("application/vnd.oci.image.layer.v1.tar", layer_tar(a.rootfs))
    config = {"Env": a.env}
    for key, val in (("Entrypoint", a.entrypoint), ("Cmd", a.cmd), ("User", a.user), ("WorkingDir", a.workdir)):
        if val is not None:
            config[key] = val
    cfg = blob("application/vnd.oci.image.config.v1+json", canon({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
    }))
    manifest = blob("application/vnd.oci.image.manifest.v1+json", canon({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cfg, "layers": [layer],
    }))
    manifest["annotations"] = {"io.containerd.image.name": a.name, "org.opencontainers.image.ref.name": tag}
    manifest["platform"] = {"architecture": "amd64", "os": "linux"}
    index = canon({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": [manifest]})

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        def add(name, data):
            tar.addfile(tarinfo(name, mode=0o644, size=len(data)), io.BytesIO(data))
        tar.addfile(tarinfo("blobs", mode=0o755, type=tarfile.DIRTYPE))
        tar.addfile(tarinfo("blobs/sha256", mode=0o755, type=tarfile.DIRTYPE))
        for digest in sorted(blobs):
            add("blobs/sha256/" + digest.split(":", 1)[1], blobs[digest])
        add("index.json", index)
        add("oci-layout", canon({"imageLayoutVersion": "1.0.0"}))
    os.replace(tmp, a.out)
    print(manifest["digest"])


if __name__ == "__main__":
    main()
