"""A task's output back to the driver through a file instead of the pool's pipe.

The pool pickles a worker's result into a pipe, and the driver's result thread unpickles
it: every byte copied twice and carried 64 KiB at a time between the two processes. The
dedup stages' ``prepare`` results (a batch's shingle sets and band keys) and a last
segment's rows are megabytes a batch: on the t0 corpus the workers spent ~1.5 CPU-s a run
pickling results and the driver's result thread ~2 CPU-s reading them, more than the
stages' own work. :func:`ship` pickles the output with its buffers out of band (pickle
protocol 5: numpy arrays and Arrow buffers are not copied into the pickle), writes the
buffers to a file in the run's spill folder, and sends the small rest; :meth:`Shipped.load`
reads each buffer back, rebuilds the output on them (no copy more: the arrays are views
of what was read, writable as before) and removes the file.

    >>> import tempfile
    >>> import numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> out = ship({"a": np.arange(4096)}, folder, at_least=1)
    >>> out.path is not None, int(out.load()["a"].sum())
    (True, 8386560)
    >>> small = ship({"a": np.arange(4)}, folder)
    >>> small.path is None, small.load()["a"].tolist()
    (True, [0, 1, 2, 3])
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass
from typing import Any

#: outputs whose buffers total less than this keep them in the pipe's message
SHIP_BYTES = 1 << 20


@dataclass
class Shipped:
    """An output pickled without its buffers (``data``): the buffers, ``sizes`` bytes each,
    follow one another in the file ``path``, or travel along in ``inline`` (a small
    output: one pickling either way, the buffers copied as they are)."""

    data: bytes
    sizes: list[int]
    path: str | None = None
    inline: list[bytearray] | None = None

    def load(self) -> Any:
        if self.inline is not None:
            return pickle.loads(self.data, buffers=self.inline)
        assert self.path is not None
        # each buffer read into memory of its own, as unpickling would give it: what the
        # driver keeps of an output (a dedup stage keeps every batch's sketches until it
        # finalizes) does not hold the rest; and not mapped, which would take one mapping
        # per batch kept, up to the kernel's limit on a big input
        buffers = []
        with open(self.path, "rb") as fh:
            for size in self.sizes:
                buf = bytearray(size)
                if fh.readinto(buf) != size:  # pragma: no cover - the run's own file, cut short
                    raise OSError(f"{self.path}: cut short")
                buffers.append(buf)
        os.unlink(self.path)
        return pickle.loads(self.data, buffers=buffers)


def ship(output: Any, folder: str, at_least: int | None = None) -> Shipped:
    """``output`` pickled once, its buffers out of band: in a file of ``folder`` when they
    total ``at_least`` bytes (default :data:`SHIP_BYTES`), else along with it."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(output, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = [r.nbytes for r in raws]
    if sum(sizes) < (SHIP_BYTES if at_least is None else at_least):
        return Shipped(data, sizes, inline=[bytearray(r) for r in raws])  # writable, as before
    fd, path = tempfile.mkstemp(prefix="out-", dir=folder)
    with os.fdopen(fd, "wb") as fh:
        for r in raws:
            fh.write(r)
    return Shipped(data, sizes, path=path)
