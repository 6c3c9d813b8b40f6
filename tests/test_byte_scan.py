"""The byte-scan fast path of the character stages agrees with the RE2 path.

``ByteScan`` must never clear a bit whose rule matches (and, for ``exact`` rules, never set
one that does not); ``RuleSet.apply`` with the scan must give the same texts, findings and
counts as the RE2 union path it replaced.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleanpipe.contract.stage import Action
from cleanpipe.stages import control_chars, invisible_chars, whitespace
from cleanpipe.stages.control_chars import ControlChars
from cleanpipe.stages.invisible_chars import InvisibleChars
from cleanpipe.stages.whitespace import Whitespace
from cleanpipe.text.byte_scan import ByteScan
from cleanpipe.text.rules import RuleSet
from tests.conftest import realdata

# Pieces every rule looks at, and neighbours that make its context (ZWJ between emoji, a
# space before a newline, a newline at a word boundary of eight bytes...).
PIECES = st.sampled_from([
    " ", "  ", "\t", "\n", "\n\n\n", "\r", "\r\n", "\x0b", "\x0c", "\x00", "\x07", "\x7f",
    "\x85", "\x9f", "\u00a0", "\u1680", "\u2003", "\u202f", "\u205f", "\u3000", "\u200b",
    "\u200c", "\u200d", "\u2060", "\u180e", "\ufeff", "\u200e", "\u202e", "\u2066", "\u00ad",
    "\U000e0041", "\U000e007f", "\U0001f3f4", "\ufff9", "\u2062", "\u206b", "\u2028",
    "\u2029", "\ufffd", "👩", "💻", "ب", "क", "中文", "“quote”", "abcdefg", "x",
])
TEXT = st.lists(st.one_of(st.text(st.characters(exclude_categories=["Cs"]), max_size=6),
                          PIECES), max_size=16).map("".join)
TEXTS = st.lists(st.one_of(TEXT, st.none()), max_size=12)


def _configs() -> list[tuple[str, list, ByteScan, object]]:
    """(name, rules, scan, action_of) for every stage config the fast path serves."""
    out = []
    for stage in (InvisibleChars(), InvisibleChars(keep_joiners=False, keep_emoji_tags=False)):
        out.append(("invisible_chars", stage._rules(), invisible_chars._scan(),
                    stage.action_of))
    for stage in (ControlChars(), ControlChars(line_endings="keep", unicode_line_breaks="keep"),
                  ControlChars(action="fix")):
        rules, groups = stage._rules()
        out.append(("control_chars", rules, control_chars._scan(tuple(groups)),
                    stage.action_of))
    for stage in (Whitespace(), Whitespace(action="fix"),
                  Whitespace(keep_ideographic_space=False, action="flag")):
        out.append(("whitespace", stage._rules(), whitespace._scan(stage._unusual()),
                    stage.action_of))
    return out


CONFIGS = _configs()


def check_bits(texts: list[str | None]) -> None:
    arr = pa.array(texts, pa.large_string())
    for name, rules, scan, _ in CONFIGS:
        bits = scan(arr)
        assert bits.shape == (len(texts),)
        for k, rule in enumerate(rules):
            on = ((bits >> k) & 1).astype(bool)
            truth = rule.mask(arr)
            missed = np.flatnonzero(truth & ~on)
            assert missed.size == 0, (name, rule.code, [texts[i] for i in missed])
            if rule.exact or rule.trim is not None:
                extra = np.flatnonzero(on & ~truth)
                assert extra.size == 0, (name, rule.code, [texts[i] for i in extra])


def _chunks(found) -> list[tuple]:
    return [(c.positions.tolist(), c.code, c.action, c.detail, c.before, c.after)
            for c in found.chunks]


def check_paths(texts: list[str | None]) -> None:
    arr = pa.array(texts, pa.large_string())
    for name, rules, scan, action_of in CONFIGS:
        fast = RuleSet(name, rules, action_of, scan=scan).apply(arr)
        slow = RuleSet(name, rules, action_of).apply(arr)
        assert fast.texts.to_pylist() == slow.texts.to_pylist(), name
        assert _chunks(fast.findings) == _chunks(slow.findings), name
        for key in ("strings_changed", "codepoints"):
            assert fast.metrics.get(key, 0) == slow.metrics.get(key, 0), (name, key)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_scan_bits_never_miss(texts):
    check_bits(texts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_fast_path_equals_regex_path(texts):
    check_paths(texts)


def test_fixtures_word_boundaries_and_slices():
    # Pairs that straddle an 8-byte word (and a string boundary) are where SWAR can slip.
    texts = ["1234567 \n", "1234567\n\n\nx", "123456  x", "abcdefg ", " next", "\n",
             "1234567\t\tz", "é" * 7 + "\u00a0", "", None, "a" * 15 + "\u200b",
             "1234567" + "\x07", "line \nend", "ok"]
    check_bits(texts)
    check_paths(texts)
    big = pa.array(["pad"] * 5 + texts, pa.large_string())
    for start in range(6):
        # A sliced array: offsets no longer start at zero.
        sliced = big.slice(start)
        bits = whitespace._scan(Whitespace()._unusual())(sliced)
        full = whitespace._scan(Whitespace()._unusual())(pa.array(sliced.to_pylist(),
                                                                   pa.large_string()))
        assert bits.tolist() == full.tolist()


def test_string_type_and_unaligned_buffer():
    texts = ["a  b", "c\u200bd", "e \n", None, "f\x00"]
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(texts, typ)
        for name, rules, scan, action_of in CONFIGS:
            fast = RuleSet(name, rules, action_of, scan=scan).apply(arr)
            slow = RuleSet(name, rules, action_of).apply(arr)
            assert fast.texts.to_pylist() == slow.texts.to_pylist()
    # A data buffer whose address is not 8-aligned takes the byte-by-byte path.
    arr = pa.array(["x" + t if t else t for t in texts], pa.large_string())
    data = arr.buffers()[2].to_pybytes()
    raw = pa.py_buffer(b"\x00" + data)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)
    shifted = pa.Array.from_buffers(pa.large_string(), len(arr),
                                    [arr.buffers()[0], arr.buffers()[1], raw.slice(1)])
    assert shifted.to_pylist() == arr.to_pylist() and offsets[0] == 0
    scan = whitespace._scan(Whitespace()._unusual())
    assert scan(shifted).tolist() == scan(arr).tolist()


def test_scan_bits_by_hand():
    scan = whitespace._scan(Whitespace()._unusual())
    got = scan(pa.array(["a\u00a0b", "a  b", "a \nb", "a\n\n\nb", " a", "plain", "a\t"]))
    assert got.tolist() == [1, 2, 4, 8, 16, 0, 4 | 16]


def test_action_of_non_fix_rules_keep_text():
    stage = Whitespace(action="flag")
    res = stage.transform(pa.array(["  a  b \n\n\n\nc\u00a0 "]))
    assert res.texts.to_pylist() == ["  a  b \n\n\n\nc\u00a0 "]
    assert {c.code for c in res.findings.chunks} == {
        "unusual_space", "space_run", "trailing_space", "blank_lines", "edge_whitespace"}
    assert all(c.action is Action.FLAG for c in res.findings.chunks)


def _t0_strings() -> list[str]:
    folder = realdata("sft_self_instruct_t0_50k", "data_per_template")
    out: list[str] = []
    for f in sorted(folder.glob("*.jsonl"))[:3]:
        for line in f.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                r = json.loads(line)
                out += [r["prompt"], r["completion"]]
    return out


@pytest.mark.realdata
def test_real_t0_fast_path_equals_regex_path():
    texts = _t0_strings()
    assert texts
    check_bits(texts)
    check_paths(texts)
