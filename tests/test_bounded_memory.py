"""What keeps a run's memory flat as its input grows (issue #7): row groups bounded by bytes,
dedup names and snippets on disk, and a MinHash finalize that never holds its index twice."""

from __future__ import annotations

import json
import pickle
import random
import tracemalloc
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import realdata
from dedup_helpers import run_global

from cleanpipe.contract.stage import BatchContext
from cleanpipe.dedup import cluster
from cleanpipe.dedup.rows import RowBook
from cleanpipe.io.row_bytes import row_bytes
from cleanpipe.io.writers import FixedGroupWriter, PartWriter, RowGroups
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.minhash_dedup import MinHashDedup, _gather


def _chat_table() -> pa.Table:
    """Nested records from the real LLaMA-Factory DPO demo: lists of structs, strings."""
    recs = json.loads(realdata("sft_llamafactory_demos", "dpo_en_demo.json")
                      .read_text(encoding="utf-8"))
    return pa.Table.from_pylist(recs)


@pytest.mark.realdata
def test_row_bytes_depend_on_the_row_alone() -> None:
    t = _chat_table()
    whole = row_bytes(t)
    assert whole.shape == (t.num_rows,) and (whole > 0).all()
    for size in (1, 7, 100):
        parts = [row_bytes(b) for b in t.to_batches(max_chunksize=size)]
        assert np.array_equal(np.concatenate(parts), whole)
    assert np.array_equal(row_bytes(t.slice(13, 40)), whole[13:53])
    # a longer text costs more, by exactly its extra bytes
    one = pa.table({"text": ["abc", "abcdef", "日本"]})
    assert np.diff(row_bytes(one)).tolist() == [3, 0]


def _long_rows(n: int, chars: int) -> pa.Table:
    rng = random.Random(0)
    return pa.table({"id": list(range(n)),
                     "text": ["".join(rng.choice("abcdef ") for _ in range(chars))
                              for _ in range(n)]})


@pytest.mark.parametrize("writer", ["part", "fixed"])
def test_row_groups_close_by_bytes_whatever_the_batches(tmp_path: Path, writer: str) -> None:
    table = _long_rows(600, 20_000)  # ~12 MB, in groups of at most 1 MB
    budget = 1 << 20
    files = []
    for bs in (1, 37, 600):
        path = tmp_path / f"{writer}{bs}"
        if writer == "part":
            w = PartWriter(path, "train", row_group_bytes=budget)
            for b in table.to_batches(max_chunksize=bs):
                w.write(b)
            out = w.close()[0]
        else:
            out = path.with_suffix(".parquet")
            fw = FixedGroupWriter(out, table.schema, group_bytes=budget)
            for b in table.to_batches(max_chunksize=bs):
                fw.write_table(pa.Table.from_batches([b]))
            fw.close()
        files.append(out.read_bytes())
        meta = pq.ParquetFile(out).metadata
        sizes = row_bytes(table)
        start = 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            group = sizes[start:start + n]
            # a group stops at the row that reaches the budget, never earlier
            assert group[:-1].sum() < budget
            if g < meta.num_row_groups - 1:
                assert group.sum() >= budget
            start += n
        assert start == table.num_rows and meta.num_row_groups > 10
        assert pq.read_table(out).equals(table)
    assert files[0] == files[1] == files[2]


def test_row_book_keeps_names_and_snippets_out_of_memory(tmp_path: Path) -> None:
    n, batch = 60_000, 1000
    before = pa.total_allocated_bytes()
    book = RowBook(snippet_chars=80, directory=tmp_path)
    for s in range(0, n, batch):
        ids = pa.array([f"shard-{s // 7919:04d}.jsonl:{i}" for i in range(s, s + batch)])
        snips = pa.array([f"row {i} " + "x" * 70 for i in range(s, s + batch)])
        book.add(np.arange(s, s + batch) * 2, np.full(batch, 5), snips, ids)
        del ids, snips
    book.close()
    # ids and snippets (~7 MB here) went to the temporary file, not to Arrow's memory
    assert pa.total_allocated_bytes() - before < 1 << 20
    assert book.nbytes()["row_ids"] + book.nbytes()["snippets"] > 6 << 20
    assert not list(tmp_path.iterdir())  # anonymous: nothing left behind
    pick = np.array([59_999, 0, 1234, 1234, 30_000])
    want = [f"shard-{i // batch * batch // 7919:04d}.jsonl:{i}" for i in pick]
    assert book.names(pick) == want
    assert book.snippets(pick)[0] == "row 59999 " + "x" * 70
    book.pin(np.array([0, 30_000]))
    assert book.names(np.array([30_000, 0])) == [want[4], want[1]]
    assert book.names(np.array([30_000, 1])) == [want[4], "shard-0000.jsonl:1"]
    copy = pickle.loads(pickle.dumps(book))
    assert copy.names(pick) == want and copy.snippets(pick) == book.snippets(pick)
    nameless = RowBook(snippet_chars=0)
    nameless.add(np.array([3, 4]), np.array([1, 1]), None, None)
    nameless.close()
    assert nameless.names(np.array([1])) == ["seq 4"] and nameless.snippet(0) == ""


