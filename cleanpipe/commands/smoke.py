"""``cleanpipe smoke``: a few optimizer steps of a tiny random causal LM on a data sample.

The last check before a real run: it feeds a deterministic sample through the same pipeline a
trainer uses (tokenize → template → label masking → forward → backward → step) with a
randomly initialised model sized to the tokenizer's vocabulary, small enough for a CPU, and
fails when a loss or gradient norm is non-finite or a token id is outside the vocabulary.
What it catches: rows with no trainable tokens (their loss is 0/0), ids past the embedding
table (pre-tokenized data from another tokenizer), labels that do not line up.

Needs the optional extra ``smoke`` (``pip install 'cleanpipe[smoke]'``: torch + transformers).

Loss: each row's loss is the mean over its own trainable tokens and the step's loss is the
mean over rows. That is what a trainer does per sequence (and what any trainer does at batch
size 1), so one row with nothing to learn makes the step NaN instead of hiding in a batch.

Templating and masking (see :func:`build_sequences`) are deliberately minimal and kept in this
one function: prompt fields joined, then the response; labels are the response tokens except
the tokenizer's pad token, which collators mask by id (Qwen's pad token is ``<|endoftext|>``,
so a response that is only that literal trains on nothing).

    >>> import numpy as np
    >>> ids, labels = build_sequences([[1, 2]], [[3, 0]], pad_id=0, eos_id=None)
    >>> ids, labels
    ([[1, 2, 3, 0]], [[-100, -100, 3, -100]])
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.columns import is_utf8
from cleanpipe.commands._data import add_sample_command
from cleanpipe.contract.stage import StageError
from cleanpipe.errors import ExitCode

__all__ = ["SmokeResult", "build_sequences", "configured_tokenizer", "load_tokenizer", "register",
           "run_smoke"]

IGNORE = -100
#: (prompt fields, response field) pairs tried in order when none are given.
#: chat columns (ShareGPT ``conversations``, OpenAI ``messages``), rendered with the chat template
CHAT_FIELDS = ("messages", "conversations")
LAYOUTS = [(["prompt"], "completion"), (["instruction", "input"], "output"),
           (["prompt"], "response"), (["question"], "answer"), (["prompt"], "chosen")]


@dataclass
class Tok:
    """The tokenizer as the smoke run needs it."""

    tokenizer: Any
    vocab_size: int
    pad_id: int | None
    eos_id: int | None
    chat: Any = None  # the tokenizer's chat template (a ChatTemplate), when it has one


def load_tokenizer(path: str | Path) -> Tok:
    """A ``tokenizer.json`` (or a folder holding one, with ``tokenizer_config.json`` for the pad
    and eos tokens and the chat template), loaded as the length stages load it. Raises
    OSError when it cannot be read."""
    from cleanpipe.templating.chat import ChatTemplate
    from cleanpipe.templating.tokenizer import LoadedTokenizer

    try:
        loaded = LoadedTokenizer.load(path)
    except OSError:
        raise
    except Exception as e:  # tokenizers raises its own Exception type for bad files
        raise OSError(f"{path}: not a tokenizer.json: {e}") from e

    def token_id(key: str) -> int | None:
        text = loaded.token_text(key)
        return loaded.tokenizer.token_to_id(text) if text is not None else None

    source = loaded.chat_template
    chat = ChatTemplate(source, loaded.special_token_strings()) if source else None
    return Tok(loaded.tokenizer, loaded.vocab_size, token_id("pad_token"), token_id("eos_token"),
               chat)


def build_sequences(prompt_ids: list[list[int]], response_ids: list[list[int]], *,
                    pad_id: int | None, eos_id: int | None
                    ) -> tuple[list[list[int]], list[list[int]]]:
    """Input ids and labels: prompt then response (then eos when given); labels ignore the
    prompt and every pad token, the way a collator masks padding by id."""
    ids_out, labels_out = [], []
    for p, r in zip(prompt_ids, response_ids, strict=True):
        resp = list(r) + ([eos_id] if eos_id is not None else [])
        ids_out.append(list(p) + resp)
        labels_out.append([IGNORE] * len(p)
                          + [IGNORE if pad_id is not None and t == pad_id else t for t in resp])
    return ids_out, labels_out


def _text(table: pa.Table, name: str) -> pa.Array:
    col = pc.fill_null(table.column(name).combine_chunks(), "")
    if not is_utf8(col.type):
        col = pc.cast(col, pa.string())
    return col


def _prompts(table: pa.Table, fields: list[str]) -> list[str]:
    present = [f for f in fields if f in table.column_names]
    cols = [_text(table, f) for f in present]
    if len(cols) == 1:
        return cols[0].to_pylist()
    # alpaca: instruction and input joined by a blank line, an empty input adds nothing
    parts = [[v for v in vals if v] for vals in zip(*(c.to_pylist() for c in cols), strict=True)]
    return ["\n\n".join(p) for p in parts]


def _has_layout(table: pa.Table) -> bool:
    names = set(table.column_names)
    return any(r in names and p[0] in names for p, r in LAYOUTS)


def _chat_sequences(table: pa.Table, field_name: str, tok: Tok
                    ) -> tuple[list[list[int]], list[list[int]]]:
    """Conversations rendered with the tokenizer's chat template, as the trainers render
    them; labels are the tokens of the assistant turns (the rest, and pad tokens, ignored).
    A row whose template fails to render trains on nothing, which the run then reports."""
    from cleanpipe.templating.chat import to_messages
    from cleanpipe.templating.sequences import render_chat_rows

    if tok.chat is None:
        raise KeyError(f"{field_name} (chat data needs a tokenizer with a chat_template in "
                       "its tokenizer_config.json)")
    rows = [to_messages(r, {}) for r in table.column(field_name).to_pylist()]
    rendered = render_chat_rows(rows, tok.chat)
    texts = [t or "" for t in rendered.texts.to_pylist()]
    encs = tok.tokenizer.encode_batch(texts, add_special_tokens=False)
    ids_out, labels_out = [], []
    for enc, spans in zip(encs, rendered.spans, strict=True):
        labels = [IGNORE] * len(enc.ids)
        for k, (t, (a, b)) in enumerate(zip(enc.ids, enc.offsets, strict=True)):
            if b > a and any(a < e and b > s_ for s_, e in spans) and t != tok.pad_id:
                labels[k] = t
        ids_out.append(list(enc.ids))
        labels_out.append(labels)
    return ids_out, labels_out


def _layout(table: pa.Table, prompt_fields: list[str] | None,
            response_field: str | None) -> tuple[list[str], str]:
    names = set(table.column_names)
    if response_field:
        if response_field not in names:
            raise KeyError(response_field)
        fields = prompt_fields or next((p for p, r in LAYOUTS if r == response_field), [])
        return [f for f in fields if f in names], response_field
    for p, r in LAYOUTS:
        if r in names and p[0] in names:
            return p, r
    raise KeyError("no prompt/response columns (give --prompt-field and --response-field)")


@dataclass
class SmokeResult:
    """What the smoke run measured; ``passed`` is what the exit code says."""

    passed: bool
    rows: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    bad_rows: list[dict[str, Any]] = field(default_factory=list)
    vocab_size: int = 0
    seconds: float = 0.0


def _tokenize(table: pa.Table, tok: Tok, prompt_fields: list[str] | None,
              response_field: str | None, append_eos: bool
              ) -> tuple[list[list[int]], list[list[int]]]:
    if "input_ids" in table.column_names:
        ids = table.column("input_ids").to_pylist()
        if "labels" in table.column_names:
            labels = table.column("labels").to_pylist()
        else:
            labels = [list(x or []) for x in ids]
        return [list(x or []) for x in ids], [list(x or []) for x in labels]
    chat_field = next((c for c in CHAT_FIELDS if c in table.column_names), None)
    if chat_field is not None and not response_field and not _has_layout(table):
        return _chat_sequences(table, chat_field, tok)
    pf, rf = _layout(table, prompt_fields, response_field)
    prompts = _prompts(table, pf) if pf else [""] * table.num_rows
    responses = _text(table, rf).to_pylist()
    enc_p = tok.tokenizer.encode_batch(prompts, add_special_tokens=False)
    enc_r = tok.tokenizer.encode_batch(responses, add_special_tokens=False)
    return build_sequences([e.ids for e in enc_p], [e.ids for e in enc_r], pad_id=tok.pad_id,
                           eos_id=tok.eos_id if append_eos else None)


def trainer_sequences(table: pa.Table, stage: Any) -> tuple[list[list[int]],
                                                             list[list[int]], list[str | None]]:
    """Ids and labels as the trainer of ``stage`` (a ``context_length`` or
    ``trainable_tokens`` stage with a ``trainer`` profile) builds them, truncation included;
    and, per row, why that trainer leaves it out (None: it trains on it)."""
    batch = table.combine_chunks().to_batches()[0] if table.num_rows else \
        pa.RecordBatch.from_pylist([], schema=table.schema)
    built = stage.trained(batch)
    ids = [list(map(int, x)) for x in built.ids]
    labels = [[t if keep else IGNORE for t, keep in zip(x, m, strict=True)]
              for x, m in zip(ids, built.labels, strict=True)]
    left_out = [e or s for e, s in zip(built.errors, built.skipped, strict=True)]
    return ids, labels, left_out


def run_smoke(table: pa.Table, tok: Tok, *, rows: np.ndarray | None = None,
              batch_size: int = 8, max_length: int | None = None, seed: int = 0,
              lr: float = 1e-3, hidden: int = 64, layers: int = 2,
              prompt_fields: list[str] | None = None, response_field: str | None = None,
              append_eos: bool = False, row_ids: list[str] | None = None,
              trainer_stage: Any = None) -> SmokeResult:
    """Train the tiny model on every row of ``table`` (one pass, ``batch_size`` rows a step).

    With ``trainer_stage`` (a length stage with a ``trainer`` profile) the sequences and
    labels are the ones that trainer builds; rows it leaves out itself are listed in
    ``bad_rows`` as ``left_out_by_trainer`` and not trained on."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    start = time.perf_counter()
    row_ids = row_ids or [f"row {i}" for i in range(table.num_rows)]
    left_out: list[str | None] = [None] * table.num_rows
    if trainer_stage is not None:
        ids, labels, left_out = trainer_sequences(table, trainer_stage)
    else:
        ids, labels = _tokenize(table, tok, prompt_fields, response_field, append_eos)
        if max_length is not None:  # a trainer truncates on the right
            ids = [x[:max_length] for x in ids]
            labels = [x[:max_length] for x in labels]
    result = SmokeResult(passed=True, rows=len(ids), vocab_size=tok.vocab_size)
    for i, why in enumerate(left_out):
        if why:
            result.bad_rows.append({"row": row_ids[i], "problem": "left_out_by_trainer",
                                    "detail": why})
    if ids and all(left_out):
        result.problems.append("the trainer leaves out every row: nothing to train on")

    # Out-of-range ids would crash (or, on GPU, silently corrupt) the embedding lookup:
    # checked on every row first, with numpy over the flattened ids.
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    flat = np.fromiter((t for x in ids for t in x), dtype=np.int64, count=int(lengths.sum()))
    flat_lab = np.fromiter((t for x in labels for t in x), dtype=np.int64,
                           count=int(sum(len(x) for x in labels)))
    owner = np.repeat(np.arange(len(ids)), lengths)
    bad_ids = (flat < 0) | (flat >= tok.vocab_size)
    lab_owner = np.repeat(np.arange(len(labels)), [len(x) for x in labels])
    bad_lab = (flat_lab != IGNORE) & ((flat_lab < 0) | (flat_lab >= tok.vocab_size))
    bad_rows = sorted(set(owner[bad_ids].tolist()) | set(lab_owner[bad_lab].tolist()))
    for i in bad_rows:
        worst = max((t for t in ids[i] + labels[i] if t != IGNORE), key=abs)
        result.bad_rows.append({"row": row_ids[i], "problem": "token_id_out_of_range",
                                "detail": f"id {worst} outside [0, {tok.vocab_size})"})
    if bad_rows:
        result.problems.append(f"{len(bad_rows)} row(s) hold token ids outside the vocabulary "
                               f"of {tok.vocab_size}")
    mismatched = [i for i in range(len(ids)) if len(ids[i]) != len(labels[i])]
    for i in mismatched:
        result.bad_rows.append({"row": row_ids[i], "problem": "labels_misaligned",
                                "detail": f"{len(ids[i])} ids, {len(labels[i])} labels"})
    if mismatched:
        result.problems.append(f"{len(mismatched)} row(s) whose labels do not line up with ids")
    skip = set(bad_rows) | set(mismatched) | {i for i, why in enumerate(left_out) if why}

    torch.manual_seed(seed)
    longest = int(lengths.max()) if lengths.size else 1
    longest = max(longest, 1)
    config = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=hidden,
                         intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=max(longest, 8), tie_word_embeddings=True,
                         pad_token_id=tok.pad_id if tok.pad_id is not None else 0)
    model = LlamaForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    pad = tok.pad_id if tok.pad_id is not None else 0
    usable = [i for i in range(len(ids)) if i not in skip]
    for step, lo in enumerate(range(0, len(usable), batch_size)):
        batch = usable[lo:lo + batch_size]
        width = max(max(len(ids[i]) for i in batch), 2)
        x = torch.full((len(batch), width), pad, dtype=torch.long)
        y = torch.full((len(batch), width), IGNORE, dtype=torch.long)
        att = torch.zeros((len(batch), width), dtype=torch.long)
        for k, i in enumerate(batch):
            n = len(ids[i])
            x[k, :n] = torch.tensor(ids[i], dtype=torch.long)
            y[k, :n] = torch.tensor(labels[i], dtype=torch.long)
            att[k, :n] = 1
        hidden_states = model.model(input_ids=x, attention_mask=att).last_hidden_state
        # next-token targets; the vocabulary projection runs on trainable positions only,
        # which keeps a 150k-token vocabulary affordable on a CPU
        h, target = hidden_states[:, :-1], y[:, 1:]
        mask = target != IGNORE
        logits = model.lm_head(h[mask])
        tok_loss = torch.nn.functional.cross_entropy(logits.float(), target[mask],
                                                     reduction="none")
        which = torch.nonzero(mask)[:, 0]
        sums = torch.zeros(len(batch)).index_add(0, which, tok_loss)
        counts = mask.sum(dim=1)
        per_row = sums / counts  # 0/0 = NaN for a row with nothing to learn
        loss = per_row.mean()
        opt.zero_grad()
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
        loss_v = float(loss.detach())
        ok = math.isfinite(loss_v) and math.isfinite(grad_norm)
        result.steps.append({"step": step, "rows": len(batch), "loss": loss_v,
                             "grad_norm": grad_norm,
                             "trainable_tokens": int(counts.sum()), "finite": ok})
        if ok:
            opt.step()
            continue
        # A real trainer would now hold NaN weights; skip the update so the remaining
        # batches are still checked, and name the rows that did it.
        row_loss = per_row.detach().tolist()
        for k, i in enumerate(batch):
            if not math.isfinite(row_loss[k]):
                why = ("no_trainable_tokens" if int(counts[k]) == 0 else "non_finite_loss")
                result.bad_rows.append({"row": row_ids[i], "problem": why,
                                        "detail": f"{int(counts[k])} trainable tokens, "
                                                  f"loss {row_loss[k]}"})
        result.problems.append(f"step {step}: loss {loss_v}, grad norm {grad_norm}")
    result.passed = not result.problems
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _print(result: SmokeResult, out: Any) -> None:
    print(f"smoke: {result.rows} rows, {len(result.steps)} steps, vocab {result.vocab_size}, "
          f"{result.seconds:.1f} s", file=out)
    print(f"{'step':>5} {'rows':>5} {'tokens':>7} {'loss':>10} {'grad norm':>10}", file=out)
    for s in result.steps:
        print(f"{s['step']:>5} {s['rows']:>5} {s['trainable_tokens']:>7} {s['loss']:>10.4g} "
              f"{s['grad_norm']:>10.4g}{'' if s['finite'] else '  <- non-finite'}", file=out)
    for b in result.bad_rows[:20]:
        print(f"  {b['row']}: {b['problem']} ({b['detail']})", file=out)
    if len(result.bad_rows) > 20:
        print(f"  ... {len(result.bad_rows) - 20} more", file=out)
    print("smoke: PASSED" if result.passed else "smoke: FAILED: " + "; ".join(result.problems),
          file=out)


