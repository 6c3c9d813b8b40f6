"""Text repair benchmark (issue 3): unicode_fix vs per-record ftfy, and the character stages.

One process, one core, same run. Corpus: every prompt and completion of
sft_self_instruct_t0_50k (110,370 strings). Reference: ``ftfy.fix_text(text, config)`` called
per record with the stage's own config. Targets: ``unicode_fix`` >= 10x that throughput;
``invisible_chars`` + ``control_chars`` + ``whitespace`` together >= 100 MB/s.

    .venv/bin/python benchmarks/bench_text.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("CLEANPIPE_REALDATA", REPO.parent / "shared" / "data"))
T0 = DATA / "sft_self_instruct_t0_50k" / "data_per_template"
QWEN = DATA / "tokenizers" / "qwen3"
RESULTS = REPO / "benchmarks" / "results" / "text.md"
_ENV = os.environ.get("CLEANPIPE_REALDATA")
COMMAND = (f"CLEANPIPE_REALDATA={_ENV} " if _ENV else "") + (
    ".venv/bin/python benchmarks/bench_text.py")


def best_of(fn, n=3):
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    import ftfy
    import pyarrow as pa

    from cleanpipe.stages.control_chars import ControlChars
    from cleanpipe.stages.invisible_chars import InvisibleChars
    from cleanpipe.stages.special_tokens import SpecialTokens
    from cleanpipe.stages.unicode_fix import UnicodeFix
    from cleanpipe.stages.whitespace import Whitespace

    strings: list[str] = []
    for f in sorted(T0.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                r = json.loads(line)
                strings += [r["prompt"], r["completion"]]
    arr = pa.array(strings, pa.large_string())
    mb = sum(len(s.encode("utf-8")) for s in strings) / 1e6
    lines = ["# Text repair stages: throughput on the t0 corpus\n",
             f"Command: `{COMMAND}`\n",
             f"Corpus: {len(strings):,} strings (every t0 prompt and completion), {mb:.1f} MB "
             "UTF-8. One process, one core; best of 3 for unicode_fix, 5 for the character "
             "stages, one pass for the "
             "per-record ftfy reference.\n",
             "## unicode_fix vs per-record `ftfy.fix_text` (same config)\n",
             "| config | ftfy per record | unicode_fix | ratio | strings sent to ftfy | "
             "setup (once per process) | exact |",
             "|---|---|---|---|---|---|---|"]
    ratios = {}
    for label, params in (("cleanpipe default", {}),
                          ("ftfy default (width+quotes on)",
                           {"fix_character_width": True, "uncurl_quotes": True})):
        stage = UnicodeFix(**params)
        t = time.perf_counter()
        stage.setup()
        setup = time.perf_counter() - t
        cfg = stage.ftfy_config()
        t = time.perf_counter()
        ref = [ftfy.fix_text(s, cfg) for s in strings]
        t_ref = time.perf_counter() - t
        t_stage, res = best_of(lambda stage=stage: stage.transform(arr))
        exact = res.texts.to_pylist() == ref
        ratio = t_ref / t_stage
        ratios[label] = ratio
        sent = res.metrics["ftfy_strings"]
        lines.append(f"| {label} | {t_ref:.2f} s ({mb / t_ref:.1f} MB/s) | {t_stage:.2f} s "
                     f"({mb / t_stage:.1f} MB/s) | **{ratio:.1f}x** | {sent:,} "
                     f"({100 * sent / len(strings):.1f}%) | {setup:.2f} s | {exact} |")
        print(lines[-1], flush=True)
    lines += ["", "Target: ratio >= 10x: " + ", ".join(
        f"{k}: {'holds' if v >= 10 else 'MISSED'}" for k, v in ratios.items()), ""]

    chain = [InvisibleChars(), ControlChars(), Whitespace()]

    def run_chain():
        a = arr
        for st in chain:
            a = st.transform(a).texts
        return a

    lines += ["## Character stages\n",
              "Best of 5 (the machine is shared; load average at the start: "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores).\n",
              "| stages | time | throughput |", "|---|---|---|"]
    for st in chain:
        st.transform(arr[:10])  # compile (or load from cache) the byte-scan kernel first
    for st in chain:
        t, _ = best_of(lambda st=st: st.transform(arr), n=5)
        lines.append(f"| {st.name} | {t:.3f} s | {mb / t:.0f} MB/s |")
        print(lines[-1], flush=True)
    t_chain, _ = best_of(run_chain, n=5)
    lines.append(f"| invisible_chars + control_chars + whitespace | {t_chain:.3f} s | "
                 f"**{mb / t_chain:.0f} MB/s** |")
    print(lines[-1], flush=True)
    if QWEN.exists():
        sp = SpecialTokens(tokenizer=str(QWEN))
        sp.setup()
        t, res = best_of(lambda: sp.transform(arr))
        lines.append(f"| special_tokens (qwen3, strip; {res.findings.count():,} strings hit) "
                     f"| {t:.3f} s | {mb / t:.0f} MB/s |")
        print(lines[-1], flush=True)
    lines += ["", f"Target: chain >= 100 MB/s: {'holds' if mb / t_chain >= 100 else 'MISSED'}"
              f" ({mb / t_chain:.0f} MB/s)", ""]
    RESULTS.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
