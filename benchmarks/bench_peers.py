"""cleanpipe's default SFT pipeline against datatrove, data-juicer and the hand-written script.

Same input (sft_self_instruct_t0_50k, 294 prompt/completion JSONL shards), same machine, one
run. Each tool runs in its own subprocess (peers in their own venvs, see peers/setup_peers.py)
and is measured from outside: wall time, docs/s, MB/s of input JSONL, peak memory of its whole
process tree, rows removed, and which rows (``<file>:<line>``) it removed, compared with the
rows cleanpipe removed.

Usage::

    .venv/bin/python benchmarks/bench_peers.py [--workers 2] [--shards N] [--only cleanpipe,...]

``--shards N`` limits every tool to the same deterministic subset (every k-th non-empty shard
in name order) when the full corpus is too slow for a peer. Results go to
``benchmarks/results/peers.md`` (and raw figures to ``benchmarks/.work/peers/results.json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH,
    DATASET,
    PROJECT_PY,
    REPO,
    WORK,
    md_table,
    measure,
    require_data,
    write_result,
)
from peers.setup_peers import ensure, venv_python

PIPELINE = BENCH / "pipelines" / "t0_default.yaml"
TOOLS = ("cleanpipe", "datatrove", "datajuicer", "naive")
CP_STAGES = ("unicode_fix", "invisible_chars", "exact_dedup", "minhash_dedup", "context_length")


# ---------------------------------------------------------------------------------------
# input


def select_input(src: Path, shards: int) -> Path:
    """The whole corpus, or ``shards`` of its non-empty shards (every k-th, name order)."""
    if not shards:
        return src
    files = sorted(f for f in src.glob("*.jsonl") if f.stat().st_size > 0)
    step = max(len(files) // shards, 1)
    chosen = files[::step][:shards]
    dst = WORK / f"subset_{shards}"
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for f in chosen:
        (dst / f.name).symlink_to(f)
    return dst


def corpus_stats(folder: Path) -> tuple[int, int]:
    """(records, bytes) of a folder of JSONL shards."""
    rows = size = 0
    for f in sorted(folder.glob("*.jsonl")):
        data = f.read_bytes()
        size += len(data)
        rows += sum(1 for ln in data.split(b"\n") if ln.strip())
    return rows, size


def prepare_text_input(src: Path, dst: Path) -> Path:
    """{text, row_id} shards for data-juicer, whose ops read a single text field (untimed)."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for f in sorted(src.glob("*.jsonl")):
        out = []
        with f.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                text = f"{rec.get('prompt') or ''}\n{rec.get('completion') or ''}"
                out.append(json.dumps({"text": text, "row_id": f"{f.name}:{i}"}))
        if out:
            (dst / f.name).write_text("\n".join(out) + "\n", encoding="utf-8")
    return dst


# ---------------------------------------------------------------------------------------
# cleanpipe


def cleanpipe_pipeline(data: Path, dst: Path) -> tuple[Path | None, list[str], list[str]]:
    """Write the runnable copy of t0_default.yaml: stages not landed yet are left out.

    Returns (path or None when the engine is missing, missing stages, notes).
    """
    import yaml

    notes: list[str] = []
    if importlib.util.find_spec("cleanpipe.pipeline") is None or importlib.util.find_spec(
        "cleanpipe.cli"
    ) is None:
        return None, list(CP_STAGES), ["cleanpipe engine (cleanpipe.pipeline / cli) not landed"]
    from cleanpipe.stages.registry import stage_classes

    classes = stage_classes()
    spec = yaml.safe_load(PIPELINE.read_text().replace("${DATA}", str(data)))
    stages, missing = [], []
    for entry in spec["stages"]:
        name = entry["stage"]
        if name not in classes:
            missing.append(name)
            continue
        cls = classes[name]
        params = {k: v for k, v in entry.items() if k != "stage"}
        try:
            cls.model_validate(params)
        except Exception as err:  # pydantic's ValidationError; keep what the stage accepts
            known = {k: v for k, v in params.items() if k in cls.model_fields}
            notes.append(f"{name}: params {sorted(set(params) - set(known))} not accepted "
                         f"({str(err).splitlines()[0]}); ran with {sorted(known)}")
            params = known
        stages.append({"stage": name, **params})
    spec["stages"] = stages
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(yaml.safe_dump(spec, sort_keys=False))
    return dst, missing, notes


