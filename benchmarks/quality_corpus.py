"""Planted-defect corpora built from real records, with the expected outcome of every row.

Independent of cleanpipe on purpose: it judges cleanpipe, so it must not share its code.
Each corpus starts from real records of one set in ``../shared/data``. Records that already
carry a defect of a planted class, or that are near copies of one another, are left out of
the pool, so a clean row is clean. Then every row is either

* **clean**: a pool record as it is (some with legitimate characters added: ZWJ emoji
  sequences, ZWNJ in Persian, U+3000, emoji, a completion's significant leading space), or
  one of a pair that shares a passage but asks a different question: expected *unchanged*;
* **planted**: a pool record with one defect planted, and the expected outcome:
  *repaired* (to the pool text), *dropped*, or *flagged*.

Same seed, same rows => same corpus. Example (a tiny alpaca corpus from made-up records)::

    >>> words = [f"w{i}" for i in range(3000)]
    >>> recs = [{"instruction": f"Question {i}?", "input": "",
    ...          "output": " ".join(random.Random(i).sample(words, 150))} for i in range(200)]
    >>> def corpus():
    ...     return build(ALPACA, recs, 120, seed=1, token_len=lambda s: len(s.split()),
    ...                  max_length=400)
    >>> rows = corpus()
    >>> rows == corpus()
    True
    >>> sorted({r.cls for r in rows})[:5]
    ['bidi', 'c0_control', 'c1_control', 'clean', 'empty_answer']
    >>> row = next(r for r in rows if r.cls == "zero_width")
    >>> row.expect, sum("\u200b" <= c <= "\u2060" or c == "\ufeff"
    ...                 for v in row.rec.values() for c in v)
    ('repaired', 1)
"""

from __future__ import annotations

import copy
import json
import random
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ftfy
import ftfy.bad_codecs
import xxhash
from datasketch import MinHash, MinHashLSH

#: where a text sits in a record: ("output",) or ("conversations", 3, "value")
TextPath = tuple[Any, ...]


@dataclass(frozen=True)
class Shape:
    """The shape of a record: where its prompt, answer and other texts are."""

    name: str
    prompt: tuple[str, ...] = ()  # columns that form the prompt (alpaca, prompt/completion)
    answer: str | None = None  # the supervised column
    chat: str | None = None  # chat column: a list of turns
    turn: tuple[str, str] = ("from", "value")  # a turn's role key and text key
    roles: tuple[str, str] = ("human", "gpt")  # the user's and the assistant's role names
    text: tuple[str, ...] = ()  # plain text columns (pretraining, classification)
    label: str | None = None

    def paths(self, rec: dict[str, Any]) -> list[TextPath]:
        """Every text of ``rec`` (answer last for prompt/answer records)."""
        if self.chat:
            return [(self.chat, i, self.turn[1]) for i in range(len(rec[self.chat]))]
        cols = [*self.prompt, *([self.answer] if self.answer else []), *self.text]
        return [(c,) for c in cols]

    def answer_path(self, rec: dict[str, Any]) -> TextPath | None:
        if self.chat:
            turns = rec[self.chat]
            return next(((self.chat, i, self.turn[1]) for i in range(len(turns) - 1, -1, -1)
                         if turns[i][self.turn[0]] == self.roles[1]), None)
        return (self.answer,) if self.answer else None

    def prompt_path(self, rec: dict[str, Any]) -> TextPath | None:
        if self.chat:
            return next(((self.chat, i, self.turn[1]) for i, t in enumerate(rec[self.chat])
                         if t[self.turn[0]] == self.roles[0]), None)
        return (self.prompt[-1],) if self.prompt else None


ALPACA = Shape("alpaca", prompt=("instruction", "input"), answer="output")
PROMPT_COMPLETION = Shape("prompt_completion", prompt=("prompt",), answer="completion")
SHAREGPT = Shape("sharegpt", chat="conversations")
OPENAI = Shape("openai", chat="messages", turn=("role", "content"), roles=("user", "assistant"))
TEXT = Shape("text", text=("text",))
CLASSIFICATION = Shape("classification", text=("text",), label="label")


def get(rec: dict[str, Any], path: TextPath) -> Any:
    for p in path:
        rec = rec[p]
    return rec


def put(rec: dict[str, Any], path: TextPath, value: Any) -> None:
    for p in path[:-1]:
        rec = rec[p]
    rec[path[-1]] = value


