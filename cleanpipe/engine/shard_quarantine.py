"""The quarantine of the first pass in one order however a shard is read: per shard, its
unreadable records first (in line order), then the rows its stages dropped (in row order).

A shard read whole has every unreadable record on its first batch; a big file read block by
block (see :mod:`cleanpipe.io.line_blocks`) finds them as it goes. Holding a shard's
dropped rows back until the shard is done gives both the same quarantine, byte for byte,
whatever the block size. What is held back goes to a temporary file past ``hold_rows``
rows, so a big file with many drops does not hold them all in memory.

    >>> out = []
    >>> q = ShardQuarantine(out.append)
    >>> q.dropped("a", "a-drop1"); q.unreadable("a", "a-bad"); q.dropped("b", "b-drop")
    >>> q.flush(); out
    ['a-bad', 'a-drop1', 'b-drop']
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


class ShardQuarantine:
    """Forwards quarantined rows to ``sink`` in shard order (see the module docstring)."""

    def __init__(self, sink: Callable[[Any], None], directory: Path | None = None,
                 hold_rows: int = 50_000) -> None:
        self._sink = sink
        self._dir = directory
        self._hold_rows = hold_rows
        self._shard: str | None = None
        self._held: list[Any] = []
        self._held_rows = 0
        self._spill: BinaryIO | None = None
        self._spilled = 0

    def unreadable(self, shard: str, q: Any) -> None:
        """Records of ``shard`` that could not be read: out at once."""
        self._switch(shard)
        self._sink(q)

    def dropped(self, shard: str, q: Any) -> None:
        """Rows of ``shard`` a stage dropped: out when the shard is done."""
        self._switch(shard)
        self._held.append(q)
        self._held_rows += len(getattr(q, "row_ids", ()))
        if self._held_rows > self._hold_rows:
            if self._spill is None:
                self._spill = tempfile.TemporaryFile(dir=self._dir)
            for item in self._held:
                pickle.dump(item, self._spill, protocol=pickle.HIGHEST_PROTOCOL)
            self._spilled += len(self._held)
            self._held, self._held_rows = [], 0

    def flush(self) -> None:
        """Send what is held back (the current shard is done)."""
        if self._spill is not None:
            self._spill.seek(0)
            for _ in range(self._spilled):
                self._sink(pickle.load(self._spill))
            self._spill.close()
            self._spill, self._spilled = None, 0
        for item in self._held:
            self._sink(item)
        self._held, self._held_rows = [], 0

    def _switch(self, shard: str) -> None:
        if shard != self._shard:
            self.flush()
            self._shard = shard
