"""Produce (key 0), versions 3-12.

Per partition: the v2 batch header is parsed and its CRC checked (storage.batch), then every
record's framing is walked, compressed batches decompressed with a size cap
(storage.record_validation, Kafka's LogValidator checks); offsets are assigned by patching the
header and the bytes are appended as they came. Undecodable records -> CORRUPT_MESSAGE (unknown
codec, payload that does not decompress or decompresses past the cap) or INVALID_RECORD (framing,
record count, offset deltas); a compacted topic refuses keyless records with INVALID_RECORD and
``record_errors`` (v8+: batch index and message per keyless record). Nothing of a failed batch
is stored. A topic with ``confluent.key/value.schema.validation`` refuses a batch holding a record
without a schema id registered for its subject with INVALID_RECORD and ``record_errors``
(broker/schema_registry_bridge.py, registry/validation.py).
Errors are per partition, as in Kafka: unknown topic/partition -> UNKNOWN_TOPIC_OR_PARTITION,
internal topics -> INVALID_TOPIC_EXCEPTION, CRC mismatch or broken structure -> CORRUPT_MESSAGE
(nothing stored), magic < 2 -> UNSUPPORTED_FOR_MESSAGE_FORMAT, more than one batch, control
batches or inconsistent record counts -> INVALID_RECORD, too large -> MESSAGE_TOO_LARGE,
idempotence violations -> the producer-state error codes; a duplicate of one of the last 5
batches of a producer answers with the original base offset. acks must be -1, 0 or 1
(INVALID_REQUIRED_ACKS). With acks=0 no response is sent and, like Kafka, a failed append closes
the connection so the client notices. On one node acks=all equals acks=1 (the ISR is the leader).
Cluster mode: a partition this broker does not lead (or any, while its etcd session is fenced)
answers NOT_LEADER_OR_FOLLOWER, from v10 with KIP-951's current_leader and node_endpoints; acks=all
while the ISR is smaller than min.insync.replicas answers NOT_ENOUGH_REPLICAS (nothing appended).
acks=all is answered once the high watermark covers the batch (the ISR has it, Kafka's
DelayedProduce): NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas
meanwhile, NOT_LEADER_OR_FOLLOWER when the leadership moved, REQUEST_TIMED_OUT after the
request's timeout_ms. The high watermark never advances while this broker's etcd session is
fenced, so a cut-off leader stops acknowledging before another can be elected. Once its appends are
done the handler calls ``ctx.release`` (cluster mode), so the connection's next Produce is appended
while this one waits (deviation from Kafka, see broker/connection.py); the answer stays in order.

Durability: when an append reaches flush.messages, the partition's log is flushed (fsync in an
executor, see broker.log_flusher) and, with acks=1/-1, the response waits for that flush, so
with flush.messages=1 an acknowledged record is on disk. A failed flush answers
KAFKA_STORAGE_ERROR for that partition. With acks=0 the flush is only scheduled.

The request is decoded by protocol.fast_codecs: each partition's records are a writable view
into the request frame, validated and appended without being copied. The answer is built from
protocol.produce_response's slotted objects and encoded by hand (no kafka-python struct per
partition: about 50 µs per answer before).

Transactions: a transactional batch must target a partition of the producer's ongoing
transaction: before anything is appended, the batches that open a transaction on their partition
are verified with the transaction coordinator (KIP-890 part 1), or, from v12 under transaction
version 2, added to the transaction by it (part 2): one question per request, answers translated
as Kafka's ReplicaManager does (broker/txn_verification.py, broker/append_path.py).

ACLs (as KafkaApis): a request with a transactional id needs WRITE on it, else every partition
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended; each topic needs WRITE, else
its partitions answer TOPIC_AUTHORIZATION_FAILED (checked before existence) and the others go on.
As Kafka, the transactional id is checked when a batch is transactional (one without a transactional
id is refused the same way).

Deviation: v13 (topic ids in Produce) is not served yet.
"""

from __future__ import annotations

import asyncio

