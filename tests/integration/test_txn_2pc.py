"""Two-phase commit (KIP-939, issue 19 item 2): a real broker, the spark_jobs/twopc_producer.py client in
separate processes, confluent-kafka read_committed readers, ``kbroker transactions`` and
``kbroker dump-log``.

Process A prepares a transaction and is SIGKILLed; the broker restarts (the 2PC state is
reloaded from ``__transaction_state``); a plain transaction with the same short timeout is
aborted by the sweeper while the prepared one stays open and pins the LSO; process B completes
it (keepPreparedTxn + commit) and only then do read_committed readers see the records.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from confluent_kafka import Consumer, TopicPartition

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from tests.integration.test_txn_protocol import (
    REPO_ROOT,
    _addr,
    add_partitions,
    create_topic,
    describe,
    init_ok,
    list_offset,
    produce,
)

TOPIC = "twopc"
N = 20
CONFIG = {"transaction.two.phase.commit.enable": "true",
          "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}

PREPARE = textwrap.dedent("""
    import asyncio, sys
    from spark_jobs.twopc_producer import TwoPhaseProducer

    async def main(bootstrap, tid, topic, n):
        p = TwoPhaseProducer(bootstrap, tid)
        await p.start(transaction_timeout_ms=1000)
        for i in range(n):
            await p.send(topic, 0, [(None, b"v%d" % i)])
        state = await p.prepare()
        print(state, flush=True)
        await asyncio.sleep(3600)  # prepared; wait to be killed

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
""")

COMPLETE = textwrap.dedent("""
    import asyncio, sys
    from spark_jobs.twopc_producer import PreparedTxnState, TwoPhaseProducer

    async def main(bootstrap, tid, state):
        async with TwoPhaseProducer(bootstrap, tid) as p:
            print("committed" if await p.complete_prepared(PreparedTxnState.parse(state)) else "aborted")

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
""")


def _committed_values(bootstrap: str, deadline_s: float = 20.0, expect: int = 0) -> list[bytes]:
    """Everything a read_committed consumer reads from the topic, until ``expect`` values or EOF."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        out: list[bytes] = []
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191 and len(out) >= expect:  # _PARTITION_EOF
                    break
                continue
            out.append(m.value())
        return out
    finally:
        c.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.transactions", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)


async def _wait_state(c: ProtocolClient, tid: str, *states: str, deadline_s: float = 30.0) -> dict:
    end = time.monotonic() + deadline_s
    while True:
        d = await describe(c, tid)
        if d["state"] in states or time.monotonic() > end:
            return d
        await asyncio.sleep(0.1)


async def test_prepared_by_a_killed_process_committed_by_another(broker_factory):
    broker = broker_factory(CONFIG)
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, TOPIC)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    a = subprocess.Popen([sys.executable, "-c", PREPARE, broker.bootstrap, "tx-2pc", TOPIC, str(N)],
                         cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert a.stdout is not None
        state = a.stdout.readline().strip()  # blocks until A has prepared
        assert state, a.stderr.read() if a.stderr else ""
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
    pid, epoch = map(int, state.split(":"))

    # The 2PC state survives a broker restart (reloaded from __transaction_state).
    broker.restart()
    async with ProtocolClient(*_addr(broker)) as c:
        d = await _wait_state(c, "tx-2pc", "Ongoing")
        assert (d["state"], d["pid"], d["epoch"]) == ("Ongoing", pid, epoch)
        # A plain transaction with the same 1 s timeout is aborted by the sweeper...
        ppid, pepoch = await init_ok(c, "tx-plain", timeout_ms=1000)
        assert await add_partitions(c, "tx-plain", ppid, pepoch, {TOPIC: [0]}) == {(TOPIC, 0): 0}
        assert (await produce(c, TOPIC, 0, [b"plain"], pid=ppid, epoch=pepoch, seq=0, tid="tx-plain"))[0] == 0
        assert (await _wait_state(c, "tx-plain", "CompleteAbort"))["state"] == "CompleteAbort"
        # ...while the prepared 2PC one, older still, is not: it pins the LSO at its first offset.
        d = await describe(c, "tx-2pc")
        assert (d["state"], d["epoch"]) == ("Ongoing", epoch)
        assert await list_offset(c, TOPIC, committed=True) == 0
        assert await list_offset(c, TOPIC) == N + 2  # the aborted batch and its marker are past it

    assert _committed_values(broker.bootstrap) == []
    listed = _cli("--bootstrap-server", broker.bootstrap, "--json", "list", "--two-phase-commit")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["TransactionalId"], r["ProducerId"], r["ProducerEpoch"], r["TransactionState"]) for r in rows] == [
        ("tx-2pc", pid, epoch, "Ongoing")]
    listed = _cli("--bootstrap-server", broker.bootstrap, "--json", "list", "--duration-filter", "0")
    assert "tx-2pc" in [r["TransactionalId"] for r in json.loads(listed.stdout)]

    b = subprocess.run([sys.executable, "-c", COMPLETE, broker.bootstrap, "tx-2pc", state], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert b.returncode == 0 and b.stdout.strip() == "committed", b.stderr
    values = _committed_values(broker.bootstrap, expect=N)
    assert values == [b"v%d" % i for i in range(N)]
    async with ProtocolClient(*_addr(broker)) as c:
        d = await _wait_state(c, "tx-2pc", "CompleteCommit")
        assert d["state"] == "CompleteCommit"
        assert await list_offset(c, TOPIC, committed=True) == await list_offset(c, TOPIC)

    # dump-log shows the 2PC flag and KIP-939's nextProducerEpoch of the recovered transaction.
    broker.stop()
    files = sorted(glob.glob(str(broker.data_dir / "**" / "__transaction_state-*" / "*.log"), recursive=True))
    dump = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--print-data", "--transaction-log-decoder",
                           *files], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    lines = [ln for ln in dump.stdout.splitlines() if '"transactionalId":"tx-2pc"' in ln]
    assert lines and all('"twoPhaseCommit":true' in ln for ln in lines)
    assert any(f'"nextProducerEpoch":{epoch + 1}' in ln and '"transactionStatus":1' in ln for ln in lines)
    assert all('"previousProducerId"' in ln and '"clientTransactionVersion"' in ln for ln in lines
               if '"version":"1"' in ln)
    assert not any('"twoPhaseCommit"' in ln for ln in dump.stdout.splitlines() if '"tx-plain"' in ln)


