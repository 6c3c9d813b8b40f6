"""What goes wrong with a run's input and output, each with a message naming the file and
what to do about it."""

from __future__ import annotations

from cleanpipe.errors import CleanpipeError, ExitCode


class InputError(CleanpipeError):
    """The input cannot be read (exit code 3). The message names the file and what to do."""

    exit_code = ExitCode.UNREADABLE


class OutputError(CleanpipeError):
    """The output location cannot be used (exists, not writable, disk full): exit code 2."""
