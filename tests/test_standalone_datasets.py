"""Stages on ``datasets`` objects: inside ``Dataset.map`` and on a whole ``Dataset``."""

from __future__ import annotations

import json

import datasets
import pytest

from cleanpipe.contract.standalone import RowWouldBeDropped, WholeDatasetRequired
from cleanpipe.stages.control_chars import ControlChars
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.invisible_chars import InvisibleChars
from cleanpipe.stages.minhash_dedup import MinHashDedup
from cleanpipe.stages.regex_filter import RegexFilter
from cleanpipe.stages.special_tokens import SpecialTokens
from cleanpipe.stages.unicode_fix import UnicodeFix
from cleanpipe.stages.whitespace import Whitespace
from tests.conftest import realdata

FIELDS = ["instruction", "input", "output"]


def _alpaca_zh() -> datasets.Dataset:
    with open(realdata("sft_llamafactory_demos", "alpaca_zh_demo.json"), encoding="utf-8") as f:
        rows = json.load(f)
    return datasets.Dataset.from_list([{k: r.get(k, "") for k in FIELDS} for r in rows])


def test_text_stage_in_map_with_and_without_batched() -> None:
    ds = datasets.Dataset.from_dict({"text": ["zero\u200bwidth", "plain", None], "n": [1, 2, 3]})
    want = ["zerowidth", "plain", None]
    assert ds.map(InvisibleChars(), batched=True)["text"] == want
    assert ds.map(InvisibleChars())["text"] == want
    assert ds.map(InvisibleChars())["n"] == [1, 2, 3]


@pytest.mark.parametrize(("make", "text", "want"), [
    (lambda: ControlChars(), "a\x00b\rc", "ab\nc"),
    (lambda: UnicodeFix(), "caf&eacute;", "café"),
    (lambda: Whitespace(action="fix"), " a\u00a0b ", "a b"),
    (lambda: SpecialTokens(tokens=["<|endoftext|>"]), "done<|endoftext|>", "done"),
], ids=["control_chars", "unicode_fix", "whitespace", "special_tokens"])
def test_every_text_stage_in_map_with_and_without_batched(make, text: str, want: str) -> None:
    ds = datasets.Dataset.from_dict({"text": [text, "plain"], "n": [1, 2]})
    for batched in (True, False):
        out = ds.map(make(), batched=batched)
        assert out["text"] == [want, "plain"] and out["n"] == [1, 2], batched


def test_unbatched_map_refuses_a_row_it_cannot_remove() -> None:
    ds = datasets.Dataset.from_dict({"text": ["keep me", "secret token"]})
    stage = RegexFilter(patterns={"secret": "secret"})
    assert ds.map(stage, batched=True)["text"] == ["keep me"]
    with pytest.raises(RowWouldBeDropped, match="batched=True"):
        ds.map(stage)


@pytest.mark.parametrize("stage", [MinHashDedup(fields=FIELDS), ExactDedup(fields=FIELDS)])
def test_global_stage_refuses_dataset_map(stage) -> None:
    ds = datasets.Dataset.from_dict({k: ["a", "a", "b"] for k in FIELDS})
    with pytest.raises(WholeDatasetRequired, match=r"whole dataset.*\(ds\)"):
        ds.map(stage, batched=True, batch_size=2)
    with pytest.raises(WholeDatasetRequired):
        ds.map(stage)


@pytest.mark.realdata
def test_exact_dedup_on_a_whole_dataset_matches_an_independent_grouping() -> None:
    ds = _alpaca_zh()
    out = ExactDedup(fields=FIELDS)(ds)
    assert isinstance(out, datasets.Dataset)
    assert out.features == ds.features
    # Oracle: the first row of each group of rows equal after whitespace folding.
    seen, want = set(), []
    for row in ds:
        key = tuple(" ".join((row[k] or "").split()) for k in FIELDS)
        if key not in seen:
            seen.add(key)
            want.append(row)
    assert out.to_list() == want
    assert len(want) < len(ds)  # the demo set holds duplicates: the check is not vacuous