from broker import dropped_batch, log_flusher
from broker.append_path import TxnRefusal
from broker.features import TV2_PRODUCE_VERSION, transaction_version
from broker.handlers import AclOperation, CloseConnection, RequestContext, ResourceType, api
from broker.partition import Partition
from cluster.metadata_store import INTERNAL_TOPICS
from protocol.errors import ErrorCode
from protocol.fast_codecs import decode_produce_request
from protocol.produce_response import ProducePartitionResult, ProduceResult, ProduceTopicResult


def _all_failed(request, v: int, code: ErrorCode) -> ProduceResult:
    if request.acks == 0:  # no response is due: close, as for any failed acks=0 produce
        raise CloseConnection(f"a Produce with acks=0 failed ({code.name}); closing so the producer notices")
    return ProduceResult([ProduceTopicResult(td.name, [ProducePartitionResult(pd.index, code)
                                                       for pd in td.partition_data])
                          for td in request.topic_data])


async def _wait_replicated(hw, waits: list[tuple[Partition, int, ProducePartitionResult]], timeout_s: float) -> None:
    """acks=all in a cluster: every appended batch waits for the high watermark, all at once,
    bounded by the request's timeout."""
    if len(waits) == 1:  # the common case: no gather, whose task per wait costs more than the wait
        codes = [await hw.wait_replicated(waits[0][0], waits[0][1], timeout_s)]
    else:
        codes = await asyncio.gather(*(hw.wait_replicated(part, offset, timeout_s) for part, offset, _ in waits))
    for (part, _, resp), code in zip(waits, codes, strict=True):
        if code != ErrorCode.NONE and resp.error_code == ErrorCode.NONE:
            resp.error_code = code
            resp.error_message = {
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "The size of the current ISR is insufficient to satisfy "
                                                            "the min.isr requirement after the append",
                ErrorCode.REQUEST_TIMED_OUT: f"Replication of {part.topic}-{part.index} did not complete in time",
            }.get(code, f"{part.topic}-{part.index}: leadership moved before the write was replicated")


