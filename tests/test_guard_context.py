"""context_length and trainable_tokens: fixtures, and exact counts on the real corpora."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from guard_data import read_records, read_t0, strip_endoftext

from cleanpipe.contract.stage import BatchContext
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.stages.trainable_tokens import TrainableTokens
from cleanpipe.templating.word_tokenizer import word_tokenizer_file
from tests.conftest import realdata

SFT_FILES = [
    ("sft_llamafactory_demos", "alpaca_en_demo.json"),
    ("sft_llamafactory_demos", "alpaca_zh_demo.json"),
    ("sft_llamafactory_demos", "glaive_toolcall_en_demo.json"),
    ("sft_llamafactory_demos", "glaive_toolcall_zh_demo.json"),
    ("sft_llamafactory_demos", "identity.json"),
    ("sft_medicalgpt_zh", "sharegpt_zh_1K_format.jsonl"),
    ("sft_medicalgpt_zh", "medical_sft_1K_format.jsonl"),
    ("sft_medicalgpt_zh", "glaive_toolcall_zh_demo.jsonl"),
]


@pytest.fixture
def word_tok() -> str:
    return word_tokenizer_file()


def _batch(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows)


def _run(stage, batch):
    stage.setup()
    return stage.process(batch, BatchContext(batch))


def test_flag_drop_and_counts(word_tok: str) -> None:
    b = _batch([{"p": "a b", "o": "c"}, {"p": "a b c d e", "o": "f"}, {"p": "", "o": ""}])
    res = _run(ContextLength(tokenizer=word_tok, max_length=4, template="{p} {o}",
                             action="flag"), b)
    assert res.findings.positions().tolist() == [1]
    assert res.findings.chunks[0].detail == ["6 tokens > 4"]
    assert res.metrics["too_long"] == 1


def test_truncate_keeps_trainable(word_tok: str) -> None:
    b = _batch([{"p": "a b", "o": "c d e f g"}, {"p": "a b c d e", "o": "f"},
                {"p": "x", "o": "y"}])
    stage = ContextLength(tokenizer=word_tok, max_length=4, template="{p} {o}",
                         actions={"too_long": "fix"})
    res = _run(stage, b)
    assert res.batch.column("o").to_pylist()[0] == "c d"
    assert res.batch.column("o").to_pylist()[1:] == ["f", "y"]
    drops = res.findings.positions(res.findings.chunks[-1].action)
    assert drops.tolist() == [1]  # the prompt alone is over the window: dropped
    after = stage.measure(res.batch.slice(0, 1), None)
    assert after.counts[0] <= 4


@pytest.mark.realdata
def test_truncate_chat_last_answer() -> None:
    tok = str(realdata("tokenizers", "qwen3"))
    long = "word " * 400
    b = pa.RecordBatch.from_pylist([{"conversations": [
        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "ok"},
        {"from": "human", "value": "tell me"}, {"from": "gpt", "value": long}]}])
    stage = ContextLength(tokenizer=tok, max_length=100, actions={"too_long": "fix"})
    res = _run(stage, b)
    new = res.batch.column("conversations").to_pylist()[0]
    assert new[1]["value"] == "ok" and 0 < len(new[3]["value"]) < len(long)
    m = stage.measure(res.batch, None)
    assert 90 <= m.counts[0] <= 100


def test_pickles_without_tokenizer(word_tok: str) -> None:
    import pickle

    s = ContextLength(tokenizer=word_tok, max_length=4, template="{p} {o}")
    s.setup()
    clone = pickle.loads(pickle.dumps(s))
    assert clone._tok is None and clone.max_length == 4


def _check_counts(stage: ContextLength, batch: pa.RecordBatch, limit: int) -> int:
    """Counted rows equal full encoding; skipped rows are provably under the limit. Returns
    how many rows owe their count or bound to the tokenizer (not to their size alone)."""
    m = stage.measure(batch, limit)
    by_size = stage.tok.upper_bound(m.rendered.texts, limit, m.add_special_tokens)
    texts = m.rendered.texts.to_pylist()
    full = np.array([len(e.ids) for e in stage.tok.tokenizer.encode_batch(
        [t or "" for t in texts], add_special_tokens=m.add_special_tokens)])
    counted = m.counts >= 0
    np.testing.assert_array_equal(m.counts[counted], full[counted])
    assert np.all(full[~counted] <= m.bound[~counted])
    assert np.all(m.bound[~counted] <= limit)
    # The stage's findings agree with the full encoding (on a slice, to keep the suite fast).
    part = batch.slice(0, 300)
    res = stage.process(part, BatchContext(part))
    assert set(res.findings.positions().tolist()) == \
        set(np.flatnonzero(full[:300] > limit).tolist())
    return int((counted | (m.bound < by_size)).sum())


@pytest.mark.realdata
@pytest.mark.parametrize("rows", [
    300, pytest.param(None, marks=pytest.mark.slow, id="every-record")])
@pytest.mark.parametrize("tok", ["qwen3", "bert-minilm"])
@pytest.mark.parametrize("folder,file", SFT_FILES)
def test_counts_equal_full_encoding_sft(tok: str, folder: str, file: str,
                                        rows: int | None) -> None:
    table = read_records(realdata(folder, file))
    if rows is not None:  # the quick suite: the first rows; `make test-slow`: every record
        table = table.slice(0, rows)
    batch = table.combine_chunks().to_batches()[0]
    path = str(realdata("tokenizers", tok))
    tokenized = 0
    if tok == "qwen3":  # the chat template
        s = ContextLength(tokenizer=path, max_length=512)
        s.setup()
        tokenized += _check_counts(s, batch, 512)
    if "instruction" in batch.schema.names:
        s = ContextLength(tokenizer=path, max_length=256, template="alpaca")
        s.setup()
        tokenized += _check_counts(s, batch, 256)
    else:  # the BERT tokenizer has no chat template: the turns' text, joined
        flat = pc.list_flatten(batch.column("conversations"))
        joined = pa.array(["\n".join(m["value"] or "" for m in conv) for conv in
                           batch.column("conversations").to_pylist()])
        assert len(flat) > 0
        b2 = pa.RecordBatch.from_arrays([joined], ["text"])
        s = ContextLength(tokenizer=path, max_length=256, template="{text}",
                          response_field="text")
        s.setup()
        tokenized += _check_counts(s, b2, 256)
    assert tokenized > 0


def _t0(step: int) -> pa.RecordBatch:
    t = read_t0(realdata("sft_self_instruct_t0_50k"))
    if step > 1:
        t = t.take(pa.array(np.arange(0, t.num_rows, step)))
    return t.combine_chunks().to_batches()[0]


@pytest.mark.realdata
@pytest.mark.parametrize("tok", ["qwen3", "bert-minilm"])
def test_counts_equal_full_encoding_t0_sample(tok: str) -> None:
    batch = _t0(25)
    s = ContextLength(tokenizer=str(realdata("tokenizers", tok)), max_length=512,
                      template="{prompt}{completion}", response_field="completion")
    s.setup()
    assert _check_counts(s, batch, 512) > 100


@pytest.mark.realdata
def test_long_by_size_proven_short_by_some_pieces_t0() -> None:
    # The shipped prompt/completion settings: most records over 4096 bytes are far under
    # 4096 tokens and are proven so by counting only some of their pieces.
    batch = _t0(8)
    s = ContextLength(tokenizer=str(realdata("tokenizers", "qwen3")), max_length=4096,
                      template="{prompt}{completion}", response_field="completion",
                      append_eos=True)
    s.setup()
    m = s.measure(batch, 4096)
    by_size = s.tok.upper_bound(m.rendered.texts, 4096, m.add_special_tokens) > 4096
    partly = by_size & (m.counts < 0)
    assert partly.sum() > 50 and np.all(m.bound[partly] <= 4096)
    _check_counts(s, batch, 4096)


@pytest.mark.realdata
def test_proof_by_pieces_does_not_depend_on_the_piece_cache() -> None:
    # A row proven short by some of its pieces is placed in the report by its bound, so
    # the bound must be the same whatever the worker's cache held: the second half of a
    # batch measured after its first half (t0 repeats passages across prompt templates),
    # and alone by a fresh tokenizer.
    batch = _t0(16)
    kw = dict(tokenizer=str(realdata("tokenizers", "qwen3")), max_length=4096,
              template="{prompt}{completion}", response_field="completion")
    half = batch.num_rows // 2
    whole = ContextLength(**kw).measure(batch, 4096)
    alone = ContextLength(**kw).measure(batch.slice(half), 4096)
    s = ContextLength(**kw)
    s.measure(batch.slice(0, half), 4096)
    after = s.measure(batch.slice(half), 4096)
    by_size = s.tok.upper_bound(alone.rendered.texts, 4096, alone.add_special_tokens)
    assert ((alone.counts < 0) & (alone.bound < by_size)).sum() > 20
    for m in (after, whole):
        np.testing.assert_array_equal(m.counts[-alone.counts.size:], alone.counts)
        np.testing.assert_array_equal(m.bound[-alone.bound.size:], alone.bound)


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.parametrize("tok", ["qwen3", "bert-minilm"])
@pytest.mark.parametrize("limit", [512, 2048])
def test_counts_equal_full_encoding_t0_every_record(tok: str, limit: int) -> None:
    batch = _t0(1)
    s = ContextLength(tokenizer=str(realdata("tokenizers", tok)), max_length=limit,
                      template="{prompt}{completion}", response_field="completion")
    s.setup()
    _check_counts(s, batch, limit)


@pytest.mark.realdata
def test_chat_render_matches_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    from cleanpipe.templating.chat import to_messages
    from cleanpipe.templating.sequences import tools_from_batch

    qdir = realdata("tokenizers", "qwen3")
    ref = transformers.PreTrainedTokenizerFast.from_pretrained(str(qdir))
    s = ContextLength(tokenizer=str(qdir), max_length=4096)
    for folder, file in [("sft_llamafactory_demos", "glaive_toolcall_en_demo.json"),
                         ("sft_medicalgpt_zh", "sharegpt_zh_1K_format.jsonl")]:
        batch = read_records(realdata(folder, file)).slice(0, 60).combine_chunks() \
            .to_batches()[0]
        ours = s.render(batch).texts.to_pylist()
        tools = tools_from_batch(batch, "tools") or [None] * batch.num_rows
        for conv, tl, mine in zip(batch.column("conversations").to_pylist(), tools, ours,
                                  strict=True):
            want = ref.apply_chat_template(to_messages(conv), tools=tl, tokenize=False)
            assert mine == want


def test_trainable_tokens_fixture(word_tok: str) -> None:
    b = _batch([{"p": "a b", "o": "c"}, {"p": "a", "o": ""}, {"p": "a b c", "o": "d"}])
    res = _run(TrainableTokens(tokenizer=word_tok, max_length=3, template="{p} {o}"), b)
    assert res.findings.positions().tolist() == [1, 2]
    assert res.metrics["reasons"] == {"empty_answer": 1, "truncated_away": 1}


@pytest.mark.realdata
def test_trainable_tokens_t0_empty_completions() -> None:
    t = strip_endoftext(read_t0(realdata("sft_self_instruct_t0_50k")))
    # Independent count: completions that are empty once the artifact is removed.
    expected = int(pc.sum(pc.equal(pc.utf8_length(t["completion"]), 0)).as_py())
    assert 1300 <= expected <= 1500
    batch = t.combine_chunks().to_batches()[0]
    s = TrainableTokens(tokenizer=str(realdata("tokenizers", "qwen3")),
                        template="{prompt}{completion}", response_field="completion")
    s.setup()
    res = s.process(batch, BatchContext(batch))
    got = res.findings.positions()
    assert got.size == expected
    lengths = pc.utf8_length(t["completion"]).to_numpy()
    assert np.all(lengths[got] == 0)


@pytest.mark.realdata
def test_trainable_tokens_truncated_away_qwen_chat() -> None:
    tok = str(realdata("tokenizers", "qwen3"))
    b = pa.RecordBatch.from_pylist([
        {"instruction": "word " * 300, "input": "", "output": "answer"},
        {"instruction": "short", "input": "", "output": "answer"},
        {"instruction": "short", "input": "", "output": ""}])
    res = _run(TrainableTokens(tokenizer=tok, max_length=200), b)
    assert res.findings.positions().tolist() == [0, 2]
