"""cleanpipe's default SFT pipeline on 1x, 2x, 4x and 8x sft_self_instruct_t0_50k.

Copy 0 is the corpus itself; copy c >= 1 of every record has every 4th word (starting at word
c mod 4) marked with a copy-specific letter, so each 5-word shingle holds a changed word: a
copy is neither an exact nor a near duplicate of the original or of another copy, while the
corpus's own duplicates stay duplicates inside each copy. So the work (and what is removed)
grows with the input instead of collapsing into dedup. Generated once, untimed, under
``benchmarks/.work/scaling/``.

Each size runs ``--repeat`` times (default 2) and the fastest run is reported: these machines
are noisy, and a single slow run makes one doubling look superlinear.

Memory: the dedup stages report their index in report.json, as bytes per row (band keys or
hashes, seq and length; with ``verify: exact`` the shingle sets; the per-row decisions kept
for the second pass) times their rows; "peak RSS − index" is what the acceptance wants flat.

Usage::

    .venv/bin/python benchmarks/bench_scaling.py [--sizes 1,2,4,8] [--workers 2] [--repeat 2]

    >>> perturb("a b c d e f g h", 1)
    'a bz c d e fz g h'
    >>> perturb("a b c d e f g h", 0)
    'a b c d e f g h'
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DATASET,
    REPO,
    WORK,
    md_table,
    measure,
    require_data,
    write_result,
)

MARKS = "qzjxkvwy"


def perturb(text: str, copy: int) -> str:
    """Copy ``copy`` of ``text``: every 4th word from ``copy % 4`` gets ``MARKS[copy]``."""
    if copy == 0 or not text:
        return text
    words = text.split(" ")
    mark = MARKS[copy % len(MARKS)]
    for i in range(copy % 4, len(words), 4):
        if words[i]:
            words[i] += mark
    return " ".join(words)


def build_corpus(src: Path, factor: int) -> Path:
    """``factor`` copies of ``src`` (copy 0 linked, the others perturbed), built once."""
    dst = WORK / "scaling" / f"x{factor}"
    stamp = dst / ".complete"
    if stamp.exists():
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for f in sorted(src.glob("*.jsonl")):
        (dst / f"c0_{f.name}").symlink_to(f)
        if factor == 1:
            continue
        lines = f.read_text(encoding="utf-8").splitlines()
        for c in range(1, factor):
            out = []
            for line in lines:
                if not line.strip():
                    out.append(line)
                    continue
                rec = json.loads(line)
                for k in ("prompt", "completion"):
                    if isinstance(rec.get(k), str):
                        rec[k] = perturb(rec[k], c)
                out.append(json.dumps(rec, ensure_ascii=False))
            (dst / f"c{c}_{f.name}").write_text(
                "\n".join(out) + ("\n" if out else ""), encoding="utf-8"
            )
    stamp.touch()
    return dst


def corpus_size(folder: Path) -> tuple[int, int]:
    rows = size = 0
    for f in folder.glob("*.jsonl"):
        data = f.read_bytes()
        size += len(data)
        rows += sum(1 for ln in data.split(b"\n") if ln.strip())
    return rows, size


def dedup_index_mb(out: Path) -> float:
    """MB of dedup index the run's report accounts for (in memory; row names are on disk).

        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "report.json").write_text(json.dumps({"stages": [
        ...     {"section": {"rows": 2**20, "memory": {"index_bytes_per_row": 3,
        ...                                            "decisions_bytes_per_row": 1}}},
        ...     {"section": {"rows": 5}}]}))
        >>> dedup_index_mb(d)
        4.0
    """
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    total = 0.0
    for stage in report.get("stages", []):
        section = stage.get("section") or {}
        mem = section.get("memory")
        if mem:
            per_row = sum(mem.get(k, 0) for k in ("index_bytes_per_row",
                                                  "verify_store_bytes_per_row",
                                                  "decisions_bytes_per_row"))
            total += per_row * section.get("rows", 0)
    return total / 2**20


#: "flat": the memory besides the dedup index at any size is within this factor of 1x's
FLAT = 1.15


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    data = require_data()
    src = require_data(DATASET, "data_per_template")

    from bench_peers import cleanpipe_pipeline, cleanpipe_removed

    work = WORK / "scaling"
    pipe, missing, notes = cleanpipe_pipeline(data, work / "pipeline.yaml")
    if missing:
        print(f"cleanpipe: stages not landed yet, left out: {', '.join(missing)}", flush=True)
    header = "# Scaling: cleanpipe's t0_default pipeline on 1x-8x the corpus\n\n"
    if pipe is None:
        body = "Not measured: " + "; ".join(notes)
        print(body)
        write_result("scaling", header + body)
        return
    rows_out = []
    prev = None
    cli = REPO / ".venv" / "bin" / "cleanpipe"
    verdicts = []
    others: list[float] = []
    for factor in [int(s) for s in args.sizes.split(",")]:
        corpus = build_corpus(src, factor)
        n_rows, n_bytes = corpus_size(corpus)
        out = work / f"out_x{factor}"
        runs = []
        for _ in range(max(1, args.repeat)):
            runs.append(measure([str(cli), "run", str(pipe), "--input", str(corpus), "--output",
                                 str(out), "--overwrite", "--workers", str(args.workers),
                                 "--no-progress", "--quiet"], cwd=REPO))
            if runs[-1].rc not in (0, 1):
                break
        m = min(runs, key=lambda r: r.wall_s)
        if m.rc not in (0, 1) or any(r.rc not in (0, 1) for r in runs):
            print(runs[-1].stderr[-2000:])
            rows_out.append([f"{factor}×", n_rows, n_bytes / 1e6, "failed", *[""] * 10])
            continue
        removed = len(cleanpipe_removed(out))
        index = dedup_index_mb(out)
        peak = max(r.peak_rss_mb for r in runs)
        other = peak - index
        others.append(other)
        step = rss_step = ""
        if prev is not None:
            k = factor / prev[0]
            # time ratio per doubling of input, normalised to doublings (k may be 2 or more)
            per_doubling = (m.wall_s / prev[1]) ** (1 / math.log2(k))
            step = f"{per_doubling:.2f}"
            rss_step = f"{peak / prev[2]:.2f}"
            verdicts.append(per_doubling <= 2 * 1.2)
        walls = " / ".join(f"{r.wall_s:.1f}" for r in runs)
        rows_out.append([f"{factor}×", n_rows, n_bytes / 1e6, m.wall_s, walls, n_rows / m.wall_s,
                         peak, m.max_single_rss_mb, index, other, removed, step, rss_step,
                         f"{m.load[0]:.1f}→{m.load[1]:.1f}"])
        prev = (factor, m.wall_s, peak)
        print(rows_out[-1], flush=True)
    flat = bool(others) and max(others) <= FLAT * others[0]
    body = md_table(["size", "records", "MB", "wall s (fastest)", "every run s", "docs/s",
                     "peak RSS MB (tree PSS, max of runs)", "max single RSS MB",
                     "dedup index MB", "peak RSS − index MB", "rows removed",
                     "time × per doubling", "RSS × per step", "load avg start→end"], rows_out)
    body += ("\n\nLinear scaling is 2.00 per doubling; the acceptance bound is 2.40 (1.2× linear)."
             f" Within bound at every step: **{all(verdicts) if verdicts else 'n/a'}**.")
    body += ("\n\nMemory besides the dedup index (peak RSS − index, the index as the dedup"
             " stages report it in report.json) stays within"
             f" {FLAT:.2f}× of the 1× run's at every size: **{flat}**"
             + (f" ({', '.join(f'{o:.0f}' for o in others)} MB)." if others else "."))
    if missing:
        body += f"\n\n**Ran without these stages (not landed yet): {', '.join(missing)}**"
    for n in notes:
        body += f"\n- {n}"
    print(body)
    write_result("scaling", header + body)


if __name__ == "__main__":
    main()
