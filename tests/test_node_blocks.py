"""NodeBlocks: every task group handed out once, in runs of consecutive groups per node."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cleanpipe.engine.node_blocks import AHEAD_GROUPS, NodeBlocks


@settings(max_examples=200, deadline=None)
@given(groups=st.integers(0, 120), cpus=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       asks=st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=400))
def test_every_group_is_handed_out_once_with_its_item(groups: int, cpus: list[int],
                                                      asks: list[tuple[int, bool]]) -> None:
    """Whatever the order the nodes ask in, and whether they may take more than the rest
    of their own block (the Ray engine says no while many results wait)."""
    nodes = {f"n{k}": c for k, c in enumerate(cpus)}
    plan = NodeBlocks(iter(range(100, 100 + groups)), nodes, expected=groups)
    got: dict[str, list[int]] = {n: [] for n in nodes}
    names = list(nodes)
    order = [(names[a % len(names)], more) for a, more in asks]
    order += [(n, True) for n in names] * (groups + 1)
    for node, more in order:
        own_before = list(plan.own.get(node, ()))
        job = plan.next_for(node, more)
        if not more:  # only the rest of its own block
            assert (job[0] if job else None) == (own_before[0][0] if own_before else None)
        if job is not None:
            i, item = job
            assert item == 100 + i
            got[node].append(i)
    assert sorted(i for g in got.values() for i in g) == list(range(groups))
    assert plan.done and all(plan.next_for(n) is None for n in nodes)


def test_two_nodes_taking_turns_split_the_groups_in_two_runs() -> None:
    """The schedule Ray produced by itself (turns) gave alternate groups to each node; the
    blocks give each node one run, the slower node's end taken by the faster one."""
    plan = NodeBlocks(iter(range(15)), {"a": 1, "b": 1}, expected=15)
    got: dict[str, list[int]] = {"a": [], "b": []}
    node = "a"
    while (job := plan.next_for(node)) is not None:
        got[node].append(job[0])
        node = "b" if node == "a" else "a"
    assert got["a"] == list(range(8))
    assert got["b"] == list(range(8, 15))


def test_the_groups_taken_ahead_are_bounded() -> None:
    """Groups are taken from their iterator a block at a time, never more than
    AHEAD_GROUPS ahead of what was handed out: the driver holds what it read itself."""
    taken = 0

    def items():
        nonlocal taken
        for i in range(10_000):
            taken += 1
            yield i

    plan = NodeBlocks(items(), {"a": 2, "b": 2}, expected=10_000)
    handed = 0
    for _ in range(500):
        for node in ("a", "b"):
            assert plan.next_for(node) is not None
            handed += 1
            assert taken - handed <= AHEAD_GROUPS
