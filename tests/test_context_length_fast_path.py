"""context_length's fast path (sound bounds, sentence pieces, no normalising of text that is
already normal) decides every record exactly as ``exact_counts=True`` does, row by row, and
both count what encoding each whole text counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import cleanpipe
from cleanpipe.contract.stage import BatchContext
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.templating.tokenizer import _split
from tests.conftest import realdata
from tests.guard_data import read_t0

SAMPLE_TOKENIZER = str(Path(cleanpipe.__file__).parent / "sample" / "tokenizer")

# Sentence ends next to everything a cut could break: newlines and Unicode spaces after
# them, combining marks (NFC composes them), emoji, CJK, added tokens, digits, quotes.
_PARTS = ["Is it? ", "Yes. ", "No!", " ", "  ", "\n", "\n\u3000", "\n \n", "e\u0301",
          "\u0301", "ﬁ", "中文。", "😊", "<|im_end|>", "3. 5", '"Done." ', "Mr. X. ", ".\t",
          "?\n", "a" * 40, " \u00a0x", "İ", "!" * 5, "x.y. z"]


def _records(n: int, seed: int) -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        prompt = "".join(rng.choice(_PARTS, size=int(rng.integers(0, 60))))
        completion = "".join(rng.choice(_PARTS, size=int(rng.integers(0, 40))))
        out.append({"prompt": prompt, "completion": completion})
    return out


def _compare_row_by_row(tokenizer: str, batch: pa.RecordBatch, limit: int,
                        template: str = "{prompt}{completion}",
                        response: str = "completion") -> int:
    """Fast and exact stages agree on every row; returns how many rows the fast path did
    not tokenize (proven short without it)."""
    kw = dict(tokenizer=tokenizer, max_length=limit, template=template,
              response_field=response, append_eos=True)
    fast, exact = ContextLength(**kw), ContextLength(**kw, exact_counts=True)
    mf, me = fast.measure(batch, limit), exact.measure(batch, limit, exact=True)
    # exact_counts uses the pieces too: check it against encoding each whole text
    whole = [len(e.ids) for e in exact.tok.tokenizer.encode_batch(
        me.rendered.texts.to_pylist(), add_special_tokens=me.add_special_tokens)]
    np.testing.assert_array_equal(me.counts, whole)
    counted = mf.counts >= 0
    np.testing.assert_array_equal(mf.counts[counted], me.counts[counted])
    assert np.all(me.counts[~counted] <= limit)
    assert np.all(me.counts[~counted] <= mf.bound[~counted])
    rf = fast.process(batch, BatchContext(batch))
    re_ = exact.process(batch, BatchContext(batch))
    got = [(c.code, c.action, c.positions.tolist(), c.detail) for c in rf.findings.chunks]
    want = [(c.code, c.action, c.positions.tolist(), c.detail) for c in re_.findings.chunks]
    assert got == want
    assert rf.metrics["too_long"] == re_.metrics["too_long"]
    return int((~counted).sum())


def test_split_cuts_after_sentence_ends_and_line_ends() -> None:
    from cleanpipe.templating.tokenizer import _CUT_SENTENCES

    assert _split(_CUT_SENTENCES, "A. B?\nC! d.e \n x") == ["A.", " B?\n", "C!", " d.e \n x"]
    assert _split(_CUT_SENTENCES, "") == [""]


@pytest.mark.parametrize("limit", [8, 40, 200])
def test_fast_path_equals_exact_on_adversarial_text(limit: int) -> None:
    batch = pa.RecordBatch.from_pylist(_records(300, limit))
    _compare_row_by_row(SAMPLE_TOKENIZER, batch, limit)


@pytest.mark.realdata
@pytest.mark.parametrize("tok", ["qwen3", "bert-minilm"])
def test_fast_path_equals_exact_on_adversarial_text_real_tokenizers(tok: str) -> None:
    batch = pa.RecordBatch.from_pylist(_records(300, 7))
    for limit in (16, 120):
        _compare_row_by_row(str(realdata("tokenizers", tok)), batch, limit)


@pytest.mark.realdata
@pytest.mark.parametrize("limit", [512, 2048])
def test_fast_path_equals_exact_on_t0(limit: int) -> None:
    t = read_t0(realdata("sft_self_instruct_t0_50k"))
    batch = t.take(pa.array(np.arange(0, t.num_rows, 20))).combine_chunks().to_batches()[0]
    skipped = _compare_row_by_row(str(realdata("tokenizers", "qwen3")), batch, limit)
    assert skipped > batch.num_rows // 2  # most are proven short without tokenizing


@pytest.mark.realdata
def test_fast_path_equals_exact_on_alpaca_zh() -> None:
    rows = json.loads(realdata("sft_llamafactory_demos", "alpaca_zh_demo.json")
                      .read_text(encoding="utf-8"))
    batch = pa.RecordBatch.from_pylist(rows)
    for tok in ("qwen3", "bert-minilm"):
        _compare_row_by_row(str(realdata("tokenizers", tok)), batch, 128, template="alpaca",
                            response="output")
