"""The campaign checker (tests/campaign/checker.py) on synthetic histories: every anomaly class is
found, with the operations that show it, and clean histories pass (issue 28, acceptance 1)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.campaign.checker import ALLOWED, VIOLATIONS, check
from tests.campaign.history import load, ops_from_events

K0, K1 = "t0/0", "t0/1"


class H:
    """Builds a history: each helper appends one completion (the invocation is implied)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self._t = itertools.count(1)

    def ev(self, p: str, f: str, value, type: str = "ok", **kw) -> H:
        self.events.append({"t": next(self._t) * 1000, "p": p, "type": type, "f": f, "value": value, **kw})
        return self

    def send(self, p: str, k: str, offset: int | None, v: int, type: str = "ok", **kw) -> H:
        return self.ev(p, "send", [["send", k, [offset, v]]], type, **kw)

    def poll(self, p: str, reads: dict[str, list[tuple[int, int]]], type: str = "ok", mode: str = "assign",
             **kw) -> H:
        return self.ev(p, "poll", [["poll", {k: [list(x) for x in pairs] for k, pairs in reads.items()}]], type,
                       mode=mode, **kw)

    def txn(self, p: str, mops: list, type: str = "ok", mode: str = "assign", **kw) -> H:
        value = []
        for m in mops:
            if m[0] == "send":
                value.append(["send", m[1], [m[2], m[3]]])
            else:
                value.append(["poll", {k: [list(x) for x in pairs] for k, pairs in m[1].items()}])
        return self.ev(p, "txn", value, type, mode=mode, outcome="commit" if type != "fail" else "abort", **kw)

    def assign(self, p: str, keys: list[str], resumed: list[str] | None = None) -> H:
        return self.ev(p, "assign", keys, resumed=resumed if resumed is not None else [])

    def result(self):
        return check(ops_from_events(self.events))


def classes(result) -> set[str]:
    return set(result.anomalies.counts)


def allowed(result) -> set[str]:
    return set(result.allowed.counts)


def example(result, name: str) -> dict:
    return result.anomalies.cases[name][0]


# --- clean histories ------------------------------------------------------------------------


def test_clean_queue_history_passes():
    h = H()
    for i in range(5):
        h.send("w1.0", K0, i, 100 + i)
    h.send("w1.0", K1, 0, 200)
    h.assign("c1.0", [K0, K1])
    h.poll("c1.0", {K0: [(0, 100), (1, 101)], K1: [(0, 200)]})
    h.poll("c1.0", {K0: [(2, 102), (3, 103), (4, 104)]})
    h.poll("c1.0", {})
    r = h.result()
    assert r.valid, r.as_dict()
    assert not r.allowed.counts
    assert r.stats["rw_ops"] == 9 and r.stats["sent_values"] == 6


def test_clean_transactional_history_passes():
    h = H()
    # Committed txns leave a marker after their records (offset gaps), an aborted one is invisible.
    h.txn("t1.0", [("send", K0, 0, 10), ("send", K1, 0, 11)])
    h.txn("t2.0", [("send", K0, 2, 20)])
    h.txn("t3.0", [("send", K0, 4, 30), ("send", K1, 2, 31)], type="fail")
    h.txn("t4.0", [("send", K1, None, 40)], type="info")  # unknown outcome, never read: fine
    h.txn("t2.0", [("poll", {K1: [(0, 11)]}), ("send", K0, 6, 21)])  # consume-transform-produce
    h.assign("c1.0", [K0, K1])
    h.poll("c1.0", {K0: [(0, 10), (2, 20), (6, 21)], K1: [(0, 11)]})
    r = h.result()
    assert r.valid, r.as_dict()
    assert r.stats["txn_commits"] == 3 and r.stats["txn_aborts"] == 1 and r.stats["indeterminate"] == 1


def test_indeterminate_send_that_was_read_counts_as_written():
    h = H()
    h.send("w1.0", K0, 0, 1)
    h.send("w1.0", K0, None, 2, type="info")  # timed out, but it did land at offset 1
    h.send("w2.0", K0, 2, 3)
    h.poll("c1.0", {K0: [(0, 1), (1, 2), (2, 3)]})
    r = h.result()
    assert r.valid, r.as_dict()


# --- each anomaly class ---------------------------------------------------------------------


