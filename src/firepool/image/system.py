"""The few system files a container of the pool image needs around the interpreter.

No distribution is installed, so each file is written here: a user table with the pod's uid
(getpwuid must answer for it: Python's `getpass`, `pathlib.Path.home` and pip ask), name
service rules that need no plugin (glibc's `files` and `dns` are built into libc), the host's
CA bundle (jobs fetch over TLS), and the directories a container runtime mounts over or the
agent writes to. The kubelet replaces /etc/hosts and writes /etc/resolv.conf itself."""

from __future__ import annotations

import ssl
from pathlib import Path

from firepool.image.entries import Tree
from firepool.image.errors import RootfsError
from firepool.image.libraries import MERGED_USR, merged_usr

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE_CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
NOBODY = 65534
NSSWITCH = """\
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
"""
HOSTS = """\
127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback
"""


def add_system(tree: Tree, *, uid: int, user: str, home: str, writable: tuple[str, ...]) -> None:
    """The base layout, the user `user` (uid = gid = `uid`, home `home`) and its directories
    `writable` (owned by it)."""
    for link, target in MERGED_USR.items():
        tree.dir(target)
        tree.symlink(link, target)
    for mount_point in ("proc", "sys", "dev", "etc", "run", "var/lib"):
        tree.dir(mount_point)
    tree.dir("root", mode=0o700)
    tree.dir("tmp", mode=0o1777)
    tree.dir("var/tmp", mode=0o1777)
    nologin = "/usr/sbin/nologin"
    tree.file(
        "etc/passwd",
        data=(
            f"root:x:0:0:root:/root:{nologin}\n"
            f"{user}:x:{uid}:{uid}:{user}:{home}:{nologin}\n"
            f"nobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:{nologin}\n"
        ).encode(),
    )
    tree.file("etc/group", data=f"root:x:0:\n{user}:x:{uid}:\nnogroup:x:{NOBODY}:\n".encode())
    tree.file("etc/nsswitch.conf", data=NSSWITCH.encode())
    tree.file("etc/hosts", data=HOSTS.encode())
    for directory in (home, *writable):
        tree.dir(directory, uid=uid, gid=uid)
    add_ca_bundle(tree)


def add_ca_bundle(tree: Tree) -> None:
    """The host's CA bundle at Debian's path, and links from where this interpreter's OpenSSL
    looks by default (a pyenv or Debian build: /usr/lib/ssl), so `ssl` verifies out of the box."""
    if not CA_BUNDLE.is_file():
        raise RootfsError(f"no CA bundle at {CA_BUNDLE} (install ca-certificates)")
    tree.file(IMAGE_CA_BUNDLE, source=CA_BUNDLE.resolve(), mode=0o644)
    paths = ssl.get_default_verify_paths()
    bundle_dir = IMAGE_CA_BUNDLE.rpartition("/")[0]
    defaults = ((paths.openssl_cafile, IMAGE_CA_BUNDLE), (paths.openssl_capath, bundle_dir))
    for default, target in defaults:
        if not default:
            continue
        where = merged_usr(default)
        if where != target and where not in tree:
            tree.symlink(where, "/" + target)
