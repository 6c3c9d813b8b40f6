"""cleanpipe's default SFT pipeline against datatrove, data-juicer (and the hand-written script).

Same input, same machine, same cache state, repeated and interleaved:

* **Inputs**: sft_self_instruct_t0_50k as its 294 prompt/completion JSONL shards, and the
  same rows in the same order as **one JSONL file** (built under ``benchmarks/.work/``,
  untimed), which is what most users have.
* **Cache state**: every tool gets a cache folder of its own (numba's, the XDG user cache,
  Hugging Face's; see ``_caches.py``). A *cold* run empties it first; a *warm* run keeps
  what that tool's previous run wrote. cleanpipe runs cold and warm (its compiled kernels
  are cached on disk); the peers keep nothing between runs that could speed up the next
  (data-juicer's datasets cache is emptied by its script every run, because a warm one
  replays the previous run's results), so they run cold only, and their cold figure is
  also their warm one. The headline ratios are **cold against cold**.
* **Repetitions**: ``--reps`` rounds (default 3), interleaved: every round runs every
  (input, tool) once, in the same order, so load that comes and goes hits every tool. Each
  table cell is the median with min–max over the rounds, and every run's load average
  (1 min, at its start and end) is listed.

Each tool runs in its own subprocess (peers in their own venvs, see peers/setup_peers.py)
and is measured from outside: wall time, peak PSS of its whole process tree, rows removed and
which rows (``<file>:<line>`` of the shards) it removed.

Usage::

    .venv/bin/python benchmarks/bench_peers.py [--reps 3] [--inputs shards,onefile]
        [--only cleanpipe,datatrove,datajuicer] [--rows N] [--workers 2] [--deadline HH:MM]
    .venv/bin/python benchmarks/bench_peers.py --report-only   # rebuild peers.md from runs
    .venv/bin/python benchmarks/bench_peers.py --append ...    # more rounds, same runs file

``--rows N`` keeps the first N/294 rows of every shard (a small, deterministic sample of
every template) to check the harness quickly. ``--deadline HH:MM`` (UTC) skips a round's
block of runs on one input when the previous block on that input says it would end after
that time; the inputs run in the order ``--inputs`` gives, so put first the one that matters
most. Every run is appended to
``benchmarks/.work/peers/runs.jsonl`` as it finishes, so an interrupted measurement keeps its
completed runs; results go to ``benchmarks/results/peers.md``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _caches import cache_env, empty_cache, installer_traces, jit_index_files
from _common import (
    BENCH,
    DATASET,
    PROJECT_PY,
    REPO,
    WORK,
    command_line,
    md_table,
    measure,
    require_data,
    write_result,
)
from _repeats import Spread, interleaved, ratio_spread
from peers.setup_peers import ensure, venv_python

PIPELINE = BENCH / "pipelines" / "t0_default.yaml"
TOOLS = ("cleanpipe", "datatrove", "datajuicer", "naive")
DEFAULT_TOOLS = ("cleanpipe", "datatrove", "datajuicer")
INPUTS = ("shards", "onefile")
CP_STAGES = ("unicode_fix", "invisible_chars", "exact_dedup", "minhash_dedup", "context_length")
PEERS_WORK = WORK / "peers"
RUNS = PEERS_WORK / "runs.jsonl"
META = PEERS_WORK / "meta.json"
CACHES = WORK / "caches"
RUN_TIMEOUT_S = 1800


# ---------------------------------------------------------------------------------------
# inputs


def shard_files(src: Path) -> list[Path]:
    """The non-empty JSONL shards of ``src``, in name order (the order every tool reads)."""
    return sorted(f for f in src.glob("*.jsonl") if f.stat().st_size > 0)


def sample_shards(src: Path, rows: int, dst: Path) -> Path:
    """The first ``ceil(rows / shards)`` lines of every shard: every template, fewer rows."""
    files = shard_files(src)
    per = -(-rows // len(files))
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for f in files:
        with f.open("rb") as fh:
            head = [ln for _, ln in zip(range(per), fh, strict=False)]
        (dst / f.name).write_bytes(b"".join(head))
    return dst


def one_file(shards: list[Path], dst: Path) -> list[str]:
    """Write the non-blank lines of ``shards``, in order, to ``dst``; return each line's origin.

    ``origin[i]`` is ``<shard name>:<line>`` (1-based) of line ``i + 1`` of ``dst``, so rows
    removed from the one file can be compared with rows removed from the shards.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    origin: list[str] = []
    with dst.open("wb") as out:
        for f in shards:
            with f.open("rb") as fh:
                for i, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    out.write(line if line.endswith(b"\n") else line + b"\n")
                    origin.append(f"{f.name}:{i}")
    return origin


