"""Exact-duplicate removal on 128-bit hashes of normalised row content."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from cleanpipe.columns import is_utf8
from cleanpipe.contract.decided import DecidedFromTable
from cleanpipe.contract.decisions import DECISIONS, decisions_table, reference_name
from cleanpipe.contract.stage import Action, BatchContext, GlobalStage, StageError
from cleanpipe.dedup import cluster, hashing
from cleanpipe.dedup.partition_steps import HASH_ROWS_SCHEMA
from cleanpipe.dedup.reference import load_reference, table_batches
from cleanpipe.dedup.rows import RowBook, lengths_and_snippets
from cleanpipe.dedup.text import UnicodeForm, normalize, row_texts
from cleanpipe.fields import string_columns


@dataclass
class _Hashed:
    hashes: np.ndarray  # (rows, 2) uint64
    lengths: np.ndarray
    snippets: pa.Array | None
    labels: pa.Array | None = None  # label values as text, with ``label_field``


#: decide's codes, in the order their findings are added
CODES = ("exact_duplicate", "contaminated_exact", "conflicting_labels")

#: rows of a content-hash table (:meth:`ExactDedup.hash_table`)
HASH_ROWS = HASH_ROWS_SCHEMA


class ExactDedup(DecidedFromTable, GlobalStage):
    """Drop (or flag) rows whose normalised content equals an earlier row's, and rows that
    copy an eval/test set.

    The configured fields (nested message contents included) are normalised, joined with a
    separator that keeps field boundaries, and hashed to 128 bits (XXH3-128); the hashes are
    the only per-row state besides row ids. One row of each group survives (``keep``); the
    others are ``exact_duplicate`` with the kept row named in the detail.

        >>> stage = ExactDedup(fields=["instruction", "output"], lowercase=True)
        >>> rows = {"instruction": ["Say hi", "say  HI", "Say bye"],
        ...         "output": ["hi", "hi", "bye"]}
        >>> stage(rows)["instruction"]
        ['Say hi', 'Say bye']

    With ``label_field``, a group whose rows carry different labels is no duplicate to
    thin out but a contradiction: every row of it is ``conflicting_labels``.

        >>> stage = ExactDedup(fields=["text"], label_field="label")
        >>> stage({"text": ["refund?", "refund?", "hi", "hi"], "label": [3, 7, 1, 1]})
        {'text': ['hi'], 'label': [1]}
    """

    name: ClassVar[str] = "exact_dedup"
    #: the distributed grouping this stage offers (see :meth:`distributed_grouping`)
    GROUPING: ClassVar[str] = "content_hash"
    decision_codes: ClassVar[tuple[str, ...]] = CODES
    codes: ClassVar[dict[str, Action]] = {
        "exact_duplicate": Action.DROP,
        "contaminated_exact": Action.DROP,
        "conflicting_labels": Action.DROP,
    }
    forbidden_actions: ClassVar[dict[str, frozenset[Action]]] = {
        "exact_duplicate": frozenset({Action.FIX}),
        "contaminated_exact": frozenset({Action.FIX}),
        "conflicting_labels": frozenset({Action.FIX}),
    }

    fields: list[str] | None = None
    """Fields compared together (default: the pipeline's text fields)."""
    lowercase: bool = False
    """Ignore case."""
    collapse_whitespace: bool = True
    """Treat runs of whitespace as one space and ignore leading/trailing whitespace."""
    strip_punctuation: bool = False
    """Ignore punctuation and symbols (they count as whitespace)."""
    unicode_form: UnicodeForm = "NFC"
    """Unicode normalisation before hashing (``NFKC`` also folds full-width forms)."""
    keep: cluster.Keep = "first"
    """Which row of a group survives: ``first``, ``last`` or ``longest``."""
    label_field: str | None = None
    """Classification label column. Rows with the same text and different labels are all
    ``conflicting_labels`` (the trainer would see the same input with both answers), not
    duplicates of which one label silently survives."""
    reference: list[Any] = []
    """Eval/test datasets (paths, or pyarrow Tables in Python) that training rows must not
    copy."""
    reference_fields: list[str] | None = None
    """Text fields of the reference sets (default: ``fields``, else their string columns)."""
    snippet_chars: int = Field(80, ge=0)
    """Characters of each row kept for the report's examples."""
    report_clusters: int = Field(10, ge=0)
    """How many of the largest duplicate groups the report shows."""

    # what DecidedFromTable reads and adopt_grouping sets
    _report: dict[str, Any] = PrivateAttr(default_factory=dict)
    _decisions: pa.Table | None = PrivateAttr(None)
    # the first pass's per-row state (forget_rows drops it)
    _book: RowBook | None = PrivateAttr(None)
    _hashes: list[np.ndarray] = PrivateAttr(default_factory=list)
    _labels: list[pa.Array] = PrivateAttr(default_factory=list)
    _conflict: np.ndarray | None = PrivateAttr(None)
    _label_text: pa.ChunkedArray | None = PrivateAttr(None)
    _rep: np.ndarray | None = PrivateAttr(None)
    _contam: np.ndarray | None = PrivateAttr(None)
    _ref_offsets: list[tuple[int, str]] = PrivateAttr(default_factory=list)

    def describe(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude={"reference"})
        out["reference"] = [x if isinstance(x, str) else f"<table {getattr(x, 'num_rows', '?')}"
                            " rows>" for x in self.reference]
        return out

    def hash_rows(self, ctx: BatchContext, fields: list[str] | None = None) -> _Hashed:
        raw = row_texts(ctx, fields if fields is not None else self.fields)
        norm = normalize(raw, lowercase=self.lowercase, unicode_form=self.unicode_form,
                         strip_punctuation=self.strip_punctuation,
                         collapse_whitespace=self.collapse_whitespace)
        lengths, snippets = lengths_and_snippets(raw, self.snippet_chars)
        return _Hashed(hashing.hash128(norm), lengths, snippets)

    def prepare(self, batch: pa.RecordBatch, ctx: BatchContext) -> _Hashed:
        hashed = self.hash_rows(ctx)
        if self.label_field is not None:
            hashed.labels = label_texts(batch, self.label_field)
        return hashed

    def distributed_grouping(self) -> str | None:
        """:data:`GROUPING` when rows are grouped by their content hash alone (no
        ``label_field``): a distributed engine can group :meth:`hash_table` rows (and
        :meth:`reference_tables`) without the stage.

            >>> ExactDedup().distributed_grouping()
            'content_hash'
            >>> ExactDedup(label_field="label").distributed_grouping() is None
            True
        """
        return self.GROUPING if self.label_field is None else None

    def forget_rows(self) -> None:
        self._book = None
        self._hashes = []

    def hash_table(self, prepared: _Hashed, seq: np.ndarray,
                   row_ids: pa.Array | None = None) -> pa.Table:
        """A prepared batch as :data:`HASH_ROWS`: rows with equal ``(h0, h1)`` are
        duplicates (the one "band" of exact dedup), for engines that group elsewhere.

            >>> st = ExactDedup(fields=["t"])
            >>> b = pa.record_batch({"t": ["a", "b", "a"]})
            >>> t = st.hash_table(st.prepare(b, BatchContext(b, ["t"])), np.array([4, 5, 6]))
            >>> h = t.column("h0").to_pylist(); (h[0] == h[2], h[0] == h[1])
            (True, False)
        """
        n = prepared.hashes.shape[0]
        ids = (pa.array(row_ids).cast(pa.large_string()) if row_ids is not None
               else pa.nulls(n, pa.large_string()))
        snips = (prepared.snippets.cast(pa.large_string()) if prepared.snippets is not None
                 else pa.nulls(n, pa.large_string()))
        return pa.table([pa.array(np.asarray(seq, np.int64)),
                         pa.array(np.ascontiguousarray(prepared.hashes[:, 0])),
                         pa.array(np.ascontiguousarray(prepared.hashes[:, 1])),
                         pa.array(np.asarray(prepared.lengths, np.int64)), ids, snips],
                        schema=HASH_ROWS)

    def reference_tables(self) -> tuple[list[pa.Table], list[tuple[int, str]]]:
        """The reference sets as :data:`HASH_ROWS` (seq = row number across all of
        them) and where each starts, for engines that group elsewhere."""
        tables, offsets, start = [], [], 0
        for item in self.reference:
            ref_name, table = load_reference(item)
            offsets.append((start, ref_name))
            fields = self.reference_fields or self.fields
            k = start
            for rb in table_batches(table):
                ctx = BatchContext(rb, fields or string_columns(rb.schema))
                h = self.hash_rows(ctx, fields)
                tables.append(self.hash_table(h, np.arange(k, k + rb.num_rows), None))
                k += rb.num_rows
            start += table.num_rows
        return tables, offsets

    def observe_reads_batch(self) -> bool:
        return False  # observe keeps the prepared hashes (and seq, row ids) only

    def observe(self, prepared: _Hashed, seq: np.ndarray, batch: pa.RecordBatch,
                ctx: BatchContext) -> None:
        if self._book is None:
            self._book = RowBook(self.snippet_chars)
        self._book.add(seq, prepared.lengths, prepared.snippets, ctx.row_ids)
        self._hashes.append(prepared.hashes)
        if prepared.labels is not None:
            self._labels.append(prepared.labels)

    def _reference_hashes(self) -> np.ndarray:
        parts = []
        start = 0
        self._ref_offsets = []
        for item in self.reference:
            ref_name, table = load_reference(item)
            self._ref_offsets.append((start, ref_name))
            fields = self.reference_fields or self.fields
            for rb in table_batches(table):
                ctx = BatchContext(rb, fields or string_columns(rb.schema))
                parts.append(self.hash_rows(ctx, fields).hashes)
            start += table.num_rows
        return np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)

    def finalize(self) -> None:
        book = self._book or RowBook(self.snippet_chars)
        book.close()
        self._book = book
        n = book.n
        hashes = np.concatenate(self._hashes) if self._hashes else np.zeros((0, 2), np.uint64)
        labels = hashing.group_labels(hashes)
        rep = cluster.choose_kept(labels, book.lengths, self.keep)
        self._rep = rep
        if self.label_field is not None:
            text = pa.chunked_array(self._labels, pa.large_string())
            self._label_text = text
            self._conflict = mixed_groups(labels, hashing.hash128(text.combine_chunks())[:, 0]
                                          if n else np.zeros(0, np.uint64))
            self._labels = []
        else:
            self._conflict = np.zeros(n, dtype=bool)
        book.pin(rep[rep != np.arange(n)])
        self._contam = hashing.lookup(hashes, self._reference_hashes())
        self._report = self._build_report(labels, rep, n, int(hashes.nbytes))
        self._hashes = []

    def _ref_name(self, idx: int) -> str:
        return reference_name(self._ref_offsets, idx)

    def _build_report(self, labels: np.ndarray, rep: np.ndarray, n: int,
                      hash_bytes: int) -> dict[str, Any]:
        book = self._book
        assert book is not None and self._contam is not None
        largest = []
        for members in cluster.largest_clusters(labels, rep, self.report_clusters):
            shown = members[:6]
            largest.append(cluster_entry(int(members.size), book.names(shown),
                                         book.snippets(shown)))
        contaminated = np.flatnonzero(self._contam >= 0)
        extra = book.nbytes()
        _, sizes = np.unique(labels, return_counts=True)
        conflict = self._conflict if self._conflict is not None else np.zeros(n, bool)
        section = self.section(
            rows=n, cluster_sizes=sizes[sizes >= 2],
            duplicates=int(((rep != np.arange(n)) & ~conflict).sum()), largest=largest,
            contaminated=int(contaminated.size),
            contamination_examples=[
                {"row": name, "reference": self._ref_name(int(self._contam[i])),
                 "snippet": book.snippet(i)}
                for i, name in zip(contaminated[:10], book.names(contaminated[:10]),
                                   strict=True)],
            memory={
                "index_bytes_per_row": round(
                    (hash_bytes + extra["seq_and_length"]) / max(n, 1), 1),
                "decisions_bytes_per_row": round((rep.nbytes + self._contam.nbytes)
                                                 / max(n, 1), 1),
                "names_and_snippets_bytes_per_row": round(
                    (extra["row_ids"] + extra["snippets"]) / max(n, 1), 1),
            })
        if self.label_field is not None:
            section["conflicting_labels"] = self._conflict_section(labels, conflict)
        return section

    def _conflict_section(self, labels: np.ndarray, conflict: np.ndarray) -> dict[str, Any]:
        book = self._book
        assert book is not None and self._label_text is not None
        groups = np.unique(labels[conflict])
        examples = []
        for g in groups[:self.report_clusters]:
            members = np.flatnonzero(labels == g)[:6]
            examples.append({
                "rows": [{"row": nm, "label": lab, "snippet": sn} for nm, lab, sn in zip(
                    book.names(members), self._label_text.take(pa.array(members)).to_pylist(),
                    book.snippets(members), strict=True)]})
        return {"groups": int(groups.size), "rows": int(conflict.sum()), "examples": examples}

    @staticmethod
    def section(*, rows: int, cluster_sizes: np.ndarray, duplicates: int,
                largest: list[dict[str, Any]], contaminated: int,
                contamination_examples: list[dict[str, Any]],
                memory: dict[str, Any]) -> dict[str, Any]:
        """The report section from its parts: one layout whichever engine grouped.

        ``cluster_sizes`` holds the size of every group of two or more rows.
        """
        return {
            "rows": rows,
            "clusters": int(cluster_sizes.size),
            "duplicates": int(duplicates),
            "cluster_sizes": cluster.sizes_histogram(cluster_sizes),
            "largest_clusters": largest,
            "contamination": {"rows": int(contaminated), "examples": contamination_examples},
            "memory": memory,
        }

    def decisions_for(self, seq: np.ndarray) -> pa.Table:
        """What ``decide`` reports for the rows ``seq``, as a decisions table."""
        if self._rep is None or self._book is None or self._contam is None:
            raise RuntimeError("decide() before finalize()")
        book = self._book
        seq = np.asarray(seq, dtype=np.int64)
        idx = book.index_of(seq)
        conflict = self._conflict[idx] if self._conflict is not None else np.zeros(
            idx.size, bool)
        dup = np.flatnonzero((self._rep[idx] != idx) & ~conflict)
        hit = np.flatnonzero(self._contam[idx] >= 0)
        mixed = np.flatnonzero(conflict)
        details = [f"duplicate of row {nm}" for nm in book.names(self._rep[idx[dup]])]
        details += [f"copy of {self._ref_name(int(r))}" for r in self._contam[idx[hit]]]
        if mixed.size:
            assert self._label_text is not None
            own = self._label_text.take(pa.array(idx[mixed])).to_pylist()
            details += [f"same text as row {nm} with another label (this row: {lab})"
                        for nm, lab in zip(book.names(self._rep[idx[mixed]]), own,
                                           strict=True)]
        return decisions_table(np.concatenate([seq[dup], seq[hit], seq[mixed]]),
                               [CODES[0]] * dup.size + [CODES[1]] * hit.size
                               + [CODES[2]] * mixed.size, details)

    def report_section(self) -> dict[str, Any]:
        return dict(self._report)


