"""Workers die with the run: however the main process ends (SIGKILL included), none of its
workers keeps running (and holding its ~200 MB) as an orphan.

On Linux each worker asks the kernel, as it starts, for SIGKILL when its parent ends
(``prctl(PR_SET_PDEATHSIG)``); a worker forked by the fork server has the server as parent,
and the server itself exits when the main process does (its pipe closes). The request is
made after the fork, so a parent that died in between is caught by checking the parent's
PID right after. Where ``prctl`` is missing (not Linux), a daemon thread polls the parent
PID instead.

    >>> die_with_parent(os.getppid())  # in a worker; harmless elsewhere
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

from cleanpipe.engine.termination import default_sigterm

_PR_SET_PDEATHSIG = 1
#: seconds between two looks at the parent, where the kernel cannot tell us
POLL_SECONDS = 1.0


def _prctl_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int) -> None:
    """In a just-started worker whose parent is ``parent``: end this process when it ends."""
    default_sigterm()
    armed = _prctl_pdeathsig()
    if os.getppid() != parent:  # the parent is already gone: we were re-parented
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch, args=(parent,), name="cleanpipe-parent-watch",
                         daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os._exit(1)
