"""`kbroker dump-log`: print segment, index and snapshot files the way kafka-dump-log.sh does.

A debugging tool, so it never trusts its input: batches are parsed without validation,
each one reports its own CRC verdict, and a torn or corrupt tail is reported (with its
position) instead of raising. Records of the internal topics (__consumer_offsets,
__transaction_state) are decoded into Kafka's JSON shape ({"type":..,"data":..} keys,
{"version":..,"data":..} values, ``<DELETE>`` for tombstones).

``--deep-verify`` checks instead of printing: every batch of every segment (files or directories,
searched recursively for ``.log`` files) must pass the CRC and the record validation that
Produce applies (storage.record_validation). Each undecodable batch is printed with its file,
position and offsets, and the exit status is 2 when any is found (docs/repair-poisoned-logs.md
gives the repair: DeleteRecords past them).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from typing import IO, Any

from storage import batch as rb
from storage.internal_records import (
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TRANSACTION_TOPIC,
    decode_coordinator_record,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"


_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_TXN_INDEX_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
_OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


def base_offset_from_name(path: str) -> int:
    """Segment files are named by their 20-digit base offset."""
    return int(os.path.basename(path).split(".")[0])


def _topic_of(path: str) -> str | None:
    """Topic name from the partition directory ``<topic>-<partition>`` holding ``path``."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    topic, sep, part = parent.rpartition("-")
    return topic if sep and part.isdigit() else None


# --- .log ------------------------------------------------------------------------------------------


def _show(data: bytes | None) -> str:
    """Kafka's StringDecoder: the bytes as UTF-8 (undecodable bytes replaced)."""
    return "null" if data is None else data.decode("utf-8", errors="replace")


def dump_log(
    path: str,
    print_data: bool = False,
    out: IO[str] = sys.stdout,
    *,
    deep_iteration: bool = False,
    decoder: str | None = None,
) -> None:
    """Print every batch of a segment file (and with ``print_data`` every record)."""
    out.write(f"Log starting offset: {base_offset_from_name(path)}\n")
    topic = decoder if decoder is not None else _topic_of(path)
    coordinator_topic = topic if topic in (OFFSETS_TOPIC, TRANSACTION_TOPIC, SHARE_STATE_TOPIC) else None
    deep = deep_iteration or print_data
    # pread in chunks (segment.scan_batches), not mmap: the file may be a live segment that a
    # broker truncates while we read, which must end the dump, not SIGBUS it.
    from storage.segment import scan_batches

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = 0
        last_offset = -1
        gaps: list[tuple[int, int]] = []
        for header, data in scan_batches(fd, 0, size):
            try:
                rb.validate(data, _at_zero(header))
                valid = True
            except rb.InvalidBatchError:
                valid = False
            _print_batch(header, valid, out)
            if deep:
                last_offset = _dump_records(
                    bytes(data), header, last_offset, gaps, print_data, coordinator_topic, out
                )
            end = header.position + header.size
    finally:
        os.close(fd)
    if end < size:
        out.write(
            f"Found {size - end} invalid bytes at the end of {os.path.basename(path)} (position {end})\n"
        )
    if gaps:
        out.write(f"Non-consecutive offsets in {path}\n")
        for prev, nxt in gaps:
            out.write(f"  {prev} is followed by {nxt}\n")


def _at_zero(h: rb.BatchHeader) -> rb.BatchHeader:
    """A copy of the header positioned at 0, for validating the batch's own bytes."""
    return rb.BatchHeader(
        h.base_offset,
        h.batch_length,
        h.partition_leader_epoch,
        h.magic,
        h.crc,
        h.attributes,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.records_count,
        0,
    )


def _print_batch(h: rb.BatchHeader, valid: bool, out: IO[str]) -> None:
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon else "OptionalLong.empty"
    ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
    codec = _CODEC_NAMES.get(h.compression, f"unknown({h.compression})")
    out.write(
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count}"
        f" baseSequence: {h.base_sequence} lastSequence: {h.last_sequence}"
        f" producerId: {h.producer_id} producerEpoch: {h.producer_epoch}"
        f" partitionLeaderEpoch: {h.partition_leader_epoch}"
        f" isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()}"
        f" deleteHorizonMs: {horizon} position: {h.position} {ts_type}: {h.max_timestamp}"
        f" size: {h.size} magic: {h.magic} compresscodec: {codec} crc: {h.crc}"
        f" isvalid: {str(valid).lower()}\n"
    )


