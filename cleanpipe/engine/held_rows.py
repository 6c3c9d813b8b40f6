"""Rows a local worker keeps between two segments: written to a file of its own in the run's
spill folder, read back by whichever worker runs the next segment's task.

The driver gets only a :class:`HeldRows` (where the rows are, and their ``seq``): the rows do
not travel through it twice (back from the worker, out again for the second pass), nor wait
in its spill file.

    >>> import tempfile
    >>> import numpy as np, pyarrow as pa
    >>> from cleanpipe.engine.rows import Rows
    >>> b = pa.record_batch({"t": ["a", "b"]})
    >>> folder = tempfile.mkdtemp()
    >>> held = hold([Rows(b, b, pa.array(["f:1", "f:2"]), np.array([1, 2]))], folder, 0)
    >>> held.seq.tolist(), [r.data.to_pylist() for r in held.load()]
    ([1, 2], [[{'t': 'a'}, {'t': 'b'}]])
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cleanpipe.engine.rows import Rows


@dataclass
class HeldRows:
    """Batches with rows, in order, at ``offset`` (``length`` bytes) in ``path``; ``seq``:
    their rows' seq, in order, for the driver to compute their decisions."""

    path: str
    offset: int
    length: int
    seq: np.ndarray

    def load(self) -> list[Rows]:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(self.length)
        if len(data) != self.length:  # pragma: no cover - the run's own file, cut short
            raise OSError(f"{self.path}: {len(data)} of {self.length} bytes at {self.offset}")
        rows: list[Rows] = pickle.loads(data)
        return rows


def hold(rows: list[Rows], folder: str, segment: int) -> HeldRows:
    """Append ``rows`` to this process's file of ``segment`` in ``folder``."""
    path = Path(folder) / f"held-{segment}-{os.getpid()}.pkl"
    data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
    with open(path, "ab") as fh:
        offset = fh.tell()
        fh.write(data)
    seq = np.concatenate([r.seq for r in rows]) if rows else np.zeros(0, np.int64)
    return HeldRows(str(path), offset, len(data), seq)
