"""cleanpipe: clean and check a fine-tuning dataset before training starts."""

from __future__ import annotations

from typing import Any

from cleanpipe.version import __version__

__all__ = ["Pipeline", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Pipeline":
        from cleanpipe.pipeline import Pipeline

        return Pipeline
    raise AttributeError(name)
