"""Keep pyarrow from importing pandas in a process that never hands it a pandas object.

The first time pyarrow converts a Python object (``pa.array`` of a list, ``pa.scalar``, a
compute function given a Python value), it imports pandas, only to ask whether the object
is a pandas one: ~0.13 s and ~50 MB of RSS in the ``cleanpipe`` command before its workers
fork, though cleanpipe never uses pandas. :func:`defer_pandas` answers that first question
"pandas is not installed" and, should anything import pandas later (``datasets``, a user's
code), tells pyarrow that it is there after all, so pandas objects convert as usual from
then on.

Only the ``cleanpipe`` command calls it (:func:`cleanpipe.cli.entry`): a program that
imports cleanpipe keeps pyarrow's own behaviour.

    >>> import pyarrow as pa
    >>> pa.array([1, None]).null_count  # converts as always
    1
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class _PandasWatch:
    """A ``sys.meta_path`` finder: refuses pandas while pyarrow first probes for it; the
    first real import of pandas afterwards goes ahead and is followed by pyarrow's own
    check, which then finds it."""

    def __init__(self) -> None:
        self.probing = False

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "pandas":
            return None
        if self.probing:
            raise ImportError("pandas: not imported by cleanpipe (see cleanpipe.pandas_probe)")
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _tell_pyarrow()

        loader.exec_module = exec_module
        return spec


def _tell_pyarrow() -> None:
    """Make pyarrow look for pandas again: a conversion to pandas imports it for good
    (its first probe, answered "not installed", is not repeated by the others)."""
    import pyarrow as pa

    pa.array([], pa.int8()).to_pandas()


def defer_pandas() -> bool:
    """Answer pyarrow's first probe for pandas "not installed", unless pandas is imported
    already; from the next import of pandas on, pyarrow sees it. Returns whether it
    deferred."""
    if "pandas" in sys.modules:
        return False
    watch = _PandasWatch()
    sys.meta_path.insert(0, watch)
    import pyarrow as pa

    watch.probing = True
    try:
        pa.array([0])  # pyarrow's first conversion: its one probe for pandas
    finally:
        watch.probing = False
    return True
