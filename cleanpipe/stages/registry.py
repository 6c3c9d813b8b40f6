"""Finds stage classes by the names pipeline files use, importing only the modules needed.

A stage lives in the module of :mod:`cleanpipe.stages` named after it (``whitespace`` in
``cleanpipe/stages/whitespace.py``), so looking one stage up imports that module alone and a
pipeline pays only for its own stages' libraries (numba, tokenizers, polars). Listing every
stage (``cleanpipe stages``, an unknown name's suggestions) imports them all. Adding a stage
is adding a module: no central list to edit.

    >>> get_stage_class("whitespace").__name__
    'Whitespace'
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from types import ModuleType

from cleanpipe.contract.stage import Stage

_PACKAGE = __name__.rpartition(".")[0]
_NOT_STAGES = {"registry"}


def stage_modules() -> list[str]:
    """Names (within :mod:`cleanpipe.stages`) of the modules that define stages."""
    found = pkgutil.iter_modules([str(Path(__file__).parent)])
    return sorted(m.name for m in found if m.name not in _NOT_STAGES
                  and not m.name.startswith("_"))


def stages_defined_in(module: ModuleType) -> list[type[Stage]]:
    """The named :class:`Stage` subclasses ``module`` defines (not those it imports)."""
    return [obj for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, Stage) and obj.name
            and obj.__module__ == module.__name__]


@cache
def stage_classes() -> dict[str, type[Stage]]:
    """Every registered stage, by name, in name order."""
    found: dict[str, type[Stage]] = {}
    for name in stage_modules():
        for cls in stages_defined_in(importlib.import_module(f"{_PACKAGE}.{name}")):
            if cls.name in found and found[cls.name] is not cls:
                raise RuntimeError(f"two stages are named {cls.name!r}")
            found[cls.name] = cls
    return dict(sorted(found.items()))


def get_stage_class(name: str) -> type[Stage] | None:
    """The class of stage ``name``, importing only its module when it is named after it;
    a stage in a differently named module is still found, by importing them all."""
    if name in stage_modules():
        module = importlib.import_module(f"{_PACKAGE}.{name}")
        for cls in stages_defined_in(module):
            if cls.name == name:
                return cls
    return stage_classes().get(name)
