"""Token counts of text pieces, cached in the process and shared with its forks.

:class:`~cleanpipe.templating.tokenizer.LoadedTokenizer` counts a long text as the sum of
its pieces' counts (cut at line and sentence starts), and encodes each distinct piece once.
The local engine's workers are forked from the process that loaded the tokenizer and clean
different batches of the same corpus: one passage under several prompt templates lands in
every worker. On t0 the two workers, each with a cache of its own, encoded 1.8× the text
one process would have (5.4 against 3.0 M characters), about a CPU-second.

So the cache has a shared part: a log in an anonymous shared mapping made before the fork,
which children inherit, and a lock. The log is append-only. A writer appends a
length-prefixed pickled record under the lock and then moves the end mark; a reader takes
the end mark under the lock and reads the records before it, which no one writes again.
A record holds counts (keyed by the pieces' texts, so a count read back is the count that
was encoded) or a claim: the pieces a process is about to encode. A process puts the
pieces others claimed last, counts its own first, and encodes what is still missing after
reading the log again: two workers on the same passages split them instead of both
encoding them. Claims are Python string hashes, the same in forks of one process; a wrong
one only changes an order. Only the forks write: they inherit what the process that made
the log counted with its cache, and a process that never forks pickles nothing.

Whatever the log holds, a count is always the tokenizer's: a full log takes no more
records, a lock not had within ``WAIT_S`` (a sibling killed while holding it) switches
sharing off in this process, and a log that crosses a pickle (a Ray worker's copy of a
stage) arrives empty and private. Each only means more encoding.

    >>> def encode(pieces): return [len(p.split()) for p in pieces]
    >>> counts = PieceCounts()
    >>> import numpy as np
    >>> counted = np.full(2, -1)
    >>> counts.fill(["a b", "c"], counted, np.arange(2), encode)
    >>> counted.tolist()
    [2, 1]
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import pickle
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

#: bytes of address space the shared log reserves (pages are used as it fills)
CAPACITY = 64 << 20
#: characters the process counted itself before its cache starts again (what it read from
#: the log comes on top, bounded by the log's capacity)
CACHE_CHARS = 64_000_000
#: characters encoded between two looks at the log
_CHUNK_CHARS = 100_000
_END = struct.Struct("<q")  # where the next record starts, after this header
_LEN = struct.Struct("<I")  # a record's length, before its pickle
#: seconds to wait for the lock before giving up sharing in this process
WAIT_S = 5.0


class SharedLog:
    """An append-only log of count and claim records in memory shared with forks.

        >>> log = SharedLog(1 << 16)
        >>> log.publish(["Hello", " world."], [1, 2])
        >>> seen, claimed = {}, set()
        >>> log.read_into(seen, claimed)
        >>> seen
        {'Hello': 1, ' world.': 2}
    """

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._map: mmap.mmap | None = None
        self.lock: Any = None
        try:
            self._map = mmap.mmap(-1, capacity)
            self.lock = mp.get_context("fork").Lock()
        except (OSError, ValueError, ImportError):  # no shared mapping here: counts stay local
            self._map = None
        if self._map is not None:
            _END.pack_into(self._map, 0, _END.size)
        self._read_to = _END.size  # the end of the records this process has read
        self._full = False

    def __reduce__(self) -> tuple[type[SharedLog], tuple[int]]:
        return type(self), (self.capacity,)

    @property
    def sharing(self) -> bool:
        """Whether this process still reads and writes the log."""
        return self._map is not None

    @contextmanager
    def _held(self) -> Iterator[mmap.mmap | None]:
        """The mapping with the lock held, or None: sharing is off, or the lock was not had
        within :data:`WAIT_S` (then sharing goes off in this process)."""
        mapping = self._map  # local: another thread may switch sharing off meanwhile
        got = mapping is not None and self.lock.acquire(timeout=WAIT_S)
        try:
            if mapping is not None and not got:
                self._map = None
            yield mapping if got else None
        finally:
            if got:
                self.lock.release()

    def read_into(self, counts: dict[str, int], claimed: set[int]) -> None:
        """Add the records written since this process last read: counts to ``counts``,
        claimed pieces' hashes to ``claimed``."""
        with self._held() as mapping:
            if mapping is None:
                return
            end = _END.unpack_from(mapping, 0)[0]
        at = self._read_to
        while at < end:  # records before the end mark are complete and never written again
            (n,) = _LEN.unpack_from(mapping, at)
            pieces, values = pickle.loads(mapping[at + _LEN.size:at + _LEN.size + n])
            if values is None:
                claimed.update(pieces)
            else:
                counts.update(zip(pieces, values, strict=True))
            at += _LEN.size + n
        self._read_to = end

    def publish(self, pieces: list[str], counts: list[int]) -> None:
        """Append the counts of ``pieces``, if the log has room for them."""
        self._append((pieces, counts))

    def claim(self, pieces: list[str]) -> None:
        """Tell the other processes that this one is about to encode ``pieces``."""
        self._append(([hash(p) for p in pieces], None))

    def _append(self, record: tuple[list[Any], list[int] | None]) -> None:
        if not record[0] or self._full:
            return
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        with self._held() as mapping:
            if mapping is None:
                return
            end = _END.unpack_from(mapping, 0)[0]
            new_end = end + _LEN.size + len(data)
            if new_end > self.capacity:
                self._full = True  # the log only grows: stop pickling for it
                return
            _LEN.pack_into(mapping, end, len(data))
            mapping[end + _LEN.size:new_end] = data
            _END.pack_into(mapping, 0, new_end)


