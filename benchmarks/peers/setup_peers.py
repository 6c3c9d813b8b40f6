"""Create each peer tool's own virtual environment under ``benchmarks/.venv-<peer>/``.

Peers are never project dependencies: each gets a fresh venv, installed from PyPI with pip.
What each needs beyond its base package is listed here with the reason (found by running
their pipelines: each import error named the missing piece). An install that fails is
recorded, with pip's error, in ``benchmarks/.work/peers/<peer>.install.json`` so the results
can say exactly why a peer is missing instead of silently dropping it.

Usage::

    .venv/bin/python benchmarks/peers/setup_peers.py [datatrove] [datajuicer]

Example of what it knows (no install happens here)::

    >>> sorted(PEERS)
    ['datajuicer', 'datatrove']
    >>> venv_python("datatrove").name
    'python'
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
STATE = BENCH / ".work" / "peers"

PEERS: dict[str, dict[str, object]] = {
    "datatrove": {
        # [processing] brings ftfy and tokenizers; orjson is JsonlReader's parser and spacy
        # the English word tokenizer MinhashDedupSignature uses; neither is in that extra.
        "packages": ["datatrove[processing]", "orjson", "spacy"],
        "check": "import datatrove, ftfy, tokenizers, orjson, spacy; print(datatrove.__name__)",
        "version_of": "datatrove",
    },
    "datajuicer": {
        # py-data-juicer loads ftfy (fix_unicode_mapper), scipy (MinHash band optimiser) and
        # transformers (token_num_filter) lazily and would pip-install them mid-run; install
        # them up front so the timed run does not include an install. aiohttp: imported by
        # data_juicer.utils.file_utils but missing from its requirements. torch: its
        # LazyLoader imports it during a run and, when missing, installs it there with uv
        # (~5 GB with the CUDA wheels), which once took most of a timed run.
        "packages": ["py-data-juicer", "ftfy", "scipy", "transformers", "aiohttp", "torch"],
        "check": "from data_juicer.config import init_configs; "
        "from data_juicer.core import DefaultExecutor; import ftfy, scipy, transformers, torch",
        "version_of": "py-data-juicer",
    },
}


def venv_dir(peer: str) -> Path:
    return BENCH / f".venv-{peer}"


def venv_python(peer: str) -> Path:
    return venv_dir(peer) / "bin" / "python"


def _state_file(peer: str) -> Path:
    return STATE / f"{peer}.install.json"




def _check(peer: str) -> bool:
    py = venv_python(peer)
    if not py.exists():
        return False
    r = subprocess.run([str(py), "-c", str(PEERS[peer]["check"])], capture_output=True)
    return r.returncode == 0


def _version(peer: str) -> str:
    r = subprocess.run(
        [str(venv_python(peer)), "-m", "pip", "show", str(PEERS[peer]["version_of"])],
        capture_output=True,
        text=True,
    )
    for line in r.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def ensure(peer: str) -> dict[str, object]:
    """Install ``peer`` into its venv unless it already imports; record and return the state."""
    STATE.mkdir(parents=True, exist_ok=True)
    if _check(peer):
        state = {"ok": True, "version": _version(peer)}
        _state_file(peer).write_text(json.dumps(state))
        return state
    t0 = time.time()
    if not venv_python(peer).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv_dir(peer))], check=True)
    cmd = [str(venv_python(peer)), "-m", "pip", "install", "-q", *PEERS[peer]["packages"]]
    print(f"installing {peer}: {' '.join(cmd[3:])}", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or not _check(peer):
        # Keep pip's own last lines: they name the package and the reason.
        err = [ln for ln in (r.stderr or "").splitlines() if "Location 'file:" not in ln]
        state = {"ok": False, "error": "\n".join(err[-15:]) or "import check failed"}
    else:
        state = {"ok": True, "version": _version(peer), "install_s": round(time.time() - t0)}
    _state_file(peer).write_text(json.dumps(state))
    return state


def main(argv: list[str]) -> None:
    for peer in argv or list(PEERS):
        state = ensure(peer)
        print(peer, "ok " + str(state.get("version")) if state["ok"] else "FAILED", flush=True)
        if not state["ok"]:
            print(state["error"])


if __name__ == "__main__":
    main(sys.argv[1:])