@dataclass
class Row:
    """One corpus row: the record, its class, the expected outcome and, for a repair, the
    record it must come out as."""

    qid: int
    rec: dict[str, Any]
    cls: str
    expect: str  # "unchanged" | "repaired" | "dropped" | "flagged"
    target: dict[str, Any] | None = None  # the record expected after a repair
    note: str = ""


# --------------------------------------------------------------------------- pool filter

SPECIAL_STRINGS = ("<|", "|>", "<s>", "</s>", "[INST]", "<unk>")
FTFY_CONFIG = ftfy.TextFixerConfig(uncurl_quotes=False, fix_character_width=False)
ALLOWED_CONTROLS = {"\n", "\t"}


def is_clean_text(s: Any) -> bool:
    """No character or string of a planted class, and nothing ftfy (as the stage configures
    it) would change: a pool text that a cleaner must leave alone."""
    if not isinstance(s, str) or not s.strip():
        return False
    for ch in s:
        cat = unicodedata.category(ch)
        if (cat == "Cc" and ch not in ALLOWED_CONTROLS) or cat in ("Cf", "Cs", "Co"):
            return False
        if ch in "\ufffd\u2028\u2029\u00ad":
            return False
    if any(t in s for t in SPECIAL_STRINGS):
        return False
    if s.isascii() and "&" not in s:  # what ftfy could change in ASCII is an HTML entity
        return True
    return unicodedata.is_normalized("NFC", s) and ftfy.fix_text(s, FTFY_CONFIG) == s


def shingles(text: str, k: int = 5, limit: int = 1500) -> set[bytes]:
    """Character ``k``-grams of the first ``limit`` characters (near copies begin alike)."""
    t = " ".join(text.lower().split())[:limit]
    return {t[i:i + k].encode() for i in range(max(1, len(t) - k + 1))}


def distinct(recs: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], str],
             want: int, threshold: float = 0.4) -> list[dict[str, Any]]:
    """Up to ``want`` of ``recs``, leaving out every record whose text is within
    ``threshold`` (character 5-gram Jaccard, datasketch LSH) of an earlier one: the pool
    holds no near copies."""
    lsh = MinHashLSH(threshold=threshold, num_perm=32)
    out = []
    for i, r in enumerate(recs):
        m = MinHash(num_perm=32, seed=7, hashfunc=xxhash.xxh32_intdigest)
        m.update_batch(list(shingles(key(r))))
        if lsh.query(m):
            continue
        lsh.insert(str(i), m)
        out.append(r)
        if len(out) >= want:
            break
    return out


# --------------------------------------------------------------------------- defects

ZERO_WIDTH = ["\u200b", "\ufeff", "\u2060"]
BIDI = ["\u202e", "\u202d", "\u200e", "\u200f", "\u2066", "\u2069"]
C0 = ["\x01", "\x02", "\x07", "\x08", "\x0b", "\x0e", "\x1b", "\x1f"]
C1 = ["\x81", "\x8d", "\x8f", "\x90", "\x9d"]  # undefined in Windows-1252: no char to map to
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
LEGIT = {  # legitimate characters a cleaner must keep, appended to an answer
    "zwj_emoji": " 👩\u200d💻 👨\u200d👩\u200d👧",
    "zwnj_persian": "\nمی\u200cخواهم این را بدانم.",
    "emoji": " 😀🎉",
}


def insert_at(s: str, piece: str, rng: random.Random) -> str:
    """``piece`` inserted between two characters of ``s`` (never splitting a word edge
    into whitespace changes)."""
    i = rng.randrange(1, len(s)) if len(s) > 1 else len(s)
    return s[:i] + piece + s[i:]


def mojibake(s: str, kind: str) -> str:
    """UTF-8 bytes of ``s`` decoded as Windows-1252 (C1 for its five undefined bytes, as
    Windows tools and ftfy's sloppy codec read them), as Latin-1, or twice as Windows-1252.

        >>> mojibake("你好", "latin1")
        'ä½\\xa0å¥½'
    """
    if kind == "cp1252":
        return s.encode("utf-8").decode("sloppy-windows-1252")
    if kind == "latin1":
        return s.encode("utf-8").decode("latin-1")
    return mojibake(mojibake(s, "cp1252"), "cp1252")


def has_cjk(s: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in s)


