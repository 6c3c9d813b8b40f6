"""Named points where a test can stop a run, to kill it there on purpose.

With ``$CLEANPIPE_PAUSE_AT`` set to a point's name and ``$CLEANPIPE_PAUSE_DIR`` to a
folder, a run reaching that point writes ``<dir>/<name>`` (holding its PID) and then waits
until a signal ends it. A test waits for the file, not for a time, so the kill lands at the
same place on any machine. Unset (always, outside tests), :func:`pause_point` does nothing.

Points: ``read`` (first input batch read; the CLI has started its workers), ``midrun``
(half the input's batches handed to the output), ``commit`` (output complete in its
temporary folder, about to replace the old one), ``swapped`` (new output in place, old one
not yet removed).

    >>> pause_point("read")  # not armed: returns at once
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_AT_ENV = "CLEANPIPE_PAUSE_AT"
PAUSE_DIR_ENV = "CLEANPIPE_PAUSE_DIR"


def pause_point(name: str) -> None:
    """Stop here when a test asked for ``name`` (see the module doc)."""
    if os.environ.get(PAUSE_AT_ENV) != name:
        return
    folder = Path(os.environ.get(PAUSE_DIR_ENV) or ".")
    tmp = folder / f".{name}.tmp"
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(folder / name)
    # a short sleep, not signal.pause(): a signal landing between the marker and pause()
    # would be run only at the next signal; each turn of this loop runs pending handlers
    while True:
        time.sleep(0.05)
