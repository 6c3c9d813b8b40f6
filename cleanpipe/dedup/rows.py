"""Compact per-row bookkeeping shared by the dedup stages: seq → index, names, snippets.

Row ids and snippets stay Arrow string arrays (one buffer, no Python object per row); the
dedup stages only turn the few they report or name into Python strings.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def lengths_and_snippets(texts: pa.Array, snippet_chars: int) -> tuple[np.ndarray,
                                                                       pa.Array | None]:
    """Characters per row (for ``keep: longest``) and the first ``snippet_chars`` of each."""
    lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    if snippet_chars <= 0:
        return lengths, None
    return lengths, pc.utf8_slice_codeunits(texts, 0, snippet_chars).cast(pa.large_string())


class RowBook:
    """What the main process remembers about each observed row, in observe order."""

    def __init__(self, snippet_chars: int) -> None:
        self.snippet_chars = snippet_chars
        self._seqs: list[np.ndarray] = []
        self._ids: list[pa.Array] = []
        self._snips: list[pa.Array] = []
        self._lengths: list[np.ndarray] = []
        self.seqs = np.zeros(0, dtype=np.int64)
        self.ids: pa.Array | None = None
        self.snippets: pa.Array | None = None
        self.lengths = np.zeros(0, dtype=np.int64)

    @property
    def n(self) -> int:
        return int(sum(s.size for s in self._seqs)) if self._seqs else int(self.seqs.size)

    def add(self, seq: np.ndarray, lengths: np.ndarray, snippets: pa.Array | None,
            row_ids: pa.Array | None) -> None:
        self._seqs.append(np.asarray(seq, dtype=np.int64))
        self._lengths.append(np.asarray(lengths, dtype=np.int64))
        if snippets is not None:
            self._snips.append(snippets)
        if row_ids is not None:
            self._ids.append(pa.array(row_ids).cast(pa.large_string()))

    def close(self) -> None:
        if self._seqs:
            self.seqs = np.concatenate(self._seqs)
            self.lengths = np.concatenate(self._lengths)
        if self._snips:
            self.snippets = pa.concat_arrays(self._snips)
        # Names only when every batch came with row ids; otherwise they could not line up.
        if self._ids and len(self._ids) == len(self._seqs):
            self.ids = pa.concat_arrays(self._ids)
        self._seqs, self._ids, self._snips, self._lengths = [], [], [], []
        if self.seqs.size > 1 and np.any(np.diff(self.seqs) <= 0):
            raise RuntimeError("observe() must be called in row order (increasing seq)")

    def index_of(self, seq: np.ndarray) -> np.ndarray:
        """Positions of ``seq`` values among the observed rows."""
        idx = np.searchsorted(self.seqs, seq)
        if idx.size and (idx.max(initial=0) >= self.seqs.size or
                         np.any(self.seqs[np.minimum(idx, self.seqs.size - 1)] != seq)):
            raise RuntimeError("decide() got rows that were never observed")
        return idx

    def names(self, idx: np.ndarray) -> list[str]:
        """Row id of each index (``seq N`` when the engine gave no ids)."""
        if self.ids is not None:
            return [str(x) for x in self.ids.take(pa.array(idx, pa.int64())).to_pylist()]
        return [f"seq {int(s)}" for s in self.seqs[idx]]

    def snippet(self, i: int) -> str:
        if self.snippets is None:
            return ""
        return str(self.snippets[int(i)].as_py() or "")

    def nbytes(self) -> dict[str, int]:
        out = {"seq_and_length": int(self.seqs.nbytes + self.lengths.nbytes)}
        out["row_ids"] = int(self.ids.nbytes) if self.ids is not None else 0
        out["snippets"] = int(self.snippets.nbytes) if self.snippets is not None else 0
        return out
