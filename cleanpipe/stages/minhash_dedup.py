"""Near-duplicate removal with MinHash LSH (datasketch-compatible signatures, bulk-computed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, PrivateAttr, field_validator, model_validator

from cleanpipe.dedup import bands, cluster, external, kernels
from cleanpipe.dedup.decisions import (
    DECISIONS,
    decisions_table,
    reference_name,
)
from cleanpipe.dedup.minhash import (
    HashName,
    Scheme,
    Shingled,
    lsh_params,
    shingle_hashes,
    signatures,
)
from cleanpipe.dedup.reference import load_reference, table_batches
from cleanpipe.dedup.rows import RowBook, lengths_and_snippets
from cleanpipe.dedup.text import UnicodeForm, normalize, row_texts, shingle_modes
from cleanpipe.engine.memory import release_free_memory
from cleanpipe.stages._decided import DecidedFromTable
from cleanpipe.stages.base import Action, BatchContext, GlobalStage


@dataclass
class _Sketch:
    """What a worker computes for one batch: compact arrays only."""

    keys: np.ndarray          # (rows, bands) uint64
    valid: np.ndarray         # rows with at least one shingle
    sets: np.ndarray | None   # sorted unique shingle hashes, flat (verify: exact)
    set_off: np.ndarray | None
    lengths: np.ndarray
    snippets: pa.Array | None
    shingles: int


#: decide's codes, in the order their findings are added
CODES = ("near_duplicate", "contaminated_near")

__all__ = ["DECISIONS", "MinHashDedup", "decisions_table", "reference_name"]


class MinHashDedup(DecidedFromTable, GlobalStage):
    """Drop (or flag) near-duplicate rows found by MinHash LSH, and rows that nearly copy an
    eval/test set.

    Each row's text (its ``fields``, nested message contents joined) is normalised and cut
    into shingles: word n-grams for space-separated text, character n-grams for Chinese,
    Japanese, Thai and other scripts written without spaces (``shingle: auto`` decides per
    row). Signatures equal ``datasketch.MinHash(num_perm, seed, scheme=scheme)`` fed the same
    shingles with the same hash (``hash: sha1`` is datasketch's default hash function;
    ``xxh32`` is ``xxhash.xxh32_intdigest``), but are computed in bulk by compiled loops.
    Bands × rows come from datasketch's own choice for ``threshold`` and ``weights``.
    Candidates sharing a band are verified on their exact shingle-set Jaccard
    (``verify: exact``), clustered by union-find, and all but one row per cluster (``keep``)
    are reported as ``near_duplicate`` of the kept row.

        >>> stage = MinHashDedup(fields=["text"], threshold=0.7)
        >>> rows = {"text": ["the quick brown fox jumps over the lazy dog near the river bank",
        ...                  "the quick brown fox jumps over the lazy dog near the river bank!",
        ...                  "a completely different sentence about training language models"]}
        >>> stage(rows)["text"]
        ['the quick brown fox jumps over the lazy dog near the river bank', \
'a completely different sentence about training language models']
    """

    name: ClassVar[str] = "minhash_dedup"
    decision_codes: ClassVar[tuple[str, ...]] = CODES
    execution_params: ClassVar[frozenset[str]] = frozenset({"spill_dir"})
    codes: ClassVar[dict[str, Action]] = {
        "near_duplicate": Action.DROP,
        "contaminated_near": Action.DROP,
    }
    forbidden_actions: ClassVar[dict[str, frozenset[Action]]] = {
        "near_duplicate": frozenset({Action.FIX}),
        "contaminated_near": frozenset({Action.FIX}),
    }

    fields: list[str] | None = None
    """Text fields compared, joined per row (default: the pipeline's text fields)."""
    threshold: float = Field(0.8, gt=0.0, lt=1.0)
    """Jaccard similarity from which two rows are duplicates."""
    num_perm: int = Field(128, ge=2, le=1024)
    """MinHash permutations (signature length)."""
    seed: int = Field(1, ge=0, le=2**32 - 1)
    """Seed of datasketch's permutation generator."""
    hash: HashName = "xxh32"
    """Shingle hash: ``xxh32`` (compiled) or ``sha1`` (datasketch's default, slow)."""
    hash_seed: int = Field(0, ge=0, le=2**32 - 1)
    """Seed of ``xxh32`` (use the same in ``hashfunc`` to reproduce signatures)."""
    scheme: Scheme = "affine32"
    """datasketch permutation scheme: ``affine32`` (its 2.x default) or ``legacy``."""
    bands: int | None = Field(None, ge=1)
    """LSH bands (give with ``rows``; default: datasketch's choice for ``threshold``)."""
    rows: int | None = Field(None, ge=1)
    """Rows (signature values) per band."""
    weights: tuple[float, float] = (0.05, 0.95)
    """(false positive, false negative) weights for choosing bands×rows, as in
    ``MinHashLSH``. Leaning to recall costs little because candidates are verified."""
    verify: Literal["exact", "none"] = "exact"
    """``exact``: keep only candidate pairs whose shingle sets reach ``threshold`` (holds the
    sets, ~4 bytes per shingle; pairs sharing nearly all bands, far above the threshold,
    are taken on their band estimate); ``none``: trust the LSH buckets (more false
    merges)."""
    shingle: Literal["auto", "word", "char"] = "auto"
    """Shingling: word n-grams, character n-grams, or chosen per row by script."""
    ngram_words: int = Field(5, ge=1)
    """Words per shingle for space-separated text."""
    ngram_chars: int = Field(2, ge=1)
    """Characters per shingle for CJK/Thai text. 2, because a 5% character edit rate leaves a
    bigram Jaccard of ~0.82 but a trigram Jaccard of ~0.74: trigrams miss such copies."""
    cjk_ratio: float = Field(0.3, ge=0.0, le=1.0)
    """``shingle: auto`` uses character n-grams when this share of a row's characters is in a
    script written without spaces."""
    lowercase: bool = True
    """Compare case-insensitively."""
    unicode_form: UnicodeForm = "NFKC"
    """Unicode normalisation before shingling (NFKC folds full-width forms)."""
    strip_punctuation: bool = False
    """Treat punctuation and symbols as spaces."""
    keep: cluster.Keep = "first"
    """Which row of a cluster survives: ``first``, ``last`` or ``longest``."""
    max_bucket_pairs: int = Field(64, ge=2)
    """Buckets up to this size are joined pairwise (for verification); bigger ones as a
    star to their first row."""
    external: bool = False
    """Spill band keys to Parquet and cluster with polars (corpora larger than memory)."""
    spill_dir: str | None = None
    """Where ``external`` spills (default: the system temp dir)."""
    reference: list[Any] = []
    """Eval/test datasets (paths, or pyarrow Tables in Python) that training rows must not
    nearly copy."""
    reference_fields: list[str] | None = None
    """Text fields of the reference sets (default: ``fields``, else their string columns)."""
    snippet_chars: int = Field(80, ge=0)
    """Characters of each row kept for the report's cluster examples."""
    report_clusters: int = Field(10, ge=0)
    """How many of the largest clusters the report shows."""

    _book: RowBook | None = PrivateAttr(None)
    _parts: list[_Sketch] = PrivateAttr(default_factory=list)
    _spill: external.KeySpill | None = PrivateAttr(None)
    _rep: np.ndarray | None = PrivateAttr(None)
    _dup_j: np.ndarray | None = PrivateAttr(None)
    _contam: np.ndarray | None = PrivateAttr(None)
    _contam_j: np.ndarray | None = PrivateAttr(None)
    _ref_offsets: list[tuple[int, str]] = PrivateAttr(default_factory=list)
    _report: dict[str, Any] = PrivateAttr(default_factory=dict)
    _decisions: pa.Table | None = PrivateAttr(None)

    @field_validator("weights")
    @classmethod
    def _weights_add_up(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= w <= 1.0 for w in v) or abs(sum(v) - 1.0) > 1e-9:
            raise ValueError("two weights within [0, 1] that add up to 1, as in MinHashLSH")
        return v

    @model_validator(mode="after")
    def _check_bands(self) -> MinHashDedup:
        if (self.bands is None) != (self.rows is None):
            raise ValueError("give both bands and rows, or neither")
        b, r = self.band_rows()
        if b * r > self.num_perm:
            raise ValueError(f"bands × rows = {b * r} exceeds num_perm = {self.num_perm}")
        return self

    def band_rows(self) -> tuple[int, int]:
        """The (bands, rows) split in use."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return lsh_params(self.threshold, self.num_perm, self.weights)

    def describe(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude={"reference"})
        out["reference"] = [x if isinstance(x, str) else f"<table {getattr(x, 'num_rows', '?')}"
                            " rows>" for x in self.reference]
        out["bands"], out["rows"] = self.band_rows()
        return out

    # -- worker side -------------------------------------------------------------------
    def sketch(self, batch: pa.RecordBatch, ctx: BatchContext,
               fields: list[str] | None = None) -> _Sketch:
        """Band keys (and, for verification, shingle sets) of every row of ``batch``."""
        # Fields joined by a newline: a word boundary, so no shingle glues two fields' words.
        raw = row_texts(ctx, fields if fields is not None else self.fields, sep="\n")
        norm = normalize(raw, lowercase=self.lowercase, unicode_form=self.unicode_form,
                         strip_punctuation=self.strip_punctuation)
        modes = shingle_modes(norm, self.shingle, self.cjk_ratio)
        sh = shingle_hashes(norm, modes, self.ngram_words, self.ngram_chars, self.hash,
                            self.hash_seed)
        b, r = self.band_rows()
        sets = set_off = None
        signed = sh
        if self.verify == "exact":
            sets, set_off = kernels.sorted_unique_segments(sh.hashes, sh.doc_off)
            # A minimum ignores repeats: signing the set gives the same signature, cheaper.
            signed = Shingled(sets, set_off)
        keys = kernels.band_keys(signatures(signed, self.num_perm, self.seed, self.scheme),
                                 b, r)
        lengths, snippets = lengths_and_snippets(raw, self.snippet_chars)
        return _Sketch(keys, sh.counts > 0, sets, set_off, lengths, snippets,
                       int(sh.hashes.size))

    def prepare(self, batch: pa.RecordBatch, ctx: BatchContext) -> _Sketch:
        return self.sketch(batch, ctx)

    # -- band-key API (distributed engines) ----------------------------------------------
    def sketch_rows(self, prepared: _Sketch, seq: np.ndarray,
                    row_ids: pa.Array | None = None) -> pa.Table:
        """A prepared batch as sketch rows (:func:`cleanpipe.dedup.bands.sketch_table`):
        what grouping and verification need of each row, keyed by ``seq``."""
        return bands.sketch_table(seq, prepared.keys, prepared.valid, prepared.sets,
                                  prepared.set_off, prepared.lengths, row_ids,
                                  prepared.snippets)

    def band_key_rows(self, prepared: _Sketch, seq: np.ndarray) -> pa.Table:
        """``(band, key, seq)`` rows of a prepared batch: rows sharing ``(band, key)`` are
        LSH candidates.

            >>> import numpy as np, pyarrow as pa
            >>> st = MinHashDedup(fields=["t"], bands=2, rows=4, num_perm=8)
            >>> b = pa.record_batch({"t": ["one two three four five six", ""]})
            >>> sk = st.prepare(b, BatchContext(b, ["t"]))
            >>> t = st.band_key_rows(sk, np.array([40, 41]))
            >>> t.column("band").to_pylist(), t.column("seq").to_pylist()
            ([0, 1], [40, 40])
        """
        return bands.band_rows(self.sketch_rows(prepared, seq))

    # -- main process ------------------------------------------------------------------
    def observe(self, prepared: _Sketch, seq: np.ndarray, batch: pa.RecordBatch,
                ctx: BatchContext) -> None:
        if self._book is None:
            self._book = RowBook(self.snippet_chars, self.spill_dir)
            if self.external:
                self._spill = external.KeySpill(self.spill_dir)
        start = self._book.n
        self._book.add(seq, prepared.lengths, prepared.snippets, ctx.row_ids)
        if self._spill is not None:
            self._spill.append(start, prepared.keys, prepared.valid)
            prepared.keys = _emptied(prepared.keys)
        self._parts.append(prepared)

    def _reference_sketches(self) -> list[tuple[str, _Sketch]]:
        out = []
        for item in self.reference:
            ref_name, table = load_reference(item)
            fields = self.reference_fields or self.fields
            for rb in table_batches(table):
                ctx = BatchContext(rb, fields or [f.name for f in rb.schema
                                                  if pa.types.is_string(f.type)
                                                  or pa.types.is_large_string(f.type)])
                out.append((ref_name, self.sketch(rb, ctx, fields)))
        return out

    def finalize(self) -> None:
        book = self._book or RowBook(self.snippet_chars)
        book.close()
        self._book = book
        n = book.n
        parts = list(self._parts)
        refs = self._reference_sketches()
        ref_offsets: list[tuple[int, str]] = []
        start = n
        for ref_name, sk in refs:
            ref_offsets.append((start, ref_name))
            if self._spill is not None:
                self._spill.append(start, sk.keys, sk.valid)
            start += sk.valid.size
            parts.append(sk)
        total = start
        valid = (np.concatenate([p.valid for p in parts]) if parts
                 else np.zeros(0, dtype=bool))
        b, _r = self.band_rows()
        index_bytes = int(valid.nbytes + book.nbytes()["seq_and_length"])
        if self._spill is None:
            keys = _gather(parts, "keys", np.zeros((0, b), dtype=np.uint64))
            index_bytes += int(keys[:n].nbytes)
            left, right = cluster.candidate_pairs(keys, valid, self.max_bucket_pairs)
            shared = kernels.shared_bands(keys, left, right)
            del keys
            release_free_memory()
        else:
            pairs = external.candidate_pairs(self._spill.scan(), self.max_bucket_pairs)
            left, right = pairs["left"].to_numpy(), pairs["right"].to_numpy()
            shared = None
        candidates = int(left.size)
        sets = off = None
        if self.verify == "exact":
            sizes = np.concatenate([np.diff(p.set_off) for p in parts]) if parts else \
                np.zeros(0, np.int64)
            off = np.zeros(total + 1, dtype=np.int64)
            np.cumsum(sizes, out=off[1:])
            sets = _gather(parts, "sets", np.zeros(0, np.uint32))
            for p in parts:
                p.set_off = None
            # Pairs agreeing on most bands are far above the threshold (each band agrees
            # with probability J**rows): the shared rule skips their exact Jaccard.
            jac = bands.verified_jaccard(
                shared, b, _r, self.threshold, right < n,
                lambda m: kernels.pair_jaccard(sets, off, left[m], right[m], self.threshold))
            del shared
            ok = jac >= self.threshold
            left, right, jac = left[ok], right[ok], jac[ok]
            del ok
        else:
            jac = np.full(left.size, np.nan)
        train = right < n
        # without reference sets every pair is a training pair: no copies
        tl, tr = (left, right) if train.all() else (left[train], right[train])
        del train
        if self._spill is not None:
            import polars as pl

            labels = external.components(n, pl.DataFrame({"left": tl, "right": tr}))
        else:
            labels = cluster.components(n, tl, tr)
        del tl, tr
        rep = cluster.choose_kept(labels, book.lengths, self.keep)
        dup = np.flatnonzero(rep != np.arange(n))
        dup_j = np.full(n, np.nan, dtype=np.float32)
        if sets is not None and dup.size:
            dup_j[dup] = kernels.pair_jaccard(sets, off, dup, rep[dup])
        # Contamination: for each training row, its most similar reference row.
        cross = (left < n) & (right >= n)
        cl, cr, cj = left[cross], right[cross], jac[cross]
        # the pairs are done with: all that follows is per row
        left = right = np.zeros(0, np.int64)
        jac = np.zeros(0)
        del cross
        release_free_memory()
        contam = np.full(n, -1, dtype=np.int64)
        contam_j = np.full(n, np.nan, dtype=np.float32)
        if cl.size:
            order = np.lexsort((cr, -np.nan_to_num(cj, nan=0.0), cl))
            cl, cr, cj = cl[order], cr[order], cj[order]
            first = np.ones(cl.size, dtype=bool)
            first[1:] = cl[1:] != cl[:-1]
            contam[cl[first]] = cr[first]
            contam_j[cl[first]] = cj[first]
        self._rep, self._dup_j, self._contam, self._contam_j = rep, dup_j, contam, contam_j
        self._ref_offsets = ref_offsets
        book.pin(rep[dup])
        del dup
        self._report = self._build_report(labels, rep, sets, off, n, candidates, index_bytes,
                                          sum(p.shingles for p in parts[:len(self._parts)]),
                                          valid[:n])
        # Workers get the stage back for decide(): ship only what decide needs.
        self._parts = []
        if self._spill is not None:
            self._report["memory"]["spilled_bytes"] = self._spill.bytes_written
            self._spill.cleanup()
            self._spill = None

    def _ref_name(self, idx: int) -> str:
        return reference_name(self._ref_offsets, idx)

    def _build_report(self, labels: np.ndarray, rep: np.ndarray, sets: np.ndarray | None,
                      off: np.ndarray | None, n: int, candidates: int, index_bytes: int,
                      shingles: int, valid: np.ndarray) -> dict[str, Any]:
        book = self._book
        assert book is not None and self._contam is not None and self._contam_j is not None
        largest = []
        for members in cluster.largest_clusters(labels, rep, self.report_clusters):
            shown = members[:6]
            jac = (kernels.pair_jaccard(sets, off, np.full(shown.size, shown[0]), shown)
                   if sets is not None else np.full(shown.size, np.nan))
            largest.append(cluster_entry(int(members.size), book.names(shown),
                                         book.snippets(shown), jac))
        _, sizes = np.unique(labels, return_counts=True)
        contaminated = np.flatnonzero(self._contam >= 0)
        examples = [contamination_example(name, self._ref_name(int(self._contam[i])),
                                          self._contam_j[i], book.snippet(i))
                    for i, name in zip(contaminated[:10], book.names(contaminated[:10]),
                                       strict=True)]
        extra = book.nbytes()
        store = int(sets.nbytes + off.nbytes) if sets is not None else 0
        assert self._rep is not None and self._dup_j is not None
        decided = sum(a.nbytes for a in (self._rep, self._dup_j, self._contam, self._contam_j))
        memory = {
            "index_bytes_per_row": round(index_bytes / max(n, 1), 1),
            "verify_store_bytes_per_row": round(store / max(n, 1), 1),
            "decisions_bytes_per_row": round(decided / max(n, 1), 1),
            "names_and_snippets_bytes_per_row": round(
                (extra["row_ids"] + extra["snippets"]) / max(n, 1), 1),
        }
        return self.section(
            rows=n, without_shingles=int(n - valid.sum()), shingles=shingles,
            candidates=candidates, cluster_sizes=sizes[sizes >= 2],
            duplicates=int((rep != np.arange(n)).sum()), largest=largest,
            contaminated=int(contaminated.size), contamination_examples=examples,
            memory=memory)

    def section(self, *, rows: int, without_shingles: int, shingles: int, candidates: int,
                cluster_sizes: np.ndarray, duplicates: int, largest: list[dict[str, Any]],
                contaminated: int, contamination_examples: list[dict[str, Any]],
                memory: dict[str, Any]) -> dict[str, Any]:
        """The report section from its parts: one layout whichever engine clustered.

        ``cluster_sizes`` holds the size of every cluster of two or more rows.
        """
        b, r = self.band_rows()
        return {
            "rows": rows,
            "rows_without_shingles": without_shingles,
            "shingles": int(shingles),
            "bands": b,
            "rows_per_band": r,
            "candidate_pairs": int(candidates),
            "clusters": int(cluster_sizes.size),
            "duplicates": int(duplicates),
            "cluster_sizes": cluster.sizes_histogram(cluster_sizes),
            "largest_clusters": largest,
            "jaccard": "exact shingle-set Jaccard" if self.verify == "exact" else "not verified",
            "contamination": {"rows": int(contaminated), "examples": contamination_examples},
            "memory": memory,
        }

    # -- decisions ---------------------------------------------------------------------
    def decisions_for(self, seq: np.ndarray) -> pa.Table:
        """What ``decide`` reports for the rows ``seq``, as a :data:`DECISIONS` table
        (near-duplicates first, then contamination hits, each in row order)."""
        if self._rep is None or self._book is None:
            raise RuntimeError("decide() before finalize()")
        assert self._dup_j is not None and self._contam is not None
        assert self._contam_j is not None
        book = self._book
        seq = np.asarray(seq, dtype=np.int64)
        idx = book.index_of(seq)
        dup = np.flatnonzero(self._rep[idx] != idx)
        hit = np.flatnonzero(self._contam[idx] >= 0)
        details = [detail_text(f"near-duplicate of row {nm}", j) for nm, j in
                   zip(book.names(self._rep[idx[dup]]), self._dup_j[idx[dup]], strict=True)]
        details += [detail_text(f"near-duplicate of {self._ref_name(int(r))}", j)
                    for r, j in zip(self._contam[idx[hit]], self._contam_j[idx[hit]],
                                    strict=True)]
        return decisions_table(np.concatenate([seq[dup], seq[hit]]),
                               ["near_duplicate"] * dup.size + ["contaminated_near"] * hit.size,
                               details)

    def report_section(self) -> dict[str, Any]:
        return dict(self._report)


#: bytes of parts released between two trims of the C heap in :func:`_gather`
_TRIM_BYTES = 32 << 20


def _emptied(a: np.ndarray) -> np.ndarray:
    """An empty array shaped like ``a`` that does not keep ``a``'s memory alive (a slice such
    as ``a[:0]`` is a view, and a view holds its base).

        >>> big = np.zeros((1000, 3)); e = _emptied(big); (e.shape, e.base is None)
        ((0, 3), True)
    """
    return np.empty((0, *a.shape[1:]), a.dtype)


def _gather(parts: list[_Sketch], name: str, empty: np.ndarray) -> np.ndarray:
    """The parts' ``name`` arrays in one, each part's released as soon as it is copied, so
    the index is never held twice (np.concatenate would need both copies at once)."""
    arrays = [getattr(p, name) for p in parts]
    if not arrays:
        return empty
    out = np.empty((sum(a.shape[0] for a in arrays), *arrays[0].shape[1:]), arrays[0].dtype)
    del arrays
    pos = freed = 0
    for p in parts:
        a = getattr(p, name)
        out[pos:pos + a.shape[0]] = a
        pos += a.shape[0]
        freed += a.nbytes
        setattr(p, name, _emptied(a))
        del a
        if freed >= _TRIM_BYTES:
            # glibc keeps freed batch-sized blocks for reuse; without this the copy and
            # the parts would both count against the process until the next trim
            release_free_memory()
            freed = 0
    release_free_memory()
    return out


def cluster_entry(size: int, names: list[str], snippets: list[str],
                  jaccard: np.ndarray) -> dict[str, Any]:
    """One of the report's largest clusters: its representative first, then members."""
    return {
        "size": size,
        "representative": names[0],
        "representative_snippet": snippets[0],
        "members": [
            {"row": names[k], "snippet": snippets[k],
             "jaccard": None if np.isnan(jaccard[k]) else round(float(jaccard[k]), 4)}
            for k in range(1, len(names))
        ],
    }


def contamination_example(name: str, reference: str, jaccard: float,
                          snippet: str) -> dict[str, Any]:
    j = np.float32(jaccard)  # stored as float32, as the detail shows it
    return {"row": name, "reference": reference,
            "jaccard": None if np.isnan(j) else round(float(j), 4), "snippet": snippet}


def detail_text(text: str, jaccard: float) -> str:
    """A decision's detail, with the Jaccard when it is known.

    >>> detail_text("near-duplicate of row a:1", np.float32(0.8125)), detail_text("x", np.nan)
    ('near-duplicate of row a:1 (Jaccard 0.81)', 'x')
    """
    return text if np.isnan(jaccard) else f"{text} (Jaccard {float(jaccard):.2f})"