def mostly_cjk(s: str) -> bool:
    """At least 30% of the non-space characters are CJK ideographs (then a "word" is one
    character, as dedup's character shingles see it)."""
    chars = [c for c in s if not c.isspace()]
    return sum("\u4e00" <= c <= "\u9fff" for c in chars) >= 0.3 * max(len(chars), 1)


def edit_words(s: str, rng: random.Random, per: int) -> str | None:
    """A near copy of ``s``: one word (or CJK ideograph) in every ``per`` replaced by the
    next one, so the text reads nearly the same; None when ``s`` is too short for it. Only
    the letters of a word change: its punctuation and the whitespace around it stay (an
    edit that adds or removes a full stop or a line break is a different kind of change).

        >>> edit_words("Tea is hot. Milk is cold, and water is wet.", random.Random(0), 9)
        'Tea is hot. Milk is cold, water water is wet.'
    """
    if mostly_cjk(s):
        units = list(s)
        is_word = [("\u4e00" <= u <= "\u9fff") for u in units]
    else:
        units = re.split(r"(\w+)", s)  # odd positions: words; even: what lies between
        is_word = [i % 2 == 1 for i in range(len(units))]
    words = [i for i, w in enumerate(is_word) if w]
    n_edit = len(words) // per
    if n_edit < 1:
        return None
    for k in rng.sample(range(len(words) - 1), n_edit):
        units[words[k]] = units[words[k + 1]]
    out = "".join(units)
    return out if out != s else None


# --------------------------------------------------------------------------- planting


@dataclass
class Plan:
    shape: Shape
    rng: random.Random
    token_len: Callable[[str], int]
    max_length: int
    pool: list[dict[str, Any]]
    rows: list[Row] = field(default_factory=list)

    def take(self, ok: Callable[[dict[str, Any]], bool] = lambda r: True
             ) -> dict[str, Any] | None:
        """A pool record (removed from the pool) that satisfies ``ok``."""
        for i, r in enumerate(self.pool):
            if ok(r):
                return copy.deepcopy(self.pool.pop(i))
        return None

    def add(self, rec: dict[str, Any], cls: str, expect: str,
            target: dict[str, Any] | None = None, note: str = "") -> None:
        self.rows.append(Row(len(self.rows), rec, cls, expect, target, note))


def _repair(plan: Plan, cls: str, damage: Callable[[str], str | None],
            ok: Callable[[str], bool] = lambda s: True,
            prep: Callable[[str], str] = lambda s: s) -> bool:
    """Plant ``damage`` in one text of a pool record (first ``prep``-ed, which must keep it
    clean); expected back to the (prepared) pool text."""
    rec = plan.take(lambda r: any(ok(prep(get(r, p))) for p in plan.shape.paths(r)))
    if rec is None:
        return False
    paths = [p for p in plan.shape.paths(rec) if ok(prep(get(rec, p)))]
    path = plan.rng.choice(paths)
    put(rec, path, prep(get(rec, path)))
    bad = damage(get(rec, path))
    if bad is None:
        return False
    target = copy.deepcopy(rec)
    put(rec, path, bad)
    plan.add(rec, cls, "repaired", target, note="/".join(map(str, path)))
    return True


def _ftfy_recovers(kind: str) -> Callable[[str], bool]:
    # ftfy itself is the reference: plant only damage that ftfy alone undoes, so a miss
    # means the pipeline lost ftfy's evidence, not that ftfy has a limit.
    def ok(s: str) -> bool:
        return bool(s) and not s.isascii() and ftfy.fix_text(mojibake(s, kind),
                                                                FTFY_CONFIG) == s
    return ok


