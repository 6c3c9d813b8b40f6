"""``Pipeline.clean``: the cleaned data in the input's type and a typed report, from one run,
equal to what ``cleanpipe run`` writes."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cleanpipe import Pipeline
from cleanpipe.cli import PIPELINES_DIR, main, shipped_pipeline
from cleanpipe.result import CleanReport
from tests.conftest import realdata

FIELDS = ["instruction", "input", "output"]


def _written(out: Path, sub: str) -> pa.Table:
    return pq.read_table(sorted((out / sub).glob("*.parquet")))


def _cli_run(pipeline: str, src: Path, out: Path) -> dict:
    yaml = str(PIPELINES_DIR / f"{pipeline}.yaml")
    assert main(["run", yaml, "--input", str(src), "--output", str(out), "--workers", "1",
                 "--quiet"]) == 0
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def _same_table(got: pa.Table, written: pa.Table) -> None:
    """Same rows in the same order and the same column types."""
    assert got.schema.equals(written.schema), (got.schema, written.schema)
    assert got.to_pylist() == written.to_pylist()


@pytest.mark.realdata
def test_clean_equals_cli_run_on_real_alpaca(tmp_path: Path) -> None:
    """alpaca_en through the shipped sft_alpaca pipeline: the Dataset and the quarantine that
    one ``clean`` call returns are the rows and types ``cleanpipe run`` writes."""
    src = realdata("sft_llamafactory_demos", "alpaca_en_demo.json")
    written = _cli_run("sft_alpaca", src, tmp_path / "out")
    result = shipped_pipeline("sft_alpaca").clean(src, workers=1)
    assert isinstance(result.dataset, datasets.Dataset)
    assert isinstance(result.report, CleanReport)
    _same_table(result.dataset.data.table, _written(tmp_path / "out", "data"))
    quarantine = result.report.quarantine
    assert isinstance(quarantine, datasets.Dataset) and quarantine.num_rows > 0
    _same_table(quarantine.data.table, _written(tmp_path / "out", "quarantine"))
    assert all(quarantine["_cleanpipe_reasons"])  # every dropped row says why
    assert result.report.totals == written["totals"]
    assert result.report.passed == written["verdict"]["passed"]
    assert result.report.to_dict()["stages"][-1]["dropped"] == \
        written["stages"][-1]["dropped"]
    t = result.report.totals
    assert t["kept"] + t["quarantined"] == t["read"] == 999


@pytest.mark.realdata
def test_dataset_in_dataset_out_on_real_alpaca(tmp_path: Path) -> None:
    """A ``datasets.Dataset`` in: a Dataset out with its features, equal to ``cleanpipe run``
    on the same Dataset saved to disk (row ids differ only in the shard's name)."""
    with open(realdata("sft_llamafactory_demos", "alpaca_en_demo.json"), encoding="utf-8") as f:
        rows = json.load(f)
    ds = datasets.Dataset.from_list([{k: r.get(k, "") for k in FIELDS} for r in rows])
    ds.save_to_disk(tmp_path / "ds")
    _cli_run("sft_alpaca", tmp_path / "ds", tmp_path / "out")
    result = shipped_pipeline("sft_alpaca").clean(ds, workers=1)
    assert isinstance(result.dataset, datasets.Dataset)
    assert result.dataset.features == ds.features
    _same_table(result.dataset.data.table, _written(tmp_path / "out", "data"))
    got = result.report.quarantine.data.table
    want = _written(tmp_path / "out", "quarantine")
    assert got.num_rows > 0
    assert got.schema.equals(want.schema)
    # the saved copy's rows are named after its folder ("ds:12"), the Dataset's "Dataset:12"
    renamed = json.dumps(want.to_pylist(), ensure_ascii=False).replace('"ds:', '"Dataset:')
    renamed = renamed.replace('row ds:', 'row Dataset:')
    assert got.to_pylist() == json.loads(renamed)


def _dupes() -> pa.Table:
    return pa.table({"text": ["a\u200bb", "same", "same", "c  d"], "n": [1, 2, 3, 4]})


def _pipe(**settings: object) -> Pipeline:
    return Pipeline(stages=[{"stage": "invisible_chars"}, {"stage": "exact_dedup"}],
                    fields=["text"], **settings)


def test_output_type_follows_the_input() -> None:
    table = _dupes()
    want = ["ab", "same", "c  d"]
    by_table = _pipe().clean(table)
    assert isinstance(by_table.dataset, pa.Table)
    assert by_table.dataset.column("text").to_pylist() == want
    assert _pipe().clean(table.to_batches()[0]).dataset.column("n").to_pylist() == [1, 2, 4]
    frame = _pipe().clean(pl.from_arrow(table)).dataset
    assert isinstance(frame, pl.DataFrame) and frame["text"].to_list() == want
    ds = datasets.Dataset(datasets.table.InMemoryTable(table))
    assert _pipe().clean(ds).dataset["text"][:] == want


def test_iterable_dataset_in_iterable_dataset_out() -> None:
    it = datasets.Dataset.from_dict(_dupes().to_pydict()).to_iterable_dataset()
    dataset, report = _pipe().clean(it)
    assert isinstance(dataset, datasets.IterableDataset)
    assert [r["text"] for r in dataset] == ["ab", "same", "c  d"]
    assert report.totals["read"] == 4
    assert report.quarantine["n"][:] == [3]
    assert report.quarantine["_cleanpipe_reasons"][:] == [["exact_duplicate"]]


def test_flag_column_and_empty_result_match_run(tmp_path: Path) -> None:
    """The flag column ``run`` writes is in the result; a run that drops every row returns
    an empty result with the written schema."""
    table = _dupes()
    pipe = Pipeline(stages=[{"stage": "whitespace"}, {"stage": "exact_dedup"}],
                    fields=["text"], output={"flag_column": "flags"})
    pipe.run(table, tmp_path / "flagged")
    _same_table(pipe.clean(table).dataset, _written(tmp_path / "flagged", "data"))
    everything = Pipeline(stages=[{"stage": "regex_filter", "patterns": {"any": "."}}],
                          fields=["text"])
    everything.run(table, tmp_path / "none")
    result = everything.clean(table)
    assert result.dataset.num_rows == 0 and result.report.quarantine.num_rows == 4
    _same_table(result.dataset, _written(tmp_path / "none", "data"))
    _same_table(result.report.quarantine.data.table, _written(tmp_path / "none", "quarantine"))


def test_report_verdict_and_dict() -> None:
    pipe = _pipe(gate={"max_dropped_fraction": 0.1})
    report = pipe.clean(_dupes()).report
    assert not report.passed and report.exit_code != 0
    assert report.to_dict()["verdict"] == report.verdict
    written = pipe.run(_dupes())
    assert report.totals == written["totals"]
    assert report.verdict == written["verdict"]


def test_unknown_engine_argument_is_refused() -> None:
    from cleanpipe.spec import ConfigError

    with pytest.raises(ConfigError, match="engine 'spark' is not one of 'local', 'ray'"):
        _pipe().clean(_dupes(), engine="spark")
    assert _pipe().clean(_dupes(), engine="local").report.to_dict()["timing"]["engine"] == "local"
