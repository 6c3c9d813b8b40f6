"""special_tokens' one-scan path gives the findings and stripped texts of the per-token path."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from guard_data import read_t0

from cleanpipe.stages.special_tokens import SpecialTokens, tokenizer_tokens
from cleanpipe.text.token_scan import (
    can_scan_once,
    scan_each,
    scan_once,
    strip_each,
    strip_once,
)
from tests.conftest import realdata


def _same(texts: list[str | None] | pa.Array, tokens: list[str]) -> int:
    """Assert both paths agree on ``texts``; returns how many strings hold a token."""
    arr = pa.array(texts, pa.large_string()) if isinstance(texts, list) else texts
    arr = pc.fill_null(arr.cast(pa.large_string()), "")
    toks = sorted(set(tokens), key=lambda t: (-len(t), t))
    assert can_scan_once(toks)
    once, each = scan_once(arr, toks), scan_each(arr, toks)
    assert once == each
    assert strip_once(arr, toks).to_pylist() == strip_each(arr, toks).to_pylist()
    return sum(1 for n in each[0] if n)


def _ordered(tokens: list[str]) -> list[str]:
    return sorted(set(tokens), key=lambda t: (-len(t), t))


def test_overlapping_tokens_take_the_exact_path() -> None:
    # Here one scan would hide "bc" behind "ab": the guard must refuse it.
    assert not can_scan_once(["ab", "bc"])
    arr = pa.array(["abc"], pa.large_string())
    assert scan_each(arr, ["ab", "bc"]) == ([["ab", "bc"]], {"ab": 1, "bc": 1})
    assert scan_once(arr, ["ab", "bc"]) != scan_each(arr, ["ab", "bc"])
    for toks in (["aa"], ["aba"], ["<s>", "s>"], ["[CLS]", "CLS"], ["x\x00"]):
        assert not can_scan_once(toks), toks
    # The stage still counts both tokens with an overlapping list.
    res = SpecialTokens(tokens=["ab", "bc"], action="flag").transform(arr)
    assert res.findings.chunks[0].detail == ["ab,bc"]


def test_fixtures_joined_halves_and_neighbours() -> None:
    toks = _ordered(["<|im_start|>", "<|endoftext|>", "<|im_end|>", "[CLS]", "</s>", "<s>",
                     "<|末|>", "a.b*c"])
    texts = ["<|im_<|endoftext|>start|>hi", "<|im_start|><|im_start|>", "[CLS][CLS][CLS]",
             "x</s><s></s>y", "<<|im_end|>|im_end|>>", "<|末|>中<|末|>", "a.b*c axbxc",
             "", "no tokens", "<|im_start", "|>", "<s", "\x00<s>\x00", "<s>" * 50]
    assert _same(texts, toks) == 9
    # Tokens at the ends of neighbouring strings never join across the boundary.
    assert scan_once(pa.array(["x<|im_", "start|>y"], pa.large_string()), toks) == \
        ([[], []], {})


@pytest.mark.realdata
def test_blns_with_tokens_planted() -> None:
    toks = _ordered(tokenizer_tokens(realdata("tokenizers", "qwen3"), include="all")
                    + tokenizer_tokens(realdata("tokenizers", "bert-minilm"))
                    + tokenizer_tokens(realdata("tokenizers", "claude-legacy")))
    blns = json.loads(realdata("blns", "blns.json").read_text(encoding="utf-8"))
    rng = random.Random(18)
    texts: list[str | None] = list(blns)
    for s in blns:
        t = rng.choice(toks)
        cut = rng.randrange(len(s) + 1)
        texts.append(s[:cut] + t + s[cut:])
        half = rng.randrange(1, len(t))
        texts.append(s[:cut] + t[:half] + rng.choice(toks) + t[half:] + s[cut:])
    texts.append(None)
    assert _same(texts, toks) >= 2 * len(blns)


@pytest.mark.realdata
@pytest.mark.parametrize("include", ["special", "all"])
def test_t0_rows(include: str) -> None:
    toks = _ordered(tokenizer_tokens(realdata("tokenizers", "qwen3"), include=include))
    table = read_t0(realdata("sft_self_instruct_t0_50k")).slice(0, 6000)
    for col in ("prompt", "completion"):
        arr = table[col].combine_chunks()
        hit = _same(arr, toks)
        assert (hit > 5000) == (col == "completion")  # every completion ends <|endoftext|>
