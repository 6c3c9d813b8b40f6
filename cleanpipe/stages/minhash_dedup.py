"""Near-duplicate removal with MinHash LSH (datasketch-compatible signatures, bulk-computed)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, PrivateAttr, field_validator, model_validator

from cleanpipe.contract.decided import DecidedFromTable
from cleanpipe.contract.decisions import (
    DECISIONS,
    decisions_table,
    reference_name,
)
from cleanpipe.contract.stage import Action, BatchContext, GlobalStage
from cleanpipe.dedup import bands, cluster, external, kernels, part_kernels
from cleanpipe.dedup.minhash import (
    HashName,
    Scheme,
    Shingled,
    lsh_params,
    shingle_hashes,
    signatures,
)
from cleanpipe.dedup.parts import Parts, PartsMode, difference_windows, part_texts, resolve
from cleanpipe.dedup.reference import load_reference, table_batches
from cleanpipe.dedup.rows import RowBook, lengths_and_texts, snippet_of
from cleanpipe.dedup.text import UnicodeForm, buffers, normalize, row_texts, shingle_modes
from cleanpipe.fields import string_columns
from cleanpipe.memory import release_free_memory


@dataclass
class _Sketch:
    """What a worker computes for one batch: compact arrays only."""

    keys: np.ndarray          # (rows, bands) uint64
    valid: np.ndarray         # rows with at least one shingle
    sets: np.ndarray | None   # verification records, flat (verify: exact): the sorted
    set_off: np.ndarray | None  # shingle set, or with parts a part_kernels record
    lengths: np.ndarray
    snippets: pa.Array | None  # each row's text for the report (parts split by PART_SEP)
    shingles: int
    parts: bool = False       # compared part by part (else joined)


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

    Records with a prompt and a response (``parts: auto`` finds alpaca
    instruction/input/output, prompt/completion, question/answer and chat turns by role;
    or give ``prompt_fields`` and ``response_fields``) are near duplicates only when the
    responses reach ``threshold`` and every sentence of each prompt has a near copy in the
    other (word Jaccard at ``threshold``, or a word or two replaced): rows sharing a long
    passage but asking a different question, or giving a different answer, are different
    examples and are kept (:mod:`cleanpipe.dedup.part_kernels`). Candidates still come from
    one signature per row (of both parts' shingles). ``parts: joined`` compares the fields'
    joined text, with datasketch-compatible signatures.

        >>> stage = MinHashDedup(fields=["text"], threshold=0.7)
        >>> rows = {"text": ["the quick brown fox jumps over the lazy dog near the river bank",
        ...                  "the quick brown fox jumps over the lazy dog near the river bank!",
        ...                  "a completely different sentence about training language models"]}
        >>> stage(rows)["text"]
        ['the quick brown fox jumps over the lazy dog near the river bank', \
'a completely different sentence about training language models']
        >>> passage = " ".join(f"word{i}" for i in range(60)) + "."
        >>> qa = MinHashDedup(threshold=0.7)
        >>> qa({"prompt": [passage + " Who came first?", passage + " Who came last?",
        ...                passage.replace("word7 ", "wort7 ") + " Who came first?"],
        ...     "completion": ["Ann", "Ann", "Ann"]})["prompt"] == [passage + " Who came first?",
        ...                                                    passage + " Who came last?"]
        True
    """

    name: ClassVar[str] = "minhash_dedup"
    #: the distributed grouping this stage offers (see :meth:`distributed_grouping`)
    GROUPING: ClassVar[str] = "minhash_lsh"
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
    """Text fields compared (default: the pipeline's text fields)."""
    parts: PartsMode = "auto"
    """``auto``: compare prompt and response separately when ``fields`` hold both (known
    field names, or chat turns with a role); ``joined``: compare all fields joined."""
    prompt_fields: list[str] | None = None
    """Fields of the prompt part (give with ``response_fields``; overrides ``auto``)."""
    response_fields: list[str] | None = None
    """Fields of the response part."""
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
    """Characters of each row shown in the report's cluster examples, and the width of the
    window shown around the first place where a dropped row differs from the kept one."""
    report_clusters: int = Field(10, ge=0)
    """How many of the largest clusters the report shows."""

    # what DecidedFromTable reads and adopt_grouping sets
    _report: dict[str, Any] = PrivateAttr(default_factory=dict)
    _decisions: pa.Table | None = PrivateAttr(None)
    # the first pass's per-row state (forget_rows drops it)
    _book: RowBook | None = PrivateAttr(None)
    _parts: list[_Sketch] = PrivateAttr(default_factory=list)
    _spill: external.KeySpill | None = PrivateAttr(None)
    _rep: np.ndarray | None = PrivateAttr(None)
    _dup_j: np.ndarray | None = PrivateAttr(None)
    _contam: np.ndarray | None = PrivateAttr(None)
    _contam_j: np.ndarray | None = PrivateAttr(None)
    _ref_offsets: list[tuple[int, str]] = PrivateAttr(default_factory=list)
    _compared: bool | None = PrivateAttr(None)

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
        if bool(self.prompt_fields) != bool(self.response_fields):
            raise ValueError("give both prompt_fields and response_fields, or neither")
        if self.prompt_fields and self.parts == "joined":
            raise ValueError("prompt_fields/response_fields compare parts: drop them or"
                             " parts: joined")
        if self.prompt_fields and self.verify != "exact":
            raise ValueError("comparing prompt and response separately needs verify: exact")
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
    def parts_of(self, ctx: BatchContext, fields: list[str] | None = None) -> Parts | None:
        """The prompt and response fields of this batch, or ``None`` (joined text)."""
        if self.verify != "exact":
            return None  # the parts are told apart at verification
        return resolve(self.parts, fields if fields is not None else self.fields,
                       self.prompt_fields, self.response_fields, ctx)

    def sketch(self, batch: pa.RecordBatch, ctx: BatchContext,
               fields: list[str] | None = None) -> _Sketch:
        """Band keys (and, for verification, shingle sets) of every row of ``batch``."""
        fields = fields if fields is not None else self.fields
        parts = self.parts_of(ctx, fields)
        if parts is not None:
            return self._sketch_parts(part_texts(parts, ctx))
        # Fields joined by a newline: a word boundary, so no shingle glues two fields' words.
        raw = row_texts(ctx, fields, sep="\n")
        sh, _modes, _norm = self._shingles(raw)
        b, r = self.band_rows()
        sets = set_off = None
        signed = sh
        if self.verify == "exact":
            sets, set_off = kernels.sorted_unique_segments(sh.hashes, sh.doc_off)
            # A minimum ignores repeats: signing the set gives the same signature, cheaper.
            signed = Shingled(sets, set_off)
        keys = kernels.band_keys(signatures(signed, self.num_perm, self.seed, self.scheme),
                                 b, r)
        lengths, texts = lengths_and_texts([raw], self.snippet_chars)
        return _Sketch(keys, sh.counts > 0, sets, set_off, lengths, texts,
                       int(sh.hashes.size))

    def _shingles(self, raw: pa.Array) -> tuple[Shingled, np.ndarray, pa.Array]:
        """Shingle hashes, shingle mode and normalised text of each row."""
        norm = normalize(raw, lowercase=self.lowercase, unicode_form=self.unicode_form,
                         strip_punctuation=self.strip_punctuation)
        modes = shingle_modes(norm, self.shingle, self.cjk_ratio)
        sh = shingle_hashes(norm, modes, self.ngram_words, self.ngram_chars, self.hash,
                            self.hash_seed)
        return sh, modes, norm

    def _sketch_parts(self, raw: list[pa.Array]) -> _Sketch:
        """Rows compared part by part: one signature of both parts' shingles (its bands
        find the candidates), and each row's :mod:`~cleanpipe.dedup.part_kernels` record."""
        (p_sh, p_modes, p_norm), (r_sh, _, _) = (self._shingles(t) for t in raw)
        r_sets, r_off = kernels.sorted_unique_segments(r_sh.hashes, r_sh.doc_off)
        # the prompt's shingles only find candidates: prompts are verified by sentence, so
        # they are signed as they come (a minimum ignores repeats): t0's prompts repeat 1%
        # of their shingles, and sorting them into sets cost 0.3 s of t0's 0.47 s
        # the signature of the union of two sets is the minimum of their signatures
        sig = np.minimum(signatures(p_sh, self.num_perm, self.seed, self.scheme),
                         signatures(Shingled(r_sets, r_off), self.num_perm, self.seed,
                                    self.scheme))
        data, offsets = buffers(p_norm)
        sentences = part_kernels.sentence_sets(
            data, offsets, p_modes.astype(np.int8), np.uint64(self.hash_seed))
        sets, set_off = part_kernels.pack(r_sets, r_off, *sentences)
        lengths, texts = lengths_and_texts(raw, self.snippet_chars)
        return _Sketch(kernels.band_keys(sig, *self.band_rows()),
                       (p_sh.counts + r_sh.counts) > 0, sets, set_off, lengths, texts,
                       int(p_sh.hashes.size + r_sh.hashes.size), parts=True)

    def prepare(self, batch: pa.RecordBatch, ctx: BatchContext) -> _Sketch:
        return self.sketch(batch, ctx)

    # -- band-key API (distributed engines) ----------------------------------------------
    def distributed_grouping(self) -> str:
        """:data:`GROUPING`: a distributed engine can find, verify and cluster candidates
        on :meth:`sketch_rows` (and :meth:`reference_sketches`) without the stage."""
        return self.GROUPING

    def forget_rows(self) -> None:
        self._book = None
        self._parts = []

    def sketch_rows(self, prepared: _Sketch, seq: np.ndarray,
                    row_ids: pa.Array | None = None) -> pa.Table:
        """A prepared batch as sketch rows (:func:`cleanpipe.dedup.bands.sketch_table`):
        what grouping and verification need of each row, keyed by ``seq``."""
        return bands.sketch_table(seq, prepared.keys, prepared.valid, prepared.sets,
                                  prepared.set_off, prepared.lengths, row_ids,
                                  prepared.snippets)

    # -- main process ------------------------------------------------------------------
    def observe_reads_batch(self) -> bool:
        return False  # observe keeps the prepared sketches (and seq, row ids) only

    def observe(self, prepared: _Sketch, seq: np.ndarray, batch: pa.RecordBatch,
                ctx: BatchContext) -> None:
        if self._book is None:
            self._book = RowBook(self.snippet_chars, self.spill_dir)
            if self.external:
                self._spill = external.KeySpill(self.spill_dir)
        self._compared = self.compared(prepared, self._compared)
        start = self._book.n
        self._book.add(seq, prepared.lengths, prepared.snippets, ctx.row_ids)
        keys = prepared.keys
        if self._spill is not None:
            self._spill.append(start, prepared.keys, prepared.valid)
            keys = _emptied(prepared.keys)
        # The book has the texts now (in its file): on t0 they were 54 MB, and held here to
        # the end of finalize they were the biggest part of the run's peak memory.
        self._parts.append(replace(prepared, keys=keys, snippets=None))

    @staticmethod
    def compared(prepared: _Sketch, before: bool | None) -> bool:
        """Whether rows are compared part by part, checked against earlier batches
        (``before``; ``None`` for the first): one run compares all its rows one way."""
        if before is not None and prepared.parts != before:
            raise ValueError("minhash_dedup: some batches have prompt and response fields"
                             " and others not; give prompt_fields/response_fields or"
                             " parts: joined")
        return prepared.parts

    def reference_sketches(self, training_parts: bool | None) -> list[tuple[str, _Sketch]]:
        """Sketches of the reference sets, compared the way the training rows are
        (``training_parts``; ``None`` when there were none)."""
        out = []
        for item in self.reference:
            ref_name, table = load_reference(item)
            fields = self.reference_fields or self.fields
            for rb in table_batches(table):
                ctx = BatchContext(rb, fields or string_columns(rb.schema))
                sk = self.sketch(rb, ctx, fields)
                if training_parts is not None and sk.parts != training_parts:
                    raise ValueError(
                        f"minhash_dedup: reference {ref_name} "
                        f"{'has no' if training_parts else 'has'} separate prompt and"
                        " response fields, unlike the training rows; give reference_fields"
                        " (or prompt_fields/response_fields, or parts: joined)")
                out.append((ref_name, sk))
        return out

    def similarity(self, values: np.ndarray, off: np.ndarray, left: np.ndarray,
                   right: np.ndarray, at_least: float = 0.0) -> np.ndarray:
        """Jaccard of each ``(left, right)`` pair of verification records (with parts: of
        the responses), -1 where ``at_least`` > 0 and the pair is no near duplicate."""
        return bands.similarity(values, off, left, right, at_least, bool(self._compared))

    def finalize(self) -> None:
        book = self._book or RowBook(self.snippet_chars)
        book.close()
        self._book = book
        n = book.n
        parts = list(self._parts)
        refs = self.reference_sketches(self._compared)
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
            # with parts the band estimate is of both parts together: check them exactly
            jac = bands.verified_jaccard(
                None if self._compared else shared, b, _r, self.threshold, right < n,
                lambda m: self.similarity(sets, off, left[m], right[m], self.threshold))
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
            dup_j[dup] = self.similarity(sets, off, dup, rep[dup])
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
            jac = (self.similarity(sets, off, np.full(shown.size, shown[0]), shown)
                   if sets is not None else np.full(shown.size, np.nan))
            largest.append(cluster_entry(int(members.size), book.names(shown),
                                         book.snippets(shown), jac, self.snippet_chars))
        _, sizes = np.unique(labels, return_counts=True)
        contaminated = np.flatnonzero(self._contam >= 0)
        examples = [contamination_example(name, self._ref_name(int(self._contam[i])),
                                          self._contam_j[i], book.snippet(i),
                                          self.snippet_chars)
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
            memory=memory, by_parts=bool(self._compared))

    def section(self, *, rows: int, without_shingles: int, shingles: int, candidates: int,
                cluster_sizes: np.ndarray, duplicates: int, largest: list[dict[str, Any]],
                contaminated: int, contamination_examples: list[dict[str, Any]],
                memory: dict[str, Any], by_parts: bool) -> dict[str, Any]:
        """The report section from its parts: one layout whichever engine clustered.

        ``cluster_sizes`` holds the size of every cluster of two or more rows; ``by_parts``
        says whether prompt and response were compared separately.
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
            "jaccard": ("not verified" if self.verify != "exact" else
                        "exact shingle-set Jaccard of the responses (prompts: every"
                        " sentence has a near copy)"
                        if by_parts else "exact shingle-set Jaccard"),
            "compared": "prompt and response" if by_parts else "joined fields",
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


def cluster_entry(size: int, names: list[str], texts: list[str], jaccard: np.ndarray,
                  snippet_chars: int) -> dict[str, Any]:
    """One of the report's largest clusters: its representative first, then members, each
    with the window around the first place where it differs from the representative, per
    part (``texts`` as :func:`cleanpipe.dedup.rows.lengths_and_texts` keeps them)."""
    return {
        "size": size,
        "representative": names[0],
        "representative_snippet": snippet_of(texts[0], snippet_chars),
        "members": [
            # differences before the snippet: renderers that cut long rows keep them
            {"row": names[k],
             "jaccard": None if np.isnan(jaccard[k]) else round(float(jaccard[k]), 4),
             "differences": difference_windows(texts[0], texts[k], snippet_chars),
             "snippet": snippet_of(texts[k], snippet_chars)}
            for k in range(1, len(names))
        ],
    }


def contamination_example(name: str, reference: str, jaccard: float, text: str,
                          snippet_chars: int) -> dict[str, Any]:
    j = np.float32(jaccard)  # stored as float32, as the detail shows it
    return {"row": name, "reference": reference,
            "jaccard": None if np.isnan(j) else round(float(j), 4),
            "snippet": snippet_of(text, snippet_chars)}


def detail_text(text: str, jaccard: float) -> str:
    """A decision's detail, with the Jaccard when it is known.

    >>> detail_text("near-duplicate of row a:1", np.float32(0.8125)), detail_text("x", np.nan)
    ('near-duplicate of row a:1 (Jaccard 0.81)', 'x')
    """
    return text if np.isnan(jaccard) else f"{text} (Jaccard {float(jaccard):.2f})"
