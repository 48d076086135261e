"""Appends on a partition leader (Kafka's ReplicaManager.appendRecords and Partition.appendRecordsToLeader):
producers' batches, coordinator records and transaction markers, all through the partition's one
append path (storage.partition_log).

- ``verify_transactions``: before a Produce is appended, the transactional batches that open a
  transaction on their partition are verified (or, under transaction version 2, added) with the
  transaction coordinator in one question per request (broker.txn_verification); each gets the
  partition's verification guard, or the Produce error of the coordinator's answer.
- ``append_client``: validation (batch header, CRC, every record: Kafka's LogValidator checks),
  then the append with origin CLIENT. A compressed batch is validated on the loop while that stays
  cheap (lz4, zstd or snappy, at most INLINE_MAX_RECORDS records and INLINE_VALIDATION_BUDGET bytes
  decompressed); past that, or when its records are invalid, it is validated again from the start
  on an executor thread, so one hostile batch cannot stall the loop. Offsets, producer state and
  the append stay on the event loop.
- ``append_coordinator`` / ``write_marker``: coordinator records and COMMIT/ABORT markers, which
  only leaders write; in a cluster the caller waits for the high watermark (acks=all).
Every append wakes the fetches parked on the partition and lets the high watermark move (an ISR
of one commits at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from broker.metrics.stats import BrokerTopicStats
from broker.partition import Partition
from broker.replication.high_watermark import HighWatermarks
from broker.txn_verification import TxnVerifier, produce_error
from protocol.errors import ErrorCode, KafkaError
from storage import batch as B
from storage import record_validation as RV
from storage.partition_log import AppendOrigin
from storage.producer_state import ProducerStateError

# A compressed batch may hold ~1.3 M minimal records per MiB, and walking them takes about a second:
# from this size on, a compressed batch that turns out costly (storage.record_validation's
# ValidationTooHeavy: gzip, over INLINE_MAX_RECORDS records, over INLINE_VALIDATION_BUDGET bytes
# decompressed, or invalid records) is validated on an executor thread (the walk reads only the
# request's bytes), so one hostile batch cannot stall every other connection. Uncompressed batches
# walk at >1 GB/s and stay inline. Validating every large compressed batch on the executor cost
# 20-25 % more broker CPU per record than inline for lz4 and 15 % for zstd (the hand-over, and the
# loop and the worker taking the GIL in turns at every 64 KiB piece).
OFFLOAD_VALIDATION_BYTES = 64 * 1024
# Decompressed bytes a compressed batch may take to be validated on the loop: ~3-6 ms of lz4, zstd
# or snappy at worst; a producer's 1 MiB batches of ordinary records decompress to 1-3 MiB.
INLINE_VALIDATION_BUDGET = 8 << 20
# The low byte of the attributes (int16 at offset 21) holds the codec.
_CODEC_BYTE = B.ATTRIBUTES_OFFSET + 1
# How long followers may be left parked after a coordinator record nobody waits to see replicated
# (append_coordinator's ``unwaited``): long enough for the next transaction's record to join it in
# one fetch, short against the follower's own long poll (replica.fetch.wait.max.ms, 500 ms).
UNWAITED_REPLICATION_DELAY_S = 0.005
# A v2 batch (magic at byte 16) with the transactional attribute (bit 0x10 of byte 22).
_MIN_HEADER = 61


@dataclass(slots=True)
class AppendOutcome:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    flush_due: bool = False  # flush.messages reached: flush before acknowledging (broker.log_flusher)


@dataclass(slots=True)
class TxnRefusal:
    """A transactional batch the coordinator did not confirm: its Produce error."""

    error: ErrorCode
    message: str | None


class RecordErrors(KafkaError):
    """INVALID_RECORD with per-record errors (batch index, message) for ProduceResponse.record_errors."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)
        self.record_errors = record_errors