def test_candidate_pairs_equal_all_bands_at_once() -> None:
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 40, size=(3000, 9)).astype(np.uint64)
    valid = rng.random(3000) > 0.05
    left, right = cluster.candidate_pairs(keys, valid, 16)
    found = set()
    for j in range(keys.shape[1]):
        order = np.argsort(keys[:, j], kind="stable")
        from cleanpipe.dedup import kernels

        lj, rj = kernels.bucket_pairs(order, keys[order, j], valid, 16)
        found |= set(zip(lj.tolist(), rj.tolist(), strict=True))
    assert list(zip(left.tolist(), right.tolist(), strict=True)) == sorted(found)
    assert (left < right).all()


def test_candidate_pairs_hold_one_band_of_raw_pairs_at_a_time() -> None:
    # 300 groups of 10 rows equal in all 14 bands: every band finds the same 13,500 pairs
    keys = np.repeat(np.arange(300, dtype=np.uint64), 10)[:, None] * np.ones(14, np.uint64)
    unique = 300 * 45
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        left, _right = cluster.candidate_pairs(keys, np.ones(keys.shape[0], bool))
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert left.size == unique
    all_bands_raw = 14 * unique * 16  # what concatenating every band's pairs would hold
    assert peak < all_bands_raw / 3, (peak, all_bands_raw)


def test_minhash_finalize_releases_the_batches_index() -> None:
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(5000)]
    docs = [" ".join(rng.choice(vocab) for _ in range(60)) for _ in range(1000)]
    docs += docs[:100]
    stage = MinHashDedup(fields=["text"])
    for s in range(0, len(docs), 250):
        b = pa.record_batch({"text": docs[s:s + 250]})
        ctx = BatchContext(b, ["text"], row_ids=pa.array([f"r{i}" for i in
                                                           range(s, s + b.num_rows)]))
        stage.observe(stage.prepare(b, ctx), np.arange(s, s + b.num_rows), b, ctx)
    arrays = [weakref.ref(a) for p in stage._parts for a in (p.keys, p.sets)]
    # _gather empties the parts it gathers: it is shown on copies of the stage's parts, as
    # finalize must still find the shingle sets it verifies pairs with (emptied, their
    # offsets would point past the gathered array)
    parts = [replace(p) for p in stage._parts]
    want_sets = np.concatenate([p.sets for p in parts])
    gathered = _gather(parts, "sets", np.zeros(0, np.uint32))
    assert np.array_equal(gathered, want_sets)
    assert all(p.sets.size == 0 and p.sets.base is None for p in parts)
    del gathered, want_sets, parts
    stage.finalize()
    assert stage.report_section()["duplicates"] == 100
    # nothing of the batches' keys or shingle sets outlives finalize (a view such as
    # keys[:0] would keep each whole batch alive)
    assert all(r() is None for r in arrays)


@pytest.mark.parametrize("stage_cls", [MinHashDedup, ExactDedup])
def test_dedup_keeps_no_row_texts_in_memory_between_observe_and_finalize(stage_cls) -> None:
    """The report texts of observed rows live in the row book's file: a stage that also
    kept its prepared batches' texts held 54 MB of t0 to the end of its finalize."""
    rng = random.Random(2)
    stage = stage_cls(fields=["text"])
    before = pa.total_allocated_bytes()
    texts = 0
    for s in range(0, 400, 100):
        b = pa.record_batch({"text": [" ".join(f"w{rng.randrange(10**6)}" for _ in range(1200))
                                      for _ in range(100)]})
        texts += b.nbytes
        ctx = BatchContext(b, ["text"], row_ids=pa.array([f"r{i}" for i in range(s, s + 100)]))
        stage.observe(stage.prepare(b, ctx), np.arange(s, s + 100), b, ctx)
        del b, ctx
    held = pa.total_allocated_bytes() - before
    assert texts > 3 << 20 and held < texts / 20, (held, texts)
    stage.finalize()
    assert stage.report_section()["rows"] == 400


def test_minhash_decisions_unchanged_through_pickle() -> None:
    docs = ["alpha beta gamma delta epsilon zeta eta theta iota kappa"] * 3 + ["other text"]
    table = pa.table({"text": docs})

    def run(through_pickle: bool) -> dict[str, dict[int, str]]:
        return run_global(MinHashDedup(fields=["text"], threshold=0.5), table, ["text"],
                          batch_size=2, through_pickle=through_pickle)

    found = run(through_pickle=True)
    # rows 1 and 2 copy row 0 (the first kept); row 3 shares no shingle with them
    assert sorted(found["near_duplicate"]) == [1, 2]
    assert all("r0" in d for d in found["near_duplicate"].values())
    assert found == run(through_pickle=False)


def test_a_row_group_is_written_without_the_batches_it_was_copied_from() -> None:
    """Issue #18: a group is copied into one chunk to be written; the batches it came from
    (as many bytes again) are let go first, but for the one the rest of the rows is in."""
    groups = RowGroups(pa.schema([("t", pa.string())]), rows=1 << 20, max_bytes=24 << 20)
    base = pa.total_allocated_bytes()
    for _ in range(32):  # 32 batches of ~1 MB
        groups.add(pa.table({"t": pa.array(["x" * 1000] * 1000)}))
    pending = pa.total_allocated_bytes() - base
    sizes = []
    for group in groups.full(final=True):
        written = group.combine_chunks()  # what a writer writes: one chunk per column
        assert written.column(0).num_chunks == 1
        sizes.append(written.num_rows)
        assert pa.total_allocated_bytes() - base <= pending + (2 << 20)
        del written
    assert sum(sizes) == 32_000 and len(sizes) == 2
