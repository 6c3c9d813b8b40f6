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

    >>> ctx, _ = worker_context(["json"])
    >>> ctx.get_start_method() in ("forkserver", "spawn")
    True
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from collections.abc import Sequence
from multiprocessing.context import BaseContext
from pathlib import Path

#: imported by every worker whatever the pipeline: the engine and its array libraries
#: (pandas too: pyarrow imports it on its first ``pa.array`` of Python objects)
BASE_PRELOAD = ("numpy", "pyarrow", "pyarrow.compute", "pandas", "cleanpipe.engine.local")
#: environment variable naming the file with the pickled (initializer, initargs, warm)
WARM_ENV = "CLEANPIPE_WORKER_WARM"
#: ``spawn`` to opt out of the fork server (say, for a stage whose setup starts threads)
START_ENV = "CLEANPIPE_WORKER_START"


def worker_context(preload: Sequence[str] = (), warm: bytes | None = None
                   ) -> tuple[BaseContext, Path | None]:
    """The multiprocessing context workers are started with, and the file handed to a fork
    server started now (to delete once the pool is done; None when there is none).

    ``preload`` (module names) is imported by the fork server when it starts; ``warm``
    (pickled ``(initializer, initargs, warm_fn)``) is then run there, see
    :mod:`cleanpipe.engine.fork_server`. The server starts once per process and keeps its
    first preload and warm state: a later pool whose stages differ imports and sets them
    up in its workers, which is slower but equally correct.
    """
    if os.environ.get(START_ENV) == "spawn" or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn"), None
    ctx = mp.get_context("forkserver")
    modules = list(dict.fromkeys([*BASE_PRELOAD, *preload, "cleanpipe.engine.fork_server"]))
    ctx.set_forkserver_preload(modules)
    if warm is None:
        return ctx, None
    fd, name = tempfile.mkstemp(prefix="cleanpipe-warm-", suffix=".pkl")
    with os.fdopen(fd, "wb") as fh:
        fh.write(warm)
    # The server reads the variable when it starts (now, unless it already runs); this
    # process's environment is left as it was.
    before = os.environ.get(WARM_ENV)
    os.environ[WARM_ENV] = name
    try:
        from multiprocessing import forkserver

        forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ[WARM_ENV]
        else:
            os.environ[WARM_ENV] = before
    return ctx, Path(name)
