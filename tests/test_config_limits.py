"""Every number a user gives is range-checked, and a pipeline file is read once, safely:
size and alias-expansion limits, duplicate keys refused (issue 15, items 4 and 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cleanpipe.limits import MAX_ALIAS_NODES, MAX_BATCH_SIZE, MAX_WORKERS, MAX_YAML_BYTES
from cleanpipe.spec import ConfigError, load_spec, load_spec_text
from tests._robust_helpers import cli, write_pipeline

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n{"text": "b"}\n')
    return p


# --- item 4: numeric CLI options and config values -------------------------------------

@pytest.mark.parametrize("option,value", [
    ("--batch-size", "-5"), ("--batch-size", "-1"), ("--batch-size", "0"),
    ("--batch-size", str(MAX_BATCH_SIZE + 1)),
    # (100000, the value, is checked in a pipeline file below: a regression here
    # would fork that many processes)
    ("--workers", "0"), ("--workers", "-1"), ("--workers", str(MAX_WORKERS + 1)),
])
@pytest.mark.parametrize("command", ["run", "check"])
def test_cli_numbers_out_of_range_are_one_line_usage_errors(tmp_path, data, capsys, option,
                                                           value, command):
    pipe = write_pipeline(tmp_path / "p.yaml", data)
    out = tmp_path / "o"
    argv = [command, str(pipe), option, value, "-q", "--no-progress"]
    code, _, err = cli(capsys, *(argv + (["-o", str(out)] if command == "run" else [])))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and f"{option} {value}:" in err
    assert not out.exists()  # refused before any work


def test_cli_numbers_in_range_still_run(tmp_path, data, capsys):
    pipe = write_pipeline(tmp_path / "p.yaml", data)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(tmp_path / "o"), "-q",
                       "--no-progress", "--batch-size", "1", "--workers", "1")
    assert code == 0, err
    assert (tmp_path / "o" / "_SUCCESS").exists()


@pytest.mark.parametrize("workers", [0, -1])
def test_python_api_workers_out_of_range(workers):
    import pyarrow as pa

    from cleanpipe import Pipeline

    with pytest.raises(ConfigError, match=f"^workers {workers}: "):
        Pipeline(stages=[]).run(pa.table({"text": ["a"]}), workers=workers)


def test_demo_workers_out_of_range(tmp_path, capsys):
    code, _, err = cli(capsys, "demo", "-o", str(tmp_path / "d"), "--workers", "0",
                       "--no-progress")
    assert code == 2 and "--workers 0:" in err and not (tmp_path / "d").exists()


def test_sample_seed_must_not_be_negative(tmp_path, data, capsys):
    code, _, err = cli(capsys, "sample", str(data), "-n", "1", "--seed", "-1")
    assert code == 2 and "--seed" in err and "internal error" not in err


CONFIG_CASES = {
    "outliers.threshold": ("stages:\n  - stage: outliers\n    threshold: -1\n",
                           "p.yaml:3: stages[0].threshold: "),
    "outliers.threshold nan": ("stages:\n  - stage: outliers\n    threshold: .nan\n",
                               "p.yaml:3: stages[0].threshold: "),
    "outliers.thresholds": ("stages:\n  - stage: outliers\n    thresholds: {chars: 0}\n",
                            "p.yaml:3: stages[0].thresholds: "),
    "outliers.features": ("stages:\n  - stage: outliers\n    features: [chars, lenght]\n",
                          "p.yaml:3: stages[0].features[1]: "),
    "labels.num_labels": ("stages:\n  - stage: labels\n    num_labels: 0\n",
                          "p.yaml:3: stages[0].num_labels: "),
    "labels.labels": ("stages:\n  - stage: labels\n    labels: []\n",
                      "p.yaml:3: stages[0].labels: "),
    "numeric.ranges": ("stages:\n  - stage: numeric\n    fields: [score]\n"
                       "    ranges: {score: [1, 0]}\n", "p.yaml:4: stages[0].ranges: "),
    "token_ids.vocab_size": ("stages:\n  - stage: token_ids\n    vocab_size: 0\n",
                             "p.yaml:3: stages[0].vocab_size: "),
    "minhash.weights": ("stages:\n  - stage: minhash_dedup\n    weights: [0.5, 0.6]\n",
                        "p.yaml:3: stages[0].weights: "),
    "minhash.seed": ("stages:\n  - stage: minhash_dedup\n    seed: -1\n",
                     "p.yaml:3: stages[0].seed: "),
    "examples": ("stages:\n  - stage: whitespace\n    examples: -3\n",
                 "p.yaml:3: stages[0].examples: "),
    "batch_size": ("batch_size: 0\nstages: []\n", "p.yaml:1: batch_size: "),
    "workers": ("stages: []\nworkers: 100000\n", "p.yaml:2: workers: "),
    "rows_per_part": ("output:\n  rows_per_part: -1\nstages: []\n",
                      "p.yaml:2: output.rows_per_part: "),
    "gate fraction": ("stages: []\ngate:\n  max_dropped_fraction: .inf\n",
                      "p.yaml:3: gate.max_dropped_fraction: "),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_config_values_out_of_range_name_file_line_and_key(case):
    text, needle = CONFIG_CASES[case]
    with pytest.raises(ConfigError) as err:
        load_spec_text(text, "p.yaml")
    assert str(err.value).startswith(needle), str(err.value)
    assert "\n" not in str(err.value)


def test_config_value_error_through_the_cli(tmp_path, data, capsys):
    pipe = tmp_path / "p.yaml"
    pipe.write_text("stages:\n  - stage: outliers\n    threshold: 0\n")
    code, _, err = cli(capsys, "validate", str(pipe))
    assert code == 2 and f"{pipe}:3: stages[0].threshold: " in err
    assert len(err.strip().splitlines()) == 1


# --- item 5: the YAML file ---------------------------------------------------------------

def _laughs(levels: int, width: int = 9) -> str:
    """The classic alias bomb: each level lists the previous one ``width`` times."""
    text = "a: &a [" + ",".join(['"lol"'] * width) + "]\n"
    prev = "a"
    for n in "bcdefghijk"[:levels - 1]:
        text += f"{n}: &{n} [" + ",".join([f"*{prev}"] * width) + "]\n"
        prev = n
    return text + "stages: []\n"


def test_alias_bomb_is_refused_naming_the_line():
    # six levels: 9**6 = 531,441 values, past the limit yet cheap enough to build on old code
    text = _laughs(6)
    assert 9 ** 6 > MAX_ALIAS_NODES
    with pytest.raises(ConfigError, match=r"^p\.yaml:\d+: aliases expand to more than"):
        load_spec_text(text, "p.yaml")


def test_billion_laughs_validate_exits_2(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_laughs(9))
    assert len(bomb.read_bytes()) < 400  # the 353-byte file, give or take
    # the timeout only keeps a regression from hanging the suite (it used to grow past 2 GB)
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "validate", str(bomb)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert "aliases expand to more than" in r.stderr and r.stderr.count("\n") == 1


def test_anchors_and_merge_keys_still_work():
    text = ("stages:\n  - stage: outliers\n    thresholds: &t {chars: 3.0}\n"
            "    features: [chars]\ngate:\n  <<: {max_dropped_fraction: 0.5}\n"
            "  max_reason_count: {outlier: 7}\n")
    spec = load_spec_text(text, "p.yaml")
    assert spec.stages[0].thresholds == {"chars": 3.0}
    assert spec.gate.max_dropped_fraction == 0.5 and spec.gate.max_reason_count == {
        "outlier": 7}


def test_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match=r"^p\.yaml:1: an alias refers to the node"):
        load_spec_text("name: &a [*a]\nstages: []\n", "p.yaml")


@pytest.mark.parametrize("text,needle", [
    ("name: x\nstages: [{stage: whitespace}]\ninput: {path: d}\nstages: []\n",
     "p.yaml:4: stages: duplicate key (first at line 2)"),
    ("stages:\n  - stage: outliers\n    threshold: 3\n    threshold: 4\n",
     "p.yaml:4: stages[0].threshold: duplicate key (first at line 3)"),
    ("input: {path: a, path: b}\nstages: []\n",
     "p.yaml:1: input.path: duplicate key (first at line 1)"),
])
def test_duplicate_keys_are_refused_with_both_lines(text, needle):
    with pytest.raises(ConfigError) as err:
        load_spec_text(text, "p.yaml")
    assert str(err.value).startswith(needle), str(err.value)


def test_oversized_file_is_refused_before_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("stages: []\n# " + "x" * MAX_YAML_BYTES + "\n")
    with pytest.raises(ConfigError, match=r"big\.yaml: [\d,]+ bytes: a pipeline file may hold"):
        load_spec(p)
    with pytest.raises(ConfigError, match="a pipeline file may hold"):
        load_spec_text(p.read_text(), "big.yaml")


def test_a_file_is_parsed_once(monkeypatch):
    made: list[str] = []
    for cls in {yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)}:
        init = cls.__init__

        def counting(self, stream, _init=init, _name=cls.__name__):
            made.append(_name)
            _init(self, stream)

        monkeypatch.setattr(cls, "__init__", counting)
    text = "name: once\nstages:\n  - stage: whitespace\n    examples: 2\n"
    spec = load_spec_text(text, "p.yaml")
    assert spec.stages[0].examples == 2
    assert len(made) == 1, made
    with pytest.raises(ConfigError, match=r"p\.yaml:4: stages\[0\]\.examples"):
        load_spec_text(text.replace("2", "-2"), "p.yaml")  # lines come from the same parse


def test_shipped_pipelines_still_load():
    for p in sorted((REPO / "cleanpipe" / "pipelines").glob("*.yaml")):
        assert load_spec(p).stages, p