def norm_id(row_id: str) -> str:
    """``dir/name.jsonl:12`` -> ``name.jsonl:12``: the shard's base name and its line."""
    shard, _, line = row_id.rpartition(":")
    return f"{Path(shard).name}:{line}"


def cleanpipe_removed(out: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    removed: dict[str, str] = {}
    for f in sorted((out / "quarantine").glob("*.parquet")):
        if "_cleanpipe_row_id" not in pq.read_schema(f).names:  # an empty quarantine
            continue
        t = pq.read_table(f, columns=["_cleanpipe_row_id", "_cleanpipe_stage"])
        for rid, stage in zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True):
            removed[norm_id(rid)] = str(stage)
    return removed


def run_cleanpipe(inp: Path, data: Path, workers: int) -> dict[str, Any]:
    work = WORK / "peers" / "cleanpipe"
    shutil.rmtree(work, ignore_errors=True)
    pipe, missing, notes = cleanpipe_pipeline(data, work / "pipeline.yaml")
    if missing:
        print(f"cleanpipe: stages not landed yet, left out: {', '.join(missing)}", flush=True)
    for n in notes:
        print(f"cleanpipe: {n}", flush=True)
    if pipe is None:
        return {"skipped": "; ".join(notes)}
    out = work / "out"
    cli = REPO / ".venv" / "bin" / "cleanpipe"
    cmd = [str(cli), "run", str(pipe), "--input", str(inp), "--output", str(out),
           "--overwrite", "--workers", str(workers), "--no-progress", "--quiet"]
    m = measure(cmd, cwd=REPO)
    res: dict[str, Any] = {"m": m, "missing": missing, "notes": notes}
    if m.rc not in (0, 1):  # 1 = gate failed, the run itself completed
        res["error"] = (m.stderr or m.stdout)[-2000:]
        return res
    res["removed_ids"] = cleanpipe_removed(out)
    return res


# ---------------------------------------------------------------------------------------
# peers


def _json_tail(stdout: str, work: Path) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    if (work / "result.json").exists():
        return json.loads((work / "result.json").read_text())
    raise ValueError("no JSON result line")


def run_peer(name: str, cmd: list[str]) -> dict[str, Any]:
    m = measure(cmd, cwd=REPO, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                    "TOKENIZERS_PARALLELISM": "true"})
    res: dict[str, Any] = {"m": m}
    if not m.ok:
        res["error"] = (m.stderr or m.stdout)[-3000:]
        return res
    try:
        info = _json_tail(m.stdout, WORK / "peers" / name)
    except ValueError as err:
        res["error"] = f"{err}; stdout tail: {m.stdout[-1500:]}"
        return res
    res["info"] = info
    res["removed_ids"] = json.loads(Path(info["removed_ids_file"]).read_text())
    return res


def run_tool(tool: str, inp: Path, data: Path, workers: int) -> dict[str, Any]:
    tok_dir = data / "tokenizers" / "qwen3"
    work = WORK / "peers" / tool
    common = ["--work", str(work), "--max-tokens", "2048"]
    if tool == "cleanpipe":
        return run_cleanpipe(inp, data, workers)
    if tool == "naive":
        return run_peer(tool, [str(PROJECT_PY), str(BENCH / "peers" / "naive.py"),
                               "--input", str(inp), "--tokenizer",
                               str(tok_dir / "tokenizer.json"), *common])
    state = ensure(tool)
    if not state["ok"]:
        return {"skipped": f"could not be installed: {state['error']}"}
    if tool == "datatrove":
        return run_peer(tool, [str(venv_python(tool)), str(BENCH / "peers" /
                                                          "datatrove_pipeline.py"),
                               "--input", str(inp), "--tokenizer",
                               str(tok_dir / "tokenizer.json"), "--workers", str(workers),
                               *common])
    text_in = prepare_text_input(inp, WORK / "peers" / "text_input")
    return run_peer(tool, [str(venv_python(tool)), str(BENCH / "peers" /
                                                      "datajuicer_pipeline.py"),
                           "--input", str(text_in), "--tokenizer-dir", str(tok_dir),
                           "--np", str(workers), *common])


