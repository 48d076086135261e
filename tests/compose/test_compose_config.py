"""docker-compose.hostnet.yml changes only networking: the merged configuration (base + override)
differs from docker-compose.yml alone only in network mode, listener addresses / ports and image names.

Fast, default suite. The merge is done in Python by the compose rules that the override relies on
(mappings merge key by key, `!reset` drops a value, `!override` replaces it, lists are replaced
here, as every list the override sets is one it means to replace); when podman-compose is installed
its own `config` output is checked the same way, and it must validate the default file alone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker_proc import REPO_ROOT

yaml = pytest.importorskip("yaml")

BASE = REPO_ROOT / "docker-compose.yml"
OVERRIDE = REPO_ROOT / "docker-compose.hostnet.yml"
BROKERS = ("kbroker-1", "kbroker-2", "kbroker-3")

# (service, key path) that may differ; every one is about networking or listener addresses.
ALLOWED = {
    *((s, ("network_mode",)) for s in ("etcd", *BROKERS, "prometheus", "grafana")),
    *((s, ("ports",)) for s in (*BROKERS, "prometheus", "grafana")),
    *((s, ("image",)) for s in ("etcd", *BROKERS, "prometheus", "grafana")),
    *((s, ("environment", var)) for s in BROKERS for var in (
        "KBROKER_LISTENERS", "KBROKER_ADVERTISED_LISTENERS", "KBROKER_KBROKER_ETCD_ENDPOINTS",
        "KBROKER_KBROKER_PROMETHEUS_LISTENER", "KBROKER_KBROKER_SCHEMA_REGISTRY_LISTENER",
        "KBROKER_KBROKER_SCHEMA_REGISTRY_ADVERTISED_LISTENER")),
    ("etcd", ("command",)),               # its listen / advertise URLs (checked below)
    ("prometheus", ("command",)),         # --web.listen-address
    ("prometheus", ("volumes",)),         # the scrape targets: the brokers' metrics addresses
    ("grafana", ("environment", "PROMETHEUS_HOST")),
    ("grafana", ("environment", "GF_SERVER_HTTP_ADDR")),
}


class _Reset:
    pass


class _Override:
    def __init__(self, value: Any) -> None:
        self.value = value


class _Loader(yaml.SafeLoader):
    pass


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> _Reset:
    return _Reset()


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> _Override:
    if isinstance(node, yaml.SequenceNode):
        return _Override(loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return _Override(loader.construct_mapping(node, deep=True))
    return _Override(loader.construct_scalar(node))


_Loader.add_constructor("!reset", _construct_reset)
_Loader.add_constructor("!override", _construct_override)


def _merge(base: Any, over: Any) -> Any:
    if isinstance(over, _Reset):
        return None
    if isinstance(over, _Override):
        return over.value
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            merged = _merge(base.get(key), value)
            if merged is None and isinstance(value, _Reset):
                out.pop(key, None)
            else:
                out[key] = merged
        return out
    return over


def _differences(a: Any, b: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key) or (key in a) != (key in b):
                out += _differences(a.get(key), b.get(key), (*path, str(key)))
        return out
    return [] if a == b else [path]


def _check(base: dict[str, Any], merged: dict[str, Any]) -> list[tuple[str, ...]]:
    # x-* extension fields are only anchors; what they feed is compared where it lands.
    diffs = _differences({k: v for k, v in base.items() if not k.startswith("x-")},
                         {k: v for k, v in merged.items() if not k.startswith("x-")})
    assert diffs, "the override changes nothing"
    for path in diffs:
        assert path[0] == "services" and len(path) >= 3, path
        assert (path[1], path[2:]) in ALLOWED, f"the hostnet override changes {'.'.join(path)}"
    base_cmd, merged_cmd = base["services"]["etcd"]["command"], merged["services"]["etcd"]["command"]
    assert len(base_cmd) == len(merged_cmd)
    for x, y in zip(base_cmd, merged_cmd, strict=True):
        assert x == y or ("urls=" in x or x.startswith("--initial-cluster=")), (x, y)
    return diffs


def test_hostnet_override_changes_only_networking() -> None:
    base = yaml.load(BASE.read_text(), Loader=_Loader)
    merged = _merge(base, yaml.load(OVERRIDE.read_text(), Loader=_Loader))
    diffs = _check(base, merged)
    services = merged["services"]
    assert all(services[s]["network_mode"] == "host" for s in services)
    assert not any("ports" in services[s] for s in services)
    # Every broker keeps its own external address, the one the default file publishes.
    for n, svc in enumerate(BROKERS, 1):
        adv = services[svc]["environment"]["KBROKER_ADVERTISED_LISTENERS"]
        assert adv.split(",")[0] == f"EXTERNAL://localhost:{n}9092"
        assert base["services"][svc]["ports"] == [f"127.0.0.1:{n}9092:9092", f"127.0.0.1:808{n}:8081"]
        # The Schema Registry on localhost:8081/8082/8083, the same URLs as the published ports.
        env = services[svc]["environment"]
        assert env["KBROKER_KBROKER_SCHEMA_REGISTRY_LISTENER"] == f"http://127.0.0.1:808{n}"
        assert env["KBROKER_KBROKER_SCHEMA_REGISTRY_ADVERTISED_LISTENER"] == f"http://127.0.0.1:808{n}"
    assert ("services", "kbroker-1", "environment", "KBROKER_LISTENERS") in diffs


def test_base_file_defaults() -> None:
    base = yaml.safe_load(BASE.read_text())
    services = base["services"]
    assert "build" in services["kbroker-1"] and "build" not in services["kbroker-2"]
    assert len({services[s]["image"] for s in BROKERS}) == 1
    ids = {services[s]["environment"]["KBROKER_NODE_ID"] for s in BROKERS}
    assert ids == {1, 2, 3}
    for s in BROKERS:
        env = services[s]["environment"]
        # Topic defaults of issue 16: RF=3 and min.insync.replicas=2, internal topics included.
        assert env["KBROKER_DEFAULT_REPLICATION_FACTOR"] == 3
        assert env["KBROKER_MIN_INSYNC_REPLICAS"] == 2
        assert env["KBROKER_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 3
        assert env["KBROKER_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 3
        assert env["KBROKER_TRANSACTION_STATE_LOG_MIN_ISR"] == 2
        assert env["KBROKER_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert env["KBROKER_KBROKER_ETCD_ENDPOINTS"] == "http://etcd:2379"
        assert env["KBROKER_KBROKER_SCHEMA_REGISTRY_LISTENER"] == "http://0.0.0.0:8081"
        assert env["KBROKER_KBROKER_SCHEMA_REGISTRY_ADVERTISED_LISTENER"] == f"http://{s}:8081"
        assert services[s]["init"] is True
    assert services["prometheus"]["profiles"] == ["monitoring"] == services["grafana"]["profiles"]


def _podman_compose() -> str | None:
    venv = Path(sys.executable).parent / "podman-compose"
    return shutil.which("podman-compose") or (str(venv) if venv.exists() else None)


def _config(*files: Path) -> dict[str, Any]:
    exe = _podman_compose()
    args = [a for f in files for a in ("-f", str(f))]
    out = subprocess.run([exe, *args, "--profile", "monitoring", "config"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


@pytest.mark.skipif(_podman_compose() is None or shutil.which("podman") is None,
                    reason="podman-compose and podman not installed (deploy/container/prepare.sh installs them)")
def test_podman_compose_config_agrees() -> None:
    base = _config(BASE)
    merged = _config(BASE, OVERRIDE)
    assert set(base["services"]) == {"etcd", *BROKERS, "prometheus", "grafana"}
    _check(base, merged)


def test_image_gets_every_package() -> None:
    """The Dockerfile copies (and pre-creates for its dependency layer) every package pyproject.toml
    installs: a package left out would be missing from the image."""
    import re

    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    include = re.search(r"include = \[([^\]]*)\]", pyproject)
    assert include is not None
    packages = {p.strip().strip('"').rstrip("*") for p in include.group(1).split(",")}
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    for pkg in packages:
        assert f"COPY {pkg} /src/{pkg}" in dockerfile, pkg
        assert re.search(rf"for p in [^;]*\b{pkg}\b", dockerfile), pkg
