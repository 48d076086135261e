"""Compare the replicas of one partition batch by batch, straight from the brokers' data dirs.

Replication copies a leader's record batches byte for byte (partitionLeaderEpoch and baseOffset
included), but segment files may roll at different offsets on different brokers, so replicas are
compared by batch, keyed by base offset, never by file. Only batches below a bound (the high
watermark) are compared: what lies above it may still be on its way to a follower.

Segment files are read with plain ``os.pread`` on read-only fds (storage.segment.scan_batches without
validation): a running broker may own the log and append or truncate while we read, and opening it
with storage.log.Log would recover, rebuild indexes and write checkpoints. A batch torn at the tail
ends the scan quietly; it lies above the high watermark anyway.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from storage.segment import scan_batches

LOG_SUFFIX = ".log"


def partition_dir(data_dir: Path | str, topic: str, partition: int) -> Path:
    """``<log.dir>/<topic>-<partition>``, where every broker keeps its replica (one log dir per broker)."""
    return Path(data_dir) / f"{topic}-{partition}"


def segment_files(pdir: Path) -> list[Path]:
    """The live ``.log`` segments of a partition dir, by base offset (``*.deleted``/``*.cleaned`` skipped)."""
    names = [p for p in pdir.iterdir() if p.name.endswith(LOG_SUFFIX) and p.name[:-len(LOG_SUFFIX)].isdigit()]
    return sorted(names, key=lambda p: int(p.name[:-len(LOG_SUFFIX)]))


def read_batches(pdir: Path | str, up_to: int | None = None) -> dict[int, bytes]:
    """base offset -> batch bytes for every batch of the replica whose base offset is below ``up_to``."""
    out: dict[int, bytes] = {}
    for path in segment_files(Path(pdir)):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # deleted by retention or a roll between listing and opening
            continue
        try:
            for header, data in scan_batches(fd, 0, os.fstat(fd).st_size):
                if up_to is not None and header.base_offset >= up_to:
                    break
                out[header.base_offset] = bytes(data)
        finally:
            os.close(fd)
    return out


def _next_offset(data: bytes) -> int:
    from storage.batch import parse_header

    return parse_header(data).next_offset


def replica_differences(replicas: Mapping[str, Path | str], up_to: int, *, start: int = 0) -> list[str]:
    """What differs between the replicas below ``up_to`` (empty when they are identical there).

    ``replicas`` maps a label (e.g. ``"broker 2"``) to a partition dir. Every replica must hold the
    batches covering [start, up_to) contiguously and byte-identical to the first replica's.
    """
    if not replicas:
        raise ValueError("no replicas to compare")
    problems: list[str] = []
    logs = {label: read_batches(pdir, up_to) for label, pdir in replicas.items()}
    for label, batches in logs.items():
        expected = start
        for base in sorted(b for b in batches if b >= start):
            if base != expected:
                problems.append(f"{label}: batch at {base}, expected one at {expected} (gap or overlap)")
                break
            expected = _next_offset(batches[base])
        else:
            if expected < up_to:
                problems.append(f"{label}: batches end at {expected}, below {up_to}")
    (ref_label, ref), *others = logs.items()
    for label, batches in others:
        for base in sorted(set(ref) | set(batches)):
            if base < start:
                continue
            a, b = ref.get(base), batches.get(base)
            if a is None or b is None:
                problems.append(f"batch at {base}: only on {label if a is None else ref_label}")
            elif a != b:
                first = next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if len(a) == len(b) else None
                problems.append(f"batch at {base}: {ref_label} and {label} differ "
                                f"(sizes {len(a)}/{len(b)}, first differing byte {first})")
    return problems


def assert_replicas_identical(replicas: Mapping[str, Path | str], up_to: int, *, start: int = 0) -> int:
    """Assert :func:`replica_differences` finds nothing; returns how many batches were compared."""
    problems = replica_differences(replicas, up_to, start=start)
    assert not problems, "replicas differ below offset {}:\n  {}".format(up_to, "\n  ".join(problems[:20]))
    return len(read_batches(next(iter(replicas.values())), up_to))
