"""``hub:ORG/NAME[:CONFIG][@SPLIT]`` inputs stream through ``datasets`` (#17 item 4).

No network here: a local folder laid out as a Hub dataset repository (Parquet shards under
``data/``, a README.md whose YAML ``configs:`` names the data files and splits) is read through
the same ``datasets`` streaming path a Hub name takes, and an unreachable Hub is one line,
exit code 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cleanpipe.cli import main
from cleanpipe.io.hub import HubRef, parse_hub
from cleanpipe.io.readers import read_table
from cleanpipe.io.sources import InputError
from tests.conftest import realdata

CARD = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: data/en/train-*.parquet
  - split: test
    path: data/en/test-*.parquet
- config_name: zh
  data_files:
  - split: train
    path: data/zh/train-*.parquet
---
# a dataset card
"""


def _rows(name: str, n: int) -> list[dict]:
    recs = json.loads(realdata("sft_llamafactory_demos", name).read_text(encoding="utf-8"))
    return [{k: r[k] for k in ("instruction", "input", "output")} for r in recs[:n]]


def _hub_repo(root: Path) -> dict[tuple[str, str], list[dict]]:
    """A Hub-style dataset folder under ``root``; the rows of each (config, split)."""
    en, zh = _rows("alpaca_en_demo.json", 150), _rows("alpaca_zh_demo.json", 40)
    parts = {("en", "train"): [en[:60], en[60:120]], ("en", "test"): [en[120:]],
             ("zh", "train"): [zh]}
    for (config, split), shards in parts.items():
        folder = root / "data" / config
        folder.mkdir(parents=True, exist_ok=True)
        for i, rows in enumerate(shards):
            pq.write_table(pa.Table.from_pylist(rows),
                           folder / f"{split}-{i:05d}-of-{len(shards):05d}.parquet")
    (root / "README.md").write_text(CARD, encoding="utf-8")
    return {k: [r for s in v for r in s] for k, v in parts.items()}


@pytest.mark.realdata
@pytest.mark.parametrize(("config", "split"), [("en", "train"), ("en", "test"), ("zh", "train")])
def test_local_hub_repo_config_and_split_honoured(tmp_path: Path, config: str,
                                                  split: str) -> None:
    written = _hub_repo(tmp_path / "repo")
    got = read_table(f"hub:{tmp_path / 'repo'}:{config}@{split}").to_pylist()
    assert got == written[(config, split)]


@pytest.mark.realdata
def test_several_splits_without_one_named_is_an_error(tmp_path: Path) -> None:
    _hub_repo(tmp_path / "repo")
    with pytest.raises(InputError, match="holds the splits train, test"):
        read_table(f"hub:{tmp_path / 'repo'}:en")


@pytest.mark.realdata
def test_hub_rows_carry_stable_ids_through_a_run(tmp_path: Path) -> None:
    _hub_repo(tmp_path / "repo")
    # a repeated row in the test split: its quarantine entry names dataset, config, split, row
    test = tmp_path / "repo" / "data" / "en" / "test-00000-of-00001.parquet"
    table = pq.read_table(test)
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), test)
    pipe = tmp_path / "p.yaml"
    pipe.write_text("name: t\nfields: [instruction, input, output]\nstages:\n"
                    "  - stage: exact_dedup\n", encoding="utf-8")
    src = f"hub:{tmp_path / 'repo'}:en@test"
    reports = []
    for k in range(2):
        out = tmp_path / f"out{k}"
        assert main(["run", str(pipe), "-i", src, "-o", str(out), "--no-progress"]) == 0
        reports.append(json.loads((out / "report.json").read_text(encoding="utf-8")))
    a, b = reports
    assert a["totals"]["read"] == table.num_rows + 1 and a["totals"]["quarantined"] == 1
    ids = [e["row_id"] for e in a["examples"] if e["code"] == "exact_duplicate"]
    assert ids == [f"{src}:{table.num_rows + 1}"]
    assert a["input"]["paths"] == [src]
    assert a["input"]["fingerprint"] == b["input"]["fingerprint"]
    assert list(a["input"]["revisions"]) == [src] and a["input"]["revisions"][src]
    assert a["input"]["revisions"] == b["input"]["revisions"]


def test_hub_names_parse() -> None:
    assert parse_hub("hub:org/name") == HubRef("org/name")
    assert parse_hub("hub:org/name@validation") == HubRef("org/name", None, "validation")
    assert parse_hub("hub:/data/repo:cfg@train") == HubRef("/data/repo", "cfg", "train")
    assert parse_hub("hf://datasets/org/name/") == HubRef("org/name")
    assert parse_hub("org/name") is None


# Both forms parse to the same HubRef (test above) and reach the same loader; each unreachable
# run waits ~25 s on the Hub client's retries, so the second form runs in `make test-slow`.
@pytest.mark.parametrize("name", ["hub:tatsu-lab/alpaca", pytest.param(
    "hf://datasets/tatsu-lab/alpaca", marks=pytest.mark.slow)])
def test_unreachable_hub_is_one_line_exit_3(tmp_path: Path, name: str) -> None:
    # .invalid never resolves, so this holds online too; the cache is empty and private
    pipe = tmp_path / "p.yaml"
    pipe.write_text("name: t\nfields: [instruction]\nstages:\n  - stage: control_chars\n",
                    encoding="utf-8")
    env = {**os.environ, "HF_ENDPOINT": "https://hub.invalid", "HF_HUB_ETAG_TIMEOUT": "5",
           "HF_HOME": str(tmp_path / "hf")}
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "check", str(pipe), "-i", name,
                        "--no-progress"], capture_output=True, text=True, check=False, env=env,
                       timeout=300)
    assert r.returncode == 3, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and name in err[0] and "not in the local cache" in err[0], err


def test_offline_mode_is_one_line_exit_3(tmp_path: Path) -> None:
    pipe = tmp_path / "p.yaml"
    pipe.write_text("name: t\nfields: [instruction]\nstages:\n  - stage: control_chars\n",
                    encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "check", str(pipe), "-i",
                        "hub:tatsu-lab/alpaca:default@train", "--no-progress"],
                       capture_output=True, text=True, check=False, env=env, timeout=300)
    assert r.returncode == 3, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "hub:tatsu-lab/alpaca:default@train" in err[0], err


def test_a_bare_hub_name_that_is_no_file_points_at_the_hub_form(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"write hub:no-such-org/no-such-set$"):
        read_table("no-such-org/no-such-set")
    with pytest.raises(InputError, match=r"no such file or directory$"):
        read_table(str(tmp_path / "missing" / "train.jsonl"))