def configured_tokenizer(config: dict[str, Any]) -> str | None:
    """The tokenizer a pipeline's stages are configured with (the first ``tokenizer:``
    parameter found), so the smoke model is sized to what the length checks counted with.

    >>> configured_tokenizer({"stages": [{"stage": "unicode_fix"},
    ...                                  {"stage": "context_length", "tokenizer": "tok/qwen3"}]})
    'tok/qwen3'
    """
    for st in config.get("stages", []) or []:
        value = st.get("tokenizer") if isinstance(st, dict) else None
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and isinstance(value.get("path"), str):
            return value["path"]
    return None


def _pipeline_tokenizer(path: str) -> str | None:
    from cleanpipe.spec_yaml import read_yaml

    config = read_yaml(Path(path).read_text("utf-8"), path)[0] or {}
    found = configured_tokenizer(config) if isinstance(config, dict) else None
    if found and not Path(found).is_absolute():
        # relative paths in a pipeline file are relative to that file, as the stages read them
        candidate = Path(path).parent / found
        found = str(candidate) if candidate.exists() else found
    return found


def _names_a_trainer(path: str) -> bool:
    """Whether a pipeline file sets ``trainer:`` (top level or on a stage); only then is the
    whole file validated, so a pipeline that only lends its tokenizer still works."""
    from cleanpipe.spec_yaml import read_yaml

    config = read_yaml(Path(path).read_text("utf-8"), path)[0] or {}
    if not isinstance(config, dict):
        return False
    stages = config.get("stages") or []
    return config.get("trainer") is not None or any(
        isinstance(st, dict) and st.get("trainer") is not None for st in stages)


