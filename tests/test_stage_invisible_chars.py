"""invisible_chars: each table entry removed, joiners and emoji tag sequences kept in context."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cleanpipe.stages.invisible_chars import InvisibleChars
from tests._text_corpora import folder_strings
from tests.conftest import realdata

WALES = "\U0001f3f4\U000e0067\U000e0062\U000e0077\U000e006c\U000e0073\U000e007f"


def test_each_code_removed_and_counted() -> None:
    texts = ["\ufeffbom", "zero\u200bwidth\u2060x\u180ey\ufeffz", "a\u202eb\u2066c\u061cd",
             "soft\u00adhyphen", "tag\U000e0041s", "x\ufff9y\ufffbz", "f\u2061x",
             "old\u206aformat", "plain", None]
    res = InvisibleChars().transform(pa.array(texts))
    assert res.texts.to_pylist() == ["bom", "zerowidthxyz", "abcd", "softhyphen", "tags",
                                     "xyz", "fx", "oldformat", "plain", None]
    codes = res.findings.codes()
    assert codes == {"bom": 1, "zero_width": 1, "bidi_control": 1, "soft_hyphen": 1,
                     "tag_char": 1, "interlinear_annotation": 1, "invisible_operator": 1,
                     "deprecated_format": 1}
    assert res.metrics["codepoints"]["U+200B"] == 1
    assert res.metrics["codepoints"]["U+FEFF"] == 2
    zw = next(c for c in res.findings.chunks if c.code == "zero_width")
    assert zw.detail == ["U+200B,U+2060,U+180E,U+FEFF"] and zw.positions.tolist() == [1]


def test_joiners_kept_in_context_only() -> None:
    family = "👩\u200d👩\u200d👧"
    persian = "می\u200cخواهم"
    hindi = "क्\u200dष"
    texts = [family, persian, hindi, "a\u200db", "\u200dlead", "می\u200c a"]
    out = InvisibleChars()(texts)
    assert out[:3] == [family, persian, hindi]
    assert out[3:] == ["ab", "lead", "می a"]
    assert InvisibleChars(keep_joiners=False)(family) == "👩👩👧"


def test_emoji_tag_sequence_kept() -> None:
    assert InvisibleChars()("flag " + WALES + " x\U000e0020") == "flag " + WALES + " x"
    assert InvisibleChars(keep_emoji_tags=False)(WALES) == "\U0001f3f4"
    res = InvisibleChars().transform(pa.array([WALES]))
    assert not res.findings  # nothing removed, nothing reported


def test_flag_action_keeps_text() -> None:
    stage = InvisibleChars(actions={"bidi_control": "flag"})
    res = stage.transform(pa.array(["a\u202eb\u200b"]))
    assert res.texts.to_pylist() == ["a\u202eb"]
    assert res.findings.codes() == {"zero_width": 1, "bidi_control": 1}


@pytest.mark.realdata
def test_t0_zero_width_rows_cleaned() -> None:
    strings = folder_strings(realdata("sft_self_instruct_t0_50k", "data_per_template"), every=3)
    stage = InvisibleChars()
    arr = pa.array(strings, pa.large_string())
    res = stage.transform(arr)
    expected = [s.replace("\u200b", "") for s in strings]
    changed = sum(a != b for a, b in zip(strings, res.texts.to_pylist(), strict=True))
    assert changed == res.metrics["strings_changed"] > 0
    assert not any("\u200b" in s for s in res.texts.to_pylist())
    assert sum(a != b for a, b in zip(strings, expected, strict=True)) <= changed