# ---------------------------------------------------------------------------------------
# report

LABELS = {
    "cleanpipe": "cleanpipe (t0_default.yaml)",
    "datatrove": "datatrove (FTFYFormatter + 4-step MinHash + TokensCounter)",
    "datajuicer": "data-juicer (fix_unicode + document_minhash + token_num)",
    "naive": "hand-written (ftfy loop + datasketch loop + encode_batch)",
}


def report(results: dict[str, dict[str, Any]], rows_in: int, size: int, args: Any,
           inp: Path) -> str:
    headers = ["tool", "wall s", "docs/s", "MB/s", "peak RSS MB (tree PSS)",
               "max single RSS MB", "rows removed", "speedup vs this", "RSS cleanpipe/this",
               "load avg start→end"]
    cp = results.get("cleanpipe", {})
    cp_m = cp.get("m") if "removed_ids" in cp else None
    table, notes = [], []
    for tool in TOOLS:
        r = results.get(tool)
        if r is None:
            continue
        if "skipped" in r or "error" in r:
            table.append([LABELS[tool], "—", "—", "—", "—", "—", "—", "—", "—", "—"])
            why = r.get("skipped") or r.get("error", "")
            notes.append(f"- **{tool}** did not produce a result: ```{why.strip()[-1500:]}```")
            continue
        m = r["m"]
        speed = rss = "—"
        if cp_m is not None and tool != "cleanpipe":
            speed = f"{m.wall_s / cp_m.wall_s:.1f}×"
            rss = f"{cp_m.peak_rss_mb / m.peak_rss_mb:.2f}"
        table.append([LABELS[tool], m.wall_s, rows_in / m.wall_s, size / 1e6 / m.wall_s,
                      m.peak_rss_mb, m.max_single_rss_mb, len(r["removed_ids"]), speed, rss,
                      f"{m.load[0]:.1f}→{m.load[1]:.1f}"])
    out = [
        f"Input: `{inp}` — {rows_in:,} records, {size / 1e6:.1f} MB of JSONL"
        + (f" (subset: {args.shards} shards)" if args.shards else " (whole corpus)")
        + f"; {args.workers} workers for every tool that takes a worker count.",
        "",
        md_table(headers, table),
        "",
        "speedup vs this = this tool's wall time / cleanpipe's (how many times faster cleanpipe"
        " is); RSS cleanpipe/this < 1 means cleanpipe used less memory. Peak RSS is the sum of"
        " PSS over the whole process tree (workers included), sampled every 0.1 s. The"
        f" machine has {os.cpu_count()} cores; a load average above that means other work"
        " shared the CPU during that run, and its wall time is inflated by it.",
    ]
    if cp_m is not None:
        a = set(cp["removed_ids"])
        rows = []
        for tool in TOOLS[1:]:
            r = results.get(tool, {})
            if "removed_ids" not in r:
                continue
            b = set(r["removed_ids"])
            inter = len(a & b)
            union = len(a | b) or 1
            rows.append([LABELS[tool], len(b), inter, len(a - b), len(b - a),
                         f"{inter / union:.2f}"])
        out += ["", "Removed rows compared with cleanpipe's (row = file:line):", "",
                md_table(["tool", "removed", "also removed by cleanpipe",
                          "only cleanpipe", "only this tool", "Jaccard"], rows)]
        by_stage: dict[str, int] = {}
        for s in cp["removed_ids"].values():
            by_stage[s] = by_stage.get(s, 0) + 1
        out += ["", "cleanpipe removals by stage: "
                + ", ".join(f"{k} {v:,}" for k, v in sorted(by_stage.items()))]
        if cp.get("missing"):
            out += ["", f"**cleanpipe ran without these stages (not landed yet): "
                    f"{', '.join(cp['missing'])}**"]
        for n in cp.get("notes", []):
            out += [f"- cleanpipe: {n}"]
    for tool in ("datatrove", "naive"):
        info = results.get(tool, {}).get("info", {})
        if info.get("removed_by"):
            out += ["", f"{tool} removals by step: "
                    + ", ".join(f"{k} {v:,}" for k, v in info["removed_by"].items())]
        if info.get("phases_s"):
            out += [f"{tool} phase times (s, inside the process): "
                    + ", ".join(f"{k} {v:.1f}" for k, v in info["phases_s"].items())]
    out += ["", "## Acceptance (issue 7)", "", *acceptance(results)]
    if notes:
        out += ["", "Not measured:", *notes]
    return "\n".join(out)