def validate_batches(buf: bytearray | memoryview, max_message_bytes: int, *,
                     compacted_tp: str | None = None, inline_budget: int | None = None) -> list[B.BatchHeader]:
    """Validation of a produce request's records for one partition (v3+ rules): the batch header
    and CRC, then every record (storage.record_validation, Kafka's LogValidator checks).
    ``compacted_tp``: "topic-partition" of a compacted topic, whose records need keys.
    ``inline_budget``: see RV.validate_records (RV.ValidationTooHeavy passes through)."""
    try:
        headers = list(B.iter_headers(buf, check=True))
    except B.UnsupportedMagicError as e:
        raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(e)) from None
    except B.InvalidBatchError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    if len(headers) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Produce requests of version 3 and above must contain exactly one record batch, got {len(headers)}")
    h = headers[0]
    if h.size > max_message_bytes:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"The record batch size {h.size} exceeds max.message.bytes {max_message_bytes}")
    if h.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records")
    if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Batch has {h.records_count} records but last offset delta {h.last_offset_delta}")
    try:
        RV.validate_records(buf, h, compacted_tp=compacted_tp,
                            max_decompressed=RV.decompressed_cap(max_message_bytes), inline_budget=inline_budget)
    except RV.InvalidRecordError as e:
        if e.record_errors:
            raise RecordErrors(str(e), e.record_errors) from None
        raise KafkaError(ErrorCode.INVALID_RECORD, str(e)) from None
    except B.InvalidBatchError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    return headers


def is_large_compressed(buf: bytearray | memoryview) -> bool:
    return len(buf) >= OFFLOAD_VALIDATION_BYTES and bool(buf[_CODEC_BYTE] & B.COMPRESSION_MASK)


def is_transactional_batch(buf: bytearray | memoryview | None) -> bool:
    return buf is not None and len(buf) >= _MIN_HEADER and buf[16] == 2 and bool(buf[22] & 0x10)


def _now_ms() -> int:
    return int(time.time() * 1000)


