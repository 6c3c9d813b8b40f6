"""labels, token_ids, numeric, schema and outliers: fixtures and real data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from guard_data import read_records

from cleanpipe.contract.published import LABELS
from cleanpipe.contract.stage import BatchContext
from cleanpipe.pipeline import Pipeline
from cleanpipe.stages.labels import LabelCheck
from cleanpipe.stages.numeric import NumericCheck
from cleanpipe.stages.outliers import Outliers
from cleanpipe.stages.schema import SchemaCheck
from cleanpipe.stages.token_ids import TokenIdCheck
from tests.conftest import realdata


def _run(stage, rows_or_batch):
    b = rows_or_batch if isinstance(rows_or_batch, pa.RecordBatch) else \
        pa.RecordBatch.from_pylist(rows_or_batch)
    stage.setup()
    return stage.process(b, BatchContext(b))


def _banking() -> pa.RecordBatch:
    with open(realdata("cls_banking77", "train.csv"), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return pa.RecordBatch.from_pylist(rows)


@pytest.mark.realdata
def test_banking77_all_valid_then_ten_corrupted() -> None:
    cats = str(realdata("cls_banking77", "categories.json"))
    b = _banking()
    res = _run(LabelCheck(field="category", labels_file=cats), b)
    assert res.findings.count() == 0
    assert sum(res.metrics[LABELS].values()) == b.num_rows
    assert len(res.metrics[LABELS]) == 77
    # Corrupt ten rows in a copy: unknown strings, a near-miss, nulls.
    rng = np.random.default_rng(7)
    bad = sorted(rng.choice(b.num_rows, 10, replace=False).tolist())
    labels = b.column("category").to_pylist()
    for k, i in enumerate(bad):
        labels[i] = [None, "card_arrivall", "not_a_label", "CARD_ARRIVAL", ""][k % 5]
    b2 = b.set_column(1, "category", pa.array(labels, pa.string()))
    res2 = _run(LabelCheck(field="category", labels_file=cats), b2)
    assert res2.findings.positions().tolist() == bad
    assert res2.findings.count("null_label") == 2
    assert res2.metrics["unknown_labels"]["not_a_label"] == 2


@pytest.mark.realdata
def test_banking77_mapping_applied_and_verified() -> None:
    cats = str(realdata("cls_banking77", "categories.json"))
    b = _banking().slice(0, 500)
    res = _run(LabelCheck(field="category", labels_file=cats, id_field="label_id"), b)
    ids = res.batch.column("label_id").to_pylist()
    vocab = json.loads(open(cats, encoding="utf-8").read())
    assert [vocab[i] for i in ids] == b.column("category").to_pylist()
    wrong = res.batch.set_column(2, "label_id", pa.array([(i + 1) % 77 for i in ids[:3]]
                                                        + ids[3:]))
    res2 = _run(LabelCheck(field="category", labels_file=cats, id_field="label_id"), wrong)
    assert res2.findings.positions().tolist() == [0, 1, 2]


@pytest.mark.realdata
def test_tnews_int_vs_string_and_missing_ids() -> None:
    lab = str(realdata("cls_fewclue_tnews_iflytek_eprstmt", "tnews", "label_index2en2zh.json"))
    b = read_records(realdata("cls_fewclue_tnews_iflytek_eprstmt", "tnews",
                              "train_few_all.json")).combine_chunks().to_batches()[0]
    stage = LabelCheck(field="label", labels_file=lab)
    res = _run(stage, b)
    assert res.findings.count("label_type_mismatch") == b.num_rows
    detail = res.findings.chunks[0].detail[0]
    assert "int64 in the data but strings" in detail
    assert res.findings.count("unknown_label") == 0
    assert set(res.metrics["ids_missing_from_label_file"]) == {"105", "111"}
    # With num_labels the trainer's view (ids 0..14) every TNEWS label is out of range.
    res2 = _run(LabelCheck(field="label", num_labels=15), b)
    assert res2.findings.count("unknown_label") == b.num_rows


def test_multi_and_token_labels() -> None:
    res = _run(LabelCheck(labels=["a", "b"], kind="multi"),
               [{"label": ["a", "b"]}, {"label": ["a", "z"]}, {"label": []}])
    assert res.findings.positions().tolist() == [1]
    res = _run(LabelCheck(num_labels=3, kind="token"),
               [{"label": [-100, 0, 2]}, {"label": [3, -100]}, {"label": [-1]}])
    assert res.findings.positions().tolist() == [1, 2]


@pytest.mark.realdata
def test_token_ids_on_qwen3_pretokenized() -> None:
    qwen = realdata("tokenizers", "qwen3")
    from cleanpipe.templating import LoadedTokenizer

    tok = LoadedTokenizer.load(qwen)
    rows = read_records(realdata("sft_llamafactory_demos", "alpaca_en_demo.json")).slice(0, 200)
    prompts = rows.column("instruction").to_pylist()
    answers = rows.column("output").to_pylist()
    ep = tok.tokenizer.encode_batch(prompts, add_special_tokens=False)
    ea = tok.tokenizer.encode_batch(answers, add_special_tokens=False)
    data = []
    for p, a in zip(ep, ea, strict=True):
        ids = p.ids + a.ids
        data.append({"input_ids": ids, "labels": [-100] * len(p.ids) + a.ids,
                     "attention_mask": [1] * len(ids)})
    data[5]["input_ids"][3] = tok.vocab_size          # one past the tokenizer
    data[9]["input_ids"][0] = 151_936 + 10            # past the embedding too
    data[17]["labels"] = [-100] * len(data[17]["labels"])
    data[23]["attention_mask"] = data[23]["attention_mask"][:-1]
    res = _run(TokenIdCheck(tokenizer=str(qwen)), data)
    assert sorted(res.findings.positions().tolist()) == [5, 9, 17, 23]
    assert res.findings.count("id_out_of_range") == 2
    assert res.findings.count("all_labels_masked") == 1
    assert res.metrics["tokenizer_vocab_size"] == 151_669
    # A model embedding smaller than the tokenizer: the mismatch is reported.
    res2 = _run(TokenIdCheck(tokenizer=str(qwen), vocab_size=151_643), data)
    assert res2.metrics["vocab_size_mismatch"] == 1


@pytest.mark.realdata
def test_token_ids_config_json() -> None:
    cfg = realdata("tokenizers", "bert-minilm")
    res = _run(TokenIdCheck(config=str(cfg), labels_field=None),
               [{"input_ids": [101, 30521, 102]}, {"input_ids": [101, 30522]}])
    assert res.findings.positions().tolist() == [1]


def test_numeric() -> None:
    res = _run(NumericCheck(fields=["reward", "w"], ranges={"w": (0, None)}),
               [{"reward": 1.0, "w": 1}, {"reward": float("nan"), "w": 1},
                {"reward": float("-inf"), "w": 1}, {"reward": None, "w": -2}])
    assert res.findings.codes() == {"nan": 1, "inf": 1, "null": 1, "out_of_range": 1}
    assert res.metrics["reward"]["nan"] == 1


def test_schema_chat_and_preference_fixture() -> None:
    def conv(*turns):
        return {"conversations": [{"from": f, "value": v} for f, v in turns],
                "chosen": "a", "rejected": "b"}
    rows = [conv(("human", "q"), ("gpt", "a")),
            conv(("gpt", "a")),
            conv(("human", "q"), ("human", "q2"), ("gpt", "a")),
            conv(("human", "q"), ("gpt", " ")),
            conv(("human", "q"), ("wizard", "a")),
            {**conv(("human", "q"), ("gpt", "a")), "rejected": "a"}]
    res = _run(SchemaCheck(required=["conversations"]), rows)
    f = res.findings
    pos = {c.code: c.positions.tolist() for c in f.chunks}
    assert pos["bad_first_role"] == [1]
    assert pos["not_alternating"] == [2]
    assert pos["empty_assistant"] == [3]
    assert pos["unknown_role"] == [4] and pos["bad_last_role"] == [4]
    assert pos["chosen_equals_rejected"] == [5]


@pytest.mark.realdata
@pytest.mark.parametrize("folder,file", [("sft_llamafactory_demos", "dpo_en_demo.json"),
                                         ("sft_medicalgpt_zh", "dpo_zh_500.jsonl")])
def test_schema_real_dpo(folder: str, file: str) -> None:
    b = read_records(realdata(folder, file)).combine_chunks().to_batches()[0]
    res = _run(SchemaCheck(required=["conversations", "chosen", "rejected"],
                           last_roles=["user"]), b)
    # Independent check of the pair rule on the same rows.
    def text(v):
        return v["value"] if isinstance(v, dict) else v
    ch = [text(v) for v in b.column("chosen").to_pylist()]
    rj = [text(v) for v in b.column("rejected").to_pylist()]
    same = [i for i, (a, c) in enumerate(zip(ch, rj, strict=True)) if a == c]
    assert res.findings.count("chosen_equals_rejected") == len(same)
    assert res.findings.count("unknown_role") == 0


def test_outliers_flags_extremes() -> None:
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta"]
    rows = [" ".join(rng.choice(words, rng.integers(8, 14))) for _ in range(300)]
    rows += ["7" * 40 + " 123", "x" * 20_000]
    b = pa.RecordBatch.from_pylist([{"text": t} for t in rows])
    s = Outliers(fields=["text"])
    ctx = BatchContext(b, ["text"])
    seq = np.arange(b.num_rows)
    s.observe(s.prepare(b, ctx), seq, b, ctx)
    s.finalize()
    res = s.decide(b, seq, ctx)
    assert res.findings.positions().tolist() == [300, 301]


def _outlier_positions(s: Outliers, rows: list[str]) -> list[int]:
    b = pa.RecordBatch.from_pylist([{"text": t} for t in rows])
    ctx = BatchContext(b, ["text"])
    seq = np.arange(b.num_rows)
    s.observe(s.prepare(b, ctx), seq, b, ctx)
    s.finalize()
    return s.decide(b, seq, ctx).findings.positions().tolist()


def test_outliers_zero_mad_needs_a_real_difference() -> None:
    # Most rows have no digit, so the digit ratio's MAD is zero: one digit in a sentence is
    # not an outlier, a row that is mostly digits is.
    rows = [f"please tell me about my card number {w} today" for w in ["a", "b", "c"] * 40]
    rows += ["I was charged 5 euros twice", "my pin is 1234 and it fails"]
    rows += ["4485 2931 0077 1234 9981 0001"]
    assert _outlier_positions(Outliers(fields=["text"]), rows) == [len(rows) - 1]


@pytest.mark.realdata
def test_outliers_on_banking77_flag_no_row_for_a_few_digits() -> None:
    import pyarrow.csv as pcsv

    t = pcsv.read_csv(realdata("cls_banking77", "train.csv"))
    texts = t.column("text").to_pylist()
    planted = "0000 1111 2222 3333 4444 5555 6666"
    flagged = _outlier_positions(Outliers(fields=["text"]), [*texts, planted])
    assert len(texts) in flagged
    for i in flagged[:-1]:
        t_ = texts[i]
        digits = sum(c.isdigit() for c in t_) / max(len(t_), 1)
        letters = sum(c.isalpha() for c in t_) / max(len(t_), 1)
        # An independent reading of "really unusual": mostly digits or few letters, or a
        # length far outside the corpus (banking77 utterances are 10-400 characters).
        assert digits > 0.25 or letters < 0.5 or not 10 <= len(t_) <= 400, t_


@pytest.mark.realdata
def test_outliers_tokens_feature_loads_its_tokenizer_once(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    # The tokens feature loaded the tokenizer for every batch (~0.35 s each for Qwen3); it
    # is loaded once per process now, and a pickled stage does not carry it.
    import pickle

    from cleanpipe.templating.tokenizer import LoadedTokenizer

    loads: list[str] = []
    real = LoadedTokenizer.load.__func__  # type: ignore[attr-defined]

    def counting(cls: type[LoadedTokenizer], path: str) -> LoadedTokenizer:
        loads.append(str(path))
        return real(cls, path)

    monkeypatch.setattr(LoadedTokenizer, "load", classmethod(counting))
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"row {i} " + "word " * (i % 13)}) + "\n"
                           for i in range(300)), encoding="utf-8")
    stage = Outliers(fields=["text"], features=["chars", "tokens"],
                     tokenizer=str(realdata("tokenizers", "qwen3")))
    rep = Pipeline(stages=[stage], fields=["text"], batch_size=50).run(src, workers=1)
    assert rep["totals"]["read"] == 300
    assert len(loads) == 1
    assert len(pickle.dumps(stage)) < 10_000
