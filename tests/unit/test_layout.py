"""The layout of ../shared/design.md section 1 holds: which package may import which, and no import
cycles between the project's modules.

Every import counts, wherever it is written: at module level, under ``if TYPE_CHECKING:`` and
inside functions (a function-level import is still a dependency; it only hides it from the
interpreter at start-up). So the layout cannot drift back into the module circle `broker/` once had.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("storage", "protocol", "security", "cluster", "coordinator", "registry", "broker", "spark_jobs", "cli")

# package -> the packages it may import (design.md: dependencies point downwards only)
ALLOWED: dict[str, set[str]] = {
    "storage": set(),
    "protocol": set(),
    "security": {"protocol"},
    "cluster": {"protocol", "security", "storage"},
    "coordinator": {"protocol", "storage"},
    "registry": {"protocol", "storage"},
    "broker": {"protocol", "storage", "security", "cluster", "coordinator", "registry"},
    "spark_jobs": {"protocol"},
    "cli": {"protocol", "security", "cluster"},
}

# The client-side tools that reach into a broker's own files or formats, each for a stated reason
# (module prefix -> packages it may import besides its package's ALLOWED).
CLI_EXCEPTIONS: dict[str, set[str]] = {
    # `kbroker serve` and `kbroker dump-log` run the broker / read its segment files.
    "cli.main": {"broker", "storage"},
    "cli.serve": {"broker", "storage"},
    "cli.dump_log": {"broker", "storage"},
    # Kafka's properties-file format, read the same way by the broker and the tools.
    "cli.common": {"broker"},
    # Probes the listener named in the broker's own server.properties / environment.
    "cli.healthcheck": {"broker"},
    # Writes SCRAM credentials into the log dir of a broker that is not running yet (as Kafka's
    # kafka-storage format --add-scram).
    "cli.users": {"broker", "storage"},
    # Decodes the consumer-protocol assignment bytes that DescribeGroups returns.
    "cli.groups": {"storage"},
}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file."""
    out: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import module` imports the module; `from module import name` the module.
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
        for t in targets:
            r = _resolve(t, mods)
            if r is not None and r != name:
                out.add(r)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def test_packages_import_only_what_the_layout_allows() -> None:
    bad = []
    for mod, deps in sorted(_graph().items()):
        pkg = mod.split(".")[0]
        allowed = ALLOWED[pkg] | {pkg}
        allowed |= next((extra for prefix, extra in CLI_EXCEPTIONS.items()
                         if mod == prefix or mod.startswith(prefix + ".")), set())
        bad += [f"{mod} -> {d}" for d in sorted(deps) if d.split(".")[0] not in allowed]
    assert bad == [], "imports against design.md's layout:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == [], "modules importing each other (directly or around a circle):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_the_checker_sees_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    """The analysis itself: an import under TYPE_CHECKING or inside a function is a dependency."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.broker import Broker\n"
                   "def f():\n    from storage import log\n")
    mods = {"m": src, "broker.broker": src, "storage.log": src, "storage": src, "broker": src}
    assert _imports("m", src, mods) == {"broker.broker", "storage.log"}


def test_test_modules_have_unique_basenames() -> None:
    """pytest (rootdir-relative imports: most test folders have no __init__.py) refuses to collect two test
    modules of one basename: the whole run stops at collection."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not clashes, clashes
