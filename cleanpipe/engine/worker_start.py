"""How worker processes are started: forked from a fork server that imported the heavy
modules once.

Each worker needs numpy, pyarrow, numba and the stages' modules (tokenizers, ftfy, ...).
Started with ``spawn``, every worker imports them again: seconds of start-up each, and
about 150 MB of private memory each. A fork server imports them once; the workers forked
from it share those pages copy-on-write, so a machine's memory (PSS) holds one copy.

Plain ``fork`` from the main process is not used: the main process holds threads
(the pool's own, pyarrow's, the tokenizer's) that a fork would copy half-alive. The fork
server is a fresh, single-threaded process that only imports modules, so forking it is
safe; where it does not exist (not POSIX), workers are spawned.

    >>> worker_context(["json"]).get_start_method() in ("forkserver", "spawn")
    True
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from multiprocessing.context import BaseContext

#: imported by every worker whatever the pipeline: the engine and its array libraries
BASE_PRELOAD = ("numpy", "pyarrow", "pyarrow.compute", "cleanpipe.engine.local")


def worker_context(preload: Sequence[str] = ()) -> BaseContext:
    """The multiprocessing context workers are started with.

    ``preload`` (module names) is imported by the fork server when it starts. The server
    starts once per process and keeps its first preload list: a later pipeline whose
    stages live in other modules imports those in its workers, which is slower but
    equally correct.
    """
    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - not POSIX
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    modules = list(dict.fromkeys([*BASE_PRELOAD, *preload]))
    ctx.set_forkserver_preload(modules)
    return ctx
