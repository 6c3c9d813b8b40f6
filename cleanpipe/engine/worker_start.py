"""How worker processes are started: forked from a process that already imported the heavy
modules and set the stages up, so the workers share those pages.

Each worker needs numpy, pyarrow, numba and the stages' modules (tokenizers, ftfy, ...)
and the stages' resources (a tokenizer, compiled kernels). Started with ``spawn``, every
worker imports and loads them again: seconds of start-up each, and 150 MB or more of
private memory each. Forked, the workers share those pages copy-on-write, so a machine's
memory (PSS) holds one copy.

* **From this process** (:func:`can_fork_here`), when it runs no other Python thread, as
  the CLI does at that point: the workers then share the main process's modules too. The
  pool forks them all at once, before its own threads start; tokenizers and numba have
  not started threads here (the main process never tokenizes or runs kernels in parallel).
* **From a fork server** otherwise (a program with threads of its own): a fresh process
  that only imports modules and loads the stages' resources.

The only other threads at fork time are the allocator's and OpenBLAS's, which are made to
be forked (at-fork handlers), as with multiprocessing's default ``fork``. Where neither
is available (not POSIX), or ``$CLEANPIPE_WORKER_START`` is ``spawn``, workers are spawned.

    >>> start = worker_context(["json"])
    >>> start.context.get_start_method() in ("forkserver", "spawn")
    True
    >>> start.close()
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path

#: imported by every worker whatever the pipeline: the engine and its array libraries
#: (pandas too: pyarrow imports it on its first ``pa.array`` of Python objects)
BASE_PRELOAD = ("numpy", "pyarrow", "pyarrow.compute", "pandas", "cleanpipe.engine.local")
#: environment variable naming the file with the pickled (initializer, initargs, warm)
WARM_ENV = "CLEANPIPE_WORKER_WARM"
#: ``forkserver`` to never fork the calling process, ``spawn`` to fork nothing (say, for a
#: stage whose setup starts threads)
START_ENV = "CLEANPIPE_WORKER_START"
TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"
"""Environment variable the ``tokenizers`` library reads before each batch call."""


def leave_cores_to_engine() -> None:
    """In a worker process (a pool's or a Ray task's): switch the tokenizer's own thread
    pool off, unless the user set ``TOKENIZERS_PARALLELISM``. Each worker is one of several
    processes given a core each, by the pool or by Ray's ``num_cpus``; a tokenizer thread
    pool in each would oversubscribe the cores (its threads spin while they wait) and
    costs ~20 MB a worker."""
    os.environ.setdefault(TOKENIZERS_PARALLELISM, "false")


def can_fork_here() -> bool:
    """Whether workers may be forked from this very process: POSIX, not opted out, and no
    other Python thread (one could hold a lock the children would inherit held).

    The threads of numpy's OpenBLAS and Arrow's allocator are made to be forked (at-fork
    handlers), as with multiprocessing's own ``fork`` start method.
    """
    return (os.environ.get(START_ENV) not in ("spawn", "forkserver")
            and "fork" in mp.get_all_start_methods() and threading.active_count() == 1)


def run_warm_up(warm: Callable[[], None]) -> None:
    """``warm()`` with tokenizers' thread pool kept unstarted: once started, forked children
    do not inherit it (they run single-threaded, with a warning)."""
    before = os.environ.get(TOKENIZERS_PARALLELISM)
    os.environ[TOKENIZERS_PARALLELISM] = "false"
    try:
        warm()
    finally:
        if before is None:
            del os.environ[TOKENIZERS_PARALLELISM]
        else:
            os.environ[TOKENIZERS_PARALLELISM] = before


@dataclass
class WorkerStart:
    """How a pool starts its workers, and what to undo when the pool is done."""

    context: BaseContext
    #: the warm-up bytes handed to the fork server (which deletes them once read; the
    #: pool deletes them when done, should the server not have started)
    warm_file: Path | None = None
    #: the fork server was started for this pool: stop it when the pool is done, so it
    #: does not keep the stages' resources (hundreds of MB) alive after the run
    owns_server: bool = False
    #: the workers' parent: the fork server, or this process when they are spawned
    parent_pid: int = 0

    def __post_init__(self) -> None:
        self.parent_pid = self.parent_pid or os.getpid()

    def close(self) -> None:
        if self.warm_file is not None:
            self.warm_file.unlink(missing_ok=True)
            self.warm_file = None
        if self.owns_server:
            _stop_server()
            self.owns_server = False


def _server() -> object | None:
    from multiprocessing import forkserver

    # multiprocessing keeps one fork server per process and has no public way to ask
    # whether it runs or to stop it; these attributes exist since Python 3.4
    return getattr(forkserver, "_forkserver", None)


def _stop_server() -> None:
    stop = getattr(_server(), "_stop", None)
    if stop is not None:
        stop()


def worker_context(preload: Sequence[str] = (), warm: bytes | None = None) -> WorkerStart:
    """The multiprocessing context workers are started with (its fork server started now).

    ``preload`` (module names) is imported by the fork server when it starts; ``warm``
    (pickled ``(initializer, initargs, warm_fn)``) is then run there, see
    :mod:`cleanpipe.engine.fork_server`. A fork server already running (another pool of
    this process is still open) is shared as it is: the workers then import and set up
    what it lacks themselves, which is slower but equally correct.
    """
    if os.environ.get(START_ENV) == "spawn" or "forkserver" not in mp.get_all_start_methods():
        return WorkerStart(mp.get_context("spawn"))
    ctx = mp.get_context("forkserver")
    modules = list(dict.fromkeys([*BASE_PRELOAD, *preload, "cleanpipe.engine.fork_server"]))
    ctx.set_forkserver_preload(modules)
    start = WorkerStart(ctx)
    if warm is not None:
        fd, name = tempfile.mkstemp(prefix="cleanpipe-warm-", suffix=".pkl")
        with os.fdopen(fd, "wb") as fh:
            fh.write(warm)
        start.warm_file = Path(name)
    # The server reads the variable when it starts (now, unless it already runs); this
    # process's environment is left as it was.
    before = os.environ.get(WARM_ENV)
    if start.warm_file is not None:
        os.environ[WARM_ENV] = str(start.warm_file)
    pid_before = getattr(_server(), "_forkserver_pid", None)
    try:
        from multiprocessing import forkserver

        forkserver.ensure_running()
    finally:
        if before is None:
            os.environ.pop(WARM_ENV, None)
        else:
            os.environ[WARM_ENV] = before
    pid_after = getattr(_server(), "_forkserver_pid", None)
    start.owns_server = pid_after is not None and pid_after != pid_before
    if pid_after is not None:
        start.parent_pid = pid_after
    return start