def corpus_stats(files: list[Path]) -> tuple[int, int]:
    """(records, bytes) of JSONL files: non-blank lines, file sizes."""
    rows = size = 0
    for f in files:
        data = f.read_bytes()
        size += len(data)
        rows += sum(1 for ln in data.split(b"\n") if ln.strip())
    return rows, size


def prepare_text_input(src: Path, dst: Path) -> Path:
    """{text, row_id} files for data-juicer, whose ops read a single text field (untimed)."""
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


def build_inputs(src: Path, rows: int, wanted: list[str]) -> dict[str, dict[str, Any]]:
    """Each input: the path cleanpipe gets, the folder the peers get, stats, row origins."""
    base = WORK / "inputs" / (f"rows_{rows}" if rows else "full")
    shards_dir = sample_shards(src, rows, base / "shards") if rows else src
    files = shard_files(shards_dir)
    rows_in, size = corpus_stats(files)
    out: dict[str, dict[str, Any]] = {}
    if "shards" in wanted:
        out["shards"] = {"cleanpipe": shards_dir, "folder": shards_dir, "rows": rows_in,
                         "bytes": size, "origin": None,
                         "label": f"{len(list(shards_dir.glob('*.jsonl')))} JSONL shards, "
                                  f"{len(files)} non-empty (`{shards_dir}`)"}
    if "onefile" in wanted:
        path = base / "onefile" / f"{DATASET}.jsonl"
        origin = one_file(files, path)
        assert len(origin) == rows_in, (len(origin), rows_in)
        out["onefile"] = {"cleanpipe": path, "folder": path.parent, "rows": rows_in,
                          "bytes": path.stat().st_size, "origin": origin,
                          "label": f"one JSONL file, the same rows in the same order (`{path}`)"}
    for name, inp in out.items():
        inp["text_input"] = prepare_text_input(inp["folder"], base / "text" / name)
    return out


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


def run_cleanpipe(inp: dict[str, Any], pipe: Path, workers: int,
                  env: dict[str, str]) -> dict[str, Any]:
    out = PEERS_WORK / "cleanpipe" / "out"
    # The interpreter running this benchmark, with this checkout first on the path: the
    # figures are those of the code next to this file, not of whatever is installed.
    cmd = [sys.executable, "-m", "cleanpipe.cli", "run", str(pipe), "--input",
           str(inp["cleanpipe"]), "--output", str(out), "--overwrite", "--workers",
           str(workers), "--no-progress", "--quiet"]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    m = measure(cmd, cwd=REPO, env={**env, "PYTHONPATH": path}, timeout=RUN_TIMEOUT_S)
    res: dict[str, Any] = {"m": m}
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


