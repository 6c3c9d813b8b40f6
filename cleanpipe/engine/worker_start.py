"""How worker processes are started: forked from a fork server that imported the heavy
modules once.

Each worker needs numpy, pyarrow, numba and the stages' modules (tokenizers, ftfy, ...).
Started with ``spawn``, every worker imports them again: seconds of start-up each, and
about 150 MB of private memory each. A fork server imports them once; the workers forked
from it share those pages copy-on-write, so a machine's memory (PSS) holds one copy.

Plain ``fork`` from the main process is not used: the main process holds threads
(the pool's own, the tokenizer's and numba's once used) that a fork would copy half-alive.
The fork server is a fresh process that only imports modules and loads the stages'
resources; the only threads there are the allocator's and OpenBLAS's, which are made to be
forked (at-fork handlers), as with multiprocessing's default ``fork``. Where there is no
fork server (not POSIX), or ``$CLEANPIPE_WORKER_START`` is ``spawn``, workers are spawned.

    >>> start = worker_context(["json"])
    >>> start.context.get_start_method() in ("forkserver", "spawn")
    True
    >>> start.close()
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path

#: imported by every worker whatever the pipeline: the engine and its array libraries
#: (pandas too: pyarrow imports it on its first ``pa.array`` of Python objects)
BASE_PRELOAD = ("numpy", "pyarrow", "pyarrow.compute", "pandas", "cleanpipe.engine.local")
#: environment variable naming the file with the pickled (initializer, initargs, warm)
WARM_ENV = "CLEANPIPE_WORKER_WARM"
#: ``spawn`` to opt out of the fork server (say, for a stage whose setup starts threads)
START_ENV = "CLEANPIPE_WORKER_START"


@dataclass
class WorkerStart:
    """How a pool starts its workers, and what to undo when the pool is done."""

    context: BaseContext
    #: the warm-up bytes handed to the fork server (deleted when the pool is done)
    warm_file: Path | None = None
    #: the fork server was started for this pool: stop it when the pool is done, so it
    #: does not keep the stages' resources (hundreds of MB) alive after the run
    owns_server: bool = False

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
    return start
