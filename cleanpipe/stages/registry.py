"""Maps the stage names used in pipeline files to stage classes.

Every module in :mod:`cleanpipe.stages` is imported once and each :class:`Stage` subclass
with a ``name`` is registered, so adding a stage is adding a module: no central list to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from cleanpipe.contract.stage import GlobalStage, Stage

_INFRA = {"registry"}


@cache
def stage_classes() -> dict[str, type[Stage]]:
    """Every registered stage, by name, in name order."""
    import cleanpipe.stages as pkg

    found: dict[str, type[Stage]] = {}
    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if mod.name in _INFRA or mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"cleanpipe.stages.{mod.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Stage) and obj.name
                    and obj.__module__ == module.__name__):
                if obj.name in found and found[obj.name] is not obj:
                    raise RuntimeError(f"two stages are named {obj.name!r}")
                found[obj.name] = obj
    return dict(sorted(found.items()))


def get_stage_class(name: str) -> type[Stage] | None:
    """The class of stage ``name``, importing only its module when it is named after it.

    Importing every stage module costs seconds (numba, tokenizers); a pipeline only needs
    its own stages. Falls back to the full scan for stages in differently named modules.
    """
    if name.isidentifier() and name not in _INFRA and not name.startswith("_"):
        try:
            module = importlib.import_module(f"cleanpipe.stages.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"cleanpipe.stages.{name}":
                raise
        else:
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, Stage) and obj.name == name:
                    return obj
    return stage_classes().get(name)


def is_global(stage: Stage) -> bool:
    return isinstance(stage, GlobalStage)
