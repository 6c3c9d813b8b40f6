"""What goes wrong with a run's input and output, each with a message naming the file and
what to do about it."""

from __future__ import annotations


class InputError(Exception):
    """The input cannot be read (exit code 3). The message names the file and what to do."""


class OutputError(Exception):
    """The output location cannot be used (exists, not writable, disk full)."""
