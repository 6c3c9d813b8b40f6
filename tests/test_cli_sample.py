"""`cleanpipe sample`: deterministic, stratified, reads cleaned output folders, exit codes."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from cleanpipe import Pipeline
from cleanpipe.cli import main
from cleanpipe.commands.sample import allocate, sample_indices, sample_table
from tests.conftest import realdata


def test_allocate_is_proportional_with_one_per_stratum() -> None:
    rng = np.random.default_rng(0)
    take = allocate(np.array([900, 90, 9, 1]), 100, rng)
    assert take.sum() == 100 and (take >= 1).all()
    assert take.tolist()[0] > 85 and take[3] == 1
    # never more than a stratum holds, even when asked for everything
    assert allocate(np.array([3, 1]), 10, rng).tolist() == [3, 1]


def test_allocate_with_fewer_rows_than_strata() -> None:
    take = allocate(np.array([5, 5, 5, 5]), 2, np.random.default_rng(1))
    assert take.sum() == 2 and set(take.tolist()) <= {0, 1}


def test_sample_indices_deterministic_sorted_unique() -> None:
    a = sample_indices(10_000, 100, seed=7)
    assert np.array_equal(a, sample_indices(10_000, 100, seed=7))
    assert not np.array_equal(a, sample_indices(10_000, 100, seed=8))
    assert np.all(np.diff(a) > 0) and a.size == 100
    assert sample_indices(5, 100).tolist() == [0, 1, 2, 3, 4]


def test_stratified_sample_keeps_rare_labels() -> None:
    labels = ["common"] * 990 + ["rare"] * 9 + [None]
    t = pa.table({"i": np.arange(1000), "label": labels})
    plain, _ = sample_table(t, 20, seed=0)
    s, strata = sample_table(t, 20, seed=0, stratify="label")
    assert s.num_rows == 20 and strata["rare"] >= 1 and strata["null"] == 1
    assert sum(strata.values()) == 20
    assert s.column("i").to_pylist() == sorted(s.column("i").to_pylist())
    assert plain.num_rows == 20


def test_stratify_by_an_integer_column() -> None:
    t = pa.table({"label": [100, 100, 101, 116] * 5})
    _, strata = sample_table(t, 8, stratify="label")
    assert set(strata) == {"100", "101", "116"}


def test_cli_sample_of_a_cleaned_output_folder(tmp_path, capsys) -> None:
    rows = [{"text": f"row {i}", "label": "a" if i % 10 else "b"} for i in range(200)]
    out = tmp_path / "out"
    Pipeline(stages=[], fields=["text"]).run(pa.Table.from_pylist(rows), str(out), workers=1)
    assert main(["sample", str(out), "-n", "20", "--stratify", "label", "-o",
                 str(tmp_path / "s.jsonl")]) == 0
    first = pl.read_ndjson(tmp_path / "s.jsonl")
    assert main(["sample", str(out), "-n", "20", "--stratify", "label", "-o",
                 str(tmp_path / "s.parquet")]) == 0
    again = pl.read_parquet(tmp_path / "s.parquet")
    assert first.equals(again)  # same rows whatever the format
    assert set(first["label"]) == {"a", "b"} and first.height == 20
    # only cleaned rows: the folder also holds quarantine/ and reports, never sampled
    assert set(first.columns) == {"text", "label"}
    assert "sampled 20 of 200 rows" in capsys.readouterr().err


def test_cli_sample_to_stdout(tmp_path, capsys) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(50)), "utf-8")
    assert main(["sample", str(path), "-n", "5", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and all("x" in json.loads(ln) for ln in lines)


@pytest.mark.parametrize("extra", [["-n", "0"], ["--stratify", "nope"], ["-o", "x.csv"]])
def test_cli_sample_usage_errors_exit_2(tmp_path, extra) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"x": 1}\n', "utf-8")
    assert main(["sample", str(path), *extra]) == 2


def test_cli_sample_never_replaces_a_file_it_did_not_write(tmp_path, capsys) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(50)), "utf-8")
    theirs = tmp_path / "smoke.jsonl"
    theirs.write_text('{"mine": true}\n', "utf-8")
    for target in (theirs, data):  # a user's file, and the input itself
        before = target.read_bytes()
        assert main(["sample", str(data), "-n", "5", "-o", str(target)]) == 2
        assert target.read_bytes() == before
        assert "not replaced: cleanpipe did not write it" in capsys.readouterr().err
    # its own sample is replaced on a rerun, whole
    ours = tmp_path / "ours.jsonl"
    assert main(["sample", str(data), "-n", "5", "--seed", "1", "-o", str(ours)]) == 0
    assert main(["sample", str(data), "-n", "7", "--seed", "2", "-o", str(ours)]) == 0
    assert len(ours.read_text("utf-8").splitlines()) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "_cleanpipe.json", "d.jsonl", "ours.jsonl", "smoke.jsonl"]


def test_cli_sample_missing_input_exit_3(tmp_path) -> None:
    assert main(["sample", str(tmp_path / "missing.jsonl")]) == 3


@pytest.mark.realdata
def test_sample_real_t0_is_deterministic(tmp_path) -> None:
    folder = realdata("sft_self_instruct_t0_50k", "data_per_template")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["sample", str(folder), "-n", "300", "--seed", "1", "-o", str(a)]) == 0
    assert main(["sample", str(folder), "-n", "300", "--seed", "1", "-o", str(b)]) == 0
    ta, tb = pl.read_parquet(a), pl.read_parquet(b)
    assert ta.height == 300 and ta.equals(tb)
    assert ta["prompt"].n_unique() > 250  # a spread of the corpus, not one template
