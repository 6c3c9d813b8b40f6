"""`cleanpipe check` of 1,000 t0 rows from a fresh install with empty caches vs warm.

A fresh install (``--install wheel``, the default) is what ``pip install`` gives a user:
cleanpipe's wheel, built once with pip from this checkout (the numba kernels it compiles
ahead of time included, :mod:`cleanpipe.precompiled`), installed into a new virtual
environment for every cold run (``tests/wheel_install.py``), run as its ``cleanpipe``
command with an empty per-user cache (``HOME`` and ``XDG_CACHE_HOME`` pointed at a new
empty folder, no ``NUMBA_*`` settings): any kernel the run needs that has no usable
ahead-of-time twin is JIT-compiled. ``--install copy`` is a read-only copy of the package as
``make setup`` leaves the checkout instead (a system package or container image). Warm is
the same command in one environment whose cache the previous warm run left. Runs are
interleaved (cold, warm, cold, warm, ...); median and spread per kind, and the load average
(1 min) before each run. Building and installing are not timed.

Run from the repo root: .venv/bin/python benchmarks/bench_cold_start.py [--runs 3]
[--install wheel|copy]
Target (#18): cold <= 1.5x warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASET, REPO, RESULTS, command_line, measure, require_data

sys.path.insert(0, str(REPO / "tests"))
from read_only_install import read_only_copy
from wheel_install import build_wheel, venv_with_wheel

ROWS = 1000
PIPELINE = "sft_prompt_completion.yaml"


def _input(folder: Path) -> Path:
    """The first ROWS t0 records (shards in name order) as one JSONL file."""
    out = folder / "t0_1000.jsonl"
    lines: list[str] = []
    for f in sorted((require_data(DATASET) / "data_per_template").glob("*.jsonl")):
        lines += [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if len(lines) >= ROWS:
            break
    out.write_text("\n".join(lines[:ROWS]) + "\n", encoding="utf-8")
    return out


class FreshInstall:
    """A new install of cleanpipe: its python, its ``cleanpipe`` command and environment."""

    def __init__(self, folder: Path, wheel: Path | None) -> None:
        if wheel is None:  # a read-only copy of the checkout, on PYTHONPATH
            self.python = sys.executable
            self.cli = [sys.executable, "-m", "cleanpipe.cli"]
            self.env = {"PYTHONPATH": str(read_only_copy(folder))}
            package = Path(self.env["PYTHONPATH"]) / "cleanpipe"
        else:
            self.python = str(venv_with_wheel(folder, wheel))
            self.cli = [str(Path(self.python).parent / "cleanpipe")]
            self.env = {}
            package = next((folder / "lib").glob("python*/site-packages/cleanpipe"))
        # the install's own copy: a shipped pipeline's relative paths (its tokenizer) are
        # resolved against the installed package
        self.pipeline = package / "pipelines" / PIPELINE

    def environ(self, home: Path) -> dict[str, str]:
        """Its environment with ``home`` as the user's home and cache."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("NUMBA_", "CLEANPIPE_PRECOMPILED", "PYTHONPATH"))}
        env.update(self.env, HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"),
                   PYTHONDONTWRITEBYTECODE="1")
        return env

    def loads_twins(self, home: Path) -> bool:
        """Whether this install uses its ahead-of-time kernels (and runs its own package)."""
        m = measure([self.python, "-c", "import cleanpipe; from cleanpipe import precompiled; "
                     "print(cleanpipe.__file__, bool(precompiled.load_twins()))"],
                    env=self.environ(home), cwd=home, inherit=False)
        package, twins = m.stdout.split()
        if Path(package).parent != self.pipeline.parent.parent:
            sys.exit(f"the install runs another cleanpipe: {package}")
        return twins == "True"

    def check(self, home: Path, data: Path, report: Path) -> tuple[float, float]:
        """Wall time of ``cleanpipe check`` and the load average before it."""
        shutil.rmtree(report, ignore_errors=True)
        cmd = [*self.cli, "check", str(self.pipeline), "--input", str(data), "--no-progress",
               "--quiet", "--report-dir", str(report)]
        load = os.getloadavg()[0]
        m = measure(cmd, env=self.environ(home), cwd=home, timeout=900, inherit=False)
        if m.rc not in (0, 1):  # pass or gate failed are verdicts; anything else is an error
            sys.exit(f"check failed (rc {m.rc}): {m.stderr[-2000:]}")
        return m.wall_s, load


def _home(path: Path) -> Path:
    path.mkdir()
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--install", choices=("wheel", "copy"), default="wheel")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        root = Path(tmp)
        data = _input(root)
        wheel = build_wheel(root / "build")[0] if args.install == "wheel" else None
        warm_install = FreshInstall(root / "warm-install", wheel)
        warm_home = _home(root / "warm")
        twins = warm_install.loads_twins(warm_home)
        warm_install.check(warm_home, data, root / "r")  # fills the warm cache
        runs: list[tuple[str, float, float]] = []
        for i in range(args.runs):
            cold = FreshInstall(root / f"cold-install{i}", wheel)
            runs.append(("cold", *cold.check(_home(root / f"cold{i}"), data, root / "r")))
            runs.append(("warm", *warm_install.check(warm_home, data, root / "r")))
    cold = [w for kind, w, _ in runs if kind == "cold"]
    warm = [w for kind, w, _ in runs if kind == "warm"]
    c, w = statistics.median(cold), statistics.median(warm)
    what = (f"the wheel `pip wheel` builds from this checkout, installed into a new virtual"
            f" environment for each cold run (`{wheel.name}`)" if wheel else
            "a read-only copy of the package as `make setup` leaves the checkout")
    lines = [
        f"Command: `{command_line()}`", "",
        f"`cleanpipe check` with the shipped `{PIPELINE}` on the first {ROWS:,} t0"
        f" records (one JSONL file), from {what}; the install"
        f" {'loads' if twins else 'does NOT load'} the ahead-of-time kernels. cold = new"
        " install and empty per-user caches, warm = the caches its previous run left"
        " (building and installing not timed). "
        f"{args.runs} interleaved runs of each, on 2 cores:", "",
        "| run | wall | load average (1 min) before |", "|---|---|---|",
        *(f"| {kind} {i // 2 + 1} | {wall:.2f} s | {load:.1f} |"
          for i, (kind, wall, load) in enumerate(runs)), "",
        "| run | median wall | min | max |", "|---|---|---|---|",
        f"| cold (fresh install, empty caches) | {c:.2f} s | {min(cold):.2f} s"
        f" | {max(cold):.2f} s |",
        f"| warm | {w:.2f} s | {min(warm):.2f} s | {max(warm):.2f} s |", "",
        f"cold / warm = **{c / w:.2f}x** (target <= 1.5x:"
        f" {'holds' if c <= 1.5 * w else 'MISSED'}).",
    ]
    out = "\n".join(lines) + "\n"
    print(out)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cold_start.md").write_text(out, encoding="utf-8")


if __name__ == "__main__":
    main()