def test_lost_write():
    h = H()
    h.send("w1.0", K0, 0, 1).send("w1.0", K0, 1, 2).send("w1.0", K0, 2, 3)
    h.poll("c1.0", {K0: [(0, 1)]})
    h.poll("c2.0", {K0: [(2, 3)]})  # read offset 2, so offset 1 must have been readable
    r = h.result()
    assert classes(r) == {"lost-write", "unseen"}
    case = example(r, "lost-write")
    assert (case["key"], case["value"], case["offset"]) == (K0, 2, 1)
    assert case["writer"]["sends"] == {K0: [[1, 2]]}
    assert case["max_read"]["process"] == "c2.0"


def test_indeterminate_unread_send_is_not_lost():
    h = H()
    h.send("w1.0", K0, 0, 1).send("w1.0", K0, None, 2, type="info").send("w2.0", K0, 2, 3)
    h.poll("c1.0", {K0: [(0, 1), (2, 3)]})
    assert h.result().valid


def test_unseen():
    h = H()
    h.send("w1.0", K0, 0, 1).send("w1.0", K1, 0, 2)
    h.poll("c1.0", {K0: [(0, 1)]})
    r = h.result()
    assert classes(r) == {"unseen"}
    case = example(r, "unseen")
    assert (case["key"], case["values"], case["writers"][0]["process"]) == (K1, [2], "w1.0")


def test_duplicate():
    h = H()
    h.send("w1.0", K0, 0, 5)
    h.poll("c1.0", {K0: [(0, 5), (1, 5)]})
    r = h.result()
    assert "duplicate" in classes(r)
    case = example(r, "duplicate")
    assert (case["key"], case["value"], case["offsets"]) == (K0, 5, [0, 1])


def test_inconsistent_offsets():
    h = H()
    h.send("w1.0", K0, 0, 1).send("w2.0", K0, 0, 2)  # two acks for one offset
    h.poll("c1.0", {K0: [(0, 1)]})
    r = h.result()
    assert "inconsistent-offsets" in classes(r)
    case = example(r, "inconsistent-offsets")
    assert (case["key"], case["offset"], case["values"]) == (K0, 0, [1, 2])
    assert {w["process"] for w in case["writers"]} == {"w1.0", "w2.0"}


def test_aborted_read_g1a():
    h = H()
    h.txn("t1.0", [("send", K0, 0, 9)], type="fail")
    h.poll("c1.0", {K0: [(0, 9)]})
    r = h.result()
    assert classes(r) == {"G1a"}
    case = example(r, "G1a")
    assert case["value"] == 9 and case["writer"]["process"] == "t1.0" and case["reader"]["process"] == "c1.0"


def test_precommitted_read():
    h = H()
    h.txn("t1.0", [("send", K0, 0, 1), ("poll", {K0: [(0, 1)]})])
    r = h.result()
    assert "precommitted-read" in classes(r)
    assert example(r, "precommitted-read")["values"] == [1]


def _three_values(h: H) -> H:
    return h.send("w1.0", K0, 0, 1).send("w1.0", K0, 1, 2).send("w1.0", K0, 2, 3)


def test_poll_skip_under_assign_is_a_violation():
    h = _three_values(H())
    h.assign("c1.0", [K0])
    h.poll("c1.0", {K0: [(0, 1)]}).poll("c1.0", {K0: [(2, 3)]})
    h.poll("c2.0", {K0: [(0, 1), (1, 2), (2, 3)]})
    r = h.result()
    assert classes(r) == {"poll-skip"}
    case = example(r, "poll-skip")
    assert case["skipped"] == [2] and [o["process"] for o in case["ops"]] == ["c1.0", "c1.0"]


def test_poll_skip_under_subscribe_is_allowed():
    h = _three_values(H())
    h.poll("c1.0", {K0: [(0, 1)]}, mode="subscribe").poll("c1.0", {K0: [(2, 3)]}, mode="subscribe")
    h.poll("c2.0", {K0: [(0, 1), (1, 2), (2, 3)]})
    r = h.result()
    assert r.valid and allowed(r) == {"poll-skip"}


def test_rebalance_resets_the_position_tracking():
    h = _three_values(H())
    h.poll("c1.0", {K0: [(0, 1)]}, mode="subscribe")
    h.poll("c1.0", {K0: [(2, 3)]}, mode="subscribe", rebalance=[K0])
    h.poll("c2.0", {K0: [(0, 1), (1, 2), (2, 3)]})
    r = h.result()
    assert r.valid and not r.allowed.counts


