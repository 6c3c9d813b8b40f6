"""Loading a tokenizer for counting, a sound upper bound on token counts, and exact counts.

A tokenizer is a ``tokenizer.json`` file or a model directory (``tokenizer.json`` plus an
optional ``tokenizer_config.json`` with the chat template and special tokens). Padding and
truncation written into the file are switched off: a count capped at 128 is no count.

Two facts make counting cheap without giving up exactness:

* **A sound upper bound.** For byte-level BPE every token covers at least one byte of the
  normalised text, so ``tokens ≤ UTF-8 bytes``; for WordPiece every token covers at least one
  character, so ``tokens ≤ characters``; plus the special tokens the post-processor adds.
  Only normalisers that never lengthen ASCII are accepted, and non-ASCII records are measured
  after the tokenizer's own normaliser (NFC/NFKC and lowercasing can lengthen them).
  Anything else (Metaspace, Replace, a prefix space) gets no bound: every record is encoded.
* **Additivity at line and sentence starts.** For the known pre-tokenizers (GPT-2 / Qwen /
  Llama-3 split regexes with byte-level, BERT, whitespace) no pre-token holds a newline
  followed by a non-space character, nor a punctuation mark followed by a space (the
  pre-token holding the mark ends at the space, and matching resumes there as it would at
  the start of a text); the normalisers are per character (and a space or a character
  after a newline starts a new composition), and no added token holds a newline or strips
  its neighbours. So the count of a text is the sum of the counts of its pieces cut after
  each ``\\n`` that precedes a non-space character, and before each space that follows a
  full stop, question or exclamation mark (unless an added token holds a space). Pieces
  repeat a lot in real corpora (one passage, sentence by sentence, under many prompt
  templates), and each distinct piece is encoded once per process, mostly once for all
  the workers forked from one (:mod:`cleanpipe.templating.piece_counts`).
* **Text already normalised.** A record made only of characters that Unicode's quick check
  calls stable under the tokenizer's normal form is its own normal form: its size is
  exact, and the normaliser need not run on it.

    >>> import json, tempfile, os
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> tk = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    >>> tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    >>> d = tempfile.mkdtemp(); tk.save(os.path.join(d, "tokenizer.json"))
    >>> lt = LoadedTokenizer.load(d)
    >>> lt.count(["a b\\nb", "a"]).tolist()
    [3, 1]
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from cleanpipe.templating.piece_counts import PieceCounts
from cleanpipe.text.unicode_forms import unstable_class

#: Split regexes whose pre-tokens never contain "\n" followed by a non-space character.
_KNOWN_SPLIT_REGEXES = frozenset({
    # Qwen2 / Qwen2.5 / Qwen3
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    # Llama 3 / cl100k
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
})
# Normalisers that act character by character and never lengthen ASCII text.
_LOCAL_NORMALIZERS = frozenset({"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents",
                                "BertNormalizer"})
# Strip shortens only, so the bound holds, but it looks at the ends of the whole text.
_BOUND_ONLY_NORMALIZERS = frozenset({"Strip"})
# How many times longer (in UTF-8 bytes or in code points) a normaliser can make a text:
# Unicode's stated maximum expansion factors (UAX #15) for the normal forms, and the longest
# case mapping (U+0130 "İ", 2 bytes, lowercases to 3). A sequence multiplies them.
_GROWTH = {"NFC": 3.0, "NFD": 3.0, "NFKC": 11.0, "NFKD": 11.0, "Lowercase": 1.5,
           "StripAccents": 1.0, "Strip": 1.0}
_WORD_PRETOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit",
                                 "Punctuation", "Digits"})
# Pieces end after a newline that precedes a non-space (Python's \S is narrower than Oniguruma's:
# every character Oniguruma calls a space, Python does too, so no unsafe cut is made).
_CUT = re.compile(r"\n(?=\S)")
# ... and after ".", "!" or "?" before a space (sentence ends: pieces that repeat).
_CUT_SENTENCES = re.compile(r"\n(?=\S)|[.!?](?= )")
# The same cuts in RE2 for Arrow, each marked by a NUL: after a newline before a character
# Python calls no space (White_Space, plus the separators U+001C-U+001F), and after
# ".", "!" or "?" before a space.
_CUT_MARKS = ((r"\n([^\t-\r\x{1c}-\x{1f}\x{85}\p{Z}])", "\n\x00\\1"),
              (r"([.!?]) ", "\\1\x00 "))
# Normal forms whose stable characters (quick check YES) are known: normalisers made only
# of these leave a text of stable characters as it is.
_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})
# count_above's guess of units per token when choosing which pieces to encode first: low
# enough that one round proves most texts short; a wrong guess costs time, never exactness.
_PROOF_BYTES = 3.0


def _normalizer_kinds(node: dict | None) -> list[str]:
    if node is None:
        return []
    if node.get("type") == "Sequence":
        return [k for n in node.get("normalizers", []) for k in _normalizer_kinds(n)]
    return [node.get("type", "?")]


def _growth(kinds: list[str]) -> float:
    """Largest length growth of a normaliser sequence (inf if unknown: always normalise)."""
    g = 1.0
    for k in kinds:
        g *= _GROWTH.get(k, np.inf)
    return g


def _split(cut: re.Pattern[str], text: str) -> list[str]:
    """``text`` in pieces, each ending where a match of ``cut`` ends.

        >>> _split(_CUT_SENTENCES, "One. Two!\\nThree")
        ['One.', ' Two!\\n', 'Three']
    """
    ends = [m.end() for m in cut.finditer(text)]
    if not ends:
        return [text]
    return [text[a:b] for a, b in zip([0, *ends], [*ends, len(text)], strict=True)
            if b > a]


@cache
def _unstable_pattern(forms: tuple[str, ...]) -> str:
    """RE2 class of the characters that some of ``forms`` may change, or that this Python's
    Unicode tables do not know (a newer tokenizer may decompose them).

        >>> import pyarrow as pa, pyarrow.compute as pc
        >>> texts = pa.array(["café", "cafe\\u0301", "\\uf900", "\\u0378"])
        >>> pc.match_substring_regex(texts, _unstable_pattern(("NFC",))).to_pylist()
        [False, True, True, True]
    """
    unassigned: list[list[int]] = []
    for cp in range(0x80, 0x10000):
        if unicodedata.category(chr(cp)) == "Cn":
            if unassigned and unassigned[-1][1] == cp - 1:
                unassigned[-1][1] = cp
            else:
                unassigned.append([cp, cp])
    extra = "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in unassigned)
    classes = [unstable_class(f)[1:-1] for f in forms]
    return "[" + "".join(classes) + extra + "]"


def _pretokenizer_nodes(node: dict | None) -> list[dict]:
    if node is None:
        return []
    if node.get("type") == "Sequence":
        return [k for n in node.get("pretokenizers", []) for k in _pretokenizer_nodes(n)]
    return [node]


class LoadedTokenizer:
    """A ``tokenizers.Tokenizer`` ready for counting, with what its files say about it."""

    def __init__(self, tokenizer: Tokenizer, config: dict[str, Any] | None = None,
                 source: str = "") -> None:
        self.tokenizer = tokenizer
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.config = config or {}
        self.source = source
        spec = _structure(tokenizer)
        self.unit, self.chunkable, self.why_no_bound = _analyse(spec)
        self._has_normalizer = spec.get("normalizer") is not None
        self._growth = _growth(_normalizer_kinds(spec.get("normalizer")))
        kinds = _normalizer_kinds(spec.get("normalizer"))
        self._forms = tuple(sorted(set(kinds))) if kinds and set(kinds) <= _FORMS else None
        self._cut = _CUT_SENTENCES if not any(
            " " in a["content"] for a in spec.get("added_tokens", [])) else _CUT
        self._pieces_counted = PieceCounts()

    @classmethod
    def load(cls, path: str | Path) -> LoadedTokenizer:
        """From a ``tokenizer.json`` file or a directory holding one."""
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        cfg_file = file.parent / "tokenizer_config.json"
        config = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
        return cls(Tokenizer.from_file(str(file)), config, str(path))

    # -- what the config says ------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer can produce: the base vocabulary plus added tokens."""
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def token_text(self, key: str) -> str | None:
        """``eos_token`` etc. from tokenizer_config.json (plain string or AddedToken dict)."""
        v = self.config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return v if isinstance(v, str) else None

    @property
    def chat_template(self) -> str | None:
        t = self.config.get("chat_template")
        if isinstance(t, list):  # named templates: transformers uses "default"
            named = {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
            t = named.get("default") or next(iter(named.values()), None)
        return t if isinstance(t, str) else None

    def special_token_strings(self) -> dict[str, str | None]:
        keys = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token")
        return {k: self.token_text(k) for k in keys}

    def specials_added(self, add_special_tokens: bool) -> int:
        return int(self.tokenizer.num_special_tokens_to_add(False)) if add_special_tokens else 0

    # -- bound -----------------------------------------------------------------------------
    def upper_bound(self, texts: pa.Array, limit: int, add_special_tokens: bool) -> np.ndarray:
        """Per text, a number ≥ its token count (``inf`` where none is provable).

        Values above ``limit`` may be loose; at or under it they are sound.
        """
        n = len(texts)
        if self.unit is None:
            return np.full(n, np.inf)
        texts = pc.fill_null(texts, "")
        ascii_ = pc.string_is_ascii(texts).to_numpy(zero_copy_only=False)
        measure = pc.binary_length if self.unit == "bytes" else pc.utf8_length
        size = measure(texts).to_numpy(zero_copy_only=False).astype(np.float64)
        if self._has_normalizer:
            # Normalisers may lengthen non-ASCII text: measure those after normalising, but
            # only where that could bring the record under the limit, and where the
            # normaliser's largest growth could take it over. Text of quick-check-stable
            # characters is already normalised: its size is exact.
            exact = ascii_.copy()
            rows = np.flatnonzero(~ascii_ & (size * self._growth > limit))
            if self._forms is not None and rows.size:
                unstable = pc.match_substring_regex(texts.take(pa.array(rows)),
                                                    _unstable_pattern(self._forms))
                exact[rows[~unstable.to_numpy(zero_copy_only=False)]] = True
            grown = size * self._growth
            short = ~exact & (grown <= limit)
            size[short] = grown[short]
            todo = np.flatnonzero(~exact & ~short & (size <= limit * 4))
            if todo.size:
                norm = self.tokenizer.normalizer.normalize_str
                vals = texts.take(pa.array(todo)).to_pylist()
                out = [norm(v) for v in vals]
                if self.unit == "bytes":
                    size[todo] = [len(s.encode("utf-8")) for s in out]
                else:
                    size[todo] = [len(s) for s in out]
                size[~exact & (size > limit * 4)] = np.inf
        return size + self.specials_added(add_special_tokens)

    # -- exact counts ------------------------------------------------------------------------
    def _encode_counts(self, texts: list[str], add_special_tokens: bool) -> list[int]:
        enc = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        # len(e) is len(e.ids) (nothing pads or truncates here) without a list of the ids
        return [len(e) for e in enc(texts, add_special_tokens=add_special_tokens)]

    def count(self, texts: list[str], add_special_tokens: bool = True) -> np.ndarray:
        """Exact token counts, equal to ``len(encode(text).ids)`` for each text."""
        texts = [t or "" for t in texts]
        if not self.chunkable:
            return np.asarray(self._encode_counts(texts, add_special_tokens), dtype=np.int64)
        owner, pid, uniq, _ = self._pieces(texts)
        counted = np.full(len(uniq), -1, dtype=np.int64)
        self._count_pieces(uniq, counted, np.arange(len(uniq)))
        extra = self.specials_added(add_special_tokens)
        return np.bincount(owner, weights=counted[pid], minlength=len(texts)).astype(
            np.int64) + extra

    def _piece_sizes(self, pieces: pa.Array) -> np.ndarray:
        """Per piece a number >= its token count alone, without encoding it: its size
        (grown by the normaliser's factor where not ASCII)."""
        measure = pc.binary_length if self.unit == "bytes" else pc.utf8_length
        units = measure(pieces).to_numpy(zero_copy_only=False).astype(np.float64)
        if self._has_normalizer:
            grows = ~pc.string_is_ascii(pieces).to_numpy(zero_copy_only=False)
            units[grows] *= self._growth
        return units

    def count_above(self, texts: list[str], limit: int,
                    add_special_tokens: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Exact token counts of the texts that may exceed ``limit``, -1 where a text is
        proven within it; and per text a sound bound (its count where counted).

        Counts are additive over a text's pieces (see the module notes), so a text whose
        size exceeds the limit is often proven short after encoding only its largest
        pieces: each encoded piece swaps its size for its (smaller) count. Per text, its
        distinct pieces are taken largest first while its excess over the limit is not yet
        covered as if a token covered ``_PROOF_BYTES`` units; its bound is the counts of
        those pieces plus the sizes of the others. Texts still over the limit are counted
        in full.

        The proof and the bound are functions of the text alone: the piece cache saves
        encoding a piece again, never changes a result, so a bound can stand for a length
        in a report that must not depend on how rows were batched.

            >>> from tokenizers import Tokenizer, models, pre_tokenizers
            >>> tk = Tokenizer(models.WordLevel({"ab": 0, "[UNK]": 1}, unk_token="[UNK]"))
            >>> tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
            >>> lt = LoadedTokenizer(tk)
            >>> counts, bound = lt.count_above(["ab ab\\nab", "ab ab ab ab ab ab"], 4)
            >>> counts.tolist(), bound.tolist()
            ([-1, 6], [4.0, 6.0])
        """
        if not self.chunkable:
            counts = self.count(texts, add_special_tokens)
            return counts, counts.astype(np.float64)
        texts = [t or "" for t in texts]
        n = len(texts)
        extra = self.specials_added(add_special_tokens)
        owner, pid, uniq, pieces = self._pieces(texts)
        size = self._piece_sizes(pieces)[pid]
        excess = np.bincount(owner, weights=size, minlength=n) + extra - limit
        # Per text, its distinct pieces, largest first (the first written first among equals:
        # piece ids depend on the batch); a piece is chosen while the text's excess is not
        # yet covered by the pieces chosen before it.
        pair = owner * len(uniq) + pid
        _, first = np.unique(pair, return_index=True)
        todo = first[np.lexsort((first, -size[first], owner[first]))]
        # Sizes are whole units times products of _GROWTH's factors (binary fractions), so
        # these sums are exact: rounding would let a text's proof depend on the texts
        # before it in the batch.
        finite = np.where(np.isfinite(size[todo]), size[todo], 0.0)
        before = np.cumsum(finite) - finite
        starts = np.searchsorted(owner[todo], np.arange(n))
        before -= np.r_[before, 0][starts][owner[todo]]
        left = excess[owner[todo]]
        # no bound without counting (a normaliser of unknown growth): count every piece
        chosen = todo[(left * _PROOF_BYTES > before * (_PROOF_BYTES - 1))
                      | ~np.isfinite(left)]
        counted = np.full(len(uniq), -1, dtype=np.int64)
        self._count_pieces(uniq, counted, pid[chosen])
        swapped = np.isin(pair, pair[chosen])
        bound = np.bincount(owner, weights=np.where(swapped, counted[pid], size),
                            minlength=n) + extra
        out = np.full(n, -1, dtype=np.int64)
        over = np.flatnonzero(bound > limit)
        if over.size:
            of_over = np.isin(owner, over)
            self._count_pieces(uniq, counted, pid[of_over])
            exact = np.bincount(owner[of_over], weights=counted[pid[of_over]],
                                minlength=n).astype(np.int64) + extra
            out[over] = exact[over]
            bound[over] = exact[over]
        return out, bound

    def _count_pieces(self, uniq: list[str], counted: np.ndarray, ids: np.ndarray) -> None:
        """Fill ``counted`` (-1: not known yet) for the pieces ``ids`` of ``uniq`` (repeats
        allowed), encoding those no cache knows. Only these pieces are looked up."""
        ids = np.unique(ids)
        self._pieces_counted.fill(uniq, counted, ids[counted[ids] < 0], self._encode_pieces)

    def _encode_pieces(self, pieces: list[str]) -> list[int]:
        return self._encode_counts(pieces, False)

    def _pieces(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[str], pa.Array]:
        """The texts cut into pieces: per piece its text's index and an id, and the
        distinct pieces by id (as a list and as an Arrow array). Cut with Arrow kernels (a
        NUL marks each cut), unless a text holds a NUL itself."""
        arr = pa.array(texts, pa.large_string())
        if pc.any(pc.match_substring(arr, "\x00")).as_py():
            lists = pa.array([_split(self._cut, t) for t in texts], pa.list_(pa.large_string()))
        else:
            for pattern, mark in _CUT_MARKS[: 2 if self._cut is _CUT_SENTENCES else 1]:
                arr = pc.replace_substring_regex(arr, pattern, mark)
            lists = pc.split_pattern(arr, "\x00")
        owner = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
        codes = pc.list_flatten(lists).dictionary_encode()
        return (owner, codes.indices.to_numpy(zero_copy_only=False).astype(np.int64),
                codes.dictionary.to_pylist(), codes.dictionary)

    def encode(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
        """Full encodings (ids and character offsets)."""
        return self.tokenizer.encode_batch([t or "" for t in texts],
                                           add_special_tokens=add_special_tokens)


def _structure(tokenizer: Tokenizer) -> dict[str, Any]:
    """The parts of the ``tokenizer.json`` structure that :func:`_analyse` reads.

    Built from the components, not from ``json.loads(tokenizer.to_str())``: for a 150k-token
    vocabulary that round trip costs ~0.4 s and leaves ~10 MB of freed Python objects in
    every process that loads the tokenizer, only to read a few small nodes.

        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> tk = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
        >>> tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        >>> full = json.loads(tk.to_str())
        >>> got = _structure(tk)
        >>> got["pre_tokenizer"] == full["pre_tokenizer"], got["model"]["type"]
        (True, 'WordLevel')
    """
    def node(component: Any) -> dict[str, Any] | None:
        return None if component is None else json.loads(component.__getstate__())

    model = tokenizer.model
    added = [{"content": t.content, "lstrip": t.lstrip, "rstrip": t.rstrip}
             for _, t in sorted(tokenizer.get_added_tokens_decoder().items())]
    return {"model": {"type": type(model).__name__, "dropout": getattr(model, "dropout", None)},
            "normalizer": node(tokenizer.normalizer),
            "pre_tokenizer": node(tokenizer.pre_tokenizer),
            "added_tokens": added}


def _analyse(spec: dict[str, Any]) -> tuple[str | None, bool, str]:
    """(bound unit: 'bytes' | 'chars' | None, additive at line starts?, why no bound)."""
    model = spec.get("model", {}) or {}
    mtype = model.get("type")
    norms = _normalizer_kinds(spec.get("normalizer"))
    pres = _pretokenizer_nodes(spec.get("pre_tokenizer"))
    added = spec.get("added_tokens", []) or []
    if any(k not in _LOCAL_NORMALIZERS | _BOUND_ONLY_NORMALIZERS for k in norms):
        return None, False, f"normalizer {norms} may lengthen text"
    unit: str | None = None
    why = ""
    ptypes = [p.get("type") for p in pres]
    byte_level = [p for p in pres if p.get("type") == "ByteLevel"]
    if mtype == "BPE" and byte_level and not model.get("dropout"):
        if any(p.get("add_prefix_space") for p in byte_level):
            why = "byte-level pre-tokenizer adds a prefix space"
        elif all(t in {"ByteLevel", "Split"} for t in ptypes):
            unit = "bytes"
        else:
            why = f"pre-tokenizers {ptypes}"
    elif mtype in {"WordPiece", "WordLevel"} and all(t in _WORD_PRETOKENIZERS for t in ptypes) \
            and ptypes:
        unit = "chars"
    else:
        why = f"no proof for a {mtype} model with pre-tokenizers {ptypes}"
    chunkable = unit is not None and not any(k in _BOUND_ONLY_NORMALIZERS for k in norms)
    if chunkable:
        for p in pres:
            t = p.get("type")
            if t == "Split":
                pat = (p.get("pattern") or {}).get("Regex")
                if pat not in _KNOWN_SPLIT_REGEXES or p.get("behavior") != "Isolated" \
                        or p.get("invert"):
                    chunkable = False
            elif t == "ByteLevel":
                if p.get("use_regex", True) and len(pres) > 1:
                    chunkable = False
        if any("\n" in a.get("content", "") or a.get("lstrip") or a.get("rstrip")
               for a in added):
            chunkable = False
    return unit, chunkable, why
