"""Consecutive batches gathered into tasks, for both engines.

A task costs some work whatever its size: pickling it and its result, the pool's or Ray's
bookkeeping, the driver's merge. A corpus of many small files is read as (at least) one
batch a file, and with one task a batch the driver spent more on tasks than on rows: t0 in
its 294 files of ~190 rows took the local engine 1.6x the time of the same rows in one
file, its main process 2.3 CPU-s against 1.3. So consecutive batches travel together, up
to :data:`TASK_ROWS` rows or :data:`TASK_BYTES` bytes; a worker runs them one after the
other and hands back their results in order. A full batch (of a big file) closes the task
it joins: alone, or after the small batches before it.

    >>> from collections import namedtuple
    >>> B = namedtuple("B", "num_rows nbytes")
    >>> [[i for i, _ in g] for g in grouped([B(2, 10), B(3, 10), B(1, 10)], rows=5)]
    [[0, 1], [2]]
    >>> [[i for i, _ in g] for g in grouped([B(1, TASK_BYTES), B(1, 10)], rows=5)]
    [[0], [1]]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from cleanpipe.spec import PipelineSpec

#: rows a task gets (fewer when the pipeline's batch_size is smaller, or TASK_BYTES is
#: reached first: up to the chunk that reaches either): a Ray task costs
#: some 20 ms of CPU across the driver, the raylets and the worker (with 1,024 rows a task
#: the t0 benchmark spent a third of its CPU on them); more rows per task would leave CPUs
#: idle at each segment's end (a global stage waits for the segment's last task)
TASK_ROWS = 4096

#: bytes of input after which a task gets no more chunks: a stage's work grows with
#: the text (shingles, hashes, tokens), so long-text rows in tasks of TASK_ROWS rows made
#: tasks of three times the others' time, and the last of them a segment's idle tail
TASK_BYTES = 4 << 20


class Sized(Protocol):
    """What grouping reads of a batch (:class:`~cleanpipe.engine.rows.Rows`, or one still
    to be read)."""

    @property
    def num_rows(self) -> int: ...

    @property
    def nbytes(self) -> int: ...


T = TypeVar("T", bound=Sized)


class Groups(Generic[T]):
    """Consecutive chunks gathered into task-sized groups of at least ``rows`` rows or
    ``nbytes`` bytes, whichever comes first: lists of ``(chunk index, chunk)``, chunk
    indices counting on over the groups."""

    def __init__(self, rows: int, nbytes: int | None = None) -> None:
        self.rows = rows
        self.nbytes = TASK_BYTES if nbytes is None else nbytes
        self.items: list[tuple[int, T]] = []
        self.n = 0
        self.b = 0
        self.count = 0  # chunks gathered so far, over all groups

    def add(self, rows: T) -> list[tuple[int, T]] | None:
        """Add one chunk; returns a group once enough rows or bytes are gathered."""
        self.items.append((self.count, rows))
        self.count += 1
        self.n += rows.num_rows
        self.b += rows.nbytes
        return self.flush() if self.n >= self.rows or self.b >= self.nbytes else None

    def flush(self) -> list[tuple[int, T]] | None:
        """The chunks gathered since the last group (``None`` if none)."""
        if not self.items:
            return None
        group, self.items, self.n, self.b = self.items, [], 0, 0
        return group


def task_rows(spec: PipelineSpec) -> int:
    """Rows a task gathers for ``spec``: :data:`TASK_ROWS`, or a smaller ``batch_size``."""
    return min(spec.batch_size, TASK_ROWS)


def grouped(chunks: Iterable[T], rows: int) -> Iterator[list[tuple[int, T]]]:
    """``chunks`` in :class:`Groups` of ``rows`` rows (or :data:`TASK_BYTES`), the last
    one whatever it holds."""
    groups: Groups[T] = Groups(rows)
    for chunk in chunks:
        group = groups.add(chunk)
        if group is not None:
            yield group
    group = groups.flush()
    if group is not None:
        yield group
