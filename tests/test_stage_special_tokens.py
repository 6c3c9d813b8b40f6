"""special_tokens: qwen3 tokens in t0 completions, strip/flag/drop, idempotent strip."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from cleanpipe.contract.published import SPECIAL_TOKENS
from cleanpipe.stages.special_tokens import SpecialTokens, tokenizer_tokens
from tests.conftest import realdata


def test_list_tokens_and_actions() -> None:
    texts = ["x</s>", "[CLS] y [SEP]", "nothing", None]
    res = SpecialTokens(tokens=["</s>", "[CLS]", "[SEP]"]).transform(pa.array(texts))
    assert res.texts.to_pylist() == ["x", " y ", "nothing", None]
    chunk = res.findings.chunks[0]
    assert chunk.positions.tolist() == [0, 1] and chunk.detail == ["</s>", "[CLS],[SEP]"]
    flag = SpecialTokens(tokens=["</s>"], action="flag").transform(pa.array(texts))
    assert flag.texts.to_pylist() == texts and flag.findings.count() == 1
    drop = SpecialTokens(tokens=["</s>"], action="drop")
    assert drop({"text": texts}) == {"text": texts[1:]}


def test_strip_is_idempotent_when_halves_join() -> None:
    stage = SpecialTokens(tokens=["<|im_start|>", "<|endoftext|>"])
    assert stage("<|im_<|endoftext|>start|>hi") == "hi"


def test_needs_tokens() -> None:
    with pytest.raises(ValueError, match="needs"):
        SpecialTokens()


@pytest.mark.realdata
def test_qwen3_tokens() -> None:
    path = realdata("tokenizers", "qwen3")
    toks = tokenizer_tokens(path)
    assert "<|endoftext|>" in toks and "<|im_start|>" in toks and "<think>" not in toks
    assert "<think>" in tokenizer_tokens(path, include="all")


@pytest.mark.realdata
def test_t0_endoftext_in_every_completion() -> None:
    tok = realdata("tokenizers", "qwen3")
    folder = realdata("sft_self_instruct_t0_50k", "data_per_template")
    prompts, completions = [], []
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                prompts.append(r["prompt"])
                completions.append(r["completion"])
    assert len(completions) == 55185
    stage = SpecialTokens(tokenizer=str(tok))
    res = stage.transform(pa.array(completions, pa.large_string()))
    assert res.findings.count("special_token") == 55185
    assert res.metrics[SPECIAL_TOKENS] == {"<|endoftext|>": 55185}
    expected = [c[: -len("<|endoftext|>")] for c in completions]
    assert all(c.endswith("<|endoftext|>") for c in completions)
    assert res.texts.to_pylist() == expected
    assert not SpecialTokens(tokenizer=str(tok)).transform(
        pa.array(prompts, pa.large_string())).findings