def _dump_records(
    data: bytes,
    h: rb.BatchHeader,
    last_offset: int,
    gaps: list[tuple[int, int]],
    print_data: bool,
    coordinator_topic: str | None,
    out: IO[str],
) -> int:
    try:
        records = rb.decode_records(data)
    except Exception as e:  # noqa: BLE001 - any decoder failure is reported, never fatal
        out.write(f"| error decoding records of batch at position {h.position}: {type(e).__name__}: {e}\n")
        return last_offset
    ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
    for rec in records:
        if last_offset != -1 and rec.offset != last_offset + 1:
            gaps.append((last_offset, rec.offset))
        last_offset = rec.offset
        seq = (
            -1
            if h.base_sequence == rb.NO_SEQUENCE
            else rb.increment_sequence(h.base_sequence, rec.offset - h.base_offset)
        )
        key_size = -1 if rec.key is None else len(rec.key)
        value_size = -1 if rec.value is None else len(rec.value)
        header_keys = ",".join(k for k, _ in rec.headers)
        line = (
            f"| offset: {rec.offset} {ts_type}: {rec.timestamp} keySize: {key_size} valueSize: {value_size}"
            f" sequence: {seq} headerKeys: [{header_keys}]"
        )
        if h.is_control:
            line += _control_text(rec)
        elif print_data:
            if coordinator_topic is not None:
                key_text, payload = decode_coordinator_record(
                    coordinator_topic, rec.offset, rec.key, rec.value
                )
                line += f" key: {key_text}"
                if payload is not None:
                    line += f" payload: {payload}"
            else:
                if rec.key is not None:
                    line += f" key: {_show(rec.key)}"
                if rec.value is not None:
                    line += f" payload: {_show(rec.value)}"
        out.write(line + "\n")
    return last_offset


def _control_text(rec: rb.Record) -> str:
    try:
        _, ctype = rb.parse_control_key(rec.key or b"")
    except struct.error:
        return " controlType: <invalid key>"
    if ctype in (rb.CONTROL_TYPE_ABORT, rb.CONTROL_TYPE_COMMIT):
        name = "COMMIT" if ctype == rb.CONTROL_TYPE_COMMIT else "ABORT"
        try:
            _, coordinator_epoch = struct.unpack_from(">hi", rec.value or b"")
        except struct.error:
            return f" endTxnMarker: {name} coordinatorEpoch: <invalid value>"
        return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: UNKNOWN({ctype})"


# --- indexes ---------------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _sibling(path: str, suffix: str) -> str:
    return os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + suffix)


def dump_offset_index(path: str, out: IO[str] = sys.stdout) -> None:
    """Entries as absolute offsets; each checked against the batch at its position in the .log."""
    base = base_offset_from_name(path)
    data = _read(path)
    count = len(data) // _OFFSET_INDEX_ENTRY.size
    if count == 0:
        out.write(f"{path} is empty.\n")
        return
    log_path = _sibling(path, LOG_SUFFIX)
    log_fd = os.open(log_path, os.O_RDONLY) if os.path.exists(log_path) else None
    mismatches: list[tuple[int, int]] = []
    try:
        for i in range(count):
            rel, position = _OFFSET_INDEX_ENTRY.unpack_from(data, i * _OFFSET_INDEX_ENTRY.size)
            if i > 0 and rel == 0:
                break  # preallocated zero tail of a sparse index
            offset = base + rel
            if log_fd is not None:
                # the entry names a batch's last offset (Kafka) and the file position of that batch
                try:
                    h = rb.parse_header(os.pread(log_fd, rb.HEADER_SIZE, position))
                    if not h.base_offset <= offset <= h.last_offset:
                        mismatches.append((offset, h.last_offset))
                except rb.InvalidBatchError:
                    mismatches.append((offset, -1))
            out.write(f"offset: {offset} position: {position}\n")
    finally:
        if log_fd is not None:
            os.close(log_fd)
    for idx_off, log_off in mismatches:
        out.write(f"Mismatch in {path}: index offset: {idx_off}, log offset: {log_off}\n")


