"""Dependency cycles between operations: G0 (write-write only) and G1c (with write-read edges).

As ``jepsen.tests.kafka``: ``ww`` T1 -> T2 when T2 sent the value that directly follows, in the
key's version order, a value T1 sent; ``wr`` T1 -> T2 when T2 polled a value T1 sent. Nodes are
the operations whose effects are known to have happened (ok, or indeterminate with a value read by
someone); an operation that only reads has no outgoing edge and can never be on a cycle, so it is
left out, which keeps the graph as small as the number of writing operations.

Classification (Adya's names, as Elle reports them):
- ``G0``: a cycle of ww edges only. Kafka does not isolate writes, so Jepsen allows it.
- ``G1c``: a cycle of wr edges only (circular information flow: each transaction read what the
  next one wrote, which read_committed consumers can never see). A violation.
- ``G1c-ww``: a cycle that needs both kinds (at least one wr edge). Expected in Kafka's model once
  write-write order is inferred from offsets (Jepsen's allowed ``G1c`` under ``ww-deps``).

Strongly connected components by an iterative Tarjan; each case comes with one concrete cycle
(a list of op indices and the edge kinds between them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

WW, WR = "ww", "wr"


class Graph:
    def __init__(self) -> None:
        self.out: dict[int, dict[int, set[str]]] = {}

    def link(self, a: int, b: int, kind: str) -> None:
        if a == b:
            return
        self.out.setdefault(a, {}).setdefault(b, set()).add(kind)
        self.out.setdefault(b, {})

    def nodes(self) -> Iterable[int]:
        return self.out.keys()

    def succ(self, a: int, kinds: frozenset[str] | None = None) -> Iterable[int]:
        for b, ks in self.out.get(a, {}).items():
            if kinds is None or ks & kinds:
                yield b


def strongly_connected(graph: Graph, nodes: Iterable[int], kinds: frozenset[str] | None = None) -> list[list[int]]:
    """Components of more than one node among ``nodes`` over edges of ``kinds`` (all if None)."""
    allowed = set(nodes)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in allowed:
        if root in index:
            continue
        work = [(root, iter([b for b in graph.succ(root, kinds) if b in allowed]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter([b for b in graph.succ(nxt, kinds) if b in allowed])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _path(graph: Graph, start: int, goal: int, members: set[int], kinds: frozenset[str] | None) -> list[int] | None:
    """Shortest path start -> goal inside ``members`` (BFS)."""
    prev: dict[int, int | None] = {start: None}
    queue = deque([start])
    while queue:
        n = queue.popleft()
        if n == goal:
            path = [n]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for b in graph.succ(n, kinds):
            if b in members and b not in prev:
                prev[b] = n
                queue.append(b)
    return None


def _cycle_through(graph: Graph, a: int, b: int, members: set[int], kinds: frozenset[str] | None) -> list[int] | None:
    """A cycle using the edge a -> b: b ... a, closed back to b."""
    back = _path(graph, b, a, members, kinds)
    return None if back is None else [a, *back]  # a -> b -> ... -> a


def describe(graph: Graph, cycle: list[int]) -> list[tuple[int, str, int]]:
    """The steps of a cycle ``[n0, n1, ..., n0]`` as (from, kinds, to)."""
    steps = []
    for a, b in zip(cycle, cycle[1:], strict=False):
        steps.append((a, "+".join(sorted(graph.out[a][b])), b))
    return steps


def find_cycles(graph: Graph, limit: int = 20) -> dict[str, list[list[tuple[int, str, int]]]]:
    """``{"G0": [...], "G1c": [...], "G1c-ww": [...]}``: up to ``limit`` example cycles each."""
    found: dict[str, list[list[tuple[int, str, int]]]] = {"G0": [], "G1c": [], "G1c-ww": []}
    ww, wr = frozenset({WW}), frozenset({WR})
    for comp in strongly_connected(graph, graph.nodes()):
        members = set(comp)
        for sub in strongly_connected(graph, members, ww):
            if len(found["G0"]) < limit:
                s = set(sub)
                a = sub[0]
                b = next(x for x in graph.succ(a, ww) if x in s)
                cyc = _cycle_through(graph, a, b, s, ww)
                if cyc:
                    found["G0"].append(describe(graph, cyc))
        for sub in strongly_connected(graph, members, wr):
            if len(found["G1c"]) < limit:
                s = set(sub)
                a = sub[0]
                b = next(x for x in graph.succ(a, wr) if x in s)
                cyc = _cycle_through(graph, a, b, s, wr)
                if cyc:
                    found["G1c"].append(describe(graph, cyc))
        # Any wr edge inside the component lies on some cycle of the component.
        if len(found["G1c-ww"]) < limit:
            for a in comp:
                b = next((x for x in graph.succ(a, wr) if x in members), None)
                if b is not None:
                    cyc = _cycle_through(graph, a, b, members, None)
                    steps = describe(graph, cyc) if cyc else []
                    if any(WW in kinds.split("+") and WR not in kinds.split("+") for _, kinds, _ in steps):
                        found["G1c-ww"].append(steps)  # (a wr-only cycle is G1c, reported above)
                    break
    return found