def plant_class(plan: Plan, cls: str, clean: list[Row]) -> bool:
    """Plant one row of ``cls``; False when the pool has no record it fits."""
    rng, shape = plan.rng, plan.shape
    if cls in ("mojibake_cp1252", "mojibake_latin1", "double_mojibake"):
        kind = {"mojibake_cp1252": "cp1252", "mojibake_latin1": "latin1"}.get(cls, "double")
        zh = cls != "double_mojibake" and any(
            has_cjk(get(r, p)) for r in plan.pool[:20] for p in shape.paths(r))
        recovers = _ftfy_recovers(kind)
        # English text is mostly ASCII: its typographic apostrophe gives mojibake its bytes
        return _repair(plan, cls, lambda s: mojibake(s, kind),
                       lambda s: recovers(s) and (has_cjk(s) or not zh),
                       prep=lambda s: s if zh else s.replace("'", "\u2019"))
    if cls == "zero_width":
        return _repair(plan, cls, lambda s: insert_at(s, rng.choice(ZERO_WIDTH), rng))
    if cls == "bidi":
        return _repair(plan, cls, lambda s: insert_at(s, rng.choice(BIDI), rng))
    if cls == "soft_hyphen":
        return _repair(plan, cls, lambda s: insert_at(s, "\u00ad", rng))
    if cls == "nul":
        return _repair(plan, cls, lambda s: insert_at(s, "\x00", rng))
    if cls == "c0_control":
        return _repair(plan, cls, lambda s: insert_at(s, rng.choice(C0), rng))
    if cls == "c1_control":
        return _repair(plan, cls, lambda s: insert_at(s, rng.choice(C1), rng))
    if cls == "special_token":
        def token(s: str) -> str:
            # t0's own form: the end-of-text string glued to the answer; else anywhere
            t = rng.choice(SPECIAL_TOKENS)
            return s + t if t == "<|endoftext|>" else insert_at(s, t, rng)
        return _repair(plan, cls, token)
    if cls == "replacement_char":
        rec = plan.take()
        if rec is None:
            return False
        path = rng.choice(shape.paths(rec))
        put(rec, path, insert_at(get(rec, path), "\ufffd", rng))
        plan.add(rec, cls, "flagged")
        return True
    if cls == "exact_duplicate":
        src = rng.choice(clean)
        plan.add(copy.deepcopy(src.rec), cls, "dropped", note=f"copy of {src.qid}")
        return True
    if cls == "near_duplicate":
        return _near_duplicate(plan, clean)
    if cls in ("empty_answer", "null_answer"):
        rec = plan.take(lambda r: shape.answer_path(r) is not None)
        if rec is None:
            return False
        put(rec, shape.answer_path(rec), "" if cls == "empty_answer" else None)
        plan.add(rec, cls, "dropped")
        return True
    if cls == "overlong":
        return _overlong(plan)
    if cls == "window_prompt":
        return _window_prompt(plan)
    if cls == "unknown_label":
        rec = plan.take()
        if rec is None:
            return False
        rec[shape.label] = "no_such_intent"
        plan.add(rec, cls, "dropped")
        return True
    if cls == "null_label":
        rec = plan.take()
        if rec is None:
            return False
        rec[shape.label] = None
        plan.add(rec, cls, "dropped")
        return True
    if cls == "legit_unicode":
        return _legit(plan)
    raise ValueError(f"unknown class {cls!r}")


def _near_duplicate(plan: Plan, clean: list[Row]) -> bool:
    """A clean row again with a few words of its longest text edited (one in 100 words or
    200 CJK characters): the same question and answer, a near copy the trainer should not
    see twice."""
    rng = plan.rng
    for src in rng.sample(clean, len(clean)):
        rec = copy.deepcopy(src.rec)
        paths = plan.shape.paths(rec)
        path = max(paths, key=lambda p: len(get(rec, p) or ""))
        text = get(rec, path)
        edited = edit_words(text, rng, 200 if mostly_cjk(text) else 100)
        if edited is not None and is_clean_text(edited):
            put(rec, path, edited)
            plan.add(rec, "near_duplicate", "dropped",
                     note=f"near copy of {src.qid} ({'/'.join(map(str, path))})")
            return True
    return False


def _filler(plan: Plan, tokens: int) -> str:
    """Real text of this corpus until it holds ``tokens`` tokens: the pool's longest texts
    from a random start (read, not taken: a dropped row may repeat them harmlessly)."""
    texts = sorted((max((get(r, p) or "" for p in plan.shape.paths(r)), key=len)
                    for r in plan.pool), key=len, reverse=True)[:50]
    parts: list[str] = []
    n, i = 0, plan.rng.randrange(len(texts))
    while n < tokens:
        piece = texts[i % len(texts)]
        parts.append(piece)
        n += plan.token_len(piece)
        i += 1
    return "\n\n".join(parts)


def _overlong(plan: Plan) -> bool:
    """An answer (or text) of ~1.5x the window, made of this corpus's own texts."""
    rec = plan.take()
    if rec is None:
        return False
    path = plan.shape.answer_path(rec) or plan.shape.paths(rec)[-1]
    put(rec, path, _filler(plan, int(plan.max_length * 1.5)))
    plan.add(rec, "overlong", "dropped")
    return True


