"""Network namespaces for fault tests: one namespace per node, joined by a bridge, with cuttable links.

``NetLab`` (root only) creates a bridge in the root namespace with address ``<subnet>.1`` (where
the test's own clients live) and, per node, a namespace ``<prefix>-<name>`` with a veth pair into
the bridge and one address ``<subnet>.<n>``. A process runs inside a node's namespace through
``node.prefix`` (``nsenter --net=...``, which execs: the pid a test holds is the process's own).

Cuts are nftables rules inside a node's namespace: a set ``cut`` of peer addresses whose packets
are dropped in both directions (silently, as a real partition: open connections stall, new ones
time out). ``cut(node, peers)`` adds peers, ``heal(node)`` empties the set. Cutting A from B is
enough on A's side: both directions pass A's input and output hooks. The subnet is picked among
10.213.0.0/16's /24s that no interface uses yet; ``close()`` deletes the namespaces and the bridge
(the veth pairs go with them). Nothing is ever routed off the machine.

Requires root, iproute2 (``ip``), util-linux (``nsenter``) and the Debian package ``nftables``.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field

NFT_TABLE = "faults"
_RULESET = f"""
table inet {NFT_TABLE} {{
  set cut {{ type ipv4_addr; }}
  chain in {{ type filter hook input priority 0; policy accept; ip saddr @cut drop; }}
  chain out {{ type filter hook output priority 0; policy accept; ip daddr @cut drop; }}
}}
"""


class NetLabUnavailable(RuntimeError):
    """Not root, or a tool is missing: the namespace faults cannot run here."""


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, pkg in (("ip", "iproute2"), ("nsenter", "util-linux"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} not on PATH (Debian package {pkg})"
    return None


def _run(*args: str, input: str | None = None) -> None:
    res = subprocess.run(args, input=input, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")


@dataclass
class Node:
    name: str
    ns: str
    ip: str
    veth: str
    cut_peers: set[str] = field(default_factory=set)

    @property
    def prefix(self) -> list[str]:
        """Command prefix that runs a program inside this node's namespace."""
        return ["nsenter", f"--net=/run/netns/{self.ns}", "--"]


class NetLab:
    def __init__(self, tag: str | None = None) -> None:
        reason = unavailable_reason()
        if reason:
            raise NetLabUnavailable(reason)
        self.tag = tag or f"k{os.getpid()}"  # the owner's pid: cleanup_stale() knows when it is gone
        self.bridge = f"{self.tag}br"[:15]
        self.nodes: dict[str, Node] = {}
        self.subnet = self._free_subnet()
        self.host_ip = f"{self.subnet}.1"
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        try:
            _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        except Exception:
            self.close()
            raise

    @staticmethod
    def _free_subnet() -> str:
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        choices = list(range(1, 255))
        random.shuffle(choices)
        for third in choices:
            if f" 10.213.{third}." not in used:
                return f"10.213.{third}"
        raise RuntimeError("no free /24 in 10.213.0.0/16")

    def add(self, name: str, host: int) -> Node:
        """A namespace with address ``<subnet>.<host>`` on the bridge, loopback up, a cut set ready."""
        ns = f"{self.tag}-{name}"
        veth = f"{self.tag}{name}"[:15]
        node = Node(name, ns, f"{self.subnet}.{host}", veth)
        self.nodes[name] = node
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", veth, "master", self.bridge)
        _run("ip", "link", "set", veth, "up")
        for cmd in (["ip", "addr", "add", f"{node.ip}/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"],
                    ["ip", "link", "set", "lo", "up"]):
            _run("ip", "netns", "exec", ns, *cmd)
        _run("ip", "netns", "exec", ns, "nft", "-f", "-", input=_RULESET)
        return node

    def cut(self, name: str, peers: list[str]) -> None:
        """Drop traffic between node ``name`` and the addresses ``peers`` (both directions)."""
        node = self.nodes[name]
        new = [p for p in peers if p not in node.cut_peers]
        if not new:
            return
        _run("ip", "netns", "exec", node.ns, "nft", "add", "element", "inet", NFT_TABLE, "cut",
             "{ " + ", ".join(new) + " }")
        node.cut_peers.update(new)

    def heal(self, name: str) -> None:
        node = self.nodes[name]
        if node.cut_peers:
            _run("ip", "netns", "exec", node.ns, "nft", "flush", "set", "inet", NFT_TABLE, "cut")
            node.cut_peers.clear()

    def heal_all(self) -> None:
        for name in self.nodes:
            with contextlib.suppress(Exception):
                self.heal(name)

    def close(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                _run("ip", "link", "del", node.veth)  # (namespace teardown would, but asynchronously)
            with contextlib.suppress(Exception):
                _run("ip", "netns", "del", node.ns)
        self.nodes.clear()
        with contextlib.suppress(Exception):
            _run("ip", "link", "del", self.bridge)

    @staticmethod
    def cleanup_stale() -> list[str]:
        """Remove namespaces and bridges of NetLabs whose process is gone (killed before its close())."""
        import re

        removed = []
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        for name in names:
            m = re.fullmatch(r"k(\d+)-[be]\d+", name)
            if m and not os.path.exists(f"/proc/{m[1]}"):
                with contextlib.suppress(Exception):
                    _run("ip", "netns", "del", name)
                    removed.append(name)
        for m in re.finditer(r"^\d+: (k(\d+)br)[:@]", links, re.M):
            if not os.path.exists(f"/proc/{m[2]}"):
                with contextlib.suppress(Exception):
                    _run("ip", "link", "del", m[1])
                    removed.append(m[1])
        return removed

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
