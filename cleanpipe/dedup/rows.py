"""Compact per-row bookkeeping shared by the dedup stages: seq → index, names, snippets.

Only ``seq`` and length stay in memory (16 bytes a row). Row ids and report snippets go to
an anonymous temporary Arrow IPC file as they arrive: a run only ever names a few rows (the
report's examples, and the kept row of each duplicate group), and holding every row's name
in memory made peak RSS grow with the input by more than the dedup index itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from cleanpipe.io.row_bytes import array_bytes


def lengths_and_snippets(texts: pa.Array, snippet_chars: int) -> tuple[np.ndarray,
                                                                       pa.Array | None]:
    """Characters per row (for ``keep: longest``) and the first ``snippet_chars`` of each."""
    lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    if snippet_chars <= 0:
        return lengths, None
    return lengths, pc.utf8_slice_codeunits(texts, 0, snippet_chars).cast(pa.large_string())


#: Separates a row's parts in its report text (a control character that text stages remove)
PART_SEP = "\x1e"
#: Characters of each part kept for the report: the first difference is looked for there
TEXT_CAP = 8192


def lengths_and_texts(parts: list[pa.Array], snippet_chars: int) -> tuple[np.ndarray,
                                                                          pa.Array | None]:
    r"""Characters per row, all parts together (for ``keep: longest``), and each row's
    report text: its parts' first :data:`TEXT_CAP` characters joined by :data:`PART_SEP`
    (``None`` with ``snippet_chars`` 0: the report then shows no text).

        >>> n, t = lengths_and_texts([pa.array(["Q?"]), pa.array(["A."])], 80)
        >>> n.tolist(), t.to_pylist()
        ([4], ['Q?\x1eA.'])
    """
    lengths = sum(pc.utf8_length(t).to_numpy(zero_copy_only=False).astype(np.int64)
                  for t in parts)
    if snippet_chars <= 0:
        return np.asarray(lengths, dtype=np.int64), None
    cut = [pc.utf8_slice_codeunits(t, 0, TEXT_CAP).cast(pa.large_string()) for t in parts]
    texts = cut[0] if len(cut) == 1 else pc.binary_join_element_wise(
        *cut, pa.scalar(PART_SEP, pa.large_string()))
    return np.asarray(lengths, dtype=np.int64), texts


def snippet_of(text: str, chars: int) -> str:
    r"""The first ``chars`` characters of a report text, parts on separate lines.

        >>> snippet_of("Q?\x1eA.", 80)
        'Q?\nA.'
    """
    return text.replace(PART_SEP, "\n")[:chars]


_NAMES = pa.schema([("id", pa.large_string()), ("snippet", pa.large_string())])


class RowBook:
    """What a dedup stage remembers about each observed row, in observe order.

        >>> book = RowBook(snippet_chars=4)
        >>> book.add(np.array([10, 11]), np.array([5, 6]), pa.array(["hell", "worl"]),
        ...          pa.array(["f:0", "f:1"]))
        >>> book.add(np.array([20]), np.array([2]), pa.array(["hi"]), pa.array(["g:0"]))
        >>> book.close()
        >>> book.names(np.array([2, 0])), book.snippets(np.array([1]))
        (['g:0', 'f:0'], ['worl'])
        >>> book.pin(np.array([0])); book.names(np.array([0, 0]))
        ['f:0', 'f:0']
    """

    def __init__(self, snippet_chars: int, directory: str | Path | None = None) -> None:
        self.snippet_chars = snippet_chars
        self._directory = directory
        self._seqs: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self.seqs = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self._file: IO[bytes] | None = None
        self._writer: ipc.RecordBatchFileWriter | None = None
        self._reader: ipc.RecordBatchFileReader | None = None
        #: the batches themselves, in a copy made by pickle (no file behind it)
        self._batches: list[pa.RecordBatch] | None = None
        #: first row of each written batch, and one past the last
        self._starts = [0]
        self._with_ids = True
        self._written = {"row_ids": 0, "snippets": 0}
        self._pinned = np.zeros(0, dtype=np.int64)
        self._pinned_names: pa.Array | None = None

    @property
    def n(self) -> int:
        return int(sum(s.size for s in self._seqs)) if self._seqs else int(self.seqs.size)

    def add(self, seq: np.ndarray, lengths: np.ndarray, snippets: pa.Array | None,
            row_ids: pa.Array | None) -> None:
        seq = np.asarray(seq, dtype=np.int64)
        self._seqs.append(seq)
        self._lengths.append(np.asarray(lengths, dtype=np.int64))
        self._with_ids = self._with_ids and row_ids is not None
        ids = (pa.array(row_ids).cast(pa.large_string()) if row_ids is not None
               else pa.nulls(seq.size, pa.large_string()))
        snips = (snippets.cast(pa.large_string()) if snippets is not None
                 else pa.nulls(seq.size, pa.large_string()))
        # per row (an offset and the characters), so the figure does not depend on how
        # the engine batched the rows, as the arrays' own nbytes did
        self._written["row_ids"] += int(array_bytes(ids).sum())
        self._written["snippets"] += int(array_bytes(snips).sum())
        if self._writer is None:
            self._file = tempfile.TemporaryFile(prefix="cleanpipe-rowbook-",
                                                dir=self._directory)
            self._writer = ipc.new_file(self._file, _NAMES)
        self._writer.write_batch(pa.record_batch([ids, snips], schema=_NAMES))
        self._starts.append(self._starts[-1] + seq.size)

    def close(self) -> None:
        if self._seqs:
            self.seqs = np.concatenate(self._seqs)
            self.lengths = np.concatenate(self._lengths)
        self._seqs, self._lengths = [], []
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            assert self._file is not None
            self._file.seek(0)
            self._reader = ipc.open_file(self._file)
        if self.seqs.size > 1 and np.any(np.diff(self.seqs) <= 0):
            raise RuntimeError("observe() must be called in row order (increasing seq)")

    def index_of(self, seq: np.ndarray) -> np.ndarray:
        """Positions of ``seq`` values among the observed rows."""
        idx = np.searchsorted(self.seqs, seq)
        if idx.size and (idx.max(initial=0) >= self.seqs.size or
                         np.any(self.seqs[np.minimum(idx, self.seqs.size - 1)] != seq)):
            raise RuntimeError("decide() got rows that were never observed")
        return idx

    def _read(self, column: str, idx: np.ndarray) -> list[str | None]:
        """Values of ``column`` at row positions ``idx``, reading only the batches that
        hold them."""
        idx = np.asarray(idx, dtype=np.int64)
        out: list[str | None] = [None] * idx.size
        if not idx.size or (self._reader is None and self._batches is None):
            return out
        starts = np.asarray(self._starts, dtype=np.int64)
        batch_of = np.searchsorted(starts, idx, side="right") - 1
        order = np.argsort(batch_of, kind="stable")
        cuts = np.flatnonzero(np.diff(batch_of[order])) + 1
        for sel in np.split(order, cuts):
            b = int(batch_of[sel[0]])
            col = self._batch(b).column(column)
            values = col.take(pa.array(idx[sel] - starts[b])).to_pylist()
            for k, v in zip(sel.tolist(), values, strict=True):
                out[k] = v
        return out

    def _batch(self, b: int) -> pa.RecordBatch:
        if self._batches is not None:
            return self._batches[b]
        assert self._reader is not None
        return self._reader.get_batch(b)

    def __getstate__(self) -> dict[str, object]:
        # A copy sent elsewhere (a worker, a test) carries the names in memory: an open file
        # cannot travel, and the copy is for deciding, not for holding a whole corpus.
        if self._writer is not None:
            raise RuntimeError("a RowBook cannot be pickled between add() and close()")
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_file", "_writer", "_reader")}
        if self._reader is not None:
            state["_batches"] = [self._reader.get_batch(i)
                                 for i in range(self._reader.num_record_batches)]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._file = self._writer = self._reader = None

    def pin(self, idx: np.ndarray) -> None:
        """Keep the names of rows ``idx`` in memory: the rows that decisions will name,
        read once here rather than once per batch of the second pass."""
        if not self._with_ids:
            return
        self._pinned = np.unique(np.asarray(idx, dtype=np.int64))
        self._pinned_names = pa.array(self._read("id", self._pinned), pa.large_string())

    def names(self, idx: np.ndarray) -> list[str]:
        """Row id of each index (``seq N`` when the engine gave no ids)."""
        idx = np.asarray(idx, dtype=np.int64)
        if not self._with_ids:
            return [f"seq {int(s)}" for s in self.seqs[idx]]
        at = np.searchsorted(self._pinned, idx)
        if self._pinned_names is not None and idx.size and at.max() < self._pinned.size \
                and np.array_equal(self._pinned[at], idx):
            return [str(x) for x in self._pinned_names.take(pa.array(at)).to_pylist()]
        return [str(x) for x in self._read("id", idx)]

    def snippets(self, idx: np.ndarray) -> list[str]:
        """The report snippet of each index (empty without snippets)."""
        return [x or "" for x in self._read("snippet", idx)]

    def snippet(self, i: int) -> str:
        return self.snippets(np.array([i]))[0]

    def nbytes(self) -> dict[str, int]:
        """Bytes held in memory (``seq_and_length``) and written to the temporary file
        (``row_ids``, ``snippets``)."""
        return {"seq_and_length": int(self.seqs.nbytes + self.lengths.nbytes), **self._written}
