"""Ray engine versus local engine on the t0 corpus: wall time and the overhead ratio.

Run from the repo root: ``.venv/bin/python benchmarks/bench_ray.py`` (data from
``CLEANPIPE_REALDATA`` or ../shared/data). Writes ``benchmarks/results/ray.md``.

Both engines run the same pipeline (dedup stages from main plus two cheap vectorised stages)
with 2 workers; the Ray cluster is local (2 CPUs) and started once before timing, and one
warm-up Ray run is done first so the ratio measures steady-state engine overhead, not Ray's
worker start-up (which is reported separately).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cleanpipe import Pipeline  # noqa: E402
from cleanpipe.contract.stage import (  # noqa: E402
    Action,
    BatchContext,
    BatchResult,
    BatchStage,
    Findings,
    TextResult,
    TextStage,
)
from cleanpipe.stages.exact_dedup import ExactDedup  # noqa: E402
from cleanpipe.stages.minhash_dedup import MinHashDedup  # noqa: E402


class StripEot(TextStage):
    """Removes the literal ``<|endoftext|>`` artifact of t0 completions."""

    name = "_bench_strip_eot"
    codes = {"eot": Action.FIX}

    def transform(self, texts: pa.Array) -> TextResult:
        f = Findings(self.name)
        f.add(pc.fill_null(pc.match_substring(texts, "<|endoftext|>"), False), "eot", Action.FIX)
        return TextResult(pc.replace_substring(texts, "<|endoftext|>", ""), f)


class DropBlank(BatchStage):
    """Drops rows with an empty text field."""

    name = "_bench_drop_blank"
    codes = {"blank": Action.DROP}

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        f = Findings(self.name)
        for field in ctx.text_fields:
            col = batch.column(batch.schema.get_field_index(field))
            f.add(pc.fill_null(pc.equal(pc.utf8_trim_whitespace(col), ""), True), "blank",
                  Action.DROP, field=field)
        return BatchResult(batch, f)


def make() -> Pipeline:
    return Pipeline(stages=[StripEot(), DropBlank(), ExactDedup(), MinHashDedup()],
                    batch_size=4096)


def main() -> None:
    import ray

    root = Path(os.environ.get("CLEANPIPE_REALDATA") or REPO.parent / "shared" / "data")
    data = root / "sft_self_instruct_t0_50k" / "data_per_template"
    if not data.is_dir():
        sys.exit(f"t0 data not found under {root}")
    # the stages must live in an importable module (not __main__) for the workers to
    # unpickle them: use this file imported as ``bench_ray``
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_ray

    make = bench_ray.make

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=2 << 30,
             log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO / "benchmarks")}})
    t_init = time.perf_counter() - t
    t = time.perf_counter()
    rep_warm = make().run(data, None, workers=2, engine="ray")
    t_warm = time.perf_counter() - t
    rows = []
    for name, fn in [("local (2 workers)", lambda: make().run(data, None, workers=2)),
                     ("ray (local cluster, 2 CPUs)", lambda: make().run(data, None, workers=2,
                                                                      engine="ray"))]:
        t = time.perf_counter()
        rep = fn()
        rows.append((name, time.perf_counter() - t, rep["totals"]))
    ray.shutdown()
    (n_l, t_l, tot_l), (n_r, t_r, tot_r) = rows
    assert tot_l == tot_r == rep_warm["totals"], (tot_l, tot_r)
    env = os.environ.get("CLEANPIPE_REALDATA")
    cmd = (f"CLEANPIPE_REALDATA={env} " if env else "") + ".venv/bin/python benchmarks/bench_ray.py"
    lines = [
        f"`{cmd}`", "",
        f"t0 corpus ({tot_l['read']} rows, {len(list(data.glob('*.jsonl')))} files), pipeline:"
        " strip `<|endoftext|>` (text) → drop blank (batch) → exact_dedup → minhash_dedup"
        " (default 128 perms, threshold 0.8). Machine: 2 cores. Totals identical between"
        f" engines: read {tot_l['read']}, kept {tot_l['kept']}, quarantined"
        f" {tot_l['quarantined']}.", "",
        "| engine | wall s | rows/s | ratio vs local |", "|---|---:|---:|---:|",
        f"| {n_l} | {t_l:.2f} | {tot_l['read'] / t_l:,.0f} | 1.00 |",
        f"| {n_r} | {t_r:.2f} | {tot_r['read'] / t_r:,.0f} | {t_r / t_l:.2f} |", "",
        f"Ray overhead ratio (ray / local, warm cluster): **{t_r / t_l:.2f}x**.", "",
        f"Not in the ratio: `ray.init` {t_init:.1f} s; first (cold) Ray run {t_warm:.1f} s"
        " (worker processes start and import cleanpipe).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = REPO / "benchmarks" / "results" / "ray.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
