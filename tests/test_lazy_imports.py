"""Importing cleanpipe, or one stage, loads only what that stage needs.

Each check runs in a fresh interpreter (this one has imported everything already) and reads
``sys.modules`` after the import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cleanpipe.stages import CLASS_MODULES
from cleanpipe.stages.registry import stage_classes, stage_modules

REPO = Path(__file__).resolve().parent.parent
#: libraries (and cleanpipe's dedup package) a text stage has no use for
HEAVY = ("numba", "tokenizers", "polars", "datasets", "cleanpipe.dedup")


def loaded_after(statement: str) -> list[str]:
    """The modules of :data:`HEAVY` that ``statement`` loads in a fresh interpreter."""
    code = (f"{statement}\nimport json, sys\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=REPO, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("statement", [
    "import cleanpipe",
    "from cleanpipe.stages import Whitespace",
    "from cleanpipe.stages import UnicodeFix, ControlChars, InvisibleChars",
    "from cleanpipe.stages import Whitespace; Whitespace()",
])
def test_text_stages_load_no_heavy_library(statement):
    assert loaded_after(statement) == []


def test_a_stage_still_loads_what_it_needs():
    """The check above can fail: a dedup stage does load cleanpipe.dedup."""
    assert "cleanpipe.dedup" in loaded_after("from cleanpipe.stages import MinHashDedup")


#: kernel-backed stages on a few rows: MinHash (shingles, signatures, verification) and the
#: byte scan of the whitespace stage
KERNEL_RUN = (
    "from cleanpipe.stages import MinHashDedup, Whitespace\n"
    "rows = {'text': ['the quick brown fox jumps over the lazy dog by the bank',"
    " 'the quick brown fox jumps over the lazy dog by the bank!', 'else  entirely ']}\n"
    "assert len(MinHashDedup(fields=['text'], threshold=0.7)(rows)['text']) == 2\n"
    "assert Whitespace(action='fix')(rows['text'])[2] == 'else entirely'\n")


def test_kernels_run_without_numba_where_twins_fit(monkeypatch):
    """numba (~0.25 s to import) is imported only to compile: with the ahead-of-time
    twins built (``make setup``) the kernels of a run never need it."""
    monkeypatch.setenv("CLEANPIPE_PRECOMPILED", "only")  # twins only: an error if none fits
    assert "numba" not in loaded_after(KERNEL_RUN)


def test_kernels_import_numba_to_compile(monkeypatch):
    """The check above can fail: without twins the same run compiles, through numba."""
    monkeypatch.setenv("CLEANPIPE_PRECOMPILED", "0")
    assert "numba" in loaded_after(KERNEL_RUN)


def test_class_table_names_every_stage():
    """``from cleanpipe.stages import X`` imports X's module alone only if the table knows X;
    config files find stages by their module, named after the stage."""
    classes = stage_classes()
    assert {cls.__name__: cls.__module__.rpartition(".")[2] for cls in classes.values()} == \
        CLASS_MODULES
    assert sorted(classes) == stage_modules()


def test_probing_the_package_imports_no_stage():
    """Tools look for attributes such as ``__wrapped__``: that must not import every stage."""
    assert loaded_after("import cleanpipe.stages as s; hasattr(s, '__wrapped__')") == []


def test_every_stage_importable_by_class_name():
    import cleanpipe.stages as stages

    for cls in stage_classes().values():
        assert getattr(stages, cls.__name__) is cls