def _trainer_stage(args: argparse.Namespace, tokenizer: str) -> Any:
    """The stage whose trainer profile builds the sequences, or None for the plain reading.

    ``--trainer`` wins; else the pipeline's first length stage that names a trainer (its
    template and fields come along). ``--max-length`` sets the trainer's length option.
    """
    from cleanpipe.contract.sequence_stage import SequenceStage
    from cleanpipe.stages.trainable_tokens import TrainableTokens
    from cleanpipe.templating.profiles import parse_trainer

    stage = None
    if args.pipeline and _names_a_trainer(args.pipeline):
        from cleanpipe.spec import load_spec

        stage = next((s for s in load_spec(args.pipeline).stages
                      if isinstance(s, SequenceStage) and s.trainer is not None), None)
    if args.trainer:
        profile = parse_trainer(args.trainer)
        if stage is None:
            fields = {"prompt_fields": args.prompt_field} if args.prompt_field else {}
            if args.response_field:
                fields["response_field"] = args.response_field
            stage = TrainableTokens(tokenizer=tokenizer, trainer=profile, **fields)
        else:
            stage = stage.model_copy(update={"trainer": profile})
    if stage is None or stage.profile.name == "plain":
        return None
    stage = stage.model_copy(update={"tokenizer": tokenizer})  # resolved as the file says
    if args.max_length is not None:
        stage = stage.model_copy(update={"trainer": stage.profile.with_length(args.max_length)})
    return stage


