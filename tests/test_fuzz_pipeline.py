"""Fuzz: arbitrary Unicode, the naughty strings and random nested records through the whole
pipeline: no crash, and kept + quarantined == read."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleanpipe import Pipeline
from cleanpipe.cli import SAMPLE_DIR
from cleanpipe.io.readers import iter_chunks
from cleanpipe.stage_order import REPAIR
from cleanpipe.stages.registry import stage_classes
from tests._robust_helpers import read_parts
from tests.conftest import realdata

FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

TOKENIZER = str(SAMPLE_DIR / "tokenizer")  # the bundled byte-level BPE (1000 ids)
LABELS_FILE = SAMPLE_DIR / "labels.json"
LABELS: list[str] = json.loads(LABELS_FILE.read_text("utf-8"))
VOCAB = 1000

# What each stage needs to run on the fuzzed records (the rest build with their defaults):
# the tokenizer stages use the sample tokenizer; labels, numeric and token_ids check the
# label, score and input_ids columns the records carry; a regex filter so that rows are
# dropped too.
PARAMS: dict[str, dict] = {
    "context_length": {"tokenizer": TOKENIZER, "max_length": 24, "template": "{text}"},
    "labels": {"labels_file": str(LABELS_FILE)},
    "numeric": {"fields": ["score"], "ranges": {"score": (0, 1)}},
    "regex_filter": {"patterns": {"q": r"\?", "ctl": r"[\x00-\x08]"}},
    "special_tokens": {"tokenizer": TOKENIZER},
    "token_ids": {"tokenizer": TOKENIZER},
    "trainable_tokens": {"tokenizer": TOKENIZER, "max_length": 24, "template": "{text}"},
}
# stages that read a column of their own, which plain text input does not have
COLUMN_STAGES = {"labels", "numeric", "token_ids"}


def _stages(text_only: bool = False) -> list:
    """Every registered stage (or, for plain text input, every one that needs no column of
    its own), set up with PARAMS: a stage that cannot be built fails the test. The repair
    stage goes first, as the pipeline loader requires (cleanpipe.stage_order)."""
    out = []
    for name, cls in sorted(stage_classes().items(), key=lambda item: item[0] != REPAIR):
        if text_only and name in COLUMN_STAGES:
            continue
        stage = cls(**PARAMS.get(name, {}))
        stage.setup()
        out.append(stage)
    return out


def _check(rep: dict, text_only: bool = False) -> None:
    t = rep["totals"]
    assert t["kept"] + t["quarantined"] == t["read"]
    # every registered stage took part in the run
    expected = set(stage_classes()) - (COLUMN_STAGES if text_only else set())
    assert {s["name"] for s in rep["stages"]} == expected


# the columns of the column stages: valid values and every kind of wrong one
_label = st.one_of(st.sampled_from(LABELS), st.text(max_size=8), st.none())
_score = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())
_ids = st.one_of(st.lists(st.integers(-3, VOCAB + 3), max_size=8), st.none())
_row = st.fixed_dictionaries({"text": st.text(), "label": _label, "score": _score,
                              "input_ids": _ids})


def test_every_registered_stage_is_fuzzed() -> None:
    assert {s.name for s in _stages()} == set(stage_classes())
    assert set(PARAMS) <= set(stage_classes())  # no parameters for a stage that is gone


def _write_jsonl(path: Path, records: list) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=bool(i % 2)) + "\n"
                            for i, r in enumerate(records)), encoding="utf-8",
                    errors="surrogatepass")


@FUZZ
@given(rows=st.lists(_row, min_size=1, max_size=30))
def test_arbitrary_unicode_in_memory(rows):
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("text", pa.string()), ("label", pa.string()), ("score", pa.float64()),
        ("input_ids", pa.list_(pa.int64()))]))
    rep = Pipeline(stages=_stages(), fields=["text"]).run(table, workers=1)
    _check(rep)
    assert rep["totals"]["read"] == len(rows)


@FUZZ
@given(rows=st.lists(_row, min_size=1, max_size=30))
def test_arbitrary_unicode_through_files(tmp_path_factory, rows):
    d = tmp_path_factory.mktemp("fz")
    src = d / "in.jsonl"
    # odd rows escaped (\\ud800 style, lone surrogates included), even rows raw UTF-8
    _write_jsonl(src, rows)
    rep = Pipeline(stages=_stages(), fields=["text"]).run(src, d / "out")
    _check(rep)
    assert rep["totals"]["read"] == len(rows)
    assert (d / "out" / "_SUCCESS").exists()


@pytest.mark.realdata
def test_blns_through_the_pipeline(tmp_path):
    strings = json.loads(realdata("blns", "blns.json").read_text("utf-8"))
    src = tmp_path / "blns.jsonl"
    _write_jsonl(src, [{"text": s, "conversations": [{"from": "human", "value": s}],
                        "label": LABELS[i % len(LABELS)], "score": 0.5, "input_ids": [i]}
                       for i, s in enumerate(strings)])
    rep = Pipeline(stages=_stages()).run(src, tmp_path / "out")
    _check(rep)
    assert rep["totals"]["read"] == len(strings)
    # blns.txt read as plain text lines, too
    rep = Pipeline(stages=_stages(text_only=True), input={"format": "text"}).run(
        realdata("blns", "blns.txt"), tmp_path / "out2")
    _check(rep, text_only=True)


_leaf = st.one_of(st.text(max_size=20), st.integers(-(2 ** 40), 2 ** 40), st.booleans(),
                  st.none(), st.floats(allow_nan=False, allow_infinity=False))
_nested = st.recursive(_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.sampled_from("abcde"), kids, max_size=4)),
    max_leaves=20)
_record = st.fixed_dictionaries({"text": st.text(max_size=40), "label": _label,
                                 "score": _score, "input_ids": _ids},
                                optional={"meta": _nested, "n": _nested, "x": _leaf})


@FUZZ
@given(records=st.lists(_record, min_size=1, max_size=25))
def test_random_nested_records(tmp_path_factory, records):
    """Empty objects, values whose types clash inside a column, nesting: the run never
    stops; a record that does not fit its column is quarantined as it was, the rest is
    kept, and the output opens with datasets."""
    d = tmp_path_factory.mktemp("nest")
    src = d / "in.jsonl"
    _write_jsonl(src, records)
    lines = src.read_text("utf-8").split("\n")  # not splitlines(): U+0085 is no line end here
    # the reader keeps every field of every record it does not drop: all keys, same text
    rows, bad_lines = [], set()
    for chunk in iter_chunks(src):
        bad_lines |= {b.line for b in chunk.bad}
        rows += chunk.batch.to_pylist()
    kept = [r for i, r in enumerate(records, start=1) if i not in bad_lines]
    assert [r["text"] for r in rows] == [r["text"] for r in kept]
    for row, rec in zip(rows, kept, strict=True):
        assert {k for k, v in rec.items() if v is not None} <= set(row)
    out = d / "out"
    rep = Pipeline(stages=_stages(), fields=["text"]).run(src, out)
    _check(rep)
    assert rep["totals"]["read"] == len(records)
    data, quarantine = read_parts(out / "data"), read_parts(out / "quarantine")
    assert (data.num_rows, quarantine.num_rows) == (rep["totals"]["kept"],
                                                    rep["totals"]["quarantined"])
    ids = quarantine.column("_cleanpipe_row_id").to_pylist()
    assert len(set(ids)) == len(ids)
    for rid, stage, raw in zip(ids, quarantine.column("_cleanpipe_stage").to_pylist(),
                               quarantine.column("_cleanpipe_raw").to_pylist(), strict=True):
        if stage == "read":  # dropped by the reader: the line as it was, nothing lost
            assert raw == lines[int(rid.split(":")[1]) - 1]
    for config, n in (("default", data.num_rows), ("quarantine", quarantine.num_rows)):
        if n:  # (datasets refuses a split with no rows, whatever the files say)
            # a cache per example: datasets would otherwise serve another example's "out"
            ds = datasets.load_dataset(str(out), config, split="train",
                                       cache_dir=str(d / "hf-cache"))
            assert ds.num_rows == n
