"""SIGTERM ends a run the way Ctrl-C does: the temporary output folder is removed, the
workers are stopped, and the command exits non-zero (143), instead of the process vanishing
and leaving both behind.

    >>> with sigterm_as_interrupt():
    ...     try:
    ...         signal.raise_signal(signal.SIGTERM)
    ...     except Terminated:
    ...         print("cleaned up")
    cleaned up
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM: a KeyboardInterrupt, so every clean-up written
    for Ctrl-C runs for it too."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"terminated by signal {signum}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (main thread only: Python runs
    signal handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def default_sigterm() -> None:
    """In a worker forked from a process with the handler: SIGTERM kills it outright again
    (its parent does the clean-up)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