Encode = Callable[[list[str]], list[int]]


class PieceCounts:
    """``piece -> token count``, from this process's cache, the shared log, or an
    ``encode`` function (pieces to their counts) that :meth:`fill` is given."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._cache: dict[str, int] = {}
        self._cache_chars = 0
        self._claimed: set[int] = set()
        # made here, before any fork: workers forked later read each other's counts
        self.log = SharedLog(capacity)
        # Only forks write to the log: they inherit what this process counted with its
        # cache, and a process that never forks (one worker, a Ray worker) pickles nothing.
        self._creator = os.getpid()

    def __reduce__(self) -> tuple[type[PieceCounts], tuple[int]]:
        return type(self), (self.log.capacity,)

    @property
    def _writes(self) -> bool:
        return os.getpid() != self._creator

    def fill(self, uniq: list[str], counted: np.ndarray, ids: np.ndarray,
             encode: Encode) -> None:
        """Write into ``counted`` the counts of the pieces ``ids`` of ``uniq`` (distinct
        ids, none counted yet), encoding with ``encode`` those that no cache holds."""
        if not ids.size:
            return
        if self._cache_chars > CACHE_CHARS:
            self._cache.clear()
            self._claimed.clear()
            self._cache_chars = 0
        self._look_up(uniq, counted, ids)
        ids = ids[counted[ids] < 0]
        if not ids.size:
            return
        self.log.read_into(self._cache, self._claimed)
        self._look_up(uniq, counted, ids)
        ids = ids[counted[ids] < 0]
        # in text order, which the tokenizer's batch likes
        todo = sorted(ids.tolist(), key=uniq.__getitem__)
        claimed = self._claimed
        later = [i for i in todo if hash(uniq[i]) in claimed]
        mine = [i for i in todo if hash(uniq[i]) not in claimed]
        if self._writes:
            self.log.claim([uniq[i] for i in mine])
        self._encode(uniq, counted, mine, encode)
        self._encode(uniq, counted, later, encode, look_first=bool(mine))

    def _look_up(self, uniq: list[str], counted: np.ndarray, ids: np.ndarray) -> None:
        cache = self._cache
        counted[ids] = np.fromiter((cache.get(uniq[i], -1) for i in ids.tolist()), np.int64,
                                   ids.size)

    def _encode(self, uniq: list[str], counted: np.ndarray, order: list[int],
                encode: Encode, look_first: bool = False) -> None:
        """Encode the pieces ``order`` in chunks, each but the first (unless
        ``look_first``) after a look at the log: another process may have counted the
        rest meanwhile."""
        at = 0
        while at < len(order):
            if at or look_first:
                self.log.read_into(self._cache, self._claimed)
                rest = np.asarray(order[at:], dtype=np.int64)
                self._look_up(uniq, counted, rest)
                order = order[:at] + [i for i in order[at:] if counted[i] < 0]
            size, end = 0, at
            while end < len(order) and (size < _CHUNK_CHARS or end == at):
                size += len(uniq[order[end]])
                end += 1
            chunk = [uniq[i] for i in order[at:end]]
            if not chunk:
                break
            counts = encode(chunk)
            for p, c in zip(chunk, counts, strict=True):
                self._cache[p] = c
            self._cache_chars += size
            if self._writes:
                self.log.publish(chunk, counts)
            counted[order[at:end]] = counts
            at = end
