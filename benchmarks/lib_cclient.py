"""The C-client workload: librdkafka's own ``rdkafka_performance`` tool, produce then consume.

Numbers from the confluent-kafka workloads include the Python loop that drives the client; this
one does not. ``make bench`` builds the tool once from Debian's librdkafka source package, linked
against the librdkafka bundled in the venv's confluent-kafka wheel (the Python workloads' own library;
``librdkafka-dev``'s when there is none): benchmarks/build_rdkafka_perf.sh, binary in the gitignored
benchmarks/build/.
Settings, the same for every broker: 1 KiB values, acks=all (``-a -1``), 4 partitions (librdkafka's
default partitioner spreads keyless records), linger.ms=5, batch.size=1 MiB, no compression; the
consumer reads all 4 partitions from the beginning (``-C -p 0..3 -o beginning -c N``).

Known limit of the fallback: Debian 12's librdkafka 2.0.2 fails to parse Tansu 0.6's ApiVersions v3
response ("Read underflow"), so linked against it the phase fails against Tansu and the report shows it
under Failures; the wheel's newer librdkafka does not have the problem.

Figures come from the tool's own summary line (its clock starts at the first produce / first
consumed message); MB = 10^6 bytes of values, as in the other workloads. The tool is a separate
process, so its CPU is counted as a helper of the :class:`~lib_meter.Meter`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

from lib_meter import Meter
from lib_workloads import MB, PARTITIONS, WorkloadError, create_topic, unique

BINARY = Path(__file__).resolve().parent / "build" / "rdkafka_performance"

# "% 30000 messages produced (30720000 bytes), 30000 delivered (offset 7620, 0 failed) in 512ms:
#  58593 msgs/s and 60.00 MB/s, 0 produce failures, 0 in queue, no compression"
_PRODUCED = re.compile(r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered .*?\((?:offset -?\d+, )?"
                       r"(\d+) failed\) in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s")
# "% 30000 messages (30720000 bytes) consumed in 300ms: 100000 msgs/s (102.40 MB/s)"
_CONSUMED = re.compile(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms: (\d+) msgs/s \(([\d.]+) MB/s\)")


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The tool prints a summary line every second and a final one at exit: take the last."""
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def _why(out: str) -> str:
    """One line for the report: librdkafka's last error log line if any, else the tool's last line."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "|FAIL|" in ln or "|ERROR|" in ln or "error" in ln.lower()]
    return ((errors or lines or ["(no output)"])[-1])[:300]


def available() -> bool:
    return BINARY.is_file()


def _linked_library() -> str | None:
    """Path of the librdkafka the tool loads (ldd resolves the wheel's rpath), else the system's."""
    try:
        out = subprocess.run(["ldd", str(BINARY)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if "librdkafka" in line and "=>" in line:
            path = line.split("=>", 1)[1].split("(")[0].strip()
            if path and path != "not found":
                return path
    return ctypes.util.find_library("rdkafka")


def library_version() -> str | None:
    """Version of the librdkafka shared library the tool is linked with (the confluent-kafka wheel's
    when build_rdkafka_perf.sh found one, else the system's)."""
    name = _linked_library()
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.rd_kafka_version_str.restype = ctypes.c_char_p
    return lib.rd_kafka_version_str().decode()


def _run_metered(cmd: list[str], broker_pid: int | None, timeout: float) -> tuple[str, dict[str, Any]]:
    """Run the tool to completion under a Meter; its CPU comes from os.wait4's rusage (exact, and
    still available after exit, unlike /proc/<pid>)."""
    m = Meter(broker_pid).start()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    killer = threading.Timer(timeout, proc.kill)  # bounds the run even if the tool hangs silently
    killer.start()
    try:
        assert proc.stdout is not None
        out = proc.stdout.read().decode(errors="replace")
        _, status, rusage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    usage = m.stop()
    usage.client_cpu += rusage.ru_utime + rusage.ru_stime
    usage.machine_cpu = max(usage.machine_cpu, usage.client_cpu + (usage.broker_cpu or 0.0))
    if proc.returncode != 0:
        raise WorkloadError(f"{Path(cmd[0]).name} exited {proc.returncode} (killed after {timeout:.0f} s "
                            f"if negative): {_why(out)}")
    return out, usage.to_dict()


# sticky.partitioning.linger.ms=0: the tool queues records so fast (tens of thousands in the 10 ms
# sticky window) that librdkafka's sticky partitioner would put a whole quick run on one partition;
# 0 spreads keyless records over all 4 (per record, at random) as the workload intends.
# message.timeout.ms=60000 (default 300 s): a broker this librdkafka cannot talk to fails the phase in a
# minute rather than five (as the fallback librdkafka 2.0.2 against Tansu 0.6 would).
COMMON = ["-X", "message.timeout.ms=60000", "-X", "sticky.partitioning.linger.ms=0", "-X", "linger.ms=5", "-X", "batch.size=1048576", "-X", "queue.buffering.max.kbytes=2097152",
          "-X", "queue.buffering.max.messages=2000000"]


def produce_consume(bootstrap: str, broker_pid: int | None, *, records: int, size: int = 1024,
                    timeout: float = 180, partitions: int = PARTITIONS) -> dict[str, dict[str, Any]]:
    """Produce ``records`` values with the C tool into a fresh topic (4 partitions by default), then consume them.
    Returns ``{"c_produce": figures, "c_consume": figures}``."""
    prod = produce(bootstrap, broker_pid, records=records, size=size, timeout=timeout, partitions=partitions)
    return {"c_produce": prod, "c_consume": consume(bootstrap, broker_pid, prod["topic"], records=records,
                                                     timeout=timeout, partitions=partitions)}


def consume(bootstrap: str, broker_pid: int | None, topic: str, *, records: int, timeout: float = 180,
            partitions: int = PARTITIONS) -> dict[str, Any]:
    """Consume ``records`` values of ``topic`` from the beginning with the C tool; its figures."""
    exe = str(BINARY)
    parts = [a for p in range(partitions) for a in ("-p", str(p))]
    out, usage = _run_metered([exe, "-C", "-t", topic, "-b", bootstrap, *parts, "-o", "beginning",
                               "-c", str(records)], broker_pid, timeout)
    m = _last(_CONSUMED, out)
    if not m:
        raise WorkloadError(f"no consume summary in rdkafka_performance output: {_why(out)}")
    got, ms = int(m.group(1)), int(m.group(3))
    if got < records:
        raise WorkloadError(f"rdkafka_performance consumed {got} of {records}")
    wall = max(ms, 1) / 1e3
    return {"records": got, "records_per_s": got / wall, "mb_per_s": float(m.group(5)), "tool_ms": ms,
            "usage": usage}


def produce(bootstrap: str, broker_pid: int | None, *, records: int, size: int = 1024,
            timeout: float = 180, partitions: int = PARTITIONS) -> dict[str, Any]:
    """Produce ``records`` values (acks=all) with the C tool into a fresh topic; its figures."""
    if not available():
        raise WorkloadError(f"{BINARY} not built (make bench builds it; see benchmarks/build_rdkafka_perf.sh)")
    topic = unique("cperf")
    create_topic(bootstrap, topic, partitions)
    exe = str(BINARY)
    out, usage = _run_metered([exe, "-P", "-t", topic, "-b", bootstrap, "-s", str(size), "-c", str(records),
                               "-a", "-1", "-z", "none", *COMMON], broker_pid, timeout)
    m = _last(_PRODUCED, out)
    if not m:
        raise WorkloadError(f"no produce summary in rdkafka_performance output: {_why(out)}")
    produced, _bytes, delivered, failed, ms = (int(m.group(i)) for i in range(1, 6))
    if failed or delivered < records:
        raise WorkloadError(f"rdkafka_performance: {delivered} of {records} delivered, {failed} failed; {_why(out)}")
    wall = max(int(ms), 1) / 1e3
    return {"topic": topic, "records": delivered, "records_per_s": delivered / wall,
            "mb_per_s": float(m.group(7)), "tool_ms": int(ms), "usage": usage}


__all__ = ["BINARY", "MB", "available", "library_version", "produce", "produce_consume"]
