"""Server-side assignors (KIP-848): uniform balance and stickiness, range layout."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import MemberSpec, UnsupportedAssignor, assign

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def counts(a: dict) -> dict[str, int]:
    return {m: sum(len(ps) for ps in parts.values()) for m, parts in a.items()}


def all_pairs(a: dict) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for parts in a.values() for t, ps in parts.items() for p in ps]


def test_range_contiguous_first_members_get_extra() -> None:
    members = [MemberSpec("b", {T1, T2}), MemberSpec("a", {T1, T2}), MemberSpec("c", {T1})]
    a = assign("range", members, {T1: 7, T2: 4})
    assert a["a"][T1] == {0, 1, 2} and a["b"][T1] == {3, 4} and a["c"][T1] == {5, 6}
    assert a["a"][T2] == {0, 1} and a["b"][T2] == {2, 3} and T2 not in a["c"]


def test_uniform_balanced_and_sticky() -> None:
    members = [MemberSpec(m, {T1}) for m in "abc"]
    first = assign("uniform", members, {T1: 6})
    assert sorted(counts(first).values()) == [2, 2, 2]
    # "c" leaves: "a" and "b" keep what they had and split c's partitions.
    second = assign("uniform", [MemberSpec(m, {T1}, first[m]) for m in "ab"], {T1: 6})
    assert sorted(counts(second).values()) == [3, 3]
    for m in "ab":
        assert first[m][T1] <= second[m][T1]
    # A newcomer takes partitions only from the loaded members, never reshuffling the rest.
    third = assign("uniform", [MemberSpec(m, {T1}, second.get(m, {})) for m in "abd"], {T1: 6})
    assert sorted(counts(third).values()) == [2, 2, 2]
    moved = sum(len(second[m][T1] - third[m][T1]) for m in "ab")
    assert moved == 2


def test_uniform_heterogeneous_subscriptions() -> None:
    members = [MemberSpec("a", {T1}), MemberSpec("b", {T1, T2}), MemberSpec("c", {T2})]
    a = assign("uniform", members, {T1: 3, T2: 3})
    assert sorted(all_pairs(a)) == sorted([(T1, p) for p in range(3)] + [(T2, p) for p in range(3)])
    assert set(a["a"]) <= {T1} and set(a["c"]) <= {T2}
    assert sorted(counts(a).values()) == [2, 2, 2]


def test_unknown_assignor() -> None:
    with pytest.raises(UnsupportedAssignor):
        assign("sticky", [], {})


@settings(max_examples=60, deadline=None)
@given(n_members=st.integers(1, 6), parts=st.lists(st.integers(0, 9), min_size=1, max_size=3),
       name=st.sampled_from(["uniform", "range"]))
def test_every_partition_exactly_once(n_members: int, parts: list[int], name: str) -> None:
    topics = {uuid.UUID(int=i + 1): n for i, n in enumerate(parts)}
    members = [MemberSpec(f"m{i}", set(topics)) for i in range(n_members)]
    a = assign(name, members, topics)
    pairs = all_pairs(a)
    assert sorted(pairs) == sorted((t, p) for t, n in topics.items() for p in range(n))
    if name == "uniform":
        c = counts(a).values()
        assert max(c) - min(c) <= 1