def acceptance(results: dict[str, dict[str, Any]]) -> list[str]:
    """≥ 5x faster than datatrove and data-juicer, peak RSS no higher: holds or not, and why."""
    cp = results.get("cleanpipe", {})
    if "removed_ids" not in cp:
        return ["- cleanpipe did not run: not assessable."]
    lines = []
    if cp.get("missing"):
        lines.append(
            "- **Not assessable yet: cleanpipe ran without "
            f"{', '.join(cp['missing'])}** (not landed on main), so its figures are the engine"
            " doing less work than the peers; the ratios below are not the acceptance figures."
        )
    cm = cp["m"]
    for tool in ("datatrove", "datajuicer"):
        r = results.get(tool, {})
        if "m" not in r or "removed_ids" not in r:
            why = r.get("skipped") or r.get("error", "no result")
            lines.append(f"- vs {tool}: no comparison ({why.strip().splitlines()[-1][:200]}).")
            continue
        speed = r["m"].wall_s / cm.wall_s
        rss_ok = cm.peak_rss_mb <= r["m"].peak_rss_mb
        ok = speed >= 5 and rss_ok
        lines.append(
            f"- vs {tool}: {speed:.1f}× faster (needs ≥ 5×), peak RSS {cm.peak_rss_mb:.0f} MB"
            f" vs {r['m'].peak_rss_mb:.0f} MB (needs ≤): "
            f"**{'holds' if ok and not cp.get('missing') else 'does not hold'}**"
            + (" (incomplete pipeline)" if cp.get("missing") else "")
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=0, help="deterministic subset (0 = all)")
    ap.add_argument("--only", default=",".join(TOOLS))
    args = ap.parse_args()
    data = require_data()
    src = require_data(DATASET, "data_per_template")
    inp = select_input(src, args.shards)
    rows_in, size = corpus_stats(inp)
    results: dict[str, dict[str, Any]] = {}
    for tool in [t for t in args.only.split(",") if t]:
        if tool not in TOOLS:
            sys.exit(f"unknown tool {tool}; choose from {', '.join(TOOLS)}")
        print(f"== {tool}", flush=True)
        try:
            results[tool] = run_tool(tool, inp, data, args.workers)
        except Exception as err:  # one tool's failure must not lose the others' figures
            results[tool] = {"error": f"{type(err).__name__}: {err}"}
        r = results[tool]
        if "m" in r:
            m = r["m"]
            print(f"   {m.wall_s:.1f} s, peak {m.peak_rss_mb:.0f} MB, rc {m.rc}, "
                  f"removed {len(r.get('removed_ids', {}))}", flush=True)
        for k in ("skipped", "error"):
            if k in r:
                print(f"   {k}: {r[k][-800:]}", flush=True)
    body = report(results, rows_in, size, args, inp)
    print(body)
    raw = {t: {"wall_s": r["m"].wall_s, "peak_rss_mb": r["m"].peak_rss_mb,
               "max_single_rss_mb": r["m"].max_single_rss_mb,
               "removed": len(r.get("removed_ids", {})), "info": r.get("info", {}),
               "missing": r.get("missing", [])}
           for t, r in results.items() if "m" in r}
    (WORK / "peers").mkdir(parents=True, exist_ok=True)
    (WORK / "peers" / "results.json").write_text(json.dumps(raw, indent=1))
    path = write_result("peers", "# Peers: cleanpipe vs datatrove, data-juicer and a script\n\n"
                        + body)
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
