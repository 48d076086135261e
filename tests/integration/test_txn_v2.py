"""Transaction version 2 (KIP-890 part 2; issue 19 item 1, acceptance 1) over the raw protocol.

A real broker (a new data dir finalizes ``transaction.version`` at 2) driven with kafka-python
wire structs: EndTxn v5 bumps the epoch each time and answers the id/epoch to continue with;
Produce v12 and TxnOffsetCommit v5 add their partitions implicitly; a produce or EndTxn of the
previous transaction is fenced (KAFKA-17754); epoch exhaustion hands out a new producer id
(``KBROKERTEST_TXN_FIRST_EPOCH`` starts a transactional id near Short.MAX_VALUE) and the TV2
fields survive a restart; UpdateFeatures / ``kbroker features`` downgrade to 1 restores TV1
semantics. Expected codes are Kafka's (TransactionCoordinator.endTransaction for TV2,
ReplicaManager's verification error translation, KafkaApis' EndTxn response).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from kafka.protocol.admin import UpdateFeaturesRequest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import EndTxnRequest, TxnOffsetCommitRequest

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from tests.integration.test_txn_protocol import (
    REPO_ROOT,
    _addr,
    create_topic,
    describe,
    end_txn,
    fetch,
    init_ok,
    produce,
    wait_complete,
)

MAX_EPOCH = 32767


async def end_v5(c: ProtocolClient, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    resp = await c.request(EndTxnRequest(version=5, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                         committed=commit), 5)
    return resp.error_code, resp.producer_id, resp.producer_epoch


async def produce_v12(c, topic, values, pid, epoch, seq, tid, partition=0) -> int:
    return (await produce(c, topic, partition, values, pid=pid, epoch=epoch, seq=seq, tid=tid, version=12))[0]


async def features(c: ProtocolClient) -> tuple[dict, dict, int]:
    r = await c.request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3)
    return ({f.name: (f.min_version, f.max_version) for f in r.supported_features},
            {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features},
            r.finalized_features_epoch)


async def committed_values(c, topic) -> list[bytes]:
    """Values of committed transactions, in marker order (every transaction here has ended or is
    still open; an open one is left out)."""
    from storage.batch import CONTROL_TYPE_COMMIT, parse_control_key
    from tests.integration.test_txn_protocol import batches_of

    p = await fetch(c, topic, committed=False)
    pending: dict[int, list[bytes]] = {}
    out: list[bytes] = []
    for h, recs in batches_of(p.records):
        if h.is_control:
            done = pending.pop(h.producer_id, [])
            if parse_control_key(recs[0].key)[1] == CONTROL_TYPE_COMMIT:
                out.extend(done)
        else:
            pending.setdefault(h.producer_id, []).extend(r.value for r in recs)
    return out


async def test_api_versions_advertises_transaction_version(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        supported, finalized, epoch = await features(c)
        assert supported == {"transaction.version": (0, 2), "share.version": (0, 1)}
        assert finalized == {"transaction.version": (2, 2), "share.version": (1, 1)} and epoch >= 1


async def test_each_end_txn_bumps_the_epoch_and_old_epoch_is_fenced(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v2a", 2)
        pid, epoch = await init_ok(c, "t-v2a")
        # Produce v12 without AddPartitionsToTxn: the leader adds the partition itself
        assert await produce_v12(c, "v2a", [b"a1"], pid, epoch, 0, "t-v2a") == 0
        assert (await describe(c, "t-v2a"))["partitions"] == {("v2a", 0)}
        assert await end_v5(c, "t-v2a", pid, epoch, True) == (0, pid, epoch + 1)
        assert (await wait_complete(c, "t-v2a"))["epoch"] == epoch + 1
        # a produce of the previous transaction (old epoch): fenced, on a partition with the
        # marker (producer state) and on one the leader must ask the coordinator about
        for part in (0, 1):
            code, _ = await produce(c, "v2a", part, [b"late"], pid=pid, epoch=epoch, seq=1, tid="t-v2a", version=12)
            assert code == E.INVALID_PRODUCER_EPOCH, (part, E(code).name)
        # transaction 2 under the new epoch, aborted: one more bump
        assert await produce_v12(c, "v2a", [b"a2"], pid, epoch + 1, 0, "t-v2a") == 0
        assert await end_v5(c, "t-v2a", pid, epoch + 1, False) == (0, pid, epoch + 2)
        await wait_complete(c, "t-v2a")
        assert await committed_values(c, "v2a") == [b"a1"]


async def test_delayed_end_txn_cannot_end_the_next_transaction(broker):
    """KAFKA-17754: the commit of transaction 1 is answered, the producer starts transaction 2, then
    a delayed duplicate EndTxn of transaction 1 arrives. Under TV1 it would have ended
    transaction 2 (same epoch); under TV2 its epoch is stale and it is PRODUCER_FENCED."""
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v2k")
        pid, epoch = await init_ok(c, "t-v2k")
        assert await produce_v12(c, "v2k", [b"t1"], pid, epoch, 0, "t-v2k") == 0
        assert await end_v5(c, "t-v2k", pid, epoch, True) == (0, pid, epoch + 1)
        await wait_complete(c, "t-v2k")
        assert await produce_v12(c, "v2k", [b"t2"], pid, epoch + 1, 0, "t-v2k") == 0
        for commit in (True, False):
            assert await end_v5(c, "t-v2k", pid, epoch, commit) == (E.PRODUCER_FENCED, -1, -1)
            # EndTxn v1 (before KIP-588) gets INVALID_PRODUCER_EPOCH for the same refusal
            assert await end_txn(c, "t-v2k", pid, epoch, commit, version=1) == E.INVALID_PRODUCER_EPOCH
        d = await describe(c, "t-v2k")
        assert (d["state"], d["epoch"]) == ("Ongoing", epoch + 1)
        assert await committed_values(c, "v2k") == [b"t1"]  # transaction 2 is still open
        assert await end_v5(c, "t-v2k", pid, epoch + 1, True) == (0, pid, epoch + 2)
        await wait_complete(c, "t-v2k")
        assert await committed_values(c, "v2k") == [b"t1", b"t2"]


async def test_txn_offset_commit_v5_adds_the_offsets_partition(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v2o")
        pid, epoch = await init_ok(c, "t-v2o")
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        req = TxnOffsetCommitRequest(version=5, transactional_id="t-v2o", group_id="g-v2o", producer_id=pid,
                                     producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
                                     topics=[T(version=5, name="v2o", partitions=[T.TxnOffsetCommitRequestPartition(
                                         version=5, partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                                         committed_metadata="")])])
        for _ in range(100):  # the first call creates __consumer_offsets
            resp = await c.request(req, 5)
            code = resp.topics[0].partitions[0].error_code
            if code not in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS):
                break
            await asyncio.sleep(0.05)
        assert code == 0, E(code).name
        assert any(t == "__consumer_offsets" for t, _ in (await describe(c, "t-v2o"))["partitions"])
        assert await end_v5(c, "t-v2o", pid, epoch, True) == (0, pid, epoch + 1)
        await wait_complete(c, "t-v2o")
        T2 = OffsetFetchRequest.OffsetFetchRequestTopic
        r = await c.request(OffsetFetchRequest(version=7, group_id="g-v2o", require_stable=True, topics=[
            T2(version=7, name="v2o", partition_indexes=[0])]), 7)
        assert r.topics[0].partitions[0].committed_offset == 42
        # the previous epoch is fenced (PRODUCER_FENCED from TxnOffsetCommit v3+)
        resp = await c.request(req, 5)
        assert resp.topics[0].partitions[0].error_code == E.PRODUCER_FENCED


async def test_epoch_overflow_hands_out_a_new_producer_id_and_survives_restart(broker_factory, tmp_path):
    broker = broker_factory(start=False, data_dir=tmp_path / "ovf")
    broker.env["KBROKERTEST_TXN_FIRST_EPOCH"] = str(MAX_EPOCH - 2)
    broker.start()
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v2x")
        pid, epoch = await init_ok(c, "t-v2x")
        assert epoch == MAX_EPOCH - 2
        assert await produce_v12(c, "v2x", [b"x1"], pid, epoch, 0, "t-v2x") == 0
        assert await end_v5(c, "t-v2x", pid, epoch, True) == (0, pid, MAX_EPOCH - 1)
        await wait_complete(c, "t-v2x")
        assert await produce_v12(c, "v2x", [b"x2"], pid, MAX_EPOCH - 1, 0, "t-v2x") == 0
        err, new_pid, new_epoch = await end_v5(c, "t-v2x", pid, MAX_EPOCH - 1, True)
        assert (err, new_epoch) == (0, 0) and new_pid != pid
        d = await wait_complete(c, "t-v2x")
        assert (d["pid"], d["epoch"]) == (new_pid, 0)
        assert await produce_v12(c, "v2x", [b"x3"], new_pid, 0, 0, "t-v2x") == 0
        assert await end_v5(c, "t-v2x", new_pid, 0, True) == (0, new_pid, 1)
        await wait_complete(c, "t-v2x")
        assert await committed_values(c, "v2x") == [b"x1", b"x2", b"x3"]
    broker.restart()
    async with ProtocolClient(*_addr(broker)) as c:
        d = await describe(c, "t-v2x")
        assert (d["state"], d["pid"], d["epoch"]) == ("CompleteCommit", new_pid, 1)
        assert await end_v5(c, "t-v2x", new_pid, 0, True) == (0, new_pid, 1)  # retry after reload
        assert await committed_values(c, "v2x") == [b"x1", b"x2", b"x3"]


async def test_tv2_fields_survive_restart(broker_factory, tmp_path):
    broker = broker_factory(start=False, data_dir=tmp_path / "rot")
    broker.env["KBROKERTEST_TXN_FIRST_EPOCH"] = str(MAX_EPOCH - 1)
    broker.start()
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v2r")
        pid, epoch = await init_ok(c, "t-v2r")
        assert await produce_v12(c, "v2r", [b"r"], pid, epoch, 0, "t-v2r") == 0
        err, new_pid, new_epoch = await end_v5(c, "t-v2r", pid, epoch, False)
        assert (err, new_epoch) == (0, 0) and new_pid != pid
        await wait_complete(c, "t-v2r")
    broker.restart()
    async with ProtocolClient(*_addr(broker)) as c:
        # previousProducerId was reloaded: a retry of the EndTxn that rotated the id is recognised
        assert await end_v5(c, "t-v2r", pid, MAX_EPOCH - 1, False) == (0, new_pid, 0)
        assert await end_v5(c, "t-v2r", pid, MAX_EPOCH - 1, True) == (E.INVALID_TXN_STATE, -1, -1)
    broker.stop()
    from coordinator.txn_records import decode_key, decode_value
    from storage.batch import decode_records, iter_headers

    seen = []
    for seg in (tmp_path / "rot").rglob("__transaction_state-*/*.log"):
        buf = seg.read_bytes()
        for h in iter_headers(buf, check=False):
            for r in decode_records(buf[h.position: h.position + h.size]):
                if r.key and decode_key(r.key) == "t-v2r" and r.value:
                    seen.append((bytes(r.value[:2]), decode_value(r.value)))
    last_version, last = seen[-1]
    assert last_version == b"\x00\x01"  # TransactionLogValue v1: the tagged fields Kafka's tools decode
    assert (last.producer_id, last.prev_producer_id, last.client_txn_version) == (new_pid, pid, 2)


async def test_downgrade_to_tv1_restores_tv1_semantics(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v2d")
        K = UpdateFeaturesRequest.FeatureUpdateKey
        # upgrade type 1 (upgrade) cannot lower a level; unknown features and levels are refused
        for name, level, kind in (("transaction.version", 1, 1), ("no.such.feature", 1, 1),
                                  ("transaction.version", 3, 1)):
            r = await c.request(UpdateFeaturesRequest(version=1, timeout_ms=5000, validate_only=False, feature_updates=[
                K(version=1, feature=name, max_version_level=level, upgrade_type=kind)]), 1)
            assert r.error_code == E.INVALID_UPDATE_VERSION, (name, level)
        assert (await features(c))[1]["transaction.version"] == (2, 2)
    cli = [sys.executable, "-m", "cli", "features", "--bootstrap-server", broker.bootstrap]
    out = subprocess.run([*cli, "downgrade", "--feature", "transaction.version=1"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([*cli, "describe"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 1" \
        in out.stdout
    async with ProtocolClient(*_addr(broker)) as c:
        assert (await features(c))[1]["transaction.version"] == (1, 1)
        pid, epoch = await init_ok(c, "t-v2d")
        # TV1: Produce v12 no longer adds partitions implicitly (verification refuses it)
        assert await produce_v12(c, "v2d", [b"d"], pid, epoch, 0, "t-v2d") == E.INVALID_TXN_STATE
        # and EndTxn v5 keeps the epoch (TV1 endTransaction)
        from tests.integration.test_txn_protocol import add_partitions

        assert await add_partitions(c, "t-v2d", pid, epoch, {"v2d": [0]}) == {("v2d", 0): 0}
        assert await produce_v12(c, "v2d", [b"d"], pid, epoch, 0, "t-v2d") == 0
        assert await end_v5(c, "t-v2d", pid, epoch, True) == (0, pid, epoch)
        await wait_complete(c, "t-v2d")
    broker.restart()  # the level is persisted
    async with ProtocolClient(*_addr(broker)) as c:
        assert (await features(c))[1]["transaction.version"] == (1, 1)
    out = subprocess.run([*cli, "upgrade", "--feature", "transaction.version=2"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    async with ProtocolClient(*_addr(broker)) as c:
        assert (await features(c))[1]["transaction.version"] == (2, 2)
