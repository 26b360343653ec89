#!/usr/bin/env python3
"""Writes the envoy-injector image as an image archive, without Docker or a registry.

    image_archive.py BINARY OUT.tar TAG [TAG ...]

The archive is in the `docker save` format (manifest.json, the image config, one layer),
which `docker load`, `kind load image-archive` and `ctr images import` all take. Its one
layer holds what the Dockerfile's distroless image gives the binary at run time and
nothing else: the static binary at /envoy-injector, /etc/passwd and /etc/group naming
UID/GID 65532 `nonroot`, its home, and /tmp. No shell, no package manager. The config
runs it as 65532:65532 with the Dockerfile's entrypoint, command, ports and labels.

Every timestamp is 0 and every owner fixed, so the same binary always gives the same
image ID: loading it twice changes nothing.
"""

import hashlib
import io
import json
import os
import sys
import tarfile

NONROOT = 65532
PASSWD = b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
GROUP = b"root:x:0:\nnonroot:x:65532:\n"


def entry(name, kind, mode, owner=0, data=b""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid = info.gid = owner
    info.uname = info.gname = ""
    info.mtime = 0
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def layer(binary):
    with open(binary, "rb") as f:
        program = f.read()
    entries = [
        entry("etc", tarfile.DIRTYPE, 0o755),
        entry("etc/passwd", tarfile.REGTYPE, 0o644, data=PASSWD),
        entry("etc/group", tarfile.REGTYPE, 0o644, data=GROUP),
        entry("home", tarfile.DIRTYPE, 0o755),
        entry("home/nonroot", tarfile.DIRTYPE, 0o700, owner=NONROOT),
        entry("tmp", tarfile.DIRTYPE, 0o1777),
        entry("envoy-injector", tarfile.REGTYPE, 0o755, data=program),
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, data)
    return buf.getvalue()


def config(diff_id):
    return {
        "architecture": os.environ.get("IMAGE_ARCH", "amd64"),
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": ["/envoy-injector"],
            "Cmd": ["serve"],
            "WorkingDir": "/",
            "ExposedPorts": {"8443/tcp": {}, "9090/tcp": {}},
            "Labels": {
                "org.opencontainers.image.title": "envoy-injector",
                "org.opencontainers.image.description": "Sidecar-injecting admission webhook and Network controller",
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/image_archive.py"}],
    }


def main(argv):
    if len(argv) < 4:
        sys.exit(f"usage: {argv[0]} BINARY OUT.tar TAG [TAG ...]")
    binary, out, tags = argv[1], argv[2], argv[3:]
    layer_bytes = layer(binary)
    layer_digest = hashlib.sha256(layer_bytes).hexdigest()
    config_bytes = json.dumps(config("sha256:" + layer_digest), sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": tags, "Layers": [layer_digest + "/layer.tar"]}]).encode()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((layer_digest, None), (layer_digest + "/layer.tar", layer_bytes),
                           (config_name, config_bytes), ("manifest.json", manifest)):
            kind = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info, body = entry(name, kind, 0o755 if data is None else 0o644, data=data or b"")
            tar.addfile(info, body)
    os.replace(tmp, out)
    print(f"image {' '.join(tags)}: id sha256:{config_name[:-5]}, {len(layer_bytes) / 1e6:.1f} MB layer -> {out}")


if __name__ == "__main__":
    main(sys.argv)