def _window_prompt(plan: Plan) -> bool:
    """A prompt that fills the window by itself, with a short real answer: after
    truncation no answer token is left to learn from."""
    shape = plan.shape
    if shape.chat:  # one exchange: a short first answer (its first line) after the prompt
        rec = plan.take(lambda r: len(r[shape.chat]) >= 2)
        if rec is None:
            return False
        rec[shape.chat] = rec[shape.chat][:2]
        text_key = shape.turn[1]
        first = rec[shape.chat][1][text_key].split("\n")[0]
        rec[shape.chat][1][text_key] = first.split("。")[0] + ("。" if "。" in first else "")
    else:
        rec = plan.take(lambda r: (shape.answer_path(r) is not None
                                   and plan.token_len(get(r, shape.answer_path(r))) < 40))
    if rec is None:
        return False
    put(rec, plan.shape.prompt_path(rec), _filler(plan, plan.max_length + 64))
    plan.add(rec, "window_prompt", "dropped")
    return True


def _legit(plan: Plan) -> bool:
    """A clean row with characters that belong there: ZWJ emoji sequences, ZWNJ Persian,
    emoji, a U+3000 paragraph indent (Chinese), a completion's significant leading space."""
    rec = plan.take()
    if rec is None:
        return False
    shape = plan.shape
    path = shape.answer_path(rec) or shape.paths(rec)[-1]
    text = get(rec, path)
    kinds = list(LEGIT)
    if has_cjk(text):
        kinds.append("ideographic_indent")
    if shape is PROMPT_COMPLETION:
        kinds.append("leading_space")
    kind = kinds[len(plan.rows) % len(kinds)]
    if kind == "ideographic_indent":
        text = "\u3000\u3000" + text
    elif kind == "leading_space":
        text = " " + text
    else:
        text = text + LEGIT[kind]
    put(rec, path, text)
    plan.add(rec, "legit_unicode", "unchanged", note=kind)
    return True


#: classes planted for each record shape
CLASSES: dict[str, list[str]] = {
    "text_defects": ["mojibake_cp1252", "mojibake_latin1", "double_mojibake", "zero_width",
                     "bidi", "soft_hyphen", "nul", "c0_control", "c1_control",
                     "replacement_char"],
    "sft": ["special_token", "exact_duplicate", "near_duplicate", "same_passage",
            "empty_answer", "null_answer", "overlong", "window_prompt", "legit_unicode"],
    "text": ["special_token", "exact_duplicate", "near_duplicate", "legit_unicode"],
    "classification": ["exact_duplicate", "unknown_label", "null_label", "legit_unicode"],
}


def classes_for(shape: Shape) -> list[str]:
    extra = {"text": "text", "classification": "classification"}.get(shape.name, "sft")
    return CLASSES["text_defects"] + CLASSES[extra]


