"""Property tests for the text stages: any Unicode (and the Big List of Naughty Strings) in,
no exception, valid UTF-8 out, and every stage idempotent (twice == once)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleanpipe.stages.control_chars import ControlChars
from cleanpipe.stages.invisible_chars import InvisibleChars
from cleanpipe.stages.special_tokens import SpecialTokens
from cleanpipe.stages.unicode_fix import UnicodeFix
from cleanpipe.stages.whitespace import Whitespace
from tests.conftest import realdata

STAGES = {
    "unicode_fix": UnicodeFix(),
    "unicode_fix_ftfy_defaults": UnicodeFix(fix_character_width=True, uncurl_quotes=True,
                                            fix_line_breaks=True, remove_control_chars=True),
    "invisible_chars": InvisibleChars(),
    "control_chars": ControlChars(),
    "whitespace": Whitespace(),
    "whitespace_all_fix": Whitespace(action="fix"),
    "special_tokens": SpecialTokens(tokens=["<|endoftext|>", "<|im_start|>", "</s>", "[CLS]"]),
}

# Arrow strings are valid UTF-8, so surrogates cannot be built from Python str; they are
# tested as bytes in test_stage_control_chars. Everything else, and pieces likely to
# interact, is fair game.
PIECES = st.sampled_from(["\u200d", "\u200c", "\ufeff", "\r", "\n", "  ", "\u00a0", "&amp;",
                          "Ã©", "\x85", "<|endoftext|>", "<|im_", "start|>", "\U000e0041",
                          "\U0001f3f4", "👩", "ب", "e\u0301", "\u3000", "\t", "\x00"])
TEXT = st.lists(st.one_of(st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
                          PIECES), max_size=12).map("".join)


def check(stage, texts: list[str]) -> None:
    arr = pa.array(texts, pa.large_string())
    once = stage.transform(arr).texts
    once.validate(full=True)  # valid UTF-8
    assert len(once) == len(arr)
    twice = stage.transform(once).texts
    assert twice.to_pylist() == once.to_pylist()


@pytest.mark.parametrize("name", sorted(STAGES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXT, min_size=1, max_size=6))
def test_arbitrary_unicode(name: str, texts: list[str]) -> None:
    check(STAGES[name], texts)


@pytest.mark.realdata
@pytest.mark.parametrize("name", sorted(STAGES))
def test_blns(name: str) -> None:
    strings = json.loads(realdata("blns", "blns.json").read_text(encoding="utf-8"))
    assert len(strings) > 400
    check(STAGES[name], strings)


@pytest.mark.parametrize("name", ["unicode_fix", "unicode_fix_ftfy_defaults"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXT, min_size=1, max_size=6))
def test_unicode_fix_equals_ftfy_on_arbitrary_text(name: str, texts: list[str]) -> None:
    import ftfy

    stage = STAGES[name]
    cfg = stage.ftfy_config()
    got = stage.transform(pa.array(texts, pa.large_string())).texts.to_pylist()
    for text, out in zip(texts, got, strict=True):
        once = ftfy.fix_text(text, cfg)
        if ftfy.fix_text(once, cfg) == once:
            assert out == once  # ftfy is stable here: exactly its output
        else:
            # ftfy's own second pass would change its output: the stage goes on to the
            # text ftfy leaves alone, reached by repeating fix_text
            stable = once
            while ftfy.fix_text(stable, cfg) != stable:
                stable = ftfy.fix_text(stable, cfg)
            assert out == stable


@pytest.mark.parametrize("name", sorted(STAGES))
def test_standalone_kinds(name: str) -> None:
    import datasets
    import polars as pl

    stage = STAGES[name]
    texts = ["sÃ³lo\u200b  x\r\n", "<|endoftext|>caf&eacute;\x00 ", "plain"]
    expected = stage.transform(pa.array(texts, pa.large_string())).texts.to_pylist()
    assert [stage(t) for t in texts] == expected
    assert stage(texts) == expected
    assert stage(pa.array(texts)).to_pylist() == expected
    assert stage(pl.Series("t", texts)).to_list() == expected
    ds = datasets.Dataset.from_dict({"text": texts, "n": [1, 2, 3]})
    out = ds.map(stage, batched=True)
    assert out["text"] == expected and out["n"] == [1, 2, 3]
