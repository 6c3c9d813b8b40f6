"""Encodings: invalid UTF-8 per on_decode_error, other encodings, BOMs."""

from __future__ import annotations

import codecs
import json

import pytest

from cleanpipe import Pipeline
from cleanpipe.io import read_table
from cleanpipe.io.readers import ReadOptions, iter_chunks
from cleanpipe.io.sources import InputError
from tests._robust_helpers import cli, read_parts, write_pipeline
from tests.conftest import realdata

CESU_EMOJI = b"\xed\xa0\xbc\xed\xbd\x95"  # U+1F355 as CESU-8 surrogate pairs


def _read(src, fmt="auto", **opts):
    bad, tables = [], []
    for c in iter_chunks(src, ReadOptions(**opts), fmt):
        bad += c.bad
        if c.batch.num_rows:
            tables.append(c.batch)
    return tables, bad


def _rows(tables):
    return [r for t in tables for r in t.to_pylist()]


@pytest.fixture
def cesu_jsonl(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"text": "ok"}\n{"text": "pizza ' + CESU_EMOJI + b'"}\n{"text": "z"}\n')
    return p


def test_decode_replace_reads_cesu8_pair_on_record(cesu_jsonl):
    tables, bad = _read(cesu_jsonl)
    assert bad == []
    assert [r["text"] for r in _rows(tables)] == ["ok", "pizza \U0001f355", "z"]
    fixes = [f for c in iter_chunks(cesu_jsonl, ReadOptions()) for f in c.fixes]
    assert [(f.code, f.rows.tolist()) for f in fixes] == [("decode_repaired", [1])]
    assert "CESU-8 for U+1F355" in fixes[0].detail


def test_decode_quarantine_names_line_and_offset(cesu_jsonl):
    tables, bad = _read(cesu_jsonl, on_decode_error="quarantine")
    assert [r["text"] for r in _rows(tables)] == ["ok", "z"]
    (b,) = bad
    offset = cesu_jsonl.read_bytes().index(CESU_EMOJI)
    assert (b.line, b.code, b.byte_offset) == (2, "decode_error", offset)
    assert f"line 2, byte offset {offset}" in b.message


def test_decode_fail_names_file_line_offset(cesu_jsonl):
    offset = cesu_jsonl.read_bytes().index(CESU_EMOJI)
    with pytest.raises(InputError, match=rf"x\.jsonl:2: invalid UTF-8 at byte offset {offset};"
                       r".*input\.encoding"):
        _read(cesu_jsonl, on_decode_error="fail")


def _snips_play():
    return realdata("cls_snips_2017", "train_PlayMusic_full.json")


def _cesu_offsets(data: bytes) -> list[int]:
    out, i = [], data.find(b"\xed")
    while i >= 0:
        out.append(i)
        i = data.find(b"\xed", i + 3)
    return out


@pytest.mark.realdata
def test_snips_cesu8_replace():
    p = _snips_play()
    tables, bad = _read(p)
    assert bad == []
    # {"PlayMusic": [...]} is unwrapped to its records
    n = len(json.loads(p.read_bytes().decode("utf-8", "surrogatepass"))["PlayMusic"])
    assert sum(t.num_rows for t in tables) == n
    texts = json.dumps(_rows(tables), ensure_ascii=False)
    # the CESU-8 pairs are read as the characters they stand for, exactly
    assert "\ufffd" not in texts
    meant = p.read_bytes().decode("utf-8", "surrogatepass").encode(
        "utf-16", "surrogatepass").decode("utf-16")
    emoji = {ch for ch in meant if ord(ch) > 0xFFFF}
    assert emoji and all(ch in texts for ch in emoji)


@pytest.mark.realdata
def test_snips_cesu8_quarantine_file_line_offset():
    p = _snips_play()
    data = p.read_bytes()
    first = _cesu_offsets(data)[0]
    tables, bad = _read(p, on_decode_error="quarantine")
    assert bad and all(b.code == "decode_error" for b in bad)
    assert bad[0].byte_offset == first
    assert bad[0].shard == "train_PlayMusic_full.json"
    line = data.count(b"\n", 0, first) + 1
    assert f"line {line}, byte offset {first}" in bad[0].message
    n = len(json.loads(data.decode("utf-8", "surrogatepass"))["PlayMusic"])
    assert sum(t.num_rows for t in tables) + len(bad) == n
    # the quarantined record is the one with the emoji, and its text is kept (as U+FFFD)
    assert "\ufffd" in bad[0].raw
    assert "\ufffd" not in json.dumps(_rows(tables), ensure_ascii=False)


@pytest.mark.realdata
def test_snips_cesu8_fail(tmp_path, capsys):
    p = _snips_play()
    first = _cesu_offsets(p.read_bytes())[0]
    pipe = write_pipeline(tmp_path / "p.yaml", p, extra_input=", on_decode_error: fail")
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(tmp_path / "o"), "-q")
    assert code == 3
    line = p.read_bytes().count(b"\n", 0, first) + 1
    assert f"train_PlayMusic_full.json:{line}:" in err
    assert f"byte offset {first}" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.realdata