def dump_time_index(path: str, out: IO[str] = sys.stdout) -> None:
    base = base_offset_from_name(path)
    data = _read(path)
    prev_ts = -1
    for i in range(len(data) // _TIME_INDEX_ENTRY.size):
        ts, rel = _TIME_INDEX_ENTRY.unpack_from(data, i * _TIME_INDEX_ENTRY.size)
        if i > 0 and rel == 0 and ts == 0:
            break
        out.write(f"timestamp: {ts} offset: {base + rel}\n")
        if ts <= prev_ts:
            out.write(f"Found out of order timestamp in {path}: index timestamp: {ts}, previous: {prev_ts}\n")
        prev_ts = ts


def dump_txn_index(path: str, out: IO[str] = sys.stdout) -> None:
    data = _read(path)
    size = _TXN_INDEX_ENTRY.size
    for i in range(len(data) // size):
        version, pid, first, last, lso = _TXN_INDEX_ENTRY.unpack_from(data, i * size)
        out.write(
            f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}\n"
        )
    if len(data) % size:
        out.write(f"Found {len(data) % size} trailing bytes at the end of {os.path.basename(path)}\n")


def _attr(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def dump_snapshot(path: str, out: IO[str] = sys.stdout) -> None:
    """Producer-state snapshot entries, via storage.producer_state's reader."""
    from storage.producer_state import read_snapshot_file  # lazy: only the snapshot path needs it

    try:
        entries = read_snapshot_file(path)
    except Exception as e:  # noqa: BLE001 - corrupt snapshots are reported, not fatal
        out.write(f"Corrupt snapshot {path}: {e}\n")
        return
    for e in entries:
        line = (
            f"producerId: {_attr(e, 'producer_id')} producerEpoch: {_attr(e, 'producer_epoch')}"
            f" coordinatorEpoch: {_attr(e, 'coordinator_epoch')}"
            f" currentTxnFirstOffset: {_fmt_optional(_attr(e, 'current_txn_first_offset'))}"
            f" lastTimestamp: {_attr(e, 'last_timestamp')}"
        )
        batches = _attr(e, "batch_metadata", "batches", default=None) or []
        if batches:
            b = list(batches)[-1]  # Kafka prints the newest entry (the only one a snapshot keeps)
            first_seq = _attr(b, "first_seq", "first_sequence")
            last_seq = _attr(b, "last_seq", "last_sequence")
            last_off = _attr(b, "last_offset")
            delta = _attr(b, "offset_delta", default=None)
            if delta is None and isinstance(first_seq, int) and isinstance(last_seq, int):
                delta = last_seq - first_seq
            line += (
                f" firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_off}"
                f" offsetDelta: {delta} timestamp: {_attr(b, 'timestamp')}"
            )
        out.write(line + "\n")


def _fmt_optional(v: Any) -> str:
    if v is None or v == -1:
        return "Optional.empty"
    return f"Optional[{v}]"


# --- deep verification ---------------------------------------------------------------------------


def verify_log(path: str, out: IO[str] = sys.stdout) -> list[tuple[rb.BatchHeader, str]]:
    """Every batch of one segment that a consumer could not decode: (header, reason)."""
    from storage import record_validation as rv
    from storage.segment import scan_batches

    bad: list[tuple[rb.BatchHeader, str]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for header, data in scan_batches(fd, 0, size):
            at_zero = _at_zero(header)
            try:
                rb.validate(data, at_zero)
                rv.validate_records(data, at_zero, max_decompressed=rv.MIN_DECOMPRESSED_CAP)
            except (rb.InvalidBatchError, rv.InvalidRecordError) as e:
                bad.append((header, str(e)))
                out.write(f"BAD {path} position: {header.position} baseOffset: {header.base_offset} "
                          f"lastOffset: {header.last_offset} count: {header.records_count} "
                          f"compresscodec: {_CODEC_NAMES.get(header.compression, f'unknown({header.compression})')}"
                          f" reason: {e}\n")
    finally:
        os.close(fd)
    return bad


def _log_files(paths: list[str]) -> list[str]:
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, names in os.walk(path):
                found.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(LOG_SUFFIX))
        else:
            found.append(path)
    return sorted(found)


def deep_verify(paths: list[str], out: IO[str] = sys.stdout) -> int:
    """Exit status of ``--deep-verify``: 0 all decodable, 2 undecodable batches found, 1 unreadable input."""
    status = 0
    total_bad = 0
    checked = 0
    for path in _log_files(paths):
        if not path.endswith(LOG_SUFFIX):
            out.write(f"Ignoring {path}: --deep-verify reads .log segments\n")
            continue
        try:
            bad = verify_log(path, out)
        except OSError as e:
            out.write(f"Cannot read {path}: {e}\n")
            status = 1
            continue
        checked += 1
        total_bad += len(bad)
        if bad:
            part = os.path.basename(os.path.dirname(os.path.abspath(path)))
            out.write(f"{part}: delete records before offset {bad[-1][0].last_offset + 1} to drop the undecodable "
                      f"batches of this segment (see docs/repair-poisoned-logs.md)\n")
    out.write(f"Checked {checked} segment(s): {total_bad} undecodable batch(es)\n")
    return 2 if total_bad else status


# --- entry points ----------------------------------------------------------------------------------


def dump_file(
    path: str,
    print_data: bool = False,
    out: IO[str] = sys.stdout,
    *,
    deep_iteration: bool = False,
    decoder: str | None = None,
) -> bool:
    """Dump one file by its suffix; False for an unknown kind or an unreadable file (one line on
    stderr, never a traceback)."""
    if not os.path.isfile(path):
        print(f"kbroker dump-log: {path}: no such file", file=sys.stderr)
        return False
    out.write(f"Dumping {path}\n")
    suffix = os.path.splitext(path)[1]
    try:
        if suffix == LOG_SUFFIX:
            dump_log(path, print_data, out, deep_iteration=deep_iteration, decoder=decoder)
        elif suffix == INDEX_SUFFIX:
            dump_offset_index(path, out)
        elif suffix == TIME_INDEX_SUFFIX:
            dump_time_index(path, out)
        elif suffix == TXN_INDEX_SUFFIX:
            dump_txn_index(path, out)
        elif suffix == SNAPSHOT_SUFFIX:
            dump_snapshot(path, out)
        else:
            out.write(f"Ignoring unknown file {path}\n")
            return False
    except OSError as e:
        out.write(f"Cannot read {path}: {e}\n")
        return False
    except ValueError as e:  # a file name that is not a base offset, an undecodable file
        print(f"kbroker dump-log: cannot dump {path}: {e}", file=sys.stderr)
        return False
    return True


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="kbroker dump-log",
        description="Print the contents of log segments, indexes and producer snapshots.",
    )
    p.add_argument(
        "files", nargs="*", help="segment (.log), .index, .timeindex, .txnindex or .snapshot files"
    )
    p.add_argument("--files", dest="files_opt", help="comma-separated files (kafka-dump-log.sh style)")
    p.add_argument(
        "--print-data", "--print-data-log", action="store_true", help="print record keys and values"
    )
    p.add_argument("--deep-iteration", action="store_true", help="print record metadata without the data")
    p.add_argument("--deep-verify", action="store_true",
                   help="check every batch decodes (CRC and records, as Produce validates them); files or "
                        "directories; exit status 2 when undecodable batches are found")
    p.add_argument("--offsets-decoder", action="store_true", help="decode records as __consumer_offsets")
    p.add_argument(
        "--transaction-log-decoder", action="store_true", help="decode records as __transaction_state"
    )
    args = p.parse_args(argv)
    files = list(args.files) + ([f for f in args.files_opt.split(",") if f] if args.files_opt else [])
    if not files:
        p.error("no files given")
    if args.deep_verify:
        return deep_verify(files, sys.stdout)
    decoder = (
        OFFSETS_TOPIC if args.offsets_decoder else TRANSACTION_TOPIC if args.transaction_log_decoder else None
    )
    print_data = args.print_data or decoder is not None
    ok = True
    for path in files:
        ok = (
            dump_file(path, print_data, sys.stdout, deep_iteration=args.deep_iteration, decoder=decoder)
            and ok
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