def build(shape: Shape, records: list[dict[str, Any]], rows: int, *, seed: int,
          token_len: Callable[[str], int], max_length: int,
          same_passage: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
          legit: Sequence[dict[str, Any]] = ()) -> list[Row]:
    """``rows`` corpus rows from ``records``: about 45% clean, the rest planted, every class
    at least 3 times, plus the ``legit`` records as they are (must stay unchanged). Same
    inputs and seed => same rows."""
    rng = random.Random(seed)

    optional = {(c,) for c in shape.prompt[1:]}  # alpaca's `input` is often empty

    def usable(r: dict[str, Any]) -> bool:
        texts = [get(r, p) for p in shape.paths(r) if not (p in optional and get(r, p) == "")]
        joined = "\n".join(texts)
        # a token covers at least one character (bar rare emoji): count only long texts
        return (bool(texts) and all(is_clean_text(t) for t in texts)
                and (len(joined) < max_length // 2 or token_len(joined) < max_length // 2))

    records = list(records)
    rng.shuffle(records)
    pool = distinct((r for r in records if usable(r)),
                    key=lambda r: "\n".join(get(r, p) for p in shape.paths(r)),
                    want=rows * 3 // 2 + 100)
    plan = Plan(shape, rng, token_len, max_length, pool)
    classes = classes_for(shape)
    per_class = max(3, round(rows * 0.55 / len(classes)))
    # a small set (alpaca demo: 1,000 records) must keep records for every class
    n_clean = max(per_class, min(rows - per_class * len(classes),
                                 len(pool) - per_class * (len(classes) + 1)))
    clean: list[Row] = []
    for _ in range(n_clean):
        rec = plan.take()
        if rec is None:
            break
        plan.add(rec, "clean", "unchanged")
        clean.append(plan.rows[-1])
    for rec in legit:
        plan.add(copy.deepcopy(rec), "legit_unicode", "unchanged", note="given")
    pairs = iter(same_passage or [])
    for cls in classes:
        for _ in range(per_class):
            if cls == "same_passage":
                pair = next(pairs, None) or _passage_pair(plan)
                if pair is None:
                    break
                for rec in pair:
                    plan.add(rec, cls, "unchanged")
            elif not plant_class(plan, cls, clean):
                break
    order = list(range(len(plan.rows)))
    # interleave, but keep each duplicate after the row it copies (keep="first")
    rng.shuffle(order)
    rank = {qid: i for i, qid in enumerate(order)}
    for r in plan.rows:
        if r.cls in ("exact_duplicate", "near_duplicate"):
            src = int(r.note.split("copy of ")[1].split()[0])
            if rank[r.qid] < rank[src]:
                rank[r.qid], rank[src] = rank[src], rank[r.qid]
    out = sorted(plan.rows, key=lambda r: rank[r.qid])
    return out


def _passage_pair(plan: Plan) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Two records that share a long passage and differ in question and answer: A as it
    is, and B's question and answer asked about A's passage."""
    shape = plan.shape
    if shape.chat:
        role, text = shape.turn
        a = plan.take(lambda r: len(r[shape.chat]) >= 2 and len(r[shape.chat][0][text]) > 200)
        b = plan.take(lambda r: len(r[shape.chat]) >= 2)
        if a is None or b is None:
            return None
        b2 = {shape.chat: [{role: shape.roles[0], text: a[shape.chat][0][text] + "\n\n"
                            + b[shape.chat][0][text]}, copy.deepcopy(b[shape.chat][1])]}
        return a, b2
    passage_col = shape.prompt[-1]
    a = plan.take(lambda r: len((r[passage_col] or "").split()) >= 40 or
                  (has_cjk(r[passage_col] or "") and len(r[passage_col]) >= 50))
    b = plan.take()
    if a is None or b is None:
        return None
    b2 = copy.deepcopy(b)
    b2[passage_col] = a[passage_col]
    return a, b2


# --------------------------------------------------------------------------- real sets


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        yield from json.loads(text)
        return
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def t0_records(root: Path, per_shard: int) -> tuple[list[dict[str, Any]],
                                                     list[tuple[dict[str, Any], dict[str, Any]]]]:
    """t0 prompt/completion records (their literal ``<|endoftext|>`` removed, as the data's
    author meant it: the trainer adds its own end token), the first ``per_shard`` of every
    template (the pool filter removes template variants); and adversarial_qa pairs that share a
    passage and ask different questions with different answers."""
    shards = sorted((root / "sft_self_instruct_t0_50k" / "data_per_template").glob("*.jsonl"))
    recs: list[dict[str, Any]] = []
    for sh in shards:
        if sh.stem.startswith("adversarial_qa") or sh.stat().st_size == 0:
            continue
        with sh.open(encoding="utf-8") as fh:
            lines = [line for _, line in zip(range(per_shard), fh, strict=False)]
        for r in map(json.loads, lines):
            recs.append({"prompt": r["prompt"],
                         "completion": r["completion"].removesuffix("<|endoftext|>")})
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for name in ("dbert", "dbidaf", "droberta"):
        path = shards[0].parent / f"adversarial_qa_{name}_answer_the_following_q.jsonl"
        by_passage: dict[str, list[dict[str, Any]]] = {}
        for r in read_records(path):
            rec = {"prompt": r["prompt"],
                   "completion": r["completion"].removesuffix("<|endoftext|>")}
            if not (is_clean_text(rec["prompt"]) and is_clean_text(rec["completion"])):
                continue
            by_passage.setdefault(rec["prompt"].split("\n\n")[1], []).append(rec)
        for group in by_passage.values():
            a = group[0]
            b = next((g for g in group[1:] if g["completion"] != a["completion"]
                      and g["prompt"] != a["prompt"]), None)
            if b is not None:
                pairs.append((a, b))
    return recs, pairs