def test_snips_all_files_through_pipeline(tmp_path):
    src = realdata("cls_snips_2017")
    rep = Pipeline(stages=[], input={"on_decode_error": "quarantine"}).run(src, tmp_path / "o")
    t = rep["totals"]
    assert t["kept"] + t["quarantined"] == t["read"]
    assert t["quarantined"] >= 1
    q = read_parts(tmp_path / "o" / "quarantine")
    assert set(q.column("_cleanpipe_reasons").to_pylist()[0]) == {"decode_error"}
    assert q.column("_cleanpipe_row_id").to_pylist()[0].startswith("train_PlayMusic_full.json:")


def _sogou():
    return realdata("encoding_sogou_news_gbk", "news_tensite_xml.smarty.dat")


@pytest.mark.realdata
def test_gb18030_read_with_encoding():
    p = _sogou()
    t = read_table(p, fmt="text", encoding="gb18030")
    expected = [line.rstrip("\r") for line in p.read_bytes().decode("gb18030").split("\n")
                if line.strip()]
    assert t.column("text").to_pylist() == expected
    joined = "\n".join(expected)
    assert joined.count("<doc>") == 200  # PROVENANCE.md: 200 documents
    assert "\ufffd" not in joined


@pytest.mark.realdata
def test_gb18030_without_encoding_suggests_it(tmp_path, capsys):
    p = _sogou()
    with pytest.raises(InputError, match=r"not UTF-8 .*set input\.encoding: gb18030"):
        read_table(p, fmt="text")
    pipe = write_pipeline(tmp_path / "p.yaml", p, extra_input=", format: text")
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(tmp_path / "o"), "-q")
    assert code == 3 and "news_tensite_xml.smarty.dat" in err and "input.encoding" in err
    assert "Traceback" not in err


def test_gbk_csv_and_jsonl(tmp_path):
    rows = [{"text": "中文句子，全角１２３", "label": "体育"}, {"text": "第二行", "label": "财经"}]
    j = tmp_path / "x.jsonl"
    j.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
                  .encode("gbk"))
    assert read_table(j, encoding="gbk").to_pylist() == rows
    c = tmp_path / "x.csv"
    c.write_bytes(("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
                  .encode("gb18030"))
    assert read_table(c, encoding="gb18030").to_pylist() == rows


@pytest.mark.parametrize("bom,enc", [(codecs.BOM_UTF8, "utf-8"), (b"", "utf-16-le"),
                                     (b"", "utf-16")])
def test_boms_and_utf16(tmp_path, bom, enc):
    rows = [{"text": "héllo 中文 🍕"}, {"text": "b"}]
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    p = tmp_path / "x.jsonl"
    p.write_bytes(bom + body.encode(enc))
    opts = {} if enc != "utf-16-le" else {"encoding": "utf-16-le"}
    t = read_table(p, **opts)
    assert t.to_pylist() == rows
    assert t.column_names == ["text"]  # no BOM glued to the first key


def test_utf8_bom_csv_header(tmp_path):
    p = tmp_path / "x.csv"
    p.write_bytes(codecs.BOM_UTF8 + b"text,label\nhi,1\n")
    assert read_table(p).column_names == ["text", "label"]


def test_unknown_encoding_is_clear(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n')
    with pytest.raises(InputError, match="unknown encoding 'latin-42'"):
        read_table(p, encoding="latin-42")


def test_invalid_bytes_in_other_encoding_fail_names_offset(tmp_path):
    p = tmp_path / "x.txt"
    data = "好\n坏".encode("gbk") + b"\x81\n"
    p.write_bytes(data)
    with pytest.raises(InputError, match=r"x\.txt:2: not valid gbk at byte offset 5"):
        read_table(p, encoding="gbk", on_decode_error="fail")
    assert read_table(p, encoding="gbk").column("text").to_pylist()[1].endswith("\ufffd")


def test_text_and_csv_decode_quarantine(tmp_path):
    t = tmp_path / "x.txt"
    t.write_bytes(b"one\ntw\xff\nthree\n")
    tables, bad = _read(t, on_decode_error="quarantine")
    assert [r["text"] for r in _rows(tables)] == ["one", "three"]
    assert [(b.line, b.byte_offset) for b in bad] == [(2, 6)]
    c = tmp_path / "x.csv"
    c.write_bytes(b"text,label\nfine,1\n\"b\xffd\",2\nok,3\n")
    tables, bad = _read(c, on_decode_error="quarantine")
    assert [r["text"] for r in _rows(tables)] == ["fine", "ok"]
    assert [(b.line, b.code) for b in bad] == [(2, "decode_error")]
    tables, bad = _read(c)
    # a lone FF reads as ÿ in Windows-1252, Latin-1 and Latin-9 alike (see utf8_repair)
    assert [r["text"] for r in _rows(tables)] == ["fine", "b\xffd", "ok"]
