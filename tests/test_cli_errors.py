"""The CLI never shows a traceback unless --debug; every error is one line with exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests._robust_helpers import cli, write_pipeline


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n')
    return p


CASES = {
    "missing pipeline": (lambda t, d: ["run", str(t / "nope.yaml"), "-o", str(t / "o")], 2,
                         "nope.yaml: no such pipeline file"),
    "bad yaml": (lambda t, d: ["run", str(_file(t, "stages: [\n")), "-i", str(d), "-o",
                               str(t / "o")], 2, "not valid YAML"),
    "unknown stage": (lambda t, d: ["run", str(_file(t, "stages: [{stage: nope}]\n")), "-i",
                                    str(d), "-o", str(t / "o")], 2, "unknown stage 'nope'"),
    "lookaround regex": (lambda t, d: ["run", str(_file(
        t, "stages:\n  - stage: regex_filter\n    patterns: {bad: '(?<=a)b'}\n")), "-i",
        str(d), "-o", str(t / "o")], 2, "p.yaml:3: stages[0].patterns.bad: "),
    "missing input": (lambda t, d: ["run", str(_file(t, "stages: []\n")), "-i",
                                    str(t / "absent.jsonl"), "-o", str(t / "o")], 3,
                      "absent.jsonl: no such file or directory"),
    "unknown format": (lambda t, d: ["run", str(_file(t, "stages: []\n")), "-i",
                                     str(_data(t, "x.weird")), "-o", str(t / "o")], 3,
                       "set input.format"),
    "output exists": (lambda t, d: ["run", str(_file(t, "stages: []\n")), "-i", str(d),
                                    "-o", str(_dir(t / "o"))], 2, "pass --overwrite"),
    "output is a file": (lambda t, d: ["run", str(_file(t, "stages: []\n")), "-i", str(d),
                                       "-o", str(_data(t, "o.txt")), "--overwrite"], 2,
                         "not a directory"),
    "bad encoding": (lambda t, d: ["run", str(_file(t, "input: {encoding: nope}\nstages: []\n")),
                                   "-i", str(d), "-o", str(t / "o")], 3, "unknown encoding"),
    "corrupt gzip": (lambda t, d: ["run", str(_file(t, "stages: []\n")), "-i",
                                   str(_data(t, "x.jsonl.gz", b"not gzip")), "-o",
                                   str(t / "o")], 3, "cannot decompress"),
    "corrupt parquet": (lambda t, d: ["run", str(_file(t, "stages: []\n")), "-i",
                                      str(_data(t, "x.parquet", b"PAR1 nope")), "-o",
                                      str(t / "o")], 3, "not a readable Parquet file"),
}


def _file(t, text):
    p = t / "p.yaml"
    p.write_text(text)
    return p


def _data(t, name, body=b"hello\n"):
    p = t / name
    p.write_bytes(body)
    return p


def _dir(p):
    p.mkdir()
    return p


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_error(tmp_path, data, capsys, case):
    argv, code, needle = CASES[case]
    rc, _, err = cli(capsys, *argv(tmp_path, data))
    assert rc == code, err
    assert needle in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_debug_shows_traceback(tmp_path, data, capsys):
    rc, _, err = cli(capsys, "--debug", "run", str(tmp_path / "nope.yaml"), "-o",
                     str(tmp_path / "o"))
    assert rc == 2 and "Traceback" in err and "no such pipeline file" in err


def test_subprocess_error_and_success(tmp_path, data):
    pipe = write_pipeline(tmp_path / "p.yaml", data, extra_input=", encoding: gb2312x")
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "run", str(pipe), "-o",
                        str(tmp_path / "o"), "-q"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "unknown encoding 'gb2312x'" in r.stderr
    good = write_pipeline(tmp_path / "g.yaml", data)
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "run", str(good), "-o",
                        str(tmp_path / "o"), "-q"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "_SUCCESS").exists()


def test_console_entry_exits_with_the_code_and_frozen_objects(tmp_path, data) -> None:
    # The installed `cleanpipe` command (pyproject's script) exits with main's code, its
    # objects exempt from the collector's last walk (gc.freeze), its outputs complete.
    import tomllib

    conf = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text("utf-8"))
    assert conf["project"]["scripts"]["cleanpipe"] == "cleanpipe.cli:entry"
    good = write_pipeline(tmp_path / "g.yaml", data)
    probe = ("import atexit, gc, sys\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
             "from cleanpipe.cli import entry\n"
             "sys.argv = ['cleanpipe', *sys.argv[1:]]\n"
             "entry()\n")
    for args, code in (([str(good), "-o", str(tmp_path / "o")], 0),
                       ([str(tmp_path / "missing.yaml"), "-o", str(tmp_path / "m")], 2)):
        r = subprocess.run([sys.executable, "-c", probe, "run", *args, "-q"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == code, r.stderr
        assert r.stdout.strip().endswith("frozen True")
    assert (tmp_path / "o" / "_SUCCESS").exists()
    assert (tmp_path / "o" / "report.json").stat().st_size > 0
