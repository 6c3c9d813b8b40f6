"""cleanpipe's default SFT pipeline on 1x, 2x, 4x and 8x sft_self_instruct_t0_50k.

Copy 0 is the corpus itself; copy c >= 1 of every record has every 4th word (starting at word
c mod 4) marked with a copy-specific letter, so each 5-word shingle holds a changed word: a
copy is neither an exact nor a near duplicate of the original or of another copy, while the
corpus's own duplicates stay duplicates inside each copy. So the work (and what is removed)
grows with the input instead of collapsing into dedup. Generated once, untimed, under
``benchmarks/.work/scaling/``.

Usage::

    .venv/bin/python benchmarks/bench_scaling.py [--sizes 1,2,4,8] [--workers 2]

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--workers", type=int, default=2)
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
    for factor in [int(s) for s in args.sizes.split(",")]:
        corpus = build_corpus(src, factor)
        n_rows, n_bytes = corpus_size(corpus)
        out = work / f"out_x{factor}"
        m = measure([str(cli), "run", str(pipe), "--input", str(corpus), "--output", str(out),
                     "--overwrite", "--workers", str(args.workers), "--no-progress", "--quiet"],
                    cwd=REPO)
        if m.rc not in (0, 1):
            print(m.stderr[-2000:])
            rows_out.append([f"{factor}×", n_rows, n_bytes / 1e6, "failed", *[""] * 7])
            continue
        removed = len(cleanpipe_removed(out))
        step = rss_step = ""
        if prev is not None:
            k = factor / prev[0]
            # time ratio per doubling of input, normalised to doublings (k may be 2 or more)
            per_doubling = (m.wall_s / prev[1]) ** (1 / math.log2(k))
            step = f"{per_doubling:.2f}"
            rss_step = f"{m.peak_rss_mb / prev[2]:.2f}"
            verdicts.append(per_doubling <= 2 * 1.2)
        rows_out.append([f"{factor}×", n_rows, n_bytes / 1e6, m.wall_s, n_rows / m.wall_s,
                         m.peak_rss_mb, m.max_single_rss_mb, removed, step, rss_step,
                         f"{m.load[0]:.1f}→{m.load[1]:.1f}"])
        prev = (factor, m.wall_s, m.peak_rss_mb)
        print(rows_out[-1], flush=True)
    body = md_table(["size", "records", "MB", "wall s", "docs/s", "peak RSS MB (tree PSS)",
                     "max single RSS MB", "rows removed", "time × per doubling",
                     "RSS × per step", "load avg start→end"], rows_out)
    body += ("\n\nLinear scaling is 2.00 per doubling; the acceptance bound is 2.40 (1.2× linear)."
             f" Within bound at every step: **{all(verdicts) if verdicts else 'n/a'}**.")
    if missing:
        body += f"\n\n**Ran without these stages (not landed yet): {', '.join(missing)}**"
    for n in notes:
        body += f"\n- {n}"
    print(body)
    write_result("scaling", header + body)


if __name__ == "__main__":
    main()
