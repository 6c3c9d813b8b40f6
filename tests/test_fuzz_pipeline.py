"""Fuzz: arbitrary Unicode, the naughty strings and random nested records through the whole
pipeline: no crash, and kept + quarantined == read."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleanpipe import Pipeline
from cleanpipe.io.readers import iter_chunks
from cleanpipe.stage_order import REPAIR
from cleanpipe.stages.registry import stage_classes
from tests._robust_helpers import read_parts
from tests.conftest import realdata

FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _stages() -> list:
    """Every registered stage that builds with its defaults (more as branches land),
    plus a regex filter so that rows are dropped too. The repair stage goes first, as the
    pipeline loader requires (cleanpipe.stage_order)."""
    out = []
    for name, cls in sorted(stage_classes().items(), key=lambda item: item[0] != REPAIR):
        if name == "regex_filter":
            continue
        try:
            stage = cls()
            stage.setup()
        except Exception:  # needs parameters (a tokenizer, a label list): not fuzzable here
            continue
        out.append(stage)
    out.append(stage_classes()["regex_filter"](patterns={"q": r"\?", "ctl": r"[\x00-\x08]"}))
    return out


def _check(rep: dict) -> None:
    t = rep["totals"]
    assert t["kept"] + t["quarantined"] == t["read"]


def _write_jsonl(path: Path, records: list) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=bool(i % 2)) + "\n"
                            for i, r in enumerate(records)), encoding="utf-8",
                    errors="surrogatepass")


@FUZZ
@given(texts=st.lists(st.text(), min_size=1, max_size=30))
def test_arbitrary_unicode_in_memory(texts):
    rep = Pipeline(stages=_stages(), fields=["text"]).run(pa.table({"text": texts}), workers=1)
    _check(rep)
    assert rep["totals"]["read"] == len(texts)


@FUZZ
@given(texts=st.lists(st.text(), min_size=1, max_size=30))
def test_arbitrary_unicode_through_files(tmp_path_factory, texts):
    d = tmp_path_factory.mktemp("fz")
    src = d / "in.jsonl"
    # odd rows escaped (\\ud800 style, lone surrogates included), even rows raw UTF-8
    _write_jsonl(src, [{"text": t} for t in texts])
    rep = Pipeline(stages=_stages(), fields=["text"]).run(src, d / "out")
    _check(rep)
    assert rep["totals"]["read"] == len(texts)
    assert (d / "out" / "_SUCCESS").exists()


def test_blns_through_the_pipeline(tmp_path):
    strings = json.loads(realdata("blns", "blns.json").read_text("utf-8"))
    src = tmp_path / "blns.jsonl"
    _write_jsonl(src, [{"text": s, "conversations": [{"from": "human", "value": s}]}
                       for s in strings])
    rep = Pipeline(stages=_stages()).run(src, tmp_path / "out")
    _check(rep)
    assert rep["totals"]["read"] == len(strings)
    # blns.txt read as plain text lines, too
    rep = Pipeline(stages=_stages(), input={"format": "text"}).run(
        realdata("blns", "blns.txt"), tmp_path / "out2")
    _check(rep)


_leaf = st.one_of(st.text(max_size=20), st.integers(-(2 ** 40), 2 ** 40), st.booleans(),
                  st.none(), st.floats(allow_nan=False, allow_infinity=False))
_nested = st.recursive(_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.sampled_from("abcde"), kids, max_size=4)),
    max_leaves=20)
_record = st.fixed_dictionaries({"text": st.text(max_size=40)},
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
