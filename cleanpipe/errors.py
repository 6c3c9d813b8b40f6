"""The exit codes of every ``cleanpipe`` command, and the base of the errors it reports.

Every error meant for the user (a wrong pipeline file, an unreadable input, an unusable
output) is a :class:`CleanpipeError`: its message is one line naming the file, line or key,
and its class says the exit code, so the command line maps them all by this one base.

    >>> from cleanpipe.io.sources import InputError
    >>> from cleanpipe.spec import ConfigError
    >>> ConfigError("p.yaml:3: stages: unknown stage").exit_code
    <ExitCode.USAGE: 2>
    >>> int(InputError("data.jsonl: no such file").exit_code)
    3
    >>> ExitCode.UNREADABLE.meaning
    'unreadable input'
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

__all__ = ["CleanpipeError", "ExitCode"]


class ExitCode(IntEnum):
    """Process exit codes of every cleanpipe command."""

    PASSED = 0
    GATE_FAILED = 1
    USAGE = 2
    UNREADABLE = 3
    #: a bug in cleanpipe (EX_SOFTWARE of sysexits.h)
    INTERNAL = 70
    #: Ctrl-C (128 + SIGINT, as a shell reports it)
    INTERRUPTED = 130
    #: SIGTERM (128 + SIGTERM)
    TERMINATED = 143

    @property
    def meaning(self) -> str:
        """What the code tells a CI job, in a few words."""
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.PASSED: "gate passed",
    ExitCode.GATE_FAILED: "gate failed",
    ExitCode.USAGE: "usage or config error",
    ExitCode.UNREADABLE: "unreadable input",
    ExitCode.INTERNAL: "internal error",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.TERMINATED: "terminated",
}


class CleanpipeError(Exception):
    """An error in what the user asked for or gave, not in cleanpipe: the command prints
    ``cleanpipe: <message>`` and exits with ``exit_code``. Subclasses set the code."""

    exit_code: ClassVar[ExitCode] = ExitCode.USAGE