def run_peer(name: str, cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    m = measure(cmd, cwd=REPO, timeout=RUN_TIMEOUT_S,
                env={**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                     "TOKENIZERS_PARALLELISM": "true"})
    res: dict[str, Any] = {"m": m}
    if not m.ok:
        res["error"] = (m.stderr or m.stdout)[-3000:]
        return res
    try:
        info = _json_tail(m.stdout, PEERS_WORK / name)
    except ValueError as err:
        res["error"] = f"{err}; stdout tail: {m.stdout[-1500:]}"
        return res
    res["info"] = info
    res["removed_ids"] = json.loads(Path(info["removed_ids_file"]).read_text())
    return res


def peer_command(tool: str, inp: dict[str, Any], data: Path, workers: int) -> list[str]:
    tok_dir = data / "tokenizers" / "qwen3"
    common = ["--work", str(PEERS_WORK / tool), "--max-tokens", "2048"]
    folder = str(inp["folder"])
    if tool == "naive":
        return [str(PROJECT_PY), str(BENCH / "peers" / "naive.py"), "--input", folder,
                "--tokenizer", str(tok_dir / "tokenizer.json"), *common]
    if tool == "datatrove":
        return [str(venv_python(tool)), str(BENCH / "peers" / "datatrove_pipeline.py"),
                "--input", folder, "--tokenizer", str(tok_dir / "tokenizer.json"),
                "--workers", str(workers), *common]
    return [str(venv_python(tool)), str(BENCH / "peers" / "datajuicer_pipeline.py"),
            "--input", str(inp["text_input"]), "--tokenizer-dir", str(tok_dir),
            "--np", str(workers), *common]


# ---------------------------------------------------------------------------------------
# one run, recorded


@functools.cache
def ensured(peer: str) -> dict[str, object]:
    """The peer's install state, checked (and installed if needed) once per measurement."""
    return ensure(peer)


def plan(tools: list[str], inputs: list[str], reps: int) -> list[tuple[int, tuple[str, ...]]]:
    """(round, (input, tool, cache state)) in run order.

    Within a round cleanpipe's warm run comes after its cold run (whose cache it reuses) with
    a peer between them, so cleanpipe's two figures are not taken back to back.

    >>> for r, slot in plan(["cleanpipe", "datatrove"], ["shards"], 2):
    ...     print(r, *slot)
    0 shards cleanpipe cold
    0 shards datatrove cold
    0 shards cleanpipe warm
    1 shards cleanpipe cold
    1 shards datatrove cold
    1 shards cleanpipe warm
    """
    slots: list[tuple[str, str]] = []
    peers = [t for t in tools if t != "cleanpipe"]
    if "cleanpipe" in tools:
        slots.append(("cleanpipe", "cold"))
    if peers:
        slots.append((peers[0], "cold"))
    if "cleanpipe" in tools:
        slots.append(("cleanpipe", "warm"))
    slots += [(p, "cold") for p in peers[1:]]
    per_round = [(i, t, s) for i in inputs for t, s in slots]
    return interleaved(per_round, reps)


def seconds_until(hhmm: str, now: float) -> float:
    """Seconds from ``now`` (epoch) to the next ``HH:MM`` UTC.

    >>> seconds_until("20:25", 1796328000.0)  # 2026-12-03 20:00:00 UTC
    1500.0
    >>> seconds_until("00:10", 1796328000.0)  # past midnight: the next day
    15000.0
    """
    hh, mm = (int(x) for x in hhmm.split(":"))
    day = now - now % 86400
    target = day + hh * 3600 + mm * 60
    return target - now if target > now else target + 86400 - now


def run_one(tool: str, state: str, inp: dict[str, Any], data: Path, workers: int,
            pipe: Path | None) -> dict[str, Any]:
    """Run one (tool, cache state) on one input; the record that goes to runs.jsonl."""
    root = CACHES / tool
    cleared = empty_cache(root, within=WORK) if state == "cold" else None
    env = cache_env(root)
    if tool == "cleanpipe":
        if pipe is None:
            return {"error": "cleanpipe engine not landed"}
        res = run_cleanpipe(inp, pipe, workers, env)
    else:
        if tool != "naive":
            setup = ensured(tool)
            if not setup["ok"]:
                return {"error": f"could not be installed: {setup['error']}"}
        res = run_peer(tool, peer_command(tool, inp, data, workers), env)
    rec: dict[str, Any] = {"cache_files_before": cleared,
                           "jit_index_files_after": len(jit_index_files(root))}
    installers = installer_traces(root)
    if installers and state == "cold":
        # The figure would time a package install: keep it out of the medians, say why.
        rec["error"] = (f"{tool} installed packages during the timed run ({', '.join(installers)}"
                        f" cache written); run benchmarks/peers/setup_peers.py {tool} so the"
                        " install happens before timing")
    if "m" in res:
        m = res["m"]
        rec |= {"wall_s": m.wall_s, "peak_pss_mb": m.peak_rss_mb,
                "max_single_rss_mb": m.max_single_rss_mb, "rc": m.rc, "load": list(m.load),
                "runnable": m.runnable_mean}
    if "error" in res or "error" in rec:
        rec["error"] = rec.get("error") or res["error"]
        return rec
    removed = res["removed_ids"]
    if inp["origin"] is not None:  # one-file row ids -> the shard rows they came from
        origin = inp["origin"]
        removed = {origin[int(k.rpartition(":")[2]) - 1]: v for k, v in removed.items()}
    rec["removed"] = len(removed)
    rec["info"] = {k: v for k, v in res.get("info", {}).items() if k != "removed_ids_file"}
    return rec | {"_removed_ids": removed}


def save_run(rec: dict[str, Any]) -> None:
    """Append the run to runs.jsonl; its removed rows go to a file of their own."""
    removed = rec.pop("_removed_ids", None)
    if removed is not None:
        name = f"{rec['input']}-{rec['tool']}-{rec['state']}-{rec['rep']}.json"
        f = PEERS_WORK / "removed" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(removed))
        rec["removed_file"] = str(f)
    with RUNS.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")


