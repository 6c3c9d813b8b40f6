"""Readers: every input form of issue 2, compressed files, globs, schema unification."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from cleanpipe.io import InputError, read_table
from cleanpipe.io.readers import ReadOptions, iter_chunks

RECS = [{"text": "a", "n": 1}, {"text": "b\u2028c", "n": 2}, {"text": "d", "n": 3}]


def _jsonl(recs: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs).encode()


def test_every_format_reads_the_same_rows(tmp_path: Path) -> None:
    zstd = pytest.importorskip("zstandard")
    datasets = pytest.importorskip("datasets")
    table = pa.Table.from_pylist(RECS)
    (tmp_path / "a.jsonl").write_bytes(_jsonl(RECS))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(_jsonl(RECS)))
    (tmp_path / "c.jsonl.zst").write_bytes(zstd.ZstdCompressor().compress(_jsonl(RECS)))
    (tmp_path / "d.json").write_text(json.dumps(RECS))
    pq.write_table(table, tmp_path / "e.parquet")
    feather.write_feather(table, tmp_path / "f.arrow")
    (tmp_path / "g.csv").write_text('text,n\na,1\n"b\u2028c",2\nd,3\n')
    (tmp_path / "h.tsv").write_text("text\tn\na\t1\nb\u2028c\t2\nd\t3\n")
    datasets.Dataset.from_list(RECS).save_to_disk(str(tmp_path / "hf"))
    for name in ("a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.json", "e.parquet", "f.arrow",
                 "g.csv", "h.tsv", "hf"):
        t = read_table(tmp_path / name)
        assert t.column("text").to_pylist() == ["a", "b\u2028c", "d"], name
        assert t.column("n").to_pylist() == [1, 2, 3], name


def test_directory_glob_and_empty_shards(tmp_path: Path) -> None:
    d = tmp_path / "shards"
    (d / "sub").mkdir(parents=True)
    (d / "b.jsonl").write_bytes(_jsonl(RECS[1:2]))
    (d / "a.jsonl").write_bytes(_jsonl(RECS[:1]))
    (d / "empty.jsonl").write_bytes(b"")
    (d / "sub" / "c.jsonl").write_bytes(_jsonl(RECS[2:]))
    (d / "README.md").write_text("not data")
    assert read_table(d).column("text").to_pylist() == ["a", "b\u2028c", "d"]
    g = read_table(str(d / "*.jsonl"))
    assert g.column("text").to_pylist() == ["a", "b\u2028c"]
    names = [c.shard.name for c in iter_chunks(d)]
    assert names == ["a.jsonl", "b.jsonl", "empty.jsonl", "sub/c.jsonl"]


def test_blank_lines_keep_line_numbers(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"t": "a"}\n\n   \n{"t": "b"}\n')
    (chunk,) = list(iter_chunks(p))
    assert chunk.numbers.tolist() == [1, 4]


def test_lossless_unification_and_conflict(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(_jsonl([{"text": "x", "extra": None}]))
    (tmp_path / "b.jsonl").write_bytes(_jsonl([{"text": "y", "extra": "e", "more": 1}]))
    t = read_table(tmp_path)
    assert t.to_pylist() == [{"text": "x", "extra": None, "more": None},
                             {"text": "y", "extra": "e", "more": 1}]
    (tmp_path / "c.jsonl").write_bytes(_jsonl([{"text": 5}]))
    with pytest.raises(InputError, match=r"'text' is string in a.jsonl but int64 in c.jsonl"):
        read_table(tmp_path)


def test_memory_inputs() -> None:
    pl = pytest.importorskip("polars")
    datasets = pytest.importorskip("datasets")
    for src in (pa.Table.from_pylist(RECS), pl.DataFrame(RECS), datasets.Dataset.from_list(RECS),
                datasets.Dataset.from_list(RECS).to_iterable_dataset()):
        assert read_table(src).column("n").to_pylist() == [1, 2, 3], type(src)


def test_dataset_views_read_their_own_rows_in_their_order() -> None:
    """A select, shuffle or filter of a datasets.Dataset is a view over the whole original
    table: the input is the view's rows, in its order, and nothing else."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(RECS)
    assert read_table(ds.select([2, 0])).column("n").to_pylist() == [3, 1]
    assert read_table(ds.filter(lambda r: r["n"] != 2)).column("n").to_pylist() == [1, 3]
    shuffled = ds.shuffle(seed=3)
    assert read_table(shuffled).column("n").to_pylist() == shuffled["n"]
    assert read_table(ds.select([])).num_rows == 0


def test_batch_size(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(_jsonl(RECS * 3))
    sizes = [c.batch.num_rows for c in iter_chunks(p, ReadOptions(batch_size=4))]
    assert sizes == [4, 4, 1]
