"""Inputs that used to lose rows or stop with the wrong error (issue 15, item 6).

Each case ends read correctly, or refused with exit code 3 and a message naming the path;
every row read is kept or quarantined with a reason, and no value changes without an event.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests._robust_helpers import cli, read_parts, report, write_pipeline
from tests.conftest import realdata

EXIT_INPUT = 3


def _run(tmp_path: Path, capsys, src, *, stages: str = "[]", extra: str = "",
         args: tuple[str, ...] = (), out_name: str = "out"):
    out = tmp_path / out_name
    pipe = write_pipeline(tmp_path / f"{out_name}.yaml", src, stages=stages, extra=extra)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q", "--no-progress", *args)
    assert "Traceback" not in err
    return code, err, out


def _conserved(out: Path) -> dict:
    totals = report(out)["totals"]
    assert totals["kept"] + totals["quarantined"] == totals["read"]
    assert read_parts(out / "data").num_rows == totals["kept"]
    return totals


def _events(out: Path, stage: str = "read") -> list[dict]:
    ev = pq.read_table(out / "events.parquet").to_pylist()
    return [e for e in ev if e["stage"] == stage]


def _quarantine(out: Path) -> list[dict]:
    return read_parts(out / "quarantine").to_pylist()


# ---------------------------------------------------------------- shards with other columns


def _alpaca_pair(d: Path) -> None:
    d.mkdir()
    (d / "a.jsonl").write_text(
        '{"instruction": "add", "input": "1 and 2", "output": "3"}\n'
        '{"instruction": "name a colour", "input": "", "output": "red"}\n', "utf-8")
    # alpaca exports often leave out an empty "input"
    (d / "b.jsonl").write_text('{"instruction": "say hi", "output": " hi "}\n', "utf-8")


def test_shard_without_a_text_field_reads_it_as_null(tmp_path, capsys):
    _alpaca_pair(tmp_path / "in")
    # whitespace set to fix (its defaults only flag): the text stage visibly ran on it
    code, err, out = _run(tmp_path, capsys, tmp_path / "in",
                          stages="[{stage: whitespace, action: fix}]",
                          extra="fields: [instruction, input, output]\n")
    assert code == 0, err
    assert _conserved(out)["kept"] == 3
    rows = {r["instruction"]: r for r in read_parts(out / "data").to_pylist()}
    assert rows["say hi"]["input"] is None and rows["say hi"]["output"] == "hi"
    assert rows["add"]["input"] == "1 and 2"


def test_shard_without_a_field_the_schema_stage_decides(tmp_path, capsys):
    _alpaca_pair(tmp_path / "in")
    code, err, out = _run(tmp_path, capsys, tmp_path / "in",
                          stages="[{stage: schema, required: [input]}]",
                          extra="fields: [instruction, input, output]\n")
    assert code == 0, err
    assert _conserved(out)["quarantined"] == 2
    # the missing "input" is judged like the empty one: by the schema stage, per row
    assert sorted((q["_cleanpipe_row_id"], q["_cleanpipe_reasons"]) for q in _quarantine(out)) \
        == [("a.jsonl:2", ["empty_field"]), ("b.jsonl:1", ["null_field"])]


def test_shard_order_does_not_change_the_rows(tmp_path, capsys):
    _alpaca_pair(tmp_path / "in")
    flipped = tmp_path / "flipped"
    flipped.mkdir()
    # the file without "input" first
    (flipped / "a.jsonl").write_bytes((tmp_path / "in" / "b.jsonl").read_bytes())
    (flipped / "b.jsonl").write_bytes((tmp_path / "in" / "a.jsonl").read_bytes())
    fields = "fields: [instruction, input, output]\n"
    outs = []
    for name, src in (("o1", tmp_path / "in"), ("o2", flipped)):
        code, err, out = _run(tmp_path, capsys, src, stages="[{stage: whitespace}]",
                              extra=fields, out_name=name)
        assert code == 0, err
        outs.append(sorted(json.dumps(r, sort_keys=True)
                           for r in read_parts(out / "data").to_pylist()))
    assert outs[0] == outs[1]


def test_text_field_in_no_file_is_a_config_error(tmp_path, capsys):
    _alpaca_pair(tmp_path / "in")
    code, err, out = _run(tmp_path, capsys, tmp_path / "in",
                          extra="fields: [instruction, inptu, output]\n")
    assert code == 2
    assert "'inptu'" in err and "in no input file" in err
    assert not out.exists()


@pytest.mark.realdata
def test_real_alpaca_shards_with_and_without_input(tmp_path, capsys):
    en = realdata("sft_llamafactory_demos", "alpaca_en_demo.json")
    zh = realdata("sft_llamafactory_demos", "alpaca_zh_demo.json")
    d = tmp_path / "in"
    d.mkdir()
    os.symlink(en, d / "a_en.json")
    # the same records as an export that leaves out the empty "input" writes them
    recs = json.loads(zh.read_text("utf-8"))
    no_input = [{k: v for k, v in r.items() if k != "input"} for r in recs if r["input"] == ""]
    assert no_input
    (d / "b_zh.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                          for r in no_input), "utf-8")
    code, err, out = _run(tmp_path, capsys, d, stages="[{stage: whitespace}]",
                          extra="fields: [instruction, input, output]\n")
    assert code == 0, err
    totals = _conserved(out)
    n_en = len(json.loads(en.read_text("utf-8")))
    assert totals["read"] == n_en + len(no_input)
    data = read_parts(out / "data").to_pylist()
    zh_rows = [r for r in data if r["instruction"] in {x["instruction"] for x in no_input}]
    assert zh_rows and all(r["input"] is None for r in zh_rows)


# ---------------------------------------------------------------- invalid UTF-8


def test_invalid_utf8_is_read_exactly_where_it_can_be_and_on_record(tmp_path, capsys):
    src = tmp_path / "x.jsonl"
    src.write_bytes(b'{"t": "caf\xe9"}\n'                      # one Latin-1 byte
                    b'{"t": "pizza \xed\xa0\xbc\xed\xbd\x95"}\n'  # U+1F355 as CESU-8
                    b'{"t": "fine"}\n'
                    b'{"t": "\xe9\xe8 and \xf0\x9f\x8d"}\n')  # no sound reading
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    assert _conserved(out)["kept"] == 4
    texts = [r["t"] for r in read_parts(out / "data").to_pylist()]
    assert texts == ["café", "pizza \U0001f355", "fine", "\ufffd\ufffd and \ufffd"]
    events = sorted((e["row_id"], e["code"], e["action"]) for e in _events(out))
    assert events == [("x.jsonl:1", "decode_repaired", "fix"),
                      ("x.jsonl:2", "decode_repaired", "fix"),
                      ("x.jsonl:4", "decode_replaced", "fix")]
    details = {e["row_id"]: e["detail"] for e in _events(out)}
    assert "byte E9" in details["x.jsonl:1"] and "'é'" in details["x.jsonl:1"]
    assert "CESU-8 for U+1F355" in details["x.jsonl:2"]
    assert "no sound reading" in details["x.jsonl:4"] and "F0 9F 8D" in details["x.jsonl:4"]


def test_repair_events_do_not_depend_on_the_batch_size(tmp_path, capsys):
    src = tmp_path / "x.jsonl"
    src.write_bytes(b"".join(b'{"t": "r%d caf\xe9"}\n' % i if i % 3 else b'{"t": "r%d"}\n' % i
                             for i in range(10)))
    seen = []
    for name, args in (("o1", ("--batch-size", "1")), ("o2", ("--batch-size", "4")), ("o3", ())):
        code, err, out = _run(tmp_path, capsys, src, args=args, out_name=name)
        assert code == 0, err
        _conserved(out)
        seen.append([(e["row_id"], e["code"], e["detail"]) for e in _events(out)])
    assert seen[0] == seen[1] == seen[2]
    assert [e[0] for e in seen[0]] == [f"x.jsonl:{i + 1}" for i in range(10) if i % 3]


def test_lone_surrogate_escape_replaced_on_record(tmp_path, capsys):
    src = tmp_path / "x.jsonl"
    src.write_text('{"t": "ok"}\n{"t": "a\\ud800b"}\n', "utf-8")
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    assert [r["t"] for r in read_parts(out / "data").to_pylist()] == ["ok", "a\ufffdb"]
    assert [(e["row_id"], e["code"]) for e in _events(out)] == [("x.jsonl:2", "decode_replaced")]


def test_ambiguous_single_bytes_are_not_guessed(tmp_path, capsys):
    # 0x92 is ’ in Windows-1252 but a C1 control in Latin-1; 0xA4 is ¤ in Latin-1, € in Latin-9
    src = tmp_path / "x.jsonl"
    src.write_bytes(b'{"t": "don\x92t"}\n{"t": "5 \xa4"}\n')
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    assert [r["t"] for r in read_parts(out / "data").to_pylist()] == ["don\ufffdt", "5 \ufffd"]
    assert [e["code"] for e in _events(out)] == ["decode_replaced"] * 2


def _no_nulls(v):
    """``v`` without the null fields Arrow gives a struct for the keys a record lacks."""
    if isinstance(v, dict):
        return {k: _no_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_no_nulls(x) for x in v]
    return v


@pytest.mark.realdata
def test_real_snips_cesu8_emoji_read_exactly(tmp_path, capsys):
    src = realdata("cls_snips_2017", "train_PlayMusic_full.json")
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    totals = _conserved(out)
    # what the file means: its surrogate pairs joined into the characters they stand for
    meant = json.loads(src.read_bytes().decode("utf-8", "surrogatepass").encode(
        "utf-16", "surrogatepass").decode("utf-16"))["PlayMusic"]
    assert totals["read"] == totals["kept"] == len(meant)
    got = read_parts(out / "data").to_pylist()
    assert [_no_nulls(r) for r in got] == meant
    astral = [i + 1 for i, r in enumerate(meant)
              if any(ord(ch) > 0xFFFF for ch in json.dumps(r, ensure_ascii=False))]
    assert astral
    events = _events(out)
    assert sorted(e["row_id"] for e in events) == [
        f"train_PlayMusic_full.json:{i}" for i in astral]
    assert all(e["code"] == "decode_repaired" and "CESU-8" in e["detail"] for e in events)


# ---------------------------------------------------------------- folders and links


def _five_rows(tmp_path: Path) -> Path:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "c.jsonl").write_text('{"t": "4"}\n{"t": "5"}\n', "utf-8")
    top = tmp_path / "in"
    top.mkdir()
    (top / "a.jsonl").write_text('{"t": "1"}\n{"t": "2"}\n', "utf-8")
    (top / "sub").mkdir()
    (top / "sub" / "b.jsonl").write_text('{"t": "3"}\n', "utf-8")
    os.symlink(real, top / "linked")
    return top


def test_symlinked_subfolder_is_read(tmp_path, capsys):
    code, err, out = _run(tmp_path, capsys, _five_rows(tmp_path))
    assert code == 0, err
    assert _conserved(out)["read"] == 5
    assert sorted(r["t"] for r in read_parts(out / "data").to_pylist()) == list("12345")


def test_symlink_loop_is_refused_naming_it(tmp_path, capsys):
    top = _five_rows(tmp_path)
    os.symlink(top, top / "sub" / "back")
    code, err, out = _run(tmp_path, capsys, top)
    assert code == EXIT_INPUT
    assert "symbolic link loop" in err and str(top / "sub" / "back") in err
    assert not out.exists()


def test_unreadable_input_folder_is_an_input_error(tmp_path, capsys, monkeypatch):
    top = _five_rows(tmp_path)
    # the tests may run as root, whom permissions do not stop: the kernel's answer to a
    # folder without read permission is simulated where the listing asks for it
    locked = {str(top), str(top / "sub")}
    real_scandir = os.scandir

    def scandir(path="."):
        if not isinstance(path, int) and os.fspath(path) in locked:  # rmtree passes fds
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, err, out = _run(tmp_path, capsys, top)
    assert code == EXIT_INPUT, err
    assert f"{top}: cannot list the input folder: Permission denied" in err
    locked.discard(str(top))  # only a subfolder: its rows must not be skipped silently
    code, err, out = _run(tmp_path, capsys, top, out_name="out2")
    assert code == EXIT_INPUT
    assert f"{top / 'sub'}: cannot list the input folder: Permission denied" in err
    assert not out.exists()


def test_dangling_symlink_is_an_input_error(tmp_path, capsys):
    top = _five_rows(tmp_path)
    os.symlink(tmp_path / "gone.jsonl", top / "d.jsonl")
    code, err, _ = _run(tmp_path, capsys, top)
    assert code == EXIT_INPUT
    assert f"{top / 'd.jsonl'}: a symbolic link to {tmp_path / 'gone.jsonl'}, which does not" \
           " exist" in err
    assert "Errno" not in err
    code, err, _ = _run(tmp_path, capsys, top / "d.jsonl", out_name="out2")
    assert code == EXIT_INPUT and "symbolic link" in err and "Errno" not in err


# ---------------------------------------------------------------- numbers and types


def test_numbers_that_do_not_fit_cost_their_row_only(tmp_path, capsys):
    src = tmp_path / "n.jsonl"
    src.write_text('{"t": "a", "s": 1}\n'
                   '{"t": "b", "s": 1e400}\n'
                   '{"t": "c", "s": 9223372036854775807}\n'
                   '{"t": "d", "s": 92233720368547758070}\n'
                   '{"t": "e", "s": 2}\n', "utf-8")
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    assert _conserved(out)["quarantined"] == 2
    kept = read_parts(out / "data").to_pylist()
    # 9223372036854775807 fits int64 exactly and is kept as written
    assert [(r["t"], r["s"]) for r in kept] == [("a", 1), ("c", 9223372036854775807), ("e", 2)]
    q = {r["_cleanpipe_row_id"]: r for r in _quarantine(out)}
    assert sorted(q) == ["n.jsonl:2", "n.jsonl:4"]
    for rid, number in (("n.jsonl:2", "1e400"), ("n.jsonl:4", "92233720368547758070")):
        assert q[rid]["_cleanpipe_reasons"] == ["number_out_of_range"]
        detail = q[rid]["_cleanpipe_details"][0]
        assert f"field 's' holds the {'number' if 'e' in number else 'integer'} {number}" in \
            detail and f"n.jsonl, line {rid[-1]}" in detail
        assert number in q[rid]["_cleanpipe_raw"]


def _column_s(tmp_path: Path, capsys, name: str, text: str) -> tuple[list, list[dict]]:
    """Read ``text`` as the file ``name``: the values of ``s`` kept, and the quarantine."""
    src = tmp_path / name
    src.write_text(text, "utf-8")
    code, err, out = _run(tmp_path, capsys, src)
    assert code == 0, err
    _conserved(out)
    return [r["s"] for r in read_parts(out / "data").to_pylist()], _quarantine(out)


def test_long_integer_among_floats_is_not_rounded(tmp_path, capsys):
    kept, q = _column_s(tmp_path, capsys, "f.jsonl",
                        '{"s": 0.5}\n{"s": 9223372036854775807}\n{"s": 1.5}\n')
    assert kept == [0.5, 1.5]
    assert [r["_cleanpipe_row_id"] for r in q] == ["f.jsonl:2"]
    assert "cannot store exactly" in q[0]["_cleanpipe_details"][0]


def test_booleans_in_a_float_column_are_not_turned_into_numbers(tmp_path, capsys):
    kept, q = _column_s(tmp_path, capsys, "b.jsonl",
                        '{"s": 0.5}\n{"s": true}\n{"s": 0.25}\n{"s": false}\n')
    assert kept == [0.5, 0.25]
    assert [(r["_cleanpipe_row_id"], r["_cleanpipe_reasons"]) for r in q] == [
        ("b.jsonl:2", ["type_mismatch"]), ("b.jsonl:4", ["type_mismatch"])]
    assert "'s' is a boolean here but a number" in q[0]["_cleanpipe_details"][0]


def test_numeric_stage_judges_text_values_row_by_row(tmp_path, capsys):
    src = tmp_path / "s.jsonl"
    src.write_text("".join(json.dumps({"t": str(i), "score": v}) + "\n" for i, v in
                           enumerate(["0.5", "high", "2", "nan", "0.25"])), "utf-8")
    stages = "[{stage: numeric, fields: [score], ranges: {score: [0, 1]}}]"
    results = []
    for name, args in (("o1", ("--batch-size", "1")), ("o2", ())):
        code, err, out = _run(tmp_path, capsys, src, stages=stages, args=args, out_name=name)
        assert code == 0, err
        _conserved(out)
        kept = [r["score"] for r in read_parts(out / "data").to_pylist()]
        q = sorted((r["_cleanpipe_row_id"], r["_cleanpipe_reasons"][0]) for r in _quarantine(out))
        results.append((kept, q))
    assert results[0] == results[1]
    kept, q = results[0]
    # kept as written: the stage checks the number a text holds, it never rewrites it
    assert kept == ["0.5", "0.25"]
    assert q == [("s.jsonl:2", "not_numeric"), ("s.jsonl:3", "out_of_range"),
                 ("s.jsonl:4", "nan")]
