"""Do the shipped pipelines do good and no harm, judged by what the trainer sees?

For every pipeline in ``cleanpipe/pipelines/*.yaml``, a corpus of real records of its kind
(``benchmarks/quality_corpus.py``) gets planted defects, each row with its expected outcome
(repaired to the original text, dropped, flagged, or kept unchanged). The pipeline runs
through ``Pipeline`` as shipped, except that its token stages use the real Qwen3 tokenizer
with a 4,096-token window, and reads ``input.id_field`` so rows can be matched. Then, from
the cleaned data, the quarantine and the events:

* **recall per planted class**: the share of planted rows that came out as expected;
* **clean rows changed**: clean rows dropped or with any text changed;
* **clean rows whose trained sequence changed**: each clean row rendered the way the
  trainer renders it (Qwen3's chat template for alpaca and chat,
  TRL's prompt + completion concatenation for prompt/completion) and tokenized before and
  after: token ids and loss mask compared.

Bounds: recall >= 0.97 in every class, <= 0.5% of clean rows changed, no clean row's trained
sequence changed. A class the pipeline has no stage for (e.g. special tokens without a
``special_tokens`` stage) is listed as not covered and not counted against the bounds.

    .venv/bin/python benchmarks/bench_quality.py [--rows 800] [--only sft_alpaca,...]

Writes benchmarks/results/quality.md; exits 1 when a bound fails.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality_corpus as qc

REPO = Path(__file__).resolve().parent.parent
PIPELINES = REPO / "cleanpipe" / "pipelines"
MAX_LENGTH = 4096
MIN_RECALL = 0.97
MAX_CLEAN_CHANGED = 0.005
SEED = 2026

#: stages that can act on a class; a pipeline with none of them does not cover it
REQUIRES = {
    "special_token": {"special_tokens"},
    "overlong": {"context_length", "trainable_tokens"},
    "window_prompt": {"context_length", "trainable_tokens"},
    "near_duplicate": {"minhash_dedup"},
    "unknown_label": {"labels"},
    "null_label": {"labels"},
}


def data_root() -> Path | None:
    env = os.environ.get("CLEANPIPE_REALDATA")
    for c in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data",
                                              REPO.parent.parent / "shared" / "data"]:
        if c.is_dir():
            return c.resolve()
    return None


# --------------------------------------------------------------------------- corpora


@dataclass
class Corpus:
    name: str
    shape: qc.Shape
    rows: list[qc.Row]
    labels_file: Path | None = None


def _alpaca(root: Path, lang: str) -> list[dict[str, Any]]:
    path = root / "sft_llamafactory_demos" / f"alpaca_{lang}_demo.json"
    return [{k: r[k] for k in ("instruction", "input", "output")} for r in qc.read_records(path)]


def _chats(root: Path, name: str, shape: qc.Shape) -> list[dict[str, Any]]:
    """MedicalGPT's ShareGPT conversations that alternate human/gpt and end with an answer
    (the others are malformed for SFT, and the schema stage rightly drops them), in the
    form of ``shape`` (ShareGPT, or OpenAI messages)."""
    out = []
    for r in qc.read_records(root / "sft_medicalgpt_zh" / name):
        roles = [t["from"] for t in r["conversations"]]
        if len(roles) >= 2 and roles == ["human", "gpt"] * (len(roles) // 2):
            role, text = shape.turn
            out.append({shape.chat: [
                {role: shape.roles[t["from"] == "gpt"], text: t["value"]}
                for t in r["conversations"]]})
    return out


def _c4(root: Path) -> list[dict[str, Any]]:
    """c4 web text, one paragraph (200 characters or more) a document: the set holds only
    300 documents, too few for every class at --rows 800."""
    path = root / "sft_llamafactory_demos" / "c4_demo.jsonl"
    return [{"text": p} for r in qc.read_records(path) for p in r["text"].split("\n")
            if len(p) >= 200]


def _banking(root: Path) -> list[dict[str, Any]]:
    with (root / "cls_banking77" / "train.csv").open(encoding="utf-8", newline="") as fh:
        return [{"text": r["text"], "label": r["category"]} for r in csv.DictReader(fh)]


#: records given as they are, which must come out unchanged
LEGIT = {"t0": [{"prompt": "The sky is", "completion": " blue."}]}  # TRL's own example

CORPORA: dict[str, tuple[qc.Shape, Callable[[Path, int], list[dict[str, Any]]]]] = {
    "alpaca_en": (qc.ALPACA, lambda root, n: _alpaca(root, "en")),
    "alpaca_zh": (qc.ALPACA, lambda root, n: _alpaca(root, "zh")),
    "t0": (qc.PROMPT_COMPLETION, lambda root, n: qc.t0_records(root, max(10, n // 40))[0]),
    "sharegpt_zh": (qc.SHAREGPT,
                    lambda root, n: _chats(root, "sharegpt_zh_1K_format.jsonl", qc.SHAREGPT)),
    "medical_openai_zh": (qc.OPENAI, lambda root, n: _chats(
        root, "medical_sft_1K_format.jsonl", qc.OPENAI)),
    "c4": (qc.TEXT, lambda root, n: _c4(root)),
    "banking77": (qc.CLASSIFICATION, lambda root, n: _banking(root)),
}


def build_corpus(name: str, root: Path, rows: int, token_len: Callable[[str], int]) -> Corpus:
    """One planted corpus (see :data:`CORPORA`); t0 also gets its shared-passage pairs."""
    shape, load = CORPORA[name]
    pairs = qc.t0_records(root, 0)[1] if name == "t0" else None
    corpus = Corpus(name, shape, qc.build(shape, load(root, rows), rows, seed=SEED,
                                          token_len=token_len, max_length=MAX_LENGTH,
                                          same_passage=pairs, legit=LEGIT.get(name, [])))
    if name == "banking77":
        corpus.labels_file = root / "cls_banking77" / "categories.json"
    return corpus


#: which corpora a shipped pipeline is meant for, by its text fields
def corpora_for(spec: dict[str, Any]) -> list[str]:
    fields = spec.get("fields")
    names = {s.get("stage") for s in spec.get("stages", [])}
    if fields == ["instruction", "input", "output"]:
        return ["alpaca_en", "alpaca_zh"]
    if fields == ["prompt", "completion"]:
        return ["t0"]
    if "labels" in names:
        return ["banking77"]
    if fields == ["text"]:
        return ["c4"]
    if fields is None and "schema" in names:
        return ["sharegpt_zh", "medical_openai_zh"]
    return []


# --------------------------------------------------------------------------- trainer view


class Trainer:
    """Renders a record the way a trainer does and returns (token ids, loss mask, label).

    The chat template is the tokenizer's own, rendered by jinja2 with the settings
    ``transformers`` uses (trim_blocks, lstrip_blocks, loopcontrols); tokens come from the
    ``tokenizers`` library. Nothing here is cleanpipe's.
    """

    def __init__(self, tokenizer_dir: Path) -> None:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        self.directory = tokenizer_dir
        self.tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text("utf-8"))
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[loopcontrols])
        self.template = env.from_string(config["chat_template"])
        self.eos_id = self.tok.token_to_id(config["eos_token"])

    def _ids(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def token_len(self, text: str | None) -> int:
        return len(self._ids(text or ""))

    def _chat(self, msgs: list[dict[str, str]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        # Loss on the assistant turns' tokens, located by character offsets in the render.
        text = self.template.render(messages=msgs, add_generation_prompt=False)
        spans, cursor = [], 0
        for m in msgs:
            content = m["content"]
            at = text.find(content, cursor)
            if at < 0:  # Qwen3's template strips an answer's leading newlines
                content = content.lstrip("\n")
                at = text.find(content, cursor)
            if at < 0:
                continue
            if m["role"] == "assistant":
                spans.append((at, at + len(content)))
            cursor = at + len(content)
        enc = self.tok.encode(text, add_special_tokens=False)
        mask = tuple(int(any(a < e and b > s for s, e in spans)) for a, b in enc.offsets)
        return tuple(enc.ids), mask

    def sequence(self, shape: qc.Shape, rec: dict[str, Any]) -> tuple[Any, ...]:
        if shape is qc.ALPACA:  # LLaMA-Factory: instruction + "\n" + input, one user turn
            user = (rec["instruction"] or "") + ("\n" + rec["input"] if rec["input"] else "")
            return self._chat([{"role": "user", "content": user},
                               {"role": "assistant", "content": rec["output"] or ""}])
        if shape.chat:
            role = {shape.roles[0]: "user", shape.roles[1]: "assistant", "system": "system"}
            key, text = shape.turn
            return self._chat([{"role": role[t[key]], "content": t[text] or ""}
                               for t in rec[shape.chat]])
        if shape is qc.PROMPT_COMPLETION:  # TRL: ids(prompt), ids(prompt + completion) + EOS
            prompt = self._ids(rec["prompt"] or "")
            full = self._ids((rec["prompt"] or "") + (rec["completion"] or ""))
            full.append(self.eos_id)
            return tuple(full), (0,) * len(prompt) + (1,) * (len(full) - len(prompt))
        ids = tuple(self._ids(rec["text"] or ""))
        return ids, (1,) * len(ids), rec.get("label")


# --------------------------------------------------------------------------- running


def prepared_pipeline(src: Path, tokenizer: Path, labels_file: Path | None, work: Path) -> Path:
    """A copy of a shipped pipeline with the real tokenizer, the benchmark's window, the
    row id column and parquet output; every cleaning setting as shipped."""
    spec = yaml.safe_load(src.read_text(encoding="utf-8"))
    spec["input"] = {**{k: v for k, v in (spec.get("input") or {}).items() if k != "path"},
                     "id_field": "qid"}
    spec["output"] = {**{k: v for k, v in (spec.get("output") or {}).items() if k != "path"},
                      "format": "parquet"}
    for st in spec.get("stages", []):
        if "tokenizer" in st:
            st["tokenizer"] = str(tokenizer)
        if "max_length" in st:
            st["max_length"] = MAX_LENGTH
        if "labels_file" in st:
            st["labels_file"] = str(labels_file or (src.parent / st["labels_file"]).resolve())
    out = work / src.name
    out.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return out


def extra_columns(spec: dict[str, Any]) -> dict[str, Any]:
    """Columns the pipeline checks beyond the text, with a valid value: the demo pipeline
    checks a ``score`` in [0, 1], as its sample data has."""
    out: dict[str, Any] = {}
    for st in spec.get("stages", []):
        if st.get("stage") == "numeric":
            for col, (lo, hi) in (st.get("ranges") or {}).items():
                out[col] = (lo + hi) / 2
    return out


def write_corpus(corpus: Corpus, path: Path, extra: dict[str, Any]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in corpus.rows:
            fh.write(json.dumps({"qid": r.qid, **r.rec, **extra}, ensure_ascii=False) + "\n")


@dataclass
class Outcome:
    kept: dict[int, dict[str, Any]]
    dropped: dict[int, str]  # qid -> "stage:code"
    codes: dict[int, set[str]] = field(default_factory=dict)  # qid -> event codes


def run_pipeline(yaml_path: Path, corpus_path: Path, out: Path, workers: int | None
                 ) -> Outcome:
    from cleanpipe import Pipeline

    Pipeline.from_yaml(yaml_path).run(corpus_path, out, overwrite=True, workers=workers)
    kept: dict[int, dict[str, Any]] = {}
    for part in sorted((out / "data").glob("*.parquet")):
        for rec in pq.read_table(part).to_pylist():
            kept[int(rec.pop("qid"))] = rec
    dropped: dict[int, str] = {}
    for part in sorted((out / "quarantine").glob("*.parquet")):
        t = pq.read_table(part, columns=["_cleanpipe_row_id", "_cleanpipe_stage",
                                         "_cleanpipe_reasons"])
        for rid, stage, reasons in zip(*(c.to_pylist() for c in t.columns), strict=True):
            dropped[int(rid)] = f"{stage}:{','.join(reasons or [])}"
    codes: dict[int, set[str]] = defaultdict(set)
    ev = out / "events.parquet"
    if ev.exists():
        t = pq.read_table(ev, columns=["row_id", "stage", "code", "action"])
        for rid, stage, code, action in zip(*(c.to_pylist() for c in t.columns), strict=True):
            codes[int(rid)].add(f"{stage}:{code}:{action}")
    return Outcome(kept, dropped, dict(codes))


def same_record(shape: qc.Shape, a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _project(shape, a) == _project(shape, b)


def _project(shape: qc.Shape, rec: dict[str, Any]) -> Any:
    if shape.chat:
        return [tuple(t.get(k) for k in shape.turn) for t in rec.get(shape.chat) or []]
    cols = [*shape.prompt, *([shape.answer] if shape.answer else []), *shape.text,
            *([shape.label] if shape.label else [])]
    return [rec.get(c) for c in cols]


@dataclass
class Result:
    pipeline: str
    corpus: str
    recall: dict[str, tuple[int, int]]  # class -> (hits, planted)
    not_covered: dict[str, str]
    clean: int
    clean_changed: int
    token_changed: int
    misses: dict[str, list[str]]
    seconds: float
    unplanted: list[str] = field(default_factory=list)  # classes the corpus had no room for

    def failures(self) -> list[str]:
        out = [f"{c}: recall {h}/{n}" for c, (h, n) in self.recall.items()
               if n and h / n < MIN_RECALL]
        out += [f"{c}: not planted (the real set has too few usable records)"
                for c in self.unplanted]
        if self.clean and self.clean_changed / self.clean > MAX_CLEAN_CHANGED:
            out.append(f"clean rows changed {self.clean_changed}/{self.clean}")
        if self.token_changed:
            out.append(f"trained sequence changed in {self.token_changed} clean rows")
        return out


def _show(rec: Any, width: int = 90) -> str:
    text = json.dumps(rec, ensure_ascii=True)
    return text if len(text) <= width else text[:width] + "..."


def judge(pipeline: str, stages: set[str], corpus: Corpus, outcome: Outcome,
          trainer: Trainer, seconds: float) -> Result:
    shape = corpus.shape
    hits: Counter[str] = Counter()
    planted: Counter[str] = Counter()
    misses: dict[str, list[str]] = defaultdict(list)
    not_covered = {c: f"no {' or '.join(sorted(req))} stage" for c, req in REQUIRES.items()
                   if not req & stages}
    clean = clean_changed = token_changed = 0
    for row in corpus.rows:
        out = outcome.kept.get(row.qid)
        fate = ("kept" if out is not None else
                f"dropped by {outcome.dropped[row.qid]}" if row.qid in outcome.dropped
                else "lost (neither kept nor quarantined)")
        if row.expect == "unchanged":
            clean += 1
            unchanged = out is not None and same_record(shape, out, row.rec)
            if not unchanged:
                clean_changed += 1
                before = trainer.sequence(shape, row.rec)
                if out is None or trainer.sequence(shape, out) != before:
                    token_changed += 1
        if row.cls == "clean" or row.cls in not_covered:
            continue
        planted[row.cls] += 1
        if row.expect == "unchanged":
            ok = unchanged
        elif row.expect == "repaired":
            ok = out is not None and same_record(shape, out, row.target)
        elif row.expect == "dropped":
            ok = out is None and row.qid in outcome.dropped
        else:  # flagged: an event names the class, or the row was dropped for it
            ok = (row.qid in outcome.dropped or
                  any(":replacement_char:" in c for c in outcome.codes.get(row.qid, ())))
        if ok:
            hits[row.cls] += 1
        elif len(misses[row.cls]) < 3:
            want = row.target if row.expect == "repaired" else row.rec
            got = "" if out is None else (_diff(_project(shape, want), _project(shape, out))
                                          if row.expect in ("repaired", "unchanged")
                                          else _show(_project(shape, out)))
            events = ",".join(sorted(outcome.codes.get(row.qid, ()))) or "no events"
            misses[row.cls].append(f"qid {row.qid} ({row.note or row.expect}): {fate} "
                                   f"[{events}] {got}")
    for row in corpus.rows:  # rows that had to stay as they were and did not, for the record
        if row.expect == "unchanged" and len(misses["clean"]) < 3:
            out = outcome.kept.get(row.qid)
            if out is None or not same_record(shape, out, row.rec):
                misses["clean"].append(
                    f"qid {row.qid} ({row.cls}): " + (f"dropped by {outcome.dropped.get(row.qid)}"
                                          if out is None else "changed: " +
                                          _diff(_project(shape, row.rec), _project(shape, out))))
    recall = {c: (hits[c], planted[c]) for c in planted}
    unplanted = [c for c in qc.classes_for(shape) if c not in planted and c not in not_covered]
    return Result(pipeline, corpus.name, recall, {c: why for c, why in not_covered.items()
                                                   if c in qc.classes_for(shape)},
                  clean, clean_changed, token_changed, dict(misses), seconds, unplanted)


def _diff(a: Any, b: Any) -> str:
    a, b = json.dumps(a, ensure_ascii=True), json.dumps(b, ensure_ascii=True)
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at {i}: {a[max(0, i - 30):i + 30]!r} -> {b[max(0, i - 30):i + 30]!r}"


def run_one(src: Path, corpus: Corpus, trainer: Trainer, work: Path,
            workers: int | None = None) -> Result:
    """One pipeline file on one corpus, judged."""
    spec = yaml.safe_load(src.read_text(encoding="utf-8"))
    extra = extra_columns(spec)
    path = work / f"{corpus.name}-{'-'.join(sorted(extra))}.jsonl"
    if not path.exists():
        write_corpus(corpus, path, extra)
    y = prepared_pipeline(src, trainer.directory, corpus.labels_file, work)
    t0 = time.perf_counter()
    outcome = run_pipeline(y, path, work / f"out-{src.stem}-{corpus.name}", workers)
    stages = {s.get("stage") for s in spec.get("stages", [])}
    return judge(src.stem, stages, corpus, outcome, trainer, time.perf_counter() - t0)


def evaluate(rows: int, only: set[str] | None = None, workers: int | None = None,
             root: Path | None = None) -> tuple[list[Result], list[str]]:
    """Every shipped pipeline on its corpora; the results and the pipelines with no corpus."""
    root = root or data_root()
    if root is None:
        raise SystemExit("real data not found: set CLEANPIPE_REALDATA or provide ../shared/data")
    trainer = Trainer(root / "tokenizers" / "qwen3")
    corpora: dict[str, Corpus] = {}
    results, unmatched = [], []
    with tempfile.TemporaryDirectory(prefix="cleanpipe-quality-") as tmp:
        for src in sorted(PIPELINES.glob("*.yaml")):
            if only and src.stem not in only:
                continue
            names = corpora_for(yaml.safe_load(src.read_text(encoding="utf-8")))
            if not names:
                unmatched.append(src.stem)
            for name in names:
                if name not in corpora:
                    corpora[name] = build_corpus(name, root, rows, trainer.token_len)
                results.append(run_one(src, corpora[name], trainer, Path(tmp), workers))
    return results, unmatched


# --------------------------------------------------------------------------- report


#: what each class must come out as
EXPECT = {"replacement_char": "flagged", "same_passage": "kept unchanged",
          "legit_unicode": "kept unchanged", "exact_duplicate": "dropped",
          "near_duplicate": "dropped", "empty_answer": "dropped", "null_answer": "dropped",
          "overlong": "dropped", "window_prompt": "dropped", "unknown_label": "dropped",
          "null_label": "dropped"}


def table(results: list[Result]) -> str:
    """One row per class, one column per pipeline/corpus run."""
    classes = sorted({c for r in results for c in (*r.recall, *r.not_covered)})
    head = ["class", "expected", *(f"{r.pipeline} / {r.corpus}" for r in results)]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(results)]
    for c in classes:
        cells = []
        for r in results:
            if c in r.recall:
                h, n = r.recall[c]
                cells.append(f"{h}/{n}" + ("" if h / n >= MIN_RECALL else " ✗"))
            else:
                cells.append("n/c" if c in r.not_covered else
                             "none planted ✗" if c in r.unplanted else "")
        lines.append("| " + " | ".join([c, EXPECT.get(c, "repaired"), *cells]) + " |")
    changed = []
    for r in results:
        frac = r.clean_changed / r.clean if r.clean else 0.0
        changed.append(f"{r.clean_changed}/{r.clean} ({frac:.1%})"
                       + (" ✗" if frac > MAX_CLEAN_CHANGED else ""))
    lines.append("| **clean rows changed** | ≤ 0.5% | " + " | ".join(changed) + " |")
    lines.append("| **clean rows, trained sequence changed** | 0 | " + " | ".join(
        f"{r.token_changed}" + (" ✗" if r.token_changed else "") for r in results) + " |")
    return "\n".join(lines)


def report(results: list[Result], unmatched: list[str], rows: int, command: str) -> str:
    failed = [(r, f) for r in results for f in r.failures()]
    lines = [f"`{command}`", "",
             f"{rows} rows per corpus (~45% clean, the rest planted; seed {SEED}), token stages "
             f"on the Qwen3 tokenizer with max_length {MAX_LENGTH}. Cells: rows that came out "
             f"as expected / rows planted. Bounds: recall ≥ {MIN_RECALL} per class, ≤ "
             f"{MAX_CLEAN_CHANGED:.1%} clean rows changed, 0 clean rows whose trained token "
             "sequence (ids + loss mask) changed; clean rows are all rows expected unchanged "
             "(plain clean rows, the legitimate-character rows and the shared-passage pairs). "
             "`n/c`: the pipeline has no stage for the class (not counted).", "",
             "Corpora (real records of ../shared/data): alpaca_en / alpaca_zh: LLaMA-Factory's "
             "alpaca demos; t0: self-instruct t0 prompt/completion shards; sharegpt_zh: "
             "MedicalGPT's ShareGPT conversations; medical_openai_zh: MedicalGPT's medical SFT "
             "as OpenAI messages; c4: LLaMA-Factory's c4 demo, one paragraph a document; "
             "banking77: intent text and label.", "",
             table(results), ""]
    for r in results:
        if r.not_covered:
            lines.append(f"- {r.pipeline} / {r.corpus} not covered: " + "; ".join(
                f"{c} ({why})" for c, why in sorted(r.not_covered.items())))
    if unmatched:
        lines.append(f"- pipelines with no matching corpus: {', '.join(unmatched)}")
    lines += ["", f"Verdict: {'FAIL' if failed or unmatched else 'PASS'}"
              f" ({len(failed)} bound(s) failed)", ""]
    if failed:
        lines += ["### Failures, with up to 3 examples each", ""]
        for r in results:
            for f in r.failures():
                lines.append(f"- **{r.pipeline} / {r.corpus}**: {f}")
                cls = f.split(":")[0] if f[0].isalpha() and ":" in f else "clean"
                for ex in r.misses.get(cls, []):
                    lines.append(f"  - `{ex}`")
        lines.append("")
    lines.append("Seconds per run: " + ", ".join(f"{r.pipeline}/{r.corpus} {r.seconds:.1f}"
                                                 for r in results))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=800, help="rows per corpus")
    ap.add_argument("--only", help="comma-separated pipeline names")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    results, unmatched = evaluate(args.rows, set(args.only.split(",")) if args.only else None,
                                  args.workers)
    script = os.path.relpath(Path(sys.argv[0]).resolve(), REPO)
    text = report(results, unmatched, args.rows,
                  " ".join([".venv/bin/python", script, *sys.argv[1:]]))
    print(text)
    if not args.no_write and not args.only:
        (REPO / "benchmarks" / "results" / "quality.md").write_text(text, encoding="utf-8")
    failed = any(r.failures() for r in results) or bool(unmatched)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