def measure_all(args: argparse.Namespace) -> None:
    data = require_data()
    src = require_data(DATASET, "data_per_template")
    tools = [t for t in args.only.split(",") if t]
    inputs = [i for i in args.inputs.split(",") if i]
    for name, known in ((tools, TOOLS), (inputs, INPUTS)):
        bad = set(name) - set(known)
        if bad:
            sys.exit(f"unknown {sorted(bad)}; choose from {', '.join(known)}")
    print("== preparing inputs (untimed)", flush=True)
    built = build_inputs(src, args.rows, inputs)
    rep_offset: dict[str, int] = {}  # --append: rounds already measured, per input
    old_meta = None
    if args.append and META.exists() and RUNS.exists():
        old_meta, old_runs = load_runs()
        if old_meta["rows_arg"] != args.rows or old_meta["workers"] != args.workers:
            sys.exit("--append needs the same --rows and --workers as the runs it adds to")
        for r in old_runs:
            rep_offset[r["input"]] = max(rep_offset.get(r["input"], 0), r["rep"] + 1)
    else:
        shutil.rmtree(PEERS_WORK, ignore_errors=True)
        PEERS_WORK.mkdir(parents=True)
    pipe = notes = None
    missing: list[str] = []
    if "cleanpipe" in tools:
        pipe, missing, notes = cleanpipe_pipeline(data, PEERS_WORK / "pipeline.yaml")
    versions = {t: (ensured(t).get("version") if t in ("datatrove", "datajuicer") else None)
                for t in tools}
    meta = {
        "command": command_line(), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "reps": args.reps, "workers": args.workers, "rows_arg": args.rows, "tools": tools,
        "cores": os.cpu_count(), "versions": versions, "missing": missing, "notes": notes,
        "inputs": {k: {"rows": v["rows"], "bytes": v["bytes"], "label": v["label"]}
                   for k, v in built.items()},
    }
    if old_meta is not None:  # one measurement in two commands: both are named
        meta = old_meta | {"command": f"{old_meta['command']}` then `{meta['command']}",
                           "inputs": {**old_meta["inputs"], **meta["inputs"]},
                           "tools": sorted(set(old_meta["tools"]) | set(tools), key=TOOLS.index)}
    META.write_text(json.dumps(meta, indent=1))
    deadline = time.time() + seconds_until(args.deadline, time.time()) if args.deadline else None
    block_s: dict[str, float] = {}  # how long the last block of each input took
    blocks = itertools.groupby(plan(tools, inputs, args.reps), key=lambda x: (x[0], x[1][0]))
    for (rep, inp_name), slots in blocks:
        started = time.time()
        # A block is one input's runs in one round: the unit that is kept or skipped whole,
        # so a later, shorter block (the other input) may still fit before the deadline.
        # No block on this input yet: the longest block so far is the estimate.
        est = block_s.get(inp_name, max(block_s.values(), default=0.0))
        if deadline and started + est > deadline:
            print(f"== skipping round {rep + 1} on {inp_name}: estimated {est:.0f} s from the "
                  f"blocks so far, it would end after {args.deadline} UTC", flush=True)
            continue
        for _, (_, tool, state) in slots:
            print(f"== round {rep + 1}/{args.reps}: {tool} ({state}) on {inp_name}", flush=True)
            try:
                rec = run_one(tool, state, built[inp_name], data, args.workers, pipe)
            except Exception as err:  # one tool's failure must not lose the others' figures
                rec = {"error": f"{type(err).__name__}: {err}"}
            rec |= {"input": inp_name, "tool": tool, "state": state,
                    "rep": rep + rep_offset.get(inp_name, 0)}
            if "wall_s" in rec:
                print(f"   {rec['wall_s']:.1f} s, peak {rec['peak_pss_mb']:.0f} MB, "
                      f"rc {rec['rc']}, removed {rec.get('removed', '—')}, load "
                      f"{load_cell(rec)}, jit cache files after "
                      f"{rec['jit_index_files_after']}", flush=True)
            if "error" in rec:
                print(f"   error: {rec['error'][-800:]}", flush=True)
            save_run(rec)
        block_s[inp_name] = time.time() - started


