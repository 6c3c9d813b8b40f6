"""Shared test helpers: where the real data of ../shared/data lives, and skipping without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def realdata_root() -> Path | None:
    env = os.environ.get("CLEANPIPE_REALDATA")
    root = Path(env) if env else REPO.parent / "shared" / "data"
    return root if root.is_dir() else None


def realdata(*parts: str) -> Path:
    """Path under the real-data folder; skips the test (with the reason) when it is absent."""
    root = realdata_root()
    if root is None:
        pytest.skip("real data not found: set CLEANPIPE_REALDATA or provide ../shared/data")
    path = root.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data file missing: {path}")
    return path


@pytest.fixture
def shared_data() -> Path:
    root = realdata_root()
    if root is None:
        pytest.skip("real data not found: set CLEANPIPE_REALDATA or provide ../shared/data")
    return root