async def test_two_phase_commit_disabled_refuses_enable2pc(broker_factory):
    from kafka.protocol.producer import InitProducerIdRequest

    broker = broker_factory()
    async with ProtocolClient(*_addr(broker)) as c:
        for keep in (False, True):
            r = await c.request(InitProducerIdRequest(
                version=6, transactional_id="tx-off", transaction_timeout_ms=1000, producer_id=-1,
                producer_epoch=-1, enable2_pc=True, keep_prepared_txn=keep), 6)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        r = await c.request(InitProducerIdRequest(
            version=6, transactional_id="tx-off", transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1,
            enable2_pc=False, keep_prepared_txn=False), 6)
        assert (r.error_code, r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (E.NONE, -1, -1)


async def test_force_terminate_aborts_a_prepared_transaction(broker_factory):
    from spark_jobs.twopc_producer import TwoPhaseProducer

    broker = broker_factory(CONFIG)
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, TOPIC)
    async with TwoPhaseProducer(broker.bootstrap, "tx-ft") as p:
        await p.start()
        await p.send(TOPIC, 0, [(None, b"doomed")])
        state = await p.prepare()
    out = _cli("--bootstrap-server", broker.bootstrap, "--json", "force-terminate", "--transactional-id", "tx-ft")
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)[0]
    assert (row["ProducerId"], row["Result"]) == (state.producer_id, "terminated")
    assert row["ProducerEpoch"] > state.epoch
    async with ProtocolClient(*_addr(broker)) as c:
        # The abort completes, then the fencing InitProducerId leaves the id Empty (as Kafka's
        # coordinator does once the bumped epoch is written).
        assert (await _wait_state(c, "tx-ft", "CompleteAbort", "Empty"))["state"] in ("CompleteAbort", "Empty")
        assert await list_offset(c, TOPIC, committed=True) == await list_offset(c, TOPIC)
    assert _committed_values(broker.bootstrap) == []
    # the prepared state is gone: completing it now finds nothing to commit
    async with TwoPhaseProducer(broker.bootstrap, "tx-ft") as p:
        assert await p.complete_prepared(state) is False


async def test_enable2pc_needs_two_phase_commit_on_the_transactional_id(broker_factory, tmp_path):
    """KIP-939: WRITE on the transactional id is not enough for enable2Pc; TWO_PHASE_COMMIT is."""
    from kafka.protocol.producer import InitProducerIdRequest

    def acl(op: str) -> dict:
        return {"resource_type": "TRANSACTIONAL_ID", "name": "tx-acl", "pattern_type": "LITERAL",
                "principal": "User:ANONYMOUS", "host": "*", "operation": op, "permission": "ALLOW"}

    data_dir = tmp_path / "acl"
    data_dir.mkdir()
    acls = data_dir / "kbroker-acls.json"
    acls.write_text(json.dumps({"version": 1, "acls": [acl("WRITE")]}))
    broker = broker_factory({**CONFIG, "authorizer.class.name": "standard",
                             "allow.everyone.if.no.acl.found": "false"}, data_dir=data_dir)

    async def init(enable_2pc: bool) -> int:
        async with ProtocolClient(*_addr(broker)) as c:
            r = await c.request(InitProducerIdRequest(
                version=6, transactional_id="tx-acl", transaction_timeout_ms=1000, producer_id=-1,
                producer_epoch=-1, enable2_pc=enable_2pc, keep_prepared_txn=False), 6)
            return r.error_code

    assert await init(False) == E.NONE
    assert await init(True) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acls.write_text(json.dumps({"version": 1, "acls": [acl("WRITE"), acl("TWO_PHASE_COMMIT")]}))
    broker.restart()
    assert await init(True) == E.NONE
