"""The wheel pip builds ships the numba kernels compiled ahead of time (setup.py), so a
fresh ``pip install`` runs small inputs without compiling; where that build cannot run, the
wheel is still built, without them, and says why."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest
from read_only_install import small_run
from wheel_install import build_wheel, venv_with_wheel

pytestmark = pytest.mark.slow  # each builds a wheel (~1 min on 2 cores)


def _built(wheel: Path) -> list[str]:
    return [n for n in zipfile.ZipFile(wheel).namelist()
            if n.startswith("cleanpipe/_precompiled")]


def test_wheel_ships_kernels_and_its_fresh_install_compiles_nothing(tmp_path: Path) -> None:
    wheel, log = build_wheel(tmp_path / "build")
    built = _built(wheel)
    assert {"cleanpipe/_precompiled.json", "cleanpipe/_precompiled_host.json"} <= set(built)
    for module in ("_precompiled", "_precompiled_host"):  # for any x86-64, for this CPU
        assert any(re.fullmatch(rf"cleanpipe/{module}\.[\w.-]+\.so", n) for n in built), built
    assert not wheel.name.endswith("-none-any.whl")  # a compiled module: tagged for platform
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if "__pycache__" in n or n.endswith((".nbi", ".nbc"))]
    assert re.search(r"precompiled [1-9]\d* kernels into", log), log[-3000:]

    python = venv_with_wheel(tmp_path / "venv", wheel)
    home = tmp_path / "home"
    home.mkdir()
    got = small_run(str(python), home)
    assert got["package"].startswith(str(tmp_path / "venv")), got["package"]
    assert got["twins"]  # the installed package loads its twins (fingerprint matches)
    assert got["host_twins"]  # and, installed on the CPU it was built on, the host ones
    assert got["compiled"] == []
    assert len(got["kept"]) == 2 and len(got["fixed"]) == 3
    assert not list(home.rglob("*.nbi"))


def test_wheel_without_a_c_compiler_falls_back_to_jit(tmp_path: Path) -> None:
    # numba.pycc links through the C compiler $CC names: a failing one stands for a platform
    # where the ahead-of-time build cannot run
    wheel, log = build_wheel(tmp_path / "build", env={**os.environ, "CC": "false"})
    assert _built(wheel) == []
    assert "ahead-of-time numba kernels could not be built" in log

    python = venv_with_wheel(tmp_path / "venv", wheel)
    home = tmp_path / "home"
    home.mkdir()
    got = small_run(str(python), home)
    assert not got["twins"] and not got["host_twins"] and got["compiled"]  # compiles
    assert len(got["kept"]) == 2 and len(got["fixed"]) == 3

