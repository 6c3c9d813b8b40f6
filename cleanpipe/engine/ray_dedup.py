"""Dedup stages grouped on Ray: ``minhash_dedup``'s band keys, candidate pairs,
verification and connected components, and ``exact_dedup``'s content-hash groups, as Ray
Data shuffles, never the whole key array or edge list in one process.

The driver sees the first pass's sketch rows until a block of :data:`BLOCK_BYTES` of them
is gathered and put in the object store (:meth:`RayMinHash.observe`), and after
clustering only compact results: one ``(label, size)`` row per cluster, the few rows the
report shows, and counts.
Everything else runs in Ray tasks over hash partitions (:func:`co_group`), with the
per-partition functions of :mod:`cleanpipe.dedup.partition_steps`:

sketch rows ─ band rows ─(band, key)→ candidate pairs ─(left)→ + left sketch ─(right)→
verified edges ─(node, rounds of large/small star)→ stars ─(leaf, centre)→ members with
their kept row → decisions ``(seq, code, detail)``, joined back to the chunks by the engine.

``exact_dedup`` is the same with one "band": hash rows partitioned by their 128-bit hash,
groups of equal hashes are the clusters (no pairs or components needed), reference rows
ride in the same partitions to find copies of an eval set.

The rules are the in-memory path's own (same bucket pairs, same acceptance rule, same
``keep`` choice over rows in seq order), so the decisions and the report sections are
identical to the local engine's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.contract.stage import GlobalStage
from cleanpipe.dedup import bands, partition_steps
from cleanpipe.dedup.partition_steps import MEMBERS
from cleanpipe.engine.ray_fetch import fetch
from cleanpipe.engine.ray_shuffle import Blocks, co_group
from cleanpipe.engine.rows import Rows
from cleanpipe.stages import exact_dedup
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.minhash_dedup import (
    MinHashDedup,
    cluster_entry,
    contamination_example,
    decisions_table,
    detail_text,
    reference_name,
)

#: one entry per distributed grouping in this process (``stage`` 0: exact, 1: MinHash;
#: rounds, pair and edge counts, ``s_*`` phase times in ms): shows tests and users that
#: the distributed path ran, and where its time went
RUNS: list[dict[str, int]] = []


def distributed(stage: GlobalStage, ray: Any, parts: int) -> RayGrouping | None:
    """The distributed grouping ``stage`` declares (``distributed_grouping()``, looked up in
    :data:`GROUPINGS`), or ``None``: then the stage observes and finalizes on the driver."""
    name = stage.distributed_grouping()
    make = GROUPINGS.get(name) if name is not None else None
    return make(stage, ray, parts) if make is not None else None


def collect(ray: Any, ds: Any, schema: pa.Schema) -> pa.Table:
    """A (small) dataset as one Arrow table on the driver."""
    tables = [t for t in fetch(ray, ds.to_arrow_refs()) if t.num_rows]
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def components(ray: Any, edges: Any, parts: int) -> tuple[Any, int]:
    """Star edges ``(hi, lo)`` of the graph ``edges`` (a dataset of ``hi``/``lo`` columns):
    each node linked to the smallest node of its component. Alternates large-star and
    small-star shuffles until an entire round moves no edge; returns the stars (a
    materialized dataset) and the number of rounds."""
    rounds = 0
    while True:
        rounds += 1
        big = co_group([("e", edges.map_batches(partition_steps.directed,
                                                batch_format="pyarrow"), "src")],
                       partition_steps.large_star_step, parts).materialize()
        small = co_group([("e", big.map_batches(partition_steps.directed,
                                                batch_format="pyarrow"), "src")],
                         partition_steps.small_star_step, parts).materialize()
        moved = _sum(ray, big, "changed") + _sum(ray, small, "changed")
        edges = small
        if moved == 0:
            return edges, rounds


def _stopwatch() -> Callable[[], int]:
    """Milliseconds since the previous call (phase timings in :data:`RUNS`)."""
    last = [time.perf_counter()]

    def lap() -> int:
        now = time.perf_counter()
        ms, last[0] = int(1000 * (now - last[0])), now
        return ms
    return lap


def select(table: pa.Table, names: list[str]) -> pa.Table:
    return table.select(names)


def _columns(ds: Any, names: list[str]) -> Any:
    return ds.map_batches(select, fn_kwargs={"names": names}, batch_format="pyarrow")


TOTAL = pa.schema([("total", pa.int64())])


def column_total(table: pa.Table, column: str) -> pa.Table:
    """One row: the sum of ``column`` over this block."""
    return pa.table([pa.array([int(pc.sum(table.column(column)).as_py() or 0)], pa.int64())],
                    schema=TOTAL)


def _sum(ray: Any, ds: Any, column: str) -> int:
    """The sum of ``column``: one row per block, added on the driver (``Dataset.sum`` is an
    aggregation, i.e. one more shuffle)."""
    totals = collect(ray, ds.map_batches(column_total, fn_kwargs={"column": column},
                                         batch_format="pyarrow"), TOTAL)
    return int(pc.sum(totals.column("total")).as_py() or 0)


# -- small map functions (run in Ray tasks) ---------------------------------------------

def training_edges(edges: pa.Table, first_ref: int) -> pa.Table:
    right = edges.column("right").to_numpy()
    t = edges.filter(pa.array(right < first_ref))
    return pa.table([t.column("right"), t.column("left"),
                     pa.array(np.zeros(t.num_rows, np.int64))], schema=partition_steps.STARS)


def reference_edges(edges: pa.Table, first_ref: int) -> pa.Table:
    left, right = edges.column("left").to_numpy(), edges.column("right").to_numpy()
    return edges.filter(pa.array((left < first_ref) & (right >= first_ref)))


def member_decisions(members: pa.Table, exact: bool) -> pa.Table:
    """Decisions for the non-kept members of clusters (``exact``: of exact_dedup)."""
    seq, rep = members.column("seq").to_numpy(), members.column("rep").to_numpy()
    dup = np.flatnonzero(seq != rep)
    names = [nm if nm is not None else f"seq {r}" for nm, r in zip(
        members.column("rep_row_id").take(pa.array(dup)).to_pylist(), rep[dup].tolist(),
        strict=True)]
    if exact:
        return decisions_table(seq[dup], [exact_dedup.CODES[0]] * dup.size,
                               [f"duplicate of row {nm}" for nm in names])
    jac = members.column("jaccard").to_numpy()[dup].astype(np.float32)
    details = [detail_text(f"near-duplicate of row {nm}", j)
               for nm, j in zip(names, jac, strict=True)]
    return decisions_table(seq[dup], ["near_duplicate"] * dup.size, details)


def contamination_decisions(contam: pa.Table, offsets: list[tuple[int, str]],
                            exact: bool) -> pa.Table:
    refs = contam.column("ref").to_pylist()
    seq = contam.column("seq").to_numpy()
    if exact:
        return decisions_table(seq, [exact_dedup.CODES[1]] * contam.num_rows,
                               [f"copy of {reference_name(offsets, r)}" for r in refs])
    jac = contam.column("jaccard").to_numpy().astype(np.float32)
    details = [detail_text(f"near-duplicate of {reference_name(offsets, r)}", j)
               for r, j in zip(refs, jac, strict=True)]
    return decisions_table(seq, ["contaminated_near"] * contam.num_rows, details)


def shift_seq(table: pa.Table, by: int) -> pa.Table:
    return table.set_column(0, "seq", pa.array(table.column("seq").to_numpy() + by))


def cluster_heads(members: pa.Table) -> pa.Table:
    """``(label, size)`` of each cluster (its kept row's member row)."""
    seq, rep = members.column("seq").to_numpy(), members.column("rep").to_numpy()
    return members.filter(pa.array(seq == rep)).select(["label", "size"])


def shown_members(members: pa.Table, labels: np.ndarray, shown: int) -> pa.Table:
    """The members the report shows of clusters ``labels``: kept row and first others."""
    rank = members.column("rank").to_numpy()
    want = np.isin(members.column("label").to_numpy(), labels) & (rank < shown - 1)
    return members.filter(pa.array(want))


def first_rows(table: pa.Table, k: int) -> pa.Table:
    """The ``k`` rows of smallest ``seq`` (per block; the driver merges the blocks)."""
    order = np.argsort(table.column("seq").to_numpy(), kind="stable")[:k]
    return table.take(pa.array(order))


#: the first pass's hash or sketch rows go to the object store in blocks of about this
#: size: every step of a grouping is a task per block, and a task per chunk (a few hundred
#: rows for a small file) would cost more in Ray's per-task overhead than its work
BLOCK_BYTES = 16 << 20


class RayGrouping:
    """What the distributed dedup stages share: their first-pass rows go to the object
    store, and after grouping the driver pulls only the report's few rows."""

    def __init__(self, ray: Any, parts: int) -> None:
        self.ray = ray
        self.parts = parts
        self.refs: list[Any] = []
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.rows = 0
        self.max_seq = -1

    def _put(self, table: pa.Table) -> None:
        """Add rows of the first pass; they go to the object store in blocks of about
        :data:`BLOCK_BYTES`."""
        self.pending.append(table)
        self.pending_bytes += table.nbytes
        if self.pending_bytes >= BLOCK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            block = pa.concat_tables(self.pending, promote_options="default")
            self.refs.append(self.ray.put(block))
            self.pending, self.pending_bytes = [], 0

    @staticmethod
    def _decision_rows(members: Any, contam: Any, offsets: list[tuple[int, str]], *,
                   exact: bool) -> Any:
        """The stage's decisions as one Ray dataset: duplicates of a kept row, then copies of
        a reference set (``exact`` picks exact_dedup's codes and details over minhash's)."""
        return members.map_batches(member_decisions, fn_kwargs={"exact": exact},
                                   batch_format="pyarrow").union(
            contam.map_batches(contamination_decisions,
                               fn_kwargs={"offsets": offsets, "exact": exact},
                               batch_format="pyarrow"))

    def _report_rows(self, members: Any, contam: Any, report_clusters: int,
                     ) -> tuple[np.ndarray, np.ndarray, pa.Table, pa.Table]:
        """Sizes of all clusters, the labels of the largest (ties: smallest label), their
        shown members, and the first ten contaminated rows."""
        ray = self.ray
        heads = collect(ray, members.map_batches(cluster_heads, batch_format="pyarrow"),
                        pa.schema([("label", pa.int64()), ("size", pa.int64())]))
        sizes, labels = heads.column("size").to_numpy(), heads.column("label").to_numpy()
        top = labels[np.lexsort((labels, -sizes))][:report_clusters]
        shown = collect(ray, members.map_batches(
            shown_members, fn_kwargs={"labels": top, "shown": 6}, batch_format="pyarrow"),
            MEMBERS)
        examples = collect(ray, contam.map_batches(first_rows, fn_kwargs={"k": 10},
                                                   batch_format="pyarrow"),
                           partition_steps.CONTAMINATION)
        return sizes, top, shown, first_rows(examples, 10)

    @staticmethod
    def _shown(top: np.ndarray, shown: pa.Table) -> Iterator[list[dict[str, Any]]]:
        """Per cluster of ``top``, its shown member rows, kept row first."""
        label = shown.column("label").to_numpy()
        rank = shown.column("rank").to_numpy()
        for lab in top.tolist():
            rows = np.flatnonzero(label == lab)
            rows = rows[np.argsort(rank[rows], kind="stable")]  # kept row (-1) first
            yield shown.take(pa.array(rows)).to_pylist()


def _name(row: dict[str, Any]) -> str:
    return row["row_id"] if row["row_id"] is not None else f"seq {row['seq']}"


class RayExactDedup(RayGrouping):
    """:class:`ExactDedup` grouped on the cluster: hash rows partitioned by hash."""

    def __init__(self, stage: ExactDedup, ray: Any, parts: int) -> None:
        super().__init__(ray, parts)
        self.stage = stage
        self.bytes = {"index": 0, "names": 0}

    def observe(self, prepared: Any, rows: Rows) -> None:
        table = self.stage.hash_table(prepared, rows.seq, rows.row_ids)
        self._put(table)
        self.rows += table.num_rows
        self.max_seq = max(self.max_seq, int(rows.seq.max()))
        self.bytes["index"] += 32 * table.num_rows  # two hash halves, seq, length
        self.bytes["names"] += table.column("row_id").nbytes + table.column("snippet").nbytes

    def finalize(self) -> Any:
        """Group; returns the decisions dataset (``DECISIONS`` rows) or ``None``."""
        g, parts = self.stage, self.parts
        first_ref = self.max_seq + 1
        tables, offsets = g.reference_tables()
        for t in tables:
            self._put(shift_seq(t, first_ref))
        RUNS.append({"stage": 0, "rows": self.rows})
        self._flush()
        if not self.refs:
            self._adopt(np.zeros(0, np.int64), [], 0, [])
            return None
        hashed = Blocks(self.ray, self.refs)
        members = co_group([("h", hashed, "h0")], partition_steps.hash_groups_step, parts,
                           keep=g.keep, first_ref=first_ref).materialize()
        if offsets:
            contam = co_group([("h", hashed, "h0")], partition_steps.hash_contamination_step,
                              parts, first_ref=first_ref).materialize()
        else:  # no reference set: nothing to look up
            contam = Blocks(self.ray, [self.ray.put(
                partition_steps.CONTAMINATION.empty_table())])
        sizes, top, shown, examples = self._report_rows(members, contam, g.report_clusters)
        largest = [exact_dedup.cluster_entry(int(rows[0]["size"]),
                                             [_name(r) for r in rows],
                                             [r["snippet"] or "" for r in rows])
                   for rows in self._shown(top, shown)]
        self._adopt(sizes, largest, contam.count(), [
            {"row": _name(r), "reference": reference_name(offsets, r["ref"]),
             "snippet": r["snippet"] or ""} for r in examples.to_pylist()])
        return self._decision_rows(members, contam, offsets, exact=True)

    def _adopt(self, sizes: np.ndarray, largest: list[dict[str, Any]], contaminated: int,
                 examples: list[dict[str, Any]]) -> None:
        g, n = self.stage, max(self.rows, 1)
        g.adopt_grouping(g.section(
            rows=self.rows, cluster_sizes=sizes, duplicates=int((sizes - 1).sum()),
            largest=largest, contaminated=contaminated, contamination_examples=examples,
            memory={"index_bytes_per_row": round(self.bytes["index"] / n, 1),
                    "names_and_snippets_bytes_per_row": round(self.bytes["names"] / n, 1),
                    "where": "Ray object store (hash rows), not the driver"}))


class RayMinHash(RayGrouping):
    """Collects a :class:`MinHashDedup`'s sketches during the first pass and clusters them
    on the cluster; leaves the stage's report section on the stage and hands back the
    decisions as a Ray dataset."""

    def __init__(self, stage: MinHashDedup, ray: Any, parts: int) -> None:
        super().__init__(ray, parts)
        self.stage = stage
        self.without_shingles = 0
        self.shingles = 0
        #: whether the rows are compared part by part (None before the first batch)
        self.by_parts: bool | None = None
        self.bytes = {"index": 0, "sets": 0, "names": 0}

    def observe(self, prepared: Any, rows: Rows) -> None:
        self.by_parts = self.stage.compared(prepared, self.by_parts)
        table = self.stage.sketch_rows(prepared, rows.seq, rows.row_ids)
        self._put(table)
        self.rows += table.num_rows
        self.without_shingles += int((~prepared.valid).sum())
        self.shingles += int(prepared.shingles)
        self.max_seq = max(self.max_seq, int(rows.seq.max()))
        self.bytes["index"] += table.column("keys").nbytes + 17 * table.num_rows
        self.bytes["sets"] += table.column("set").nbytes
        self.bytes["names"] += table.column("row_id").nbytes + table.column("snippet").nbytes

    def _reference_refs(self, first_ref: int) -> list[tuple[int, str]]:
        # offsets per reference batch, as the in-memory path numbers them
        offsets = []
        start = first_ref
        for name, sk in self.stage.reference_sketches(self.by_parts):
            n = sk.valid.size
            offsets.append((start, name))
            self._put(self.stage.sketch_rows(sk, np.arange(start, start + n, dtype=np.int64)))
            start += n
        return offsets

    def finalize(self) -> Any:
        """Cluster; returns the decisions dataset (``DECISIONS`` rows) or ``None``."""
        g, ray, parts = self.stage, self.ray, self.parts
        n_bands, rows_per_band = g.band_rows()
        exact = g.verify == "exact"
        first_ref = self.max_seq + 1
        offsets = self._reference_refs(first_ref)
        stats = {"stage": 1, "rows": self.rows, "rounds": 0, "candidate_pairs": 0,
                 "edges": 0}
        _lap = _stopwatch()
        self._flush()
        if not self.refs:
            self._adopt(np.zeros(0, np.int64), [], 0, 0, [])
            RUNS.append(stats)
            return None
        sketches = Blocks(ray, self.refs)
        band_rows = sketches.map_batches(bands.band_rows, batch_format="pyarrow")
        pairs = co_group([("b", band_rows, partition_steps.band_key_hash)],
                         partition_steps.bucket_step, parts,
                         max_all_pairs=g.max_bucket_pairs)
        # each join ships only the sketch columns its step reads
        for_pairs = _columns(sketches, ["seq", "keys", "set"])
        for_members = _columns(sketches, ["seq", *partition_steps.LEAF_COLUMNS])
        with_left = co_group([("p", pairs, "left"), ("s", for_pairs, "seq")],
                             partition_steps.attach_left_step, parts).materialize()
        stats["s_pairs"] = _lap()
        candidates = with_left.count()
        edges = co_group([("p", with_left, "right"), ("s", for_pairs, "seq")],
                         partition_steps.verify_step, parts, n_bands=n_bands,
                         rows_per_band=rows_per_band, threshold=g.threshold,
                         first_ref=first_ref, exact=exact,
                         by_parts=bool(self.by_parts)).materialize()
        stats.update(candidate_pairs=candidates, edges=edges.count(), s_verify=_lap())
        train = edges.map_batches(training_edges, fn_kwargs={"first_ref": first_ref},
                                  batch_format="pyarrow")
        star, stats["rounds"] = components(ray, train, parts)
        stats["s_components"] = _lap()
        leaves = co_group([("e", star, "hi"), ("s", for_members, "seq")],
                          partition_steps.attach_leaf_step, parts)
        members = co_group([("e", leaves, "lo"), ("s", for_members, "seq")],
                           partition_steps.members_step, parts, keep=g.keep,
                           exact=exact, by_parts=bool(self.by_parts)).materialize()
        if offsets:
            cross = edges.map_batches(reference_edges, fn_kwargs={"first_ref": first_ref},
                                      batch_format="pyarrow")
            contam = co_group([("e", cross, "left"),
                               ("s", _columns(sketches, ["seq", "row_id", "snippet"]), "seq")],
                              partition_steps.contamination_step, parts).materialize()
        else:  # no reference set: nothing to join
            contam = Blocks(ray, [ray.put(
                partition_steps.CONTAMINATION.empty_table())])
        stats["s_members"] = _lap()
        sizes, top, shown, examples = self._report_rows(members, contam, g.report_clusters)
        largest = [cluster_entry(int(rows[0]["size"]), [_name(r) for r in rows],
                                 [r["snippet"] or "" for r in rows],
                                 np.array([r["jaccard"] for r in rows], dtype=np.float64),
                                 g.snippet_chars)
                   for rows in self._shown(top, shown)]
        self._adopt(sizes, largest, candidates, contam.count(), [
            contamination_example(_name(r), reference_name(offsets, r["ref"]), r["jaccard"],
                                  r["snippet"] or "", g.snippet_chars)
            for r in examples.to_pylist()])
        stats["s_report"] = _lap()
        RUNS.append(stats)
        return self._decision_rows(members, contam, offsets, exact=False)

    def _adopt(self, sizes: np.ndarray, largest: list[dict[str, Any]], candidates: int,
                 contaminated: int, examples: list[dict[str, Any]]) -> None:
        g, n = self.stage, max(self.rows, 1)
        g.adopt_grouping(g.section(
            rows=self.rows, without_shingles=self.without_shingles, shingles=self.shingles,
            candidates=candidates, cluster_sizes=sizes,
            duplicates=int((sizes - 1).sum()), largest=largest, contaminated=contaminated,
            contamination_examples=examples,
            memory={"index_bytes_per_row": round(self.bytes["index"] / n, 1),
                    "verify_store_bytes_per_row": round(self.bytes["sets"] / n, 1),
                    "names_and_snippets_bytes_per_row": round(self.bytes["names"] / n, 1),
                    "where": "Ray object store (sketch rows), not the driver"},
            by_parts=bool(self.by_parts)))


#: the distributed groupings of this engine, by the name a stage's
#: ``distributed_grouping()`` declares; a new global stage needs an entry only if it wants a
#: grouping of its own (else it observes and finalizes on the driver)
GROUPINGS: dict[str, Callable[[Any, Any, int], RayGrouping]] = {
    ExactDedup.GROUPING: RayExactDedup,
    MinHashDedup.GROUPING: RayMinHash,
}
