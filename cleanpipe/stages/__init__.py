"""All cleanpipe stages, importable by class name: ``from cleanpipe.stages import UnicodeFix``.

Each stage lives in its own module here (:mod:`cleanpipe.stages.registry` finds them by the
names pipeline files use). A class is imported on first use, with its module alone, so that
using one stage does not load every stage's libraries:

    >>> from cleanpipe.stages import Whitespace
    >>> Whitespace(action="fix")("two  spaces ")
    'two spaces'
"""

from __future__ import annotations

import importlib
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

#: Each stage class by the module here that defines it. A stage missing from this table is
#: still found (every module is then imported); tests/test_lazy_imports.py keeps it complete.
CLASS_MODULES = {
    "ContextLength": "context_length",
    "ControlChars": "control_chars",
    "ExactDedup": "exact_dedup",
    "InvisibleChars": "invisible_chars",
    "LabelCheck": "labels",
    "MinHashDedup": "minhash_dedup",
    "NumericCheck": "numeric",
    "Outliers": "outliers",
    "RegexFilter": "regex_filter",
    "SchemaCheck": "schema",
    "SpecialTokens": "special_tokens",
    "TokenIdCheck": "token_ids",
    "TrainableTokens": "trainable_tokens",
    "UnicodeFix": "unicode_fix",
    "Whitespace": "whitespace",
}

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
    *CLASS_MODULES,
]


def __getattr__(name: str) -> Any:
    if name in CLASS_MODULES:
        return getattr(importlib.import_module(f"{__name__}.{CLASS_MODULES[name]}"), name)
    if name.startswith("__"):  # tools probing for __wrapped__ and the like: no full scan
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from cleanpipe.stages.registry import stage_classes

    for cls in stage_classes().values():
        if cls.__name__ == name:
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
