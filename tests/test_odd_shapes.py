"""Odd shapes: each works, or gives one clear line naming the file and what to do."""

from __future__ import annotations

import json

import datasets
import pytest

from tests._robust_helpers import cli, read_parts, report, write_pipeline


def _run(tmp_path, capsys, src, stages="[]", extra_input=""):
    out = tmp_path / "out"
    pipe = write_pipeline(tmp_path / "p.yaml", src, stages=stages, extra_input=extra_input)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q")
    assert "Traceback" not in err
    return code, err, out


@pytest.mark.parametrize("name,body", [("e.jsonl", b""), ("e.csv", b""), ("h.csv", b"text,label\n"),
                                       ("blank.jsonl", b"\n\n  \n"), ("e.json", b"[]")])
def test_empty_inputs_give_empty_valid_output(tmp_path, capsys, name, body):
    src = tmp_path / name
    src.write_bytes(body)
    code, err, out = _run(tmp_path, capsys, src)
    # the output is written, and the gate fails: an empty input is not clean data
    assert code == 1, err
    assert report(out)["verdict"]["rules"][-1]["message"].startswith("the input has no rows")
    assert (out / "_SUCCESS").exists()
    assert report(out)["totals"]["read"] == 0
    assert read_parts(out / "data").num_rows == 0
    if name == "h.csv":
        # a header is a schema: the empty result keeps it and datasets opens it
        assert read_parts(out / "data").column_names == ["text", "label"]
        # (datasets.load_dataset itself refuses any split with no rows: "Instruction 'train'
        # corresponds to no data", whatever the files declare)
        ds = datasets.Dataset(read_parts(out / "data"))
        assert ds.num_rows == 0 and ds.column_names == ["text", "label"]


def test_zero_rows_left_after_filtering(tmp_path, capsys):
    src = tmp_path / "x.jsonl"
    src.write_text("".join(json.dumps({"text": f"spam {i}"}) + "\n" for i in range(5)))
    code, err, out = _run(tmp_path, capsys, src,
                          stages="[{stage: regex_filter, patterns: {spam: '^spam'}}]")
    assert code == 1, err  # nothing left to train on: the gate fails, the output is written
    rep = report(out)
    assert (rep["totals"]["kept"], rep["totals"]["quarantined"]) == (0, 5)
    ds = datasets.Dataset(read_parts(out / "data"))
    assert ds.num_rows == 0 and ds.column_names == ["text"]
    q = datasets.load_dataset(str(out), "quarantine", split="train")
    assert q.num_rows == 5


def test_50mb_single_record(tmp_path, capsys):
    big = "长文本 long text " * (50_000_000 // 20)
    src = tmp_path / "big.jsonl"
    src.write_text(json.dumps({"text": big}, ensure_ascii=False) + "\n" + '{"text": "s"}\n',
                   encoding="utf-8")
    assert src.stat().st_size > 50_000_000
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    t = read_parts(out / "data")
    assert t.column("text").to_pylist() == [big, "s"]


def test_deeply_nested_json(tmp_path, capsys):
    src = tmp_path / "deep.jsonl"
    very = '{"a": ' * 3000 + "1" + "}" * 3000
    deep = json.dumps({"text": "x", "n": json.loads("[" * 100 + "]" * 100)})
    ok = json.dumps({"text": "y", "n": [[[1]]]})
    src.write_text(f"{ok}\n{very}\n{deep}\n")
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    rep = report(out)
    assert (rep["totals"]["read"], rep["totals"]["kept"]) == (3, 1)
    q = read_parts(out / "quarantine")
    assert sorted(q.column("_cleanpipe_reasons").to_pylist()) == [["parse_error"], ["too_deep"]]
    assert all(r for r in q.column("_cleanpipe_raw").to_pylist())  # nothing lost


def test_number_where_string_expected(tmp_path, capsys):
    src = tmp_path / "x.jsonl"
    src.write_text('{"text": "a"}\n{"text": 12}\n{"text": "b"}\n{"text": null}\n')
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    rep = report(out)
    assert (rep["totals"]["kept"], rep["totals"]["quarantined"]) == (3, 1)
    q = read_parts(out / "quarantine")
    assert q.column("_cleanpipe_row_id").to_pylist() == ["x.jsonl:2"]


def test_missing_text_column_reads_as_nulls(tmp_path, capsys):
    # a text field missing from a whole file reads as a key missing from each record
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text('{"text": "a"}\n')
    (d / "b.jsonl").write_text('{"other": "b"}\n')
    code, err, out = _run(tmp_path, capsys, d,
                          stages="[{stage: regex_filter, patterns: {x: zz}}]")
    assert code == 0, err
    data = read_parts(out / "data")
    assert sorted(data.to_pylist(), key=str) == sorted(
        [{"text": "a", "other": None}, {"text": None, "other": "b"}], key=str)


def test_shards_with_different_columns_unified(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text('{"text": "a", "x": 1}\n')
    (d / "b.jsonl").write_text('{"text": "b", "y": "q"}\n')
    (d / "c.jsonl").write_text("")
    code, err, out = _run(tmp_path, capsys, d)
    assert code == 0, err
    t = read_parts(out / "data")
    assert t.to_pylist() == [{"text": "a", "x": 1, "y": None}, {"text": "b", "x": None, "y": "q"}]


def test_shards_with_conflicting_types_name_both_files(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text('{"text": "a", "x": 1}\n')
    (d / "b.jsonl").write_text('{"text": "b", "x": "q"}\n')
    code, err, out = _run(tmp_path, capsys, d)
    assert code == 3
    assert "a.jsonl" in err and "b.jsonl" in err and "'x'" in err
    assert not out.exists()
