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
    >>> type(out).__name__, int(out.load()["a"].sum())
    ('Shipped', 8386560)
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass
from typing import Any

#: outputs whose buffers total less than this go through the pipe as they are
SHIP_BYTES = 1 << 20

#: each buffer starts at a multiple of this in the file, so an array read from it is aligned
ALIGN = 64


@dataclass
class Shipped:
    """An output pickled without its buffers (``data``), the buffers at ``offsets`` in
    ``path`` (``sizes`` bytes each)."""

    data: bytes
    path: str
    offsets: list[int]
    sizes: list[int]

    def load(self) -> Any:
        # each buffer read into memory of its own, as unpickling would give it: what the
        # driver keeps of an output (a dedup stage keeps every batch's sketches until it
        # finalizes) does not hold the rest; and not mapped, which would take one mapping
        # per batch kept, up to the kernel's limit on a big input
        buffers = []
        with open(self.path, "rb") as fh:
            for offset, size in zip(self.offsets, self.sizes, strict=True):
                buf = bytearray(size)
                fh.seek(offset)
                if fh.readinto(buf) != size:  # pragma: no cover - the run's own file, cut short
                    raise OSError(f"{self.path}: short read at {offset}")
                buffers.append(buf)
        os.unlink(self.path)
        return pickle.loads(self.data, buffers=buffers)


def ship(output: Any, folder: str, at_least: int | None = None) -> Any:
    """``output`` as a :class:`Shipped` in ``folder`` when its buffers total ``at_least``
    bytes (default :data:`SHIP_BYTES`), else ``output`` itself."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(output, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    if sum(r.nbytes for r in raws) < (SHIP_BYTES if at_least is None else at_least):
        return output
    fd, path = tempfile.mkstemp(prefix="out-", dir=folder)
    offsets, sizes = [], []
    with os.fdopen(fd, "wb") as fh:
        pos = 0
        for r in raws:
            pad = -pos % ALIGN
            if pad:
                fh.write(b"\0" * pad)
                pos += pad
            fh.write(r)
            offsets.append(pos)
            sizes.append(r.nbytes)
            pos += r.nbytes
    return Shipped(data, path, offsets, sizes)