def test_a_rebalance_during_an_operation_voids_its_position_too():
    # The rebalance came after the op's read: the group's committed offset (behind it) is where
    # the next op starts, so reading the same record again is no anomaly.
    h = _three_values(H())
    h.poll("c1.0", {K0: [(0, 1), (1, 2)]}, mode="subscribe", rebalance=[K0])
    h.poll("c1.0", {K0: [(1, 2), (2, 3)]}, mode="subscribe")
    r = h.result()
    assert r.valid and not r.allowed.counts


def test_seek_and_assign_reset_the_position_tracking():
    h = _three_values(H())
    h.assign("c1.0", [K0])
    h.poll("c1.0", {K0: [(2, 3)]})
    h.ev("c1.0", "seek", {K0: 0})
    h.poll("c1.0", {K0: [(0, 1), (1, 2)]})
    h.assign("c1.0", [K0], resumed=[])  # a fresh position, from the committed offset
    h.poll("c1.0", {K0: [(2, 3)]})
    assert h.result().valid


def test_nonmonotonic_poll():
    h = _three_values(H())
    h.assign("c1.0", [K0])
    h.poll("c1.0", {K0: [(0, 1), (1, 2)]}).poll("c1.0", {K0: [(1, 2), (2, 3)]})
    r = h.result()
    assert classes(r) == {"nonmonotonic-poll"}
    assert example(r, "nonmonotonic-poll")["values"] == [2, 2]


def test_int_poll_skip():
    h = _three_values(H())
    h.poll("c1.0", {K0: [(0, 1), (2, 3)]})
    h.poll("c2.0", {K0: [(0, 1), (1, 2), (2, 3)]})
    r = h.result()
    assert classes(r) == {"int-poll-skip"}
    case = example(r, "int-poll-skip")
    assert case["skipped"] == [2] and case["op"]["process"] == "c1.0"


def test_int_nonmonotonic_poll():
    h = _three_values(H())
    h.poll("c1.0", {K0: [(0, 1), (1, 2), (2, 3), (1, 2)]})
    r = h.result()
    assert "int-nonmonotonic-poll" in classes(r)
    assert example(r, "int-nonmonotonic-poll")["values"] == [3, 2]


def test_int_send_skip_is_allowed():
    h = H()
    h.txn("t1.0", [("send", K0, 0, 1), ("send", K0, 2, 3)])
    h.send("w1.0", K0, 1, 2)
    h.poll("c1.0", {K0: [(0, 1), (1, 2), (2, 3)]})
    r = h.result()
    # The interleaved write is also a ww cycle t1 -> w1 -> t1: G0, allowed too.
    assert r.valid and allowed(r) == {"int-send-skip", "G0"}


def test_int_nonmonotonic_send():
    h = H()
    h.txn("t1.0", [("send", K0, 1, 2), ("send", K0, 0, 1)])
    h.poll("c1.0", {K0: [(0, 1), (1, 2)]})
    r = h.result()
    assert classes(r) == {"int-nonmonotonic-send"}
    assert example(r, "int-nonmonotonic-send")["values"] == [2, 1]


def test_nonmonotonic_send():
    h = H()
    h.send("w1.0", K0, 1, 1).send("w1.0", K0, 0, 2)  # the second acknowledged send went back
    h.poll("c1.0", {K0: [(0, 2), (1, 1)]})
    r = h.result()
    assert classes(r) == {"nonmonotonic-send"}
    case = example(r, "nonmonotonic-send")
    assert case["values"] == [1, 2] and len(case["ops"]) == 2


def test_g0_write_cycle_is_allowed():
    h = H()
    h.txn("t1.0", [("send", K0, 0, 1), ("send", K1, 1, 2)])
    h.txn("t2.0", [("send", K0, 1, 3), ("send", K1, 0, 4)])
    h.poll("c1.0", {K0: [(0, 1), (1, 3)], K1: [(0, 4), (1, 2)]})
    r = h.result()
    assert r.valid and "G0" in allowed(r)
    steps = r.allowed.cases["G0"][0]["steps"]
    assert {s["edge"] for s in steps} == {"ww"} and {s["from"]["process"] for s in steps} == {"t1.0", "t2.0"}


def test_g1c_read_cycle():
    h = H()
    h.txn("t1.0", [("send", K0, 0, 1), ("poll", {K1: [(0, 2)]})])
    h.txn("t2.0", [("send", K1, 0, 2), ("poll", {K0: [(0, 1)]})])
    r = h.result()
    assert classes(r) == {"G1c"}
    steps = example(r, "G1c")["steps"]
    assert [s["edge"] for s in steps] == ["wr", "wr"]
    assert {s["from"]["process"] for s in steps} == {"t1.0", "t2.0"}