# ---------------------------------------------------------------------------------------
# report

LABELS = {
    "cleanpipe": "cleanpipe (t0_default.yaml)",
    "datatrove": "datatrove (FTFYFormatter + 4-step MinHash + TokensCounter)",
    "datajuicer": "data-juicer (fix_unicode + document_minhash + token_num)",
    "naive": "hand-written (ftfy loop + datasketch loop + encode_batch)",
}


def load_runs() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if not META.exists() or not RUNS.exists():
        sys.exit(f"no measurement in {PEERS_WORK}: run without --report-only first")
    runs = [json.loads(ln) for ln in RUNS.read_text().splitlines() if ln.strip()]
    return json.loads(META.read_text()), runs


def group(runs: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Successful runs by (input, tool, state), in round order."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        if "wall_s" in r and "error" not in r:
            out.setdefault((r["input"], r["tool"], r["state"]), []).append(r)
    return out


def removed_set(run: dict[str, Any]) -> set[str]:
    return set(json.loads(Path(run["removed_file"]).read_text()))


def load_cell(run: dict[str, Any]) -> str:
    """``2.1→2.4 [3.0]``: 1-minute load average at start and end, mean runnable tasks.

    >>> load_cell({"load": [2.12, 2.4], "runnable": 3.04})
    '2.1→2.4 [3.0]'
    """
    return f"{run['load'][0]:.1f}→{run['load'][1]:.1f} [{run.get('runnable', 0.0):.1f}]"


def input_table(name: str, meta: dict[str, Any], g: dict[tuple[str, str, str], list]) -> str:
    inp = meta["inputs"][name]
    headers = ["tool", "cache", "runs", "wall s median (min–max)", "docs/s", "MB/s",
               "peak PSS MB median (min–max)", "rows removed", "cold/cold: × slower than "
               "cleanpipe cold (range)", "warm/warm: × slower than cleanpipe warm (range)",
               "load per run: 1-min avg start→end [mean runnable]"]
    cold = g.get((name, "cleanpipe", "cold"))
    warm = g.get((name, "cleanpipe", "warm"))
    cold_w = Spread.of(r["wall_s"] for r in cold) if cold else None
    warm_w = Spread.of(r["wall_s"] for r in warm) if warm else None
    rows = []
    for tool in TOOLS:
        for state in ("cold", "warm"):
            runs = g.get((name, tool, state))
            if not runs:
                continue
            wall = Spread.of(r["wall_s"] for r in runs)
            pss = Spread.of(r["peak_pss_mb"] for r in runs)
            removed = sorted({r["removed"] for r in runs})
            vs_cold = vs_warm = "—"
            if tool != "cleanpipe":
                if cold_w:
                    vs_cold = "{:.1f}× ({:.1f}–{:.1f})".format(*ratio_spread(wall, cold_w))
                if warm_w:
                    vs_warm = "{:.1f}× ({:.1f}–{:.1f})".format(*ratio_spread(wall, warm_w))
            shown_state = state if tool == "cleanpipe" else "cold = warm (nothing kept)"
            rows.append([LABELS[tool], shown_state, len(runs), wall.fmt(),
                         inp["rows"] / wall.median, inp["bytes"] / 1e6 / wall.median,
                         pss.fmt("{:.0f}"), " / ".join(f"{x:,}" for x in removed),
                         vs_cold, vs_warm,
                         ", ".join(load_cell(r) for r in runs)])
    return md_table(headers, rows)


def overlap_table(name: str, g: dict[tuple[str, str, str], list]) -> list[str]:
    cp = g.get((name, "cleanpipe", "cold")) or g.get((name, "cleanpipe", "warm"))
    if not cp:
        return []
    a = removed_set(cp[0])
    rows = []
    for tool in TOOLS[1:]:
        runs = g.get((name, tool, "cold"))
        if not runs:
            continue
        b = removed_set(runs[0])
        inter = len(a & b)
        rows.append([LABELS[tool], len(b), inter, len(a - b), len(b - a),
                     f"{inter / (len(a | b) or 1):.2f}"])
    if not rows:
        return []
    return ["", f"Rows removed on `{name}`, compared with cleanpipe's (first round; row = "
            "shard file:line):", "",
            md_table(["tool", "removed", "also removed by cleanpipe", "only cleanpipe",
                      "only this tool", "Jaccard"], rows)]


def determinism(g: dict[tuple[str, str, str], list]) -> list[str]:
    """Did every cleanpipe run (each round, cold or warm, shards or one file) remove the
    same rows?"""
    runs = [r for (_, tool, _), rs in g.items() if tool == "cleanpipe" for r in rs]
    if len(runs) < 2:
        return []
    first = removed_set(runs[0])
    same = all(removed_set(r) == first for r in runs[1:])
    return ["", f"cleanpipe removed the same rows (by shard file:line) in all {len(runs)} of its "
            f"runs, cold and warm, shards and one file: **{'yes' if same else 'NO'}**."]


def acceptance(meta: dict[str, Any], g: dict[tuple[str, str, str], list]) -> list[str]:
    """Issue 7 (≥ 5× on shards) and issue 18 (≥ 10× on one file, one file vs shards),
    cold against cold, medians; the warm figures beside them."""

    def spread(inp: str, tool: str, state: str, key: str) -> Spread | None:
        runs = g.get((inp, tool, state))
        return Spread.of(r[key] for r in runs) if runs else None

    lines = []
    if meta.get("missing"):
        lines.append(f"- **cleanpipe ran without {', '.join(meta['missing'])}** (not landed):"
                     " the ratios below are not acceptance figures.")
    for inp, bar, issue in (("shards", 5, "issue 7"), ("onefile", 10, "issue 18")):
        for tool in ("datatrove", "datajuicer"):
            peer_w, peer_m = spread(inp, tool, "cold", "wall_s"), spread(inp, tool, "cold",
                                                                        "peak_pss_mb")
            for state in ("cold", "warm"):
                cp_w = spread(inp, "cleanpipe", state, "wall_s")
                cp_m = spread(inp, "cleanpipe", state, "peak_pss_mb")
                if not (peer_w and cp_w and peer_m and cp_m):
                    continue
                med, lo, hi = ratio_spread(peer_w, cp_w)
                mem_ok = cp_m.median <= peer_m.median
                need_mem = tool == "datatrove" or issue == "issue 7"
                ok = med >= bar and (mem_ok or not need_mem)
                lines.append(
                    f"- {issue}, {inp}, cleanpipe {state} vs {tool}: {med:.1f}× faster "
                    f"(range {lo:.1f}–{hi:.1f}; needs ≥ {bar}×)"
                    + (f", peak PSS {cp_m.median:.0f} vs {peer_m.median:.0f} MB (needs ≤)"
                       if need_mem else "")
                    + f": **{'holds' if ok else 'does not hold'}**"
                    + (" (headline: cold for everyone)" if state == "cold" else
                       " (warm cleanpipe; the peers keep no cache, so theirs is the same run)")
                )
    for state in ("cold", "warm"):
        s_w, o_w = (spread(i, "cleanpipe", state, "wall_s") for i in INPUTS)
        s_m, o_m = (spread(i, "cleanpipe", state, "peak_pss_mb") for i in INPUTS)
        if s_w and o_w and s_m and o_m:
            wr, mr = o_w.median / s_w.median, o_m.median / s_m.median
            lines.append(f"- issue 18, cleanpipe {state}, one file / shards: wall {wr:.2f}×, "
                         f"peak PSS {mr:.2f}× (needs ≤ 1.15× each): "
                         f"**{'holds' if wr <= 1.15 and mr <= 1.15 else 'does not hold'}**")
    return lines or ["- not assessable: cleanpipe or the peers did not complete a run."]


def report(meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    g = group(runs)
    rounds = 1 + max((r["rep"] for r in runs), default=-1)
    out = [
        f"Dataset {DATASET}; {meta['workers']} workers for every tool that takes a worker "
        f"count; {meta['cores']} cores, shared with other work (see the load averages). "
        f"{rounds} interleaved round(s) of {meta['reps']} planned; each round runs, for each "
        "input in turn: cleanpipe cold, the first peer, cleanpipe warm, the other peers. "
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v) + ".",
        "",
        "Which figure is which:",
        "- **cold**: the tool's cache folders (numba's `NUMBA_CACHE_DIR`, `XDG_CACHE_HOME`,"
        " `HF_HOME`, all under `benchmarks/.work/caches/<tool>/`) were emptied just before the"
        " run, so cleanpipe compiled its numba kernels inside the timed run (the line"
        " `jit files` under each table counts the kernels each cold run wrote to its empty"
        " cache, which shows the run really started cold). A fresh CI runner is in this state.",
        "- **warm**: cleanpipe's cache as its cold run of the same round left it (a user's"
        " second run). datatrove and data-juicer keep nothing between runs (data-juicer's"
        " datasets cache is emptied every run by its script, as a warm one would replay the"
        " previous results), so their one figure serves as both.",
        "- Every cell is the **median (min–max) over the rounds**; ratios are peer median /"
        " cleanpipe median, with the range pairing the extreme runs. **The headline ratio is"
        " cold against cold.** Python's own bytecode caches and the OS page cache are warm for"
        " every tool alike (installed packages; inputs read by earlier runs).",
        "- Peak PSS: the whole process tree (workers included), sampled every 0.1 s.",
        "- Load per run: the 1-minute load average when the run started and ended, and in"
        " brackets the mean number of runnable tasks over the run (sampled every 0.1 s, the"
        " measured tool's own processes included). With 2 workers a tool alone shows about"
        f" 2; above the machine's {meta['cores']} cores, other work shared the CPU and the"
        " wall time is inflated by it.",
    ]
    for name in INPUTS:
        if name not in meta["inputs"]:
            continue
        inp = meta["inputs"][name]
        out += ["", f"### t0 as {inp['label']}", "",
                f"{inp['rows']:,} records, {inp['bytes'] / 1e6:.1f} MB of JSONL.", ""]
        if not any(k[0] == name for k in g):
            out += ["**Not measured**: no run on this input completed (its blocks were skipped"
                    " at the deadline, or failed: see below)."]
            continue
        out += [input_table(name, meta, g)]
        jit = [r["jit_index_files_after"] for r in runs
               if r.get("input") == name and r.get("tool") == "cleanpipe"
               and r.get("state") == "cold" and "wall_s" in r]
        if jit:
            out += ["", f"jit files (numba index files in cleanpipe's emptied cache after each "
                    f"cold run): {', '.join(map(str, jit))}."]
        out += overlap_table(name, g)
    out += determinism(g)
    cp = [r for r in runs if r.get("tool") == "cleanpipe" and r.get("removed_file")]
    if cp:
        by_stage: dict[str, int] = {}
        for s in json.loads(Path(cp[0]["removed_file"]).read_text()).values():
            by_stage[s] = by_stage.get(s, 0) + 1
        out += ["", "cleanpipe removals by stage (first run): "
                + ", ".join(f"{k} {v:,}" for k, v in sorted(by_stage.items()))]
    for n in meta.get("notes") or []:
        out += [f"- cleanpipe: {n}"]
    failed = [r for r in runs if "error" in r]
    out += ["", "### Acceptance (cold for everyone is the headline)", "", *acceptance(meta, g)]
    if failed:
        out += ["", "Runs that failed (not in the figures):"]
        out += [f"- round {r['rep'] + 1}, {r['tool']} {r['state']} on {r['input']}: "
                f"```{r['error'].strip()[-600:]}```" for r in failed]
    planned = len(plan(meta["tools"], list(meta["inputs"]), meta["reps"]))
    if len(runs) < planned:
        out += ["", f"**Only {len(runs)} of the {planned} planned runs were made** (blocks"
                " skipped at the deadline, or interrupted); the `runs` column says how many"
                " each figure rests on."]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--inputs", default=",".join(INPUTS))
    ap.add_argument("--only", default=",".join(DEFAULT_TOOLS))
    ap.add_argument("--rows", type=int, default=0, help="sample ~N rows (0 = whole corpus)")
    ap.add_argument("--deadline", help="HH:MM UTC: start no block of runs that would end after it")
    ap.add_argument("--append", action="store_true",
                    help="add rounds to the runs already in benchmarks/.work/peers (same rows)")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild peers.md from benchmarks/.work/peers/runs.jsonl")
    args = ap.parse_args()
    if not args.report_only:
        measure_all(args)
    meta, runs = load_runs()
    body = report(meta, runs)
    print(body)
    path = write_result("peers", "# Peers: cleanpipe vs datatrove and data-juicer\n\n" + body,
                        command=meta["command"], measured=meta["started"])
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
