"""Quality of minhash_dedup at threshold 0.8 on controlled edits of real records.

English: t0 corpus documents (prompt + completion); Chinese: sft_medicalgpt_zh records.
Each original gets one copy with a random share of its words (English) or characters
(Chinese) substituted, deleted or inserted; the true Jaccard of the two shingle sets (the
stage's own shingling, computed in plain Python) is recorded. Originals are first made
mutually distinct (no pair ≥ 0.5) so a merge can only come from the pair itself.

    .venv/bin/python benchmarks/bench_dedup_quality.py

Writes benchmarks/results/dedup_quality.md.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dedup import REPO, data_root, load_t0, run_stage

from cleanpipe.dedup.text import normalize, python_shingles, shingle_modes
from cleanpipe.stages.minhash_dedup import MinHashDedup

N_DOCS = 600


def distinct(texts: list[str]) -> list[str]:
    """Texts with no near-duplicate (verified Jaccard ≥ 0.5) among them."""
    stage = MinHashDedup(threshold=0.5)
    run_stage(stage, pa.table({"text": texts}))
    rep = stage._rep
    sizes = np.bincount(rep, minlength=len(texts))
    return [t for i, t in enumerate(texts) if rep[i] == i and sizes[i] == 1]


def edit(units: list[str], rate: float, rng: random.Random, pool: list[str]) -> list[str]:
    out = []
    for u in units:
        x = rng.random()
        if x < rate / 3:
            continue  # deletion
        if x < 2 * rate / 3:
            out.append(rng.choice(pool))  # substitution
            continue
        out.append(u)
        if x < rate:
            out.append(rng.choice(pool))  # insertion
    return out


def true_jaccard(a: str, b: str) -> float:
    na, nb = normalize(pa.array([a, b])).to_pylist()
    modes = shingle_modes(normalize(pa.array([a, b])), "auto", 0.3)
    sa = set(python_shingles(na, int(modes[0]), 5, 2))
    sb = set(python_shingles(nb, int(modes[1]), 5, 2))
    return len(sa & sb) / max(len(sa | sb), 1)


def evaluate(originals: list[str], copies: list[str]) -> dict:
    n = len(originals)
    stage = MinHashDedup()
    run_stage(stage, pa.table({"text": originals + copies}))
    rep = stage._rep
    found = np.array([rep[n + k] == rep[k] for k in range(n)])
    jac = np.array([true_jaccard(o, c) for o, c in zip(originals, copies, strict=True)])
    hi, lo = jac >= 0.85, jac <= 0.7
    bins = [(0.0, 0.5), (0.5, 0.7), (0.7, 0.75), (0.75, 0.8), (0.8, 0.85), (0.85, 0.9),
            (0.9, 1.01)]
    per_bin = []
    for a, b in bins:
        m = (jac >= a) & (jac < b)
        per_bin.append((a, min(b, 1.0), int(m.sum()), float(found[m].mean()) if m.any() else 0))
    others = int((rep[:n] != np.arange(n)).sum())
    return {"pairs": n, "recall": float(found[hi].mean()), "n_hi": int(hi.sum()),
            "false_merge": float(found[lo].mean()), "n_lo": int(lo.sum()), "bins": per_bin,
            "originals_merged": others}


def main() -> None:
    rng = random.Random(2026)
    t0 = [t for t in load_t0()["text"].to_pylist() if len(t.split()) >= 40]
    en = distinct(rng.sample(t0, N_DOCS * 2))[:N_DOCS]
    vocab = [w for t in rng.sample(t0, 200) for w in t.split()]
    en_copies = [" ".join(edit(t.split(), rng.uniform(0, 0.12), rng, vocab)) for t in en]

    path = data_root() / "sft_medicalgpt_zh" / "medical_sft_1K_format.jsonl"
    med = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        text = "".join(turn["value"] for turn in rec["conversations"])
        if len(text) >= 100:
            med.append(text)
    zh = distinct(med)[:N_DOCS]
    han = [chr(c) for c in range(0x4E00, 0x9FA6)]
    zh_copies = ["".join(edit(list(t), rng.uniform(0, 0.12), rng, han)) for t in zh]

    results = {"English (t0, word 5-grams)": evaluate(en, en_copies),
               "Chinese (sft_medicalgpt_zh, character bigrams)": evaluate(zh, zh_copies)}
    stage = MinHashDedup()
    b, r = stage.band_rows()
    lines = ["`.venv/bin/python benchmarks/bench_dedup_quality.py`", "",
             f"minhash_dedup defaults: threshold 0.8, num_perm 128, {b} bands x {r} rows "
             "(datasketch's choice for weights (0.05, 0.95)), verify: exact. One edited copy "
             "per original; edit rate uniform in 0-12% of words / characters (substitution, "
             "deletion, insertion); true Jaccard on the stage's shingle sets.", "",
             "| set | pairs | pairs J≥0.85 | recall (J≥0.85) | target | pairs J≤0.7 | "
             "merged (J≤0.7) | target | originals merged with each other |",
             "|---|---:|---:|---:|---|---:|---:|---|---:|"]
    ok = True
    for name, res in results.items():
        ok &= res["recall"] >= 0.95 and res["false_merge"] <= 0.03
        lines.append(f"| {name} | {res['pairs']} | {res['n_hi']} | {res['recall']:.3f} | ≥0.95 "
                     f"| {res['n_lo']} | {res['false_merge']:.3f} | ≤0.03 | "
                     f"{res['originals_merged']} |")
    lines += ["", "Share of pairs merged by true-Jaccard bin:", "",
              "| set | " + " | ".join(f"[{a:.2f},{b:.2f})" for a, b, _, _ in
                                    next(iter(results.values()))["bins"]) + " |",
              "|---|" + "---:|" * len(next(iter(results.values()))["bins"])]
    for name, res in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{f:.2f} (n={c})" for _, _, c, f in
                                                  res["bins"]) + " |")
    lines += ["", f"Acceptance (both sets): {'PASS' if ok else 'FAIL'}", ""]
    text = "\n".join(lines)
    print(text)
    (REPO / "benchmarks" / "results" / "dedup_quality.md").write_text(text + "\n",
                                                                      encoding="utf-8")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
