"""All cleanpipe stages, importable by class name: ``from cleanpipe.stages import UnicodeFix``.

Each stage lives in its own module here; :mod:`cleanpipe.stages.registry` finds them.
"""

from __future__ import annotations

from typing import Any

from cleanpipe.contract.stage import (
    Action,
    BatchContext,
    BatchResult,
    BatchStage,
    Findings,
    GlobalStage,
    Stage,
    StageError,
    TextResult,
    TextStage,
)

__all__ = [
    "Action",
    "BatchContext",
    "BatchResult",
    "BatchStage",
    "Findings",
    "GlobalStage",
    "Stage",
    "StageError",
    "TextResult",
    "TextStage",
]


def __getattr__(name: str) -> Any:
    # Stage classes are found lazily so that importing one stage does not import them all.
    from cleanpipe.stages.registry import stage_classes

    for cls in stage_classes().values():
        if cls.__name__ == name:
            return cls
    raise AttributeError(f"module 'cleanpipe.stages' has no attribute {name!r}")


def __dir__() -> list[str]:
    from cleanpipe.stages.registry import stage_classes

    return sorted(set(__all__) | {c.__name__ for c in stage_classes().values()})