def cmd_smoke(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("cleanpipe smoke needs torch and transformers: pip install 'cleanpipe[smoke]'",
              file=sys.stderr)
        return ExitCode.USAGE
    from cleanpipe.commands._data import read_dataset
    from cleanpipe.commands.sample import sample_indices

    if args.n <= 0 or args.batch_size <= 0:
        print("cleanpipe smoke: -n and --batch-size must be positive", file=sys.stderr)
        return ExitCode.USAGE
    if args.seed < 0 or (args.max_length is not None and args.max_length <= 0):
        print("cleanpipe smoke: --seed must be 0 or more and --max-length positive",
              file=sys.stderr)
        return ExitCode.USAGE
    tokenizer = args.tokenizer
    if tokenizer is None and args.pipeline:
        try:
            tokenizer = _pipeline_tokenizer(args.pipeline)
        except OSError as e:
            print(f"cleanpipe smoke: {e}", file=sys.stderr)
            return ExitCode.UNREADABLE
        except ValueError as e:  # not YAML, or past a limit (spec_yaml.YamlLimitError)
            print(f"cleanpipe smoke: {e}", file=sys.stderr)
            return ExitCode.USAGE
    if tokenizer is None:
        print("cleanpipe smoke: give --tokenizer, or --pipeline with a stage that has a "
              "tokenizer: parameter", file=sys.stderr)
        return ExitCode.USAGE
    try:
        tok = load_tokenizer(tokenizer)
    except OSError as e:
        print(f"cleanpipe smoke: {e}", file=sys.stderr)
        return ExitCode.UNREADABLE
    try:
        stage = _trainer_stage(args, tokenizer)
    except (ValueError, OSError) as e:  # ConfigError, a bad --trainer
        print(f"cleanpipe smoke: {e}", file=sys.stderr)
        return ExitCode.USAGE
    table = read_dataset(args.input)
    rows = sample_indices(table.num_rows, args.n, args.seed)
    try:
        result = run_smoke(table.take(pa.array(rows)), tok, batch_size=args.batch_size,
                           max_length=args.max_length, seed=args.seed,
                           prompt_fields=args.prompt_field, response_field=args.response_field,
                           append_eos=args.append_eos,
                           row_ids=[f"row {i}" for i in rows.tolist()], trainer_stage=stage)
    except StageError as e:
        print(f"cleanpipe smoke: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyError as e:
        print(f"cleanpipe smoke: no column {e}; columns: {', '.join(table.column_names)}",
              file=sys.stderr)
        return ExitCode.USAGE
    _print(result, sys.stdout)
    if args.report:
        Path(args.report).write_text(json.dumps(asdict(result), indent=2), "utf-8")
    return ExitCode.PASSED if result.passed else ExitCode.GATE_FAILED


def register(subparsers: Any) -> None:
    p = add_sample_command(
        subparsers, "smoke",
        "a few optimizer steps of a tiny random LM on a sample (needs [smoke])",
        "Train a tiny randomly initialised causal LM, sized to the tokenizer's vocabulary, for a "
        "few steps on a deterministic sample; exit 1 on a non-finite loss or gradient norm or "
        "an out-of-range token id.", rows=128, seed_help="sample and initialisation seed")
    p.add_argument("--tokenizer",
                   help="tokenizer.json, or a folder with tokenizer.json + tokenizer_config.json")
    p.add_argument("--pipeline", help="take the tokenizer from this pipeline YAML's stages")
    p.add_argument("--batch-size", type=int, default=8, help="rows per step (default 8)")
    p.add_argument("--max-length", type=int,
                   help="truncate sequences to this many tokens, as the trainer will")
    p.add_argument("--prompt-field", action="append",
                   help="prompt column (repeatable: joined by a blank line); default: detected")
    p.add_argument("--response-field", help="the column trained on; default: detected")
    p.add_argument("--trainer", choices=["trl", "llamafactory", "axolotl", "plain"],
                   help="build sequences, truncation and labels as this trainer does "
                        "(default: the pipeline's trainer, else plain); --max-length sets its "
                        "max_length / cutoff_len / sequence_len")
    p.add_argument("--append-eos", action="store_true",
                   help="append the tokenizer's eos token to each response (trained on)")
    p.add_argument("--report", help="write the step losses and bad rows as JSON here")
    p.set_defaults(func=cmd_smoke)