def _has_transactional_records(request) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of some partition is a v2 batch with
    the transactional attribute (magic at byte 16, attributes int16 at 21, bit 0x10)."""
    for td in request.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if r is not None and len(r) >= 23 and r[16] == 2 and r[22] & 0x10:
                return True
    return False


async def _verify_transactions(ctx: RequestContext, request, denied: set[str]) -> dict[Partition, object]:
    """KIP-890 for the request's transactional batches (broker.append_path): per partition, the
    verification guard or the refusal. Denied topics and partitions led elsewhere are left out
    (answered by the normal path)."""
    rm = ctx.partitions
    batches = []
    for td in request.topic_data:
        if td.name in denied:
            continue
        for pd in td.partition_data:
            part, _ = rm.get_leader(td.name, pd.index)
            if part is not None and pd.records is not None:
                batches.append((part, pd.records))
    add = transaction_version(ctx.metadata, ctx.api_version, TV2_PRODUCE_VERSION) >= 2
    return await rm.appends.verify_transactions(request.transactional_id, ctx.api_version, add, batches)


@api(0, 3, 12, decoder=decode_produce_request)
async def handle_produce(ctx: RequestContext, request) -> ProduceResult | None:
    v = ctx.api_version
    rm = ctx.partitions
    hw = rm.hw
    acks = request.acks
    responses = []
    due: dict[Partition, list] = {}  # partitions whose append reached flush.messages -> their responses
    replicated: list[tuple[Partition, int, ProducePartitionResult]] = []  # acks=all in a cluster: (partition, offset to reach, response)
    if _has_transactional_records(request) and not (
            request.transactional_id
            and ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)):
        return _all_failed(request, v, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    validated = ctx.services.schemas.validated  # topics with schema validation (usually empty)
    names = {td.name for td in request.topic_data}
    denied = names - ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, names)
    failed = False
    new_leaders: set[int] = set()  # KIP-951 (v10+): leaders named in NOT_LEADER_OR_FOLLOWER answers
    # KIP-890: transactional batches opening a transaction are verified (TV2: added) first.
    verdicts = await _verify_transactions(ctx, request, denied) if request.transactional_id else {}
    for td in request.topic_data:
        name = td.name
        parts = []
        for pd in td.partition_data:
            flush_part = None
            pending_offset = -1
            record_errors: list[tuple[int, str | None]] = []
            if acks not in (-1, 0, 1):
                outcome_code, base, lat, lso, msg = ErrorCode.INVALID_REQUIRED_ACKS, -1, -1, -1, None
            elif name in denied:
                outcome_code, base, lat, lso, msg = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1, None
            elif name in INTERNAL_TOPICS:
                outcome_code, base, lat, lso, msg = (ErrorCode.INVALID_TOPIC_EXCEPTION, -1, -1, -1,
                                                     f"Cannot append to internal topic {name}")
            else:
                part, missing = rm.get_leader(name, pd.index)
                if part is None:
                    outcome_code, base, lat, lso, msg = (missing, -1, -1, -1,
                                                         "This server does not host this topic-partition."
                                                         if missing == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else
                                                         "This server is not the leader for that topic-partition.")
                elif pd.records is None:
                    outcome_code, base, lat, lso, msg = ErrorCode.INVALID_RECORD, -1, -1, -1, "null records"
                elif acks == -1 and (short := hw.min_isr_error(part)):
                    outcome_code, base, lat, lso, msg = (short, -1, -1, -1, "The size of the current ISR is "
                                                         "insufficient to satisfy the min.isr requirement")
                elif isinstance(verdict := verdicts.get(part), TxnRefusal):
                    outcome_code, base, lat, lso, msg = verdict.error, -1, -1, -1, verdict.message
                elif validated and name in validated and (refused := await ctx.services.schemas.check_batch(
                        name, validated[name], pd.records)) is not None:
                    # confluent.*.schema.validation: nothing of a batch with a bad record is stored.
                    outcome_code, base, lat, lso, msg = ErrorCode.INVALID_RECORD, -1, -1, -1, refused[0]
                    if v >= 8:
                        record_errors = list(refused[1])
                else:
                    o = await rm.appends.append_client(part, pd.records, verification_guard=verdict)
                    outcome_code, base, lat, lso, msg = o.error, o.base_offset, o.log_append_time, o.log_start_offset, o.message
                    if dropped_batch.ACTIVE and o.error == ErrorCode.NONE:  # test-only fault
                        dropped_batch.on_appended(name, pd.index, o.base_offset, o.last_offset)
                    if o.record_errors and v >= 8:  # the field exists from v8
                        record_errors = list(o.record_errors)
                    if o.flush_due:
                        flush_part = part
                    if acks == -1 and part.replicated and o.error == ErrorCode.NONE:
                        pending_offset = o.last_offset + 1
            if outcome_code != ErrorCode.NONE:
                failed = True
            resp = ProducePartitionResult(pd.index, outcome_code, base, lat, lso, record_errors,
                                          msg if outcome_code else None)
            if outcome_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and v >= 10:
                # KIP-951: where the leader is now, so the client need not refresh its metadata.
                md = ctx.metadata
                leader = md.leader(name, pd.index)
                resp.current_leader = (leader, md.leader_epoch(name, pd.index))
                new_leaders.add(leader)
            parts.append(resp)
            if pending_offset >= 0:
                replicated.append((part, pending_offset, resp))
            if flush_part is not None:
                due.setdefault(flush_part, []).append(resp)
        responses.append(ProduceTopicResult(name, parts))
    if acks == 0:
        for part in due:
            log_flusher.schedule_flush(part)
        if failed:
                raise CloseConnection("a Produce with acks=0 failed; closing so the producer notices")
        return None
    if ctx.release is not None and (due or replicated):
        ctx.release()  # the appends are done: the connection's next Produce may be appended meanwhile
    if due:
        # Acknowledge only what is fsynced: one flush per partition, all of them in flight at once.
        settled = await asyncio.gather(*(log_flusher.flush(part) for part in due), return_exceptions=True)
        for (part, resps), res in zip(due.items(), settled, strict=True):
            if isinstance(res, BaseException):
                for resp in resps:
                    resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    resp.base_offset = resp.log_append_time_ms = -1
                    resp.error_message = f"Flushing {part.topic}-{part.index} to disk failed: {res!r}"
    if replicated:
        await _wait_replicated(hw, replicated, request.timeout_ms / 1000)
    endpoints = []
    if new_leaders:
        endpoints = [(node, host, port, rack) for node, host, port, rack in ctx.broker_addresses()
                     if node in new_leaders]
    return ProduceResult(responses, 0, endpoints)
