"""Malformed records: quarantined with file, line and the parser's message, or a clean stop."""

from __future__ import annotations

import json

import pytest

from cleanpipe import Pipeline
from cleanpipe.io import read_table
from cleanpipe.io.readers import ReadOptions, iter_chunks
from cleanpipe.io.sources import InputError
from tests._robust_helpers import cli, read_parts, report, write_pipeline
from tests.conftest import realdata


def _bad(src, **opts):
    bad, rows = [], 0
    for c in iter_chunks(src, ReadOptions(**opts)):
        bad += c.bad
        rows += c.batch.num_rows
    return rows, bad


def test_broken_line_costs_one_record(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n{"text": "b\\q"}\n\n{"text": "c"}\n[1, 2]\n{"text": ', "utf-8")
    rows, bad = _bad(p)
    assert rows == 2
    assert [(b.line, b.code) for b in bad] == [(2, "parse_error"), (5, "parse_error"),
                                               (6, "parse_error")]
    assert "Invalid \\escape" in bad[0].message and "line 2" in bad[0].message
    assert "array where an object was expected" in bad[1].message
    assert bad[0].raw == '{"text": "b\\q"}'


def test_parse_error_fail_names_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n{"text": oops}\n', "utf-8")
    with pytest.raises(InputError, match=r"x\.jsonl:2: not valid JSON: Expecting value"):
        _bad(p, on_parse_error="fail")


@pytest.mark.realdata
def test_instructionwild_five_bad_lines_quarantined(tmp_path, capsys):
    src = realdata("sft_instructionwild")
    out = tmp_path / "out"
    pipe = write_pipeline(tmp_path / "p.yaml", src)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q", "--no-progress")
    assert code == 0, err
    q = read_parts(out / "quarantine")
    got = sorted(zip(q.column("_cleanpipe_row_id").to_pylist(),
                     q.column("_cleanpipe_reasons").to_pylist(), strict=True))
    # PROVENANCE.md: user_2.jsonl has 2 and user_3.jsonl 3 unparseable lines
    assert [g[0].split(":")[0] for g in got] == ["user_2.jsonl"] * 2 + ["user_3.jsonl"] * 3
    assert all(r == ["parse_error"] for _, r in got)
    details = q.column("_cleanpipe_details").to_pylist()
    assert all("not valid JSON" in d[0] and "line " in d[0] for d in details)
    raws = q.column("_cleanpipe_raw").to_pylist()
    assert all(r for r in raws)  # the line as it was, so nothing is lost
    # each raw line really is what that file holds at that line, and really is broken
    for rid, raw in zip(q.column("_cleanpipe_row_id").to_pylist(), raws, strict=True):
        name, line = rid.split(":")
        text = (src / name).read_text("utf-8").split("\n")[int(line) - 1]
        assert text.strip() == raw.strip()
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
    rep = report(out)
    total_lines = sum(1 for f in sorted(src.glob("*.jsonl"))
                      for line in f.read_text("utf-8").split("\n") if line.strip())
    assert rep["totals"]["read"] == total_lines
    assert rep["totals"]["kept"] + rep["totals"]["quarantined"] == rep["totals"]["read"]
    assert rep["totals"]["quarantined"] == 5
    assert read_parts(out / "data").num_rows == total_lines - 5


@pytest.mark.realdata
def test_instructionwild_fail_stops_at_the_line(tmp_path, capsys):
    src = realdata("sft_instructionwild")
    out = tmp_path / "out"
    pipe = write_pipeline(tmp_path / "p.yaml", src, extra_input=", on_parse_error: fail")
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q")
    assert code == 3
    assert "user_2.jsonl:134: not valid JSON" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_type_mismatch_quarantined_not_fatal(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n{"text": 7}\n{"text": "c"}\n', "utf-8")
    rep = Pipeline(stages=[]).run(p, tmp_path / "out")
    assert rep["totals"] == {**rep["totals"], "read": 3, "kept": 2, "quarantined": 1}
    q = read_parts(tmp_path / "out" / "quarantine")
    assert q.column("_cleanpipe_reasons").to_pylist() == [["type_mismatch"]]
    assert q.column("_cleanpipe_raw").to_pylist() == ['{"text": 7}']
    assert read_table(tmp_path / "out" / "data").column("text").to_pylist() == ["a", "c"]


def test_json_array_with_a_scalar_record(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('[{"text": "a"}, 3, {"text": "b"}]', "utf-8")
    rows, bad = _bad(p)
    assert rows == 2 and [(b.line, b.code) for b in bad] == [(2, "parse_error")]


def test_broken_json_array_names_line(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('[\n{"text": "a"},\n{"text": }\n]', "utf-8")
    with pytest.raises(InputError, match=r"x\.json:3: not valid JSON"):
        _bad(p)
