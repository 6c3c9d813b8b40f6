"""One run at a time per output: an OS file lock held for the whole run.

The lock is ``fcntl.flock`` on a hidden file beside the output, ``.NAME.cleanpipe-lock``
(the folder that will hold the output's temporary folder anyway): the kernel releases it
when the process ends, however it ends, so a killed run never leaves a stale lock. The
file holds the owner's PID, which a second run names in its error. It is removed when the
run ends; one left by a killed run is reused. A file of that name that is not ours (not
empty, not a PID line of ours) is never written to: the run is refused instead.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "out"
    >>> with OutputLock(out) as lock:
    ...     lock.path.name
    '.out.cleanpipe-lock'
    >>> lock.path.exists()
    False
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import TracebackType

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, as before
    fcntl = None  # type: ignore[assignment]

from cleanpipe.io.errors import OutputError

_OWNER = re.compile(r"^cleanpipe run pid (\d+)\n?$")


class OutputLock:
    """An exclusive lock on the output ``target`` for as long as the ``with`` block runs.

    Raises :class:`~cleanpipe.io.errors.OutputError` at once when another run holds it.
    """

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.path = self.target.parent / f".{self.target.name}.cleanpipe-lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            try:
                held = _try_flock(fd)
                if held and _same_file(fd, self.path):
                    break
                text = _read(fd)
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            if held:  # the file was removed by its last owner after we opened it: retry
                continue
            pid = _OWNER.match(text)
            who = f"pid {pid.group(1)}" if pid else "another process"
            raise OutputError(f"{self.target}: another cleanpipe run ({who}) is writing this"
                              " output; wait for it to finish or choose another --output")
        text = _read(fd)
        if text and not _OWNER.match(text):
            os.close(fd)
            raise OutputError(f"{self.path}: exists and was not written by cleanpipe; remove"
                              " it or choose another --output")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"cleanpipe run pid {os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # removed while still held, so a run that opened it meanwhile sees it gone and retries
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _read(fd: int) -> str:
    return os.pread(fd, 200, 0).decode("utf-8", "replace")