def test_g1c_that_needs_write_write_edges_is_allowed():
    h = H()
    h.txn("t1.0", [("send", K0, 0, 1), ("poll", {K1: [(0, 2)]})])
    h.txn("t2.0", [("send", K1, 0, 2), ("send", K0, 1, 3)])
    h.poll("c1.0", {K0: [(0, 1), (1, 3)]})
    r = h.result()
    assert r.valid and allowed(r) == {"G1c-ww"}
    assert sorted(s["edge"] for s in r.allowed.cases["G1c-ww"][0]["steps"]) == ["wr", "ww"]


def test_torn_transaction():
    h = H()
    h.send("w1.0", K1, 0, 1)
    h.txn("t1.0", [("send", K0, 0, 10), ("send", K1, 1, 11)])
    h.send("w1.0", K1, 3, 2)
    h.assign("c1.0", [K0, K1])
    h.poll("c1.0", {K0: [(0, 10)], K1: [(0, 1)]})
    h.poll("c1.0", {K1: [(3, 2)]})  # went past the transaction's record on K1
    h.poll("c2.0", {K0: [(0, 10)], K1: [(0, 1), (1, 11), (3, 2)]})
    r = h.result()
    assert classes(r) == {"torn-transaction", "poll-skip"}
    case = example(r, "torn-transaction")
    assert case["skipped"] == [11] and case["read"] == {K0: [10]} and case["txn"]["process"] == "t1.0"


def test_skip_over_a_transaction_not_read_at_all_is_not_torn():
    h = H()
    h.send("w1.0", K1, 0, 1)
    h.txn("t1.0", [("send", K0, 0, 10), ("send", K1, 1, 11)])
    h.send("w1.0", K1, 3, 2)
    h.poll("c1.0", {K1: [(0, 1)]}, mode="subscribe").poll("c1.0", {K1: [(3, 2)]}, mode="subscribe")
    h.poll("c2.0", {K0: [(0, 10)], K1: [(0, 1), (1, 11), (3, 2)]})
    r = h.result()
    assert r.valid and allowed(r) == {"poll-skip"}


def test_unwritten_read():
    h = H()
    h.send("w1.0", K0, 0, 1)
    h.poll("c1.0", {K0: [(0, 1), (1, 777)]})
    r = h.result()
    assert classes(r) == {"unwritten-read"}
    assert example(r, "unwritten-read")["value"] == 777


def test_every_class_is_named_once():
    assert len(set(VIOLATIONS)) == len(VIOLATIONS)
    assert {"G0", "int-send-skip"} <= set(ALLOWED)


# --- the history files ----------------------------------------------------------------------


def test_load_pairs_invocations_and_completions(tmp_path: Path):
    a = [{"t": 1, "p": "w1.0", "type": "invoke", "f": "send", "value": [["send", K0, 1]]},
         {"t": 5, "p": "w1.0", "type": "ok", "f": "send", "value": [["send", K0, [0, 1]]]},
         {"t": 6, "p": "w1.0", "type": "invoke", "f": "send", "value": [["send", K0, 2]]}]  # killed here
    b = [{"t": 2, "p": "c1.0", "type": "invoke", "f": "poll", "value": [["poll"]]},
         {"t": 3, "p": "c1.0", "type": "ok", "f": "poll", "value": [["poll", {K0: [[0, 1]]}]], "mode": "assign"}]
    (tmp_path / "history-w1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in a) + '{"t": 7, "p"')
    (tmp_path / "history-c1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in b))
    ops = load(tmp_path)
    assert [(o.process, o.type, o.f) for o in ops] == [("c1.0", "ok", "poll"), ("w1.0", "ok", "send"),
                                                       ("w1.0", "info", "send")]
    assert ops[0].invoke_time == 2 and ops[0].reads == {K0: [(0, 1)]}
    assert ops[2].writes == {K0: [(None, 2)]}  # the unfinished send: indeterminate, offset unknown
    assert check(ops).valid


@pytest.mark.parametrize("n", [2000])
def test_a_large_clean_history_is_checked_quickly(n: int):
    h = H()
    for i in range(n):
        h.send(f"w{i % 4}.0", K0 if i % 2 else K1, i // 2, i)
    h.poll("c1.0", {K1: [(i // 2, i) for i in range(0, n, 2)], K0: [(i // 2, i) for i in range(1, n, 2)]})
    r = h.result()
    assert r.valid and r.stats["read_values"] == n
