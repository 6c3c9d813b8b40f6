"""Runs in the workers' fork server, once, after it imported the preloaded modules: sets up
a worker's state there, so every worker forked afterwards inherits it ready-made.

A pool's workers all start from the same pickled initializer and arguments (the stages).
When the fork server is started for a pool, it is handed those bytes (a file named by
``$CLEANPIPE_WORKER_WARM``) and runs the initializer plus the pool's ``warm`` function
(for the local engine: stage ``setup()`` — tokenizers, rule tables — and one pass over a
few input rows, which loads the compiled kernels) before forking anything. The workers then
share those objects' pages copy-on-write instead of each building its own copy: one
Qwen3 tokenizer is ~80 MB. A worker whose bytes match skips its own initialisation; one
started from other bytes (a later pool of the same process) initialises as usual.

The server is tied to the process that started it (``PR_SET_PDEATHSIG``, see
:mod:`cleanpipe.engine.worker_death`), as the workers are to the server: killed with
SIGKILL, a run leaves neither behind.

Warm-up is best effort: an error here is ignored, and the workers meet it again in their
own set-up, where it is reported the usual way. :func:`gc.freeze` keeps the collector
from writing into every inherited object's header, which would copy the shared pages.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import pickle

from cleanpipe.engine.worker_death import die_with_parent
from cleanpipe.engine.worker_start import WARM_ENV, run_warm_up
from cleanpipe.memory import release_compiler_pages

_warmed: bytes | None = None


def digest(frozen: bytes) -> bytes:
    return hashlib.sha256(frozen).digest()


def warmed_for(frozen: bytes) -> bool:
    """Whether this process was forked from a server that already ran these bytes."""
    return _warmed is not None and _warmed == digest(frozen)


def _warm_from_env() -> None:
    global _warmed
    path = os.environ.get(WARM_ENV)
    if not path:
        return
    try:
        with open(path, "rb") as fh:
            frozen = fh.read()
    except OSError:
        return
    # read once, here: gone now, a run killed before its pool closes cannot leave it behind
    # (only one killed before its server started)
    with contextlib.suppress(OSError):
        os.unlink(path)
    try:
        initializer, initargs, warm = pickle.loads(frozen)
        if initializer is not None:
            initializer(*initargs)
        if warm is not None:
            run_warm_up(warm)
    except Exception:  # best effort: workers redo it and report errors
        return
    _warmed = digest(frozen)


# The fork server imports this module after every other preloaded one (the stages' modules
# must be complete before their pickles load); the engine imports it only inside workers.
if os.environ.get(WARM_ENV):
    # the server's children (the workers) die with it, and it with the process that started
    # it: its own exit waits for every worker to let go of its pipe, so it would not notice
    die_with_parent(os.getppid())
    _warm_from_env()
    gc.collect(1)  # the warm-up's garbage (young) would otherwise be frozen into every worker
    gc.freeze()
    release_compiler_pages()  # the kernels are loaded: the server only forks from now on
