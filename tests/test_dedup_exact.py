"""exact_dedup: normalisation options, keep policies, contamination, real t0 duplicates."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from dedup_helpers import load_t0, run_global

from cleanpipe.dedup.hashing import group_labels, hash128, lookup
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.registry import get_stage_class


def test_hash128_equals_xxh3_128():
    import xxhash

    texts = ["", "a", "中文", "x" * 1000]
    h = hash128(pa.array(texts))
    for i, t in enumerate(texts):
        assert int(h[i, 0]) | (int(h[i, 1]) << 64) == int.from_bytes(
            xxhash.xxh3_128_digest(t.encode()), "little")
    # independent of the xxhash package: XXH3-128 of empty input (seed 0), as published
    # in xxHash's own sanity checks
    assert h[0].astype("<u8").tobytes().hex() == "99aa06d3014798d86001c324468d497f"


def test_group_labels_and_lookup():
    h = np.array([[1, 2], [3, 4], [1, 2], [1, 5], [3, 4]], dtype=np.uint64)
    assert group_labels(h).tolist() == [0, 1, 0, 3, 1]
    assert lookup(h, np.array([[3, 4]], dtype=np.uint64)).tolist() == [-1, 0, -1, -1, 0]


def _table() -> pa.Table:
    return pa.table({
        "instruction": ["Say hi", "say  HI", "Say hi", "Say hi.", "Say bye", "Say hi"],
        "output": ["hi", "hi", "hi", "hi", "bye", "hi there"],
    })


@pytest.mark.parametrize(("options", "expected"), [
    ({}, {2: 0}),
    ({"lowercase": True}, {1: 0, 2: 0}),
    ({"lowercase": True, "strip_punctuation": True}, {1: 0, 2: 0, 3: 0}),
    ({"collapse_whitespace": False, "lowercase": True}, {2: 0}),
])
def test_normalisation_options(options, expected):
    out = run_global(ExactDedup(**options), _table(), ["instruction", "output"])
    got = {s: int(d.split("row r")[1]) for s, d in out.get("exact_duplicate", {}).items()}
    assert got == expected


def test_field_boundaries_matter():
    t = pa.table({"a": ["ab", "a"], "b": ["c", "bc"]})
    assert run_global(ExactDedup(), t, ["a", "b"]) == {}


def test_keep_policies():
    t = pa.table({"q": ["x", "y", "x", "x"], "a": ["1", "2", "1", "1"]})
    last = run_global(ExactDedup(keep="last"), t, ["q", "a"])["exact_duplicate"]
    assert set(last) == {0, 2} and last[0] == "duplicate of row r3"
    t2 = pa.table({"q": ["x ", "x", "  x  "]})
    longest = run_global(ExactDedup(keep="longest"), t2, ["q"])["exact_duplicate"]
    assert set(longest) == {0, 1} and longest[0] == "duplicate of row r2"


def test_nested_messages():
    t = pa.table({"messages": [[{"c": "a"}, {"c": "b"}], [{"c": "a"}, {"c": "b"}],
                               [{"c": "a b"}], [{"c": "a"}]]})
    out = run_global(ExactDedup(), t, ["messages[*].c"])
    assert set(out["exact_duplicate"]) == {1}


def test_contamination_reported_separately():
    ref = pa.table({"instruction": ["say hi"], "output": ["hi"]})
    stage = ExactDedup(lowercase=True, reference=[ref])
    out = run_global(stage, _table(), ["instruction", "output"])
    assert set(out["contaminated_exact"]) == {0, 1, 2}
    assert out["contaminated_exact"][1] == "copy of table[1] row 0"
    assert stage.report_section()["contamination"]["rows"] == 3


def test_registered_and_standalone():
    assert get_stage_class("exact_dedup") is ExactDedup
    out = ExactDedup(fields=["q"])(pa.table({"q": ["a", "a", "b"]}))
    assert out["q"].to_pylist() == ["a", "b"]


@pytest.mark.realdata
def test_t0_exact_duplicates_match_a_python_count(shared_data):
    t = load_t0(shared_data)
    stage = ExactDedup(collapse_whitespace=False, unicode_form="none")
    out = run_global(stage, t, ["prompt", "completion"], batch_size=8192, through_pickle=False)
    pairs = list(zip(t["prompt"].to_pylist(), t["completion"].to_pylist(), strict=True))
    counts = collections.Counter(pairs)
    expected = sum(c - 1 for c in counts.values())
    assert len(out["exact_duplicate"]) == expected
    assert expected > 1000  # PROVENANCE.md: ~1,150
    rep = stage.report_section()
    assert rep["duplicates"] == expected
    assert rep["memory"]["index_bytes_per_row"] <= 64