class LeaderAppends:
    """``current(topic, index)``: the partition object this broker serves now (None once deleted),
    to notice a partition deleted or recreated while an append waited."""

    def __init__(self, verifier: TxnVerifier, hw: HighWatermarks, stats: BrokerTopicStats,
                 current: Callable[[str, int], Partition | None]) -> None:
        self.verifier = verifier
        self.hw = hw
        self.stats = stats
        self._current = current

    # --- KIP-890 ----------------------------------------------------------------------------

    async def verify_transactions(self, transactional_id: str | None, produce_version: int, add: bool,
                                  batches: list[tuple[Partition, bytearray | memoryview]]
                                  ) -> dict[Partition, object | TxnRefusal]:
        """For each transactional batch of ``batches`` that opens a transaction on its partition:
        the verification guard to append it with, or its refusal. ``add``: transaction version 2
        (the coordinator adds the partitions). Batches that need no verification are left out."""
        wanted: dict[tuple[int, int], list[tuple[Partition, object]]] = {}
        out: dict[Partition, object | TxnRefusal] = {}
        for part, buf in batches:
            if not is_transactional_batch(buf):
                continue
            try:
                h = B.parse_header(buf)
            except Exception:  # noqa: BLE001 - a malformed batch is answered by validation
                continue
            if not h.has_producer_id or part.plog.has_ongoing_txn(h.producer_id, h.producer_epoch):
                continue
            if not transactional_id:
                out[part] = TxnRefusal(ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")
                continue
            guard = part.plog.start_verification(h.producer_id, h.producer_epoch)
            wanted.setdefault((h.producer_id, h.producer_epoch), []).append((part, guard))
        for (pid, epoch), entries in wanted.items():
            assert transactional_id is not None
            codes = await self.verifier.ask(transactional_id, pid, epoch, [(p.topic, p.index) for p, _ in entries],
                                            add=add)
            for part, guard in entries:
                code, message = produce_error(codes[(part.topic, part.index)], produce_version)
                if code != ErrorCode.NONE:
                    out[part] = TxnRefusal(code, message)
                elif part.replicated and (self._current(part.topic, part.index) is not part
                                          or part.leader_state is None):
                    out[part] = TxnRefusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                           "The leadership moved during the transaction check.")
                else:
                    out[part] = guard
        return out

    # --- producers' batches ---------------------------------------------------------------

    async def append_client(self, part: Partition, buf: bytearray | memoryview, *,
                            verification_guard: object | None = None) -> AppendOutcome:
        """Validate and append one producer batch; a retry of one of the producer's recent batches
        is answered with its original offsets and not written again."""
        lg = part.log
        compacted_tp = f"{part.topic}-{part.index}" if lg.config.compact_enabled else None
        try:
            if is_large_compressed(buf):
                try:
                    headers = validate_batches(buf, part.max_message_bytes, compacted_tp=compacted_tp,
                                               inline_budget=INLINE_VALIDATION_BUDGET)
                except RV.ValidationTooHeavy:
                    headers = await asyncio.get_running_loop().run_in_executor(
                        None, partial(validate_batches, buf, part.max_message_bytes, compacted_tp=compacted_tp))
                    if self._current(part.topic, part.index) is not part:  # deleted meanwhile
                        return AppendOutcome(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             message="This server does not host this topic-partition.")
            else:
                headers = validate_batches(buf, part.max_message_bytes, compacted_tp=compacted_tp)
            info = part.plog.append(buf, headers, AppendOrigin.CLIENT, leader_epoch=part.leader_epoch,
                                    now_ms=_now_ms(), verification_guard=verification_guard)
        except KafkaError as e:
            return AppendOutcome(error=e.code, message=e.message, log_start_offset=lg.log_start_offset,
                                 record_errors=getattr(e, "record_errors", []))
        except ProducerStateError as e:
            return AppendOutcome(error=ErrorCode(e.error_code), message=str(e), log_start_offset=lg.log_start_offset)
        if not info.duplicate:
            self._appended(part)
            self.stats.on_append(part.topic, len(buf), headers[0].records_count)
        return AppendOutcome(base_offset=info.first_offset, last_offset=info.last_offset,
                             log_append_time=info.log_append_time, log_start_offset=lg.log_start_offset,
                             flush_due=info.flush_due)

    # --- coordinators ---------------------------------------------------------------------

    def append_coordinator(self, part: Partition, batch: bytearray, *, unwaited: bool = False) -> int:
        """Append coordinator-built batches (group and transaction state, transactional offset
        commits, whose producer state keeps the LSO of ``__consumer_offsets`` right); the first
        offset. Callers await flush_due() before answering, so flush.messages holds for them too.
        ``unwaited``: nobody waits for this record's replication; followers fetch it within
        UNWAITED_REPLICATION_DELAY_S or with the partition's next append (Partition.wake_waiters_later)."""
        headers = list(B.iter_headers(batch, check=True))
        info = part.plog.append(batch, headers, AppendOrigin.COORDINATOR, leader_epoch=part.leader_epoch,
                                now_ms=_now_ms())
        if unwaited and part.leader_state is not None and part.sessions:
            part.wake_waiters_later(UNWAITED_REPLICATION_DELAY_S)
            self.hw.maybe_advance(part)
        else:
            self._appended(part)
        return info.first_offset

    def write_marker(self, part: Partition, batch: bytearray, *, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int, transaction_version: int) -> ErrorCode:
        """Append a COMMIT/ABORT marker for the transaction coordinator (Kafka's marker checks:
        INVALID_PRODUCER_EPOCH for a stale producer epoch, TRANSACTION_COORDINATOR_FENCED for an
        older coordinator epoch); the producer's transaction ends and an ABORT goes to the
        ``.txnindex``."""
        header = B.parse_header(batch)
        try:
            part.plog.append_marker(batch, header, producer_id=producer_id, producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
                                    leader_epoch=part.leader_epoch, now_ms=_now_ms())
        except ProducerStateError as e:
            return ErrorCode(e.error_code)
        self._appended(part)
        return ErrorCode.NONE

    def _appended(self, part: Partition) -> None:
        part.wake_waiters()
        if part.leader_state is not None:
            self.hw.maybe_advance(part)  # an ISR of one commits at once