def label_texts(batch: pa.RecordBatch, field: str) -> pa.Array:
    """The label column as text, one value per row (null as ``"null"``), for comparing
    labels of any type.

        >>> label_texts(pa.record_batch({"label": [3, None, 3]}), "label").to_pylist()
        ['3', 'null', '3']
    """
    if field not in batch.schema.names:
        raise StageError(f"exact_dedup: label_field {field!r} is not a column (columns: "
                         f"{', '.join(batch.schema.names)})")
    col = batch.column(field)
    if pa.types.is_integer(col.type) or is_utf8(col.type) or pa.types.is_boolean(col.type):
        text = col.cast(pa.large_string())
    else:
        text = pa.array([json.dumps(v, sort_keys=True, ensure_ascii=False)
                         for v in col.to_pylist()], pa.large_string())
    return pc.fill_null(text, "null")


def mixed_groups(groups: np.ndarray, label_keys: np.ndarray) -> np.ndarray:
    """For each row, whether its group holds more than one label.

        >>> mixed_groups(np.array([0, 0, 2, 2]), np.array([5, 6, 1, 1], np.uint64)).tolist()
        [True, True, False, False]
    """
    lo = np.full(groups.size, np.iinfo(np.uint64).max, np.uint64)
    hi = np.zeros(groups.size, np.uint64)
    np.minimum.at(lo, groups, label_keys)
    np.maximum.at(hi, groups, label_keys)
    return lo[groups] != hi[groups]


def cluster_entry(size: int, names: list[str], snippets: list[str]) -> dict[str, Any]:
    """One of the report's largest groups: its kept row first, then members."""
    return {"size": size, "representative": names[0],
            "representative_snippet": snippets[0],
            "members": [{"row": names[k], "snippet": snippets[k]}
                        for k in range(1, len(names))]}


__all__ = ["DECISIONS", "HASH_ROWS", "ExactDedup"]
