"""Nested records: empty objects are stored (as null, on record), and a value whose type
clashes with its column costs that record, not the run; both deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from cleanpipe import Pipeline
from cleanpipe.io.readers import ReadOptions, iter_chunks
from cleanpipe.io.sources import InputError
from tests._robust_helpers import cli, read_parts, report, write_pipeline


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    return path


def _load(out: Path, config: str = "default") -> datasets.Dataset:
    # a cache per output: datasets keys its cache by folder name and would mix "out"s
    return datasets.load_dataset(str(out), config, split="train",
                                 cache_dir=str(out.parent / f"hf-cache-{out.name}"))


def _events(out: Path, code: str) -> list[dict]:
    return [e for e in pq.read_table(out / "events.parquet").to_pylist() if e["code"] == code]


# ---------------------------------------------------------------------- empty objects


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "hf"])
def test_empty_object_values_are_written_and_on_record(tmp_path, fmt):
    src = _jsonl(tmp_path / "x.jsonl", [{"text": "a", "meta": {}}, {"text": "b", "meta": None},
                                        {"text": "c", "meta": {}}])
    out = tmp_path / "out"
    rep = Pipeline(stages=[], output={"format": fmt}).run(src, out)
    assert rep["totals"] == {**rep["totals"], "read": 3, "kept": 3, "quarantined": 0}
    if fmt == "hf":
        ds = datasets.load_from_disk(str(out / "data"))
    else:
        ds = _load(out)
    assert ds.to_list() == [{"text": "a", "meta": None}, {"text": "b", "meta": None},
                            {"text": "c", "meta": None}]
    # {} became null: each such row has a fix event naming the field, and the report says so
    ev = _events(out, "empty_object")
    assert [(e["row_id"], e["stage"], e["action"], e["field"]) for e in ev] == [
        ("x.jsonl:1", "read", "fix", "meta"), ("x.jsonl:3", "read", "fix", "meta")]
    assert "Parquet cannot store an object with no keys" in ev[0]["detail"]
    assert {"stage": "read", "code": "empty_object", "action": "fix", "events": 2,
            "rows": 2} in rep["reasons"]
    assert rep["totals"]["changed"] == 2


def test_nested_empty_objects_in_lists(tmp_path):
    src = _jsonl(tmp_path / "x.jsonl", [
        {"text": "a", "turns": [{}, {}], "m": {"k": {}, "n": 1}},
        {"text": "b", "turns": [], "m": {"k": None, "n": 2}},
        {"text": "c", "turns": [{}], "m": None}])
    out = tmp_path / "out"
    rep = Pipeline(stages=[]).run(src, out)
    assert (rep["totals"]["kept"], rep["totals"]["quarantined"]) == (3, 0)
    assert _load(out).to_list() == [
        {"text": "a", "turns": [None, None], "m": {"k": None, "n": 1}},
        {"text": "b", "turns": [], "m": {"k": None, "n": 2}},
        {"text": "c", "turns": [None], "m": None}]
    got = sorted((e["row_id"], e["field"]) for e in _events(out, "empty_object"))
    assert got == [("x.jsonl:1", "m.k"), ("x.jsonl:1", "turns[*]"), ("x.jsonl:3", "turns[*]")]


def test_empty_objects_next_to_keys_unify_across_shards(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    _jsonl(d / "a.jsonl", [{"text": "a", "meta": {}}])  # struct<> here ...
    _jsonl(d / "b.jsonl", [{"text": "b", "meta": {"src": "web"}}])  # ... struct<src> here
    out = tmp_path / "out"
    rep = Pipeline(stages=[]).run(d, out)
    assert rep["totals"]["kept"] == 2
    assert _load(out).to_list() == [{"text": "a", "meta": None},
                                    {"text": "b", "meta": {"src": "web"}}]


def test_empty_object_in_a_json_array_file(tmp_path):
    src = tmp_path / "x.json"
    src.write_text('[{"text": "a", "meta": {}}, {"text": "b", "meta": {}}]', "utf-8")
    out = tmp_path / "out"
    rep = Pipeline(stages=[]).run(src, out)
    assert rep["totals"]["kept"] == 2 and len(_events(out, "empty_object")) == 2


# ---------------------------------------------------------------------- type clashes


def test_int_vs_str_in_one_column_quarantines_the_minority(tmp_path):
    lines = [{"text": "a", "label": 1}, {"text": "b", "label": "two"}, {"text": "c", "label": 3},
             {"text": "d", "label": None}]
    src = _jsonl(tmp_path / "x.jsonl", lines)
    out = tmp_path / "out"
    rep = Pipeline(stages=[]).run(src, out)
    assert rep["totals"] == {**rep["totals"], "read": 4, "kept": 3, "quarantined": 1}
    assert _load(out)["label"] == [1, 3, None]
    q = read_parts(out / "quarantine")
    assert q.column("_cleanpipe_row_id").to_pylist() == ["x.jsonl:2"]
    assert q.column("_cleanpipe_reasons").to_pylist() == [["type_mismatch"]]
    detail = q.column("_cleanpipe_details").to_pylist()[0][0]
    assert "'label'" in detail and "x.jsonl" in detail and "line 2" in detail
    # nothing lost: the line as it was
    assert json.loads(q.column("_cleanpipe_raw").to_pylist()[0]) == lines[1]


def test_list_vs_object_nested_in_one_column(tmp_path):
    src = _jsonl(tmp_path / "x.jsonl", [
        {"text": "a", "meta": {"tags": ["x"]}}, {"text": "b", "meta": {"tags": {"x": 1}}},
        {"text": "c", "meta": {"tags": ["y", "z"]}}, {"text": "d", "meta": {"tags": [1]}}])
    out = tmp_path / "out"
    rep = Pipeline(stages=[]).run(src, out)
    assert (rep["totals"]["kept"], rep["totals"]["quarantined"]) == (2, 2)
    assert _load(out)["text"] == ["a", "c"]
    q = read_parts(out / "quarantine")
    details = dict(zip(q.column("_cleanpipe_row_id").to_pylist(),
                       [d[0] for d in q.column("_cleanpipe_details").to_pylist()], strict=True))
    assert "'meta.tags' is an object here but an array" in details["x.jsonl:2"]
    assert "'meta.tags[*]' is a number here but a string" in details["x.jsonl:4"]
    assert _load(out, "quarantine").num_rows == 2


def test_type_clash_with_on_parse_error_fail_is_one_line(tmp_path, capsys):
    src = _jsonl(tmp_path / "x.jsonl", [{"text": "a", "m": {"n": 1}},
                                        {"text": "b", "m": {"n": "s"}},
                                        {"text": "c", "m": {"n": 2}}])
    out = tmp_path / "out"
    pipe = write_pipeline(tmp_path / "p.yaml", src, extra_input=", on_parse_error: fail")
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q")
    assert code == 3
    assert f"{src}:2: field 'm.n' is a string here but a number" in err
    assert "on_parse_error: quarantine" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_two_shards_with_different_schemas_and_a_clash_inside_one(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    _jsonl(d / "a.jsonl", [{"text": "a", "n": 1, "meta": {}}, {"text": "b", "n": "x"},
                           {"text": "c", "n": 2}])
    _jsonl(d / "b.jsonl", [{"text": "d", "meta": {"src": "web"}, "extra": [1]}])
    out = tmp_path / "out"
    code, _, err = cli(capsys, "run", str(write_pipeline(tmp_path / "p.yaml", d)), "-o",
                       str(out), "-q")
    assert code == 0, err
    rep = report(out)
    assert (rep["totals"]["read"], rep["totals"]["kept"], rep["totals"]["quarantined"]) == (4, 3, 1)
    assert _load(out).to_list() == [
        {"text": "a", "n": 1, "meta": None, "extra": None},
        {"text": "c", "n": 2, "meta": None, "extra": None},
        {"text": "d", "n": None, "meta": {"src": "web"}, "extra": [1]}]
    assert read_parts(out / "quarantine").column("_cleanpipe_row_id").to_pylist() == ["a.jsonl:2"]


def _chunks(path: Path, **opts) -> tuple[list, list]:
    rows, bad = [], []
    for c in iter_chunks(path, ReadOptions(**opts)):
        rows += c.batch.to_pylist()
        bad += c.bad
    return rows, bad


def test_integer_over_64_bits_is_quarantined_not_a_crash(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_text('{"n": 1}\n{"n": 18446744073709551616}\n{"n": [2]}\n{"n": 3}\n', "utf-8")
    rows, bad = _chunks(src)
    assert rows == [{"n": 1}, {"n": 3}]
    assert [(b.line, b.code) for b in bad] == [(2, "number_out_of_range"), (3, "type_mismatch")]
    assert "'n'" in bad[0].message and "64 bits" in bad[0].message


def test_lone_surrogate_escape_follows_on_decode_error(tmp_path):
    src = tmp_path / "x.jsonl"
    # a \ud800 escape is valid JSON but no text; the {oops line sends the file to the
    # careful path, where it used to crash
    src.write_text('{"t": "a"}\n{"t": "b\\ud800"}\n{oops\n', "utf-8")
    rows, bad = _chunks(src)
    assert rows == [{"t": "a"}, {"t": "b\ufffd"}]
    rows, bad = _chunks(src, on_decode_error="quarantine")
    assert rows == [{"t": "a"}]
    assert [(b.line, b.code) for b in bad] == [(2, "decode_error"), (3, "parse_error")]
    with pytest.raises(InputError, match=r"x\.jsonl:2: a lone surrogate"):
        _chunks(src, on_decode_error="fail")


def test_list_starting_with_null_is_read_whole(tmp_path):
    # pyarrow's JSON reader (26.0) builds an invalid array for this; the reader must not
    # pass it on (it crashed when the batch was pickled or written)
    src = _jsonl(tmp_path / "x.jsonl", [{"text": "a", "tags": [None, "x"]},
                                        {"text": "b", "tags": ["y"]}])
    rows, bad = _chunks(src)
    assert rows == [{"text": "a", "tags": [None, "x"]}, {"text": "b", "tags": ["y"]}] and not bad
    out = tmp_path / "out"
    Pipeline(stages=[{"stage": "exact_dedup"}]).run(src, out)  # a global stage: spills rows
    assert _load(out)["tags"] == [[None, "x"], ["y"]]


def test_a_key_first_seen_in_a_later_record_is_kept(tmp_path):
    # the careful path (a clash sends the file there) used to take its columns from the
    # first record alone: "late" was silently dropped
    src = _jsonl(tmp_path / "x.jsonl", [{"text": "a"}, {"text": "b", "late": {"k": [1]}},
                                        {"text": "c", "n": "x"}, {"text": "d", "n": 1},
                                        {"text": "e", "n": 2}])
    rows, bad = _chunks(src)
    assert [b.line for b in bad] == [3]
    assert rows == [{"text": "a", "late": None, "n": None},
                    {"text": "b", "late": {"k": [1]}, "n": None},
                    {"text": "d", "late": None, "n": 1}, {"text": "e", "late": None, "n": 2}]


@pytest.mark.parametrize("name,body", [("e.jsonl", "{}\n{ }\n"), ("e.json", "[{}, {}]")])
def test_records_that_are_all_empty_objects_are_quarantined(tmp_path, name, body):
    src = tmp_path / name
    src.write_text(body, "utf-8")
    out = tmp_path / "out"
    rep = Pipeline(stages=[]).run(src, out)  # this used to hang
    assert (rep["totals"]["read"], rep["totals"]["quarantined"]) == (2, 2)
    q = read_parts(out / "quarantine")
    assert q.column("_cleanpipe_reasons").to_pylist() == [["empty_record"]] * 2
    # next to records with keys, {} is a row of nulls, like any record missing a key
    src.write_text('{"text": "a"}\n{}\n', "utf-8")
    rep = Pipeline(stages=[]).run(src, out, overwrite=True)
    assert rep["totals"]["kept"] == 2 and _load(out)["text"] == ["a", None]


# ---------------------------------------------------------------------- determinism


def test_nested_outputs_are_byte_identical_across_workers(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    for k in range(2):
        recs = []
        for i in range(300):
            r = {"text": f"row {k} {i}", "meta": {} if i % 7 else {"src": "web"},
                 "n": "x" if i % 41 == 5 else i, "turns": [{}] * (i % 3)}
            recs.append(r)
        _jsonl(d / f"s{k}.jsonl", recs)
    outs = []
    for name, workers, batch in (("a", "1", 64), ("b", "2", 64), ("c", "2", 1000)):
        pipe = write_pipeline(tmp_path / f"{name}.yaml", d, extra=f"batch_size: {batch}\n")
        out = tmp_path / name
        code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q", "--workers", workers)
        assert code == 0, err
        outs.append(out)
    files = [{str(p.relative_to(o)): p.read_bytes() for p in sorted(o.rglob("*"))
              if p.is_file() and not p.name.startswith("report.") and p.name != "junit.xml"}
             for o in outs]
    assert files[0] == files[1] == files[2]
    assert len(_events(outs[0], "empty_object")) > 0
    rep = report(outs[0])
    assert rep["totals"]["quarantined"] == 2 * len([i for i in range(300) if i % 41 == 5])


def test_ray_engine_writes_the_same_nested_outputs(tmp_path):
    """The reader's fix events and drops travel with their rows on Ray as locally."""
    ray = pytest.importorskip("ray")
    src = _jsonl(tmp_path / "x.jsonl", [
        {"text": "a", "meta": {}, "n": 1}, {"text": "b", "meta": {}, "n": "x"},
        {"text": "c", "turns": [{}], "n": 2}, {"text": "a", "meta": None, "n": 3}])
    stages = [{"stage": "exact_dedup"}]
    Pipeline(stages=stages).run(src, tmp_path / "local", workers=1)
    repo = str(Path(__file__).resolve().parent.parent)
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=1 << 29,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": repo}})
    try:
        Pipeline(stages=stages).run(src, tmp_path / "ray", workers=2, engine="ray")
    finally:
        ray.shutdown()
    for part in ("data", "quarantine"):
        assert read_parts(tmp_path / "local" / part) == read_parts(tmp_path / "ray" / part)
    ev = [pq.read_table(tmp_path / o / "events.parquet") for o in ("local", "ray")]
    assert ev[0] == ev[1]
    assert ev[0].column("code").to_pylist().count("empty_object") == 2
