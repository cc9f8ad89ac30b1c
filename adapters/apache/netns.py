"""A network namespace of its own for each broker (Linux, as root, with iproute2's ``ip``).

A RocketMQ broker binds every interface (its listen port, port-2 for the VIP channel, port+1 for HA). Each
broker rmqspec starts therefore gets a namespace ``rmqspec-<n>`` joined to the host by a veth pair with a /30:
``10.213.<n>.1`` on the host side, ``10.213.<n>.2`` inside (``lo`` up too). The broker runs there
(``ip netns exec``) with brokerIP1 = the inside address, and a client in the normal namespace connects to
that address: the whole Python process can talk to it, and several brokers can run at once, all on port
10911. Deleting the namespace deletes the veth pair.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import attrs

PREFIX = "rmqspec-"
SUBNET = "10.213"
NETNS_DIR = Path("/run/netns")
_LOCK = Path("/run/lock/rmqspec-netns.lock")


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message holds the command and what it said."""


@attrs.frozen
class Netns:
    name: str
    index: int

    @property
    def host_ip(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    @property
    def ns_ip(self) -> str:
        return f"{SUBNET}.{self.index}.2"

    @property
    def host_if(self) -> str:
        return f"rmqspec{self.index}h"

    @property
    def ns_if(self) -> str:
        return f"rmqspec{self.index}n"

    def exec_prefix(self) -> list[str]:
        return [_ip(), "netns", "exec", self.name]

    @staticmethod
    def named(name: str) -> Netns | None:
        m = re.fullmatch(re.escape(PREFIX) + r"(\d{1,3})", name)
        return Netns(name, int(m.group(1))) if m and 1 <= int(m.group(1)) <= 254 else None


def _ip() -> str:
    return shutil.which("ip") or "/sbin/ip"


def unavailable() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not on PATH"
    try:
        subprocess.run([_ip(), "netns", "list"], capture_output=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"`ip netns list` fails: {e}"
    return None


def _run(*args: str) -> str:
    cmd = [_ip(), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise NetnsError(f"`{' '.join(cmd)}` failed: {e}") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().replace("\n", " ")
        raise NetnsError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {said}")
    return proc.stdout


def _lock_path(name: str) -> Path:
    return (_LOCK.parent if _LOCK.parent.is_dir() else Path("/tmp")) / name


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with _lock_path(_LOCK.name).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ours() -> list[Netns]:
    """The namespaces named like ours that exist now."""
    out = _run("netns", "list")
    found = []
    for line in out.splitlines():
        ns = Netns.named(line.split(" ")[0].strip()) if line.strip() else None
        if ns is not None:
            found.append(ns)
    return found


def _used_indexes() -> set[int]:
    used = {ns.index for ns in ours()}
    for m in re.finditer(rf"\b{re.escape(SUBNET)}\.(\d+)\.\d+/", _run("-4", "-o", "addr", "show")):
        used.add(int(m.group(1)))
    return used


def create() -> Netns:
    """A new namespace with its veth pair and addresses, at the lowest free index."""
    with _locked():
        used = _used_indexes()
        free = next((i for i in range(1, 255) if i not in used), None)
        if free is None:
            raise NetnsError(f"no free {SUBNET}.N.0/30 left: 254 rmqspec namespaces exist")
        ns = Netns(f"{PREFIX}{free}", free)
        _run("netns", "add", ns.name)
    try:
        _run("link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
        _run("link", "set", ns.ns_if, "netns", ns.name)
        _run("addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
        _run("link", "set", ns.host_if, "up")
        _run("-n", ns.name, "addr", "add", f"{ns.ns_ip}/30", "dev", ns.ns_if)
        _run("-n", ns.name, "link", "set", ns.ns_if, "up")
        _run("-n", ns.name, "link", "set", "lo", "up")
    except BaseException:
        delete(ns)
        raise
    return ns


def delete(ns: Netns) -> None:
    """Remove the namespace and its veth pair; quiet when they are already gone."""
    with contextlib.suppress(NetnsError):
        _run("netns", "delete", ns.name)
    with contextlib.suppress(NetnsError):
        _run("link", "delete", ns.host_if)


def pids(ns: Netns) -> list[int]:
    """The processes running in the namespace."""
    try:
        out = _run("netns", "pids", ns.name)
    except NetnsError:
        return []
    return [int(p) for p in out.split() if p.isdigit()]


def exists(ns: Netns) -> bool:
    return (NETNS_DIR / ns.name).exists()


class Hold:
    """A shared lock on a namespace, held by the process that manages its broker: ``sweep`` leaves it alone
    (between a stop and the start of a restart the namespace is empty, yet in use)."""

    def __init__(self, ns: Netns) -> None:
        self._file: IO[str] | None = _lock_path(f"{ns.name}.lock").open("a")
        fcntl.flock(self._file, fcntl.LOCK_SH)

    def release(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()


def held(ns: Netns) -> bool:
    """Whether a process holds the namespace (``Hold``): its broker is managed, though it may be down."""
    path = _lock_path(f"{ns.name}.lock")
    if not path.exists():
        return False
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def sweep(min_age_s: float = 60.0) -> list[str]:
    """Delete our namespaces left by a crash: no process in them, no process holding them, older than
    ``min_age_s`` (which spares one that another process has just made and not yet started its broker in)."""
    removed = []
    for ns in ours():
        try:
            age = time.time() - (NETNS_DIR / ns.name).stat().st_mtime
        except OSError:
            age = min_age_s
        if age >= min_age_s and not pids(ns) and not held(ns):
            delete(ns)
            removed.append(ns.name)
    return removed
