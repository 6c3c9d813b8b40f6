r"""``unicode_fix``: ftfy's Unicode repair, exact, with a vectorised fast path.

Output equals ``ftfy.fix_text(text, stage.ftfy_config())`` for every string that ftfy's own
output is stable on, which is every text field of the real corpora it is tested on. ftfy works
line by line and one of its fixes can create a line break (``\r`` becomes ``\n``), after which
a second ``fix_text`` may find more to fix (``"&ap;\r<b>"``: the ``<`` turns off entity
decoding for the one line, the next pass sees two lines and decodes ``&ap;``). There the stage
applies ftfy again until the text stops changing, so that running the stage twice gives what
running it once gave (a cleaned dataset can be cleaned again without new findings). Most strings
cannot be changed by ftfy at all; :mod:`cleanpipe.text.ftfy_safe` proves that for
whole arrays with one RE2 pass, and only the rest goes through ftfy (in the engine's worker
processes, so in parallel across batches).
"""

from __future__ import annotations

from typing import Literal

import ftfy
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from cleanpipe.contract.stage import Action, ExampleCount, Findings, TextResult, TextStage
from cleanpipe.text.arrays import examples, put, regex_mask
from cleanpipe.text.ftfy_safe import needs_ftfy_regex

#: One report code per ftfy fix, so rows are counted by the fix that changed them.
FIX_CODES = (
    "unescape_html", "fix_encoding", "restore_byte_a0", "replace_lossy_sequences",
    "decode_inconsistent_utf8", "fix_c1_controls", "fix_latin_ligatures",
    "fix_character_width", "uncurl_quotes", "fix_line_breaks", "fix_surrogates",
    "remove_terminal_escapes", "remove_control_chars", "normalization",
)


def _segments(text: str, max_length: int) -> list[str]:
    """``text`` cut where ``ftfy.fix_text`` cuts it: after each line break, and every
    ``max_length`` characters of a longer line."""
    out: list[str] = []
    pos = 0
    while pos < len(text):
        brk = text.find("\n", pos) + 1
        if brk == 0:
            brk = len(text)
        if brk - pos > max_length:
            brk = pos + max_length
        out.append(text[pos:brk])
        pos = brk
    return out


def _explain(segments: list[str], needs: list[bool], config: ftfy.TextFixerConfig
             ) -> tuple[str, dict[str, str]]:
    """``ftfy.fix_text`` of the text cut into ``segments`` (:func:`_segments`), plus
    ``{code: detail}`` of the steps that fired.

    Walks the segments exactly as ``fix_text`` does (same switch-off of
    ``unescape_html="auto"`` after the first ``<``) but asks ``fix_and_explain`` for the
    steps, so the explanation costs no second pass. A segment whose ``needs`` is false is
    kept without asking ftfy: the caller proved that ftfy leaves it alone.
    """
    out: list[str] = []
    steps: dict[str, str] = {}
    for segment, need in zip(segments, needs, strict=True):
        if config.unescape_html == "auto" and "<" in segment:
            config = config._replace(unescape_html=False)
        if not need:
            out.append(segment)
            continue
        fixed, plan = ftfy.fix_and_explain(segment, config)
        out.append(fixed)
        encoding: list[str] = []
        for action, param in plan or ():
            if action in ("encode", "decode"):
                encoding.append(param)
            elif action == "normalize":
                steps["normalization"] = param
            else:
                steps[param] = param
        if encoding:
            steps["fix_encoding"] = "→".join(encoding)
    return "".join(out), steps


#: ftfy passes after which a string that still changes is taken as it is (never reached on any
#: input seen: each pass only fixes what a new line break exposed)
MAX_PASSES = 8


def _fix_until_stable(texts: list[str], config: ftfy.TextFixerConfig,
                      pattern: str) -> list[tuple[str, dict[str, str]]]:
    r"""Per text, :func:`_explain` repeated until the text stops changing, and the steps of
    every pass.

    Segments that ``pattern`` (:func:`needs_ftfy_regex` of ``config``) does not match are
    kept as they are: the proof that ftfy leaves such a text alone holds for a segment
    as for any text, and switching ``unescape_html`` off only takes a step away. One Arrow
    match per pass covers the segments of every text still changing (each match compiles
    the 18k-character pattern, 1-2 ms). On t0, two in five segments of the strings that
    reach ftfy are skipped.

        >>> cfg = UnicodeFix(fix_line_breaks=True).ftfy_config()
        >>> ftfy.fix_text("&ap;\r<b>", cfg)
        '&ap;\n<b>'
        >>> _fix_until_stable(["&ap;\r<b>"], cfg, needs_ftfy_regex(cfg))
        [('≈\n<b>', {'fix_line_breaks': 'fix_line_breaks', 'unescape_html': 'unescape_html'})]
    """
    out: list[tuple[str, dict[str, str]]] = [(t, {}) for t in texts]
    cur: dict[int, str] = dict(enumerate(texts))  # the texts a pass still has to fix
    for n in range(MAX_PASSES):
        if not cur:
            break
        segs = {i: _segments(t, config.max_decode_length) for i, t in cur.items()}
        flat = [s for i in cur for s in segs[i]]
        mask = regex_mask(pa.array(flat, pa.large_string()), pattern).tolist()
        at = 0
        changing: dict[int, str] = {}
        for i, text in cur.items():
            k = len(segs[i])
            fixed, more = _explain(segs[i], mask[at:at + k], config)
            at += k
            steps = out[i][1]
            for code, detail in more.items():
                if code == "fix_encoding" and code in steps and steps[code] != detail:
                    detail = f"{steps[code]}; {detail}"
                steps[code] = detail
            out[i] = (fixed, steps)
            if fixed != text and n < MAX_PASSES - 1:
                changing[i] = fixed
        cur = changing
    return out


class UnicodeFix(TextStage):
    """Repair mojibake, HTML entities, C1 controls and other Unicode damage with ftfy.

    Every ``ftfy.TextFixerConfig`` option is a parameter. Four defaults differ from ftfy's:
    ``fix_character_width`` and ``uncurl_quotes`` are off, because they rewrite legitimate
    Chinese full-width punctuation (，：（）) and curly quotes (“”) into ASCII; turn them on for
    English-only data if you want that. ``remove_control_chars`` and ``fix_line_breaks`` are
    off because ``control_chars`` and ``invisible_chars`` do that work after this stage (repair
    comes first, see :mod:`cleanpipe.stage_order`), naming each character under its own code
    (``nul``, ``crlf``, ``bom``...) where ftfy would record one code for all; turn them on when
    this stage runs alone. Normalization is NFC; ``NFKC`` also folds compatibility characters
    and so rewrites CJK full-width punctuation too.

    Each changed string is counted under the fix that changed it (codes named after ftfy's
    fixes: ``fix_encoding`` with the encodings in ``detail``, ``unescape_html``,
    ``fix_c1_controls``, ``fix_line_breaks``, ``normalization``, ...).

        >>> stage = UnicodeFix()
        >>> stage("The Mona Lisa doesnÃ¢â‚¬â„¢t have eyebrows.")
        'The Mona Lisa doesn’t have eyebrows.'
        >>> stage(["caf&eacute;", "plain", "“引号”，保留"])
        ['café', 'plain', '“引号”，保留']
    """

    name = "unicode_fix"
    codes = {code: Action.FIX for code in FIX_CODES}

    unescape_html: Literal["auto"] | bool = "auto"
    """Decode HTML entities; ``auto`` skips segments after a literal ``<`` (real HTML)."""
    remove_terminal_escapes: bool = True
    """Remove ANSI terminal escape sequences (colours)."""
    fix_encoding: bool = True
    """Detect mojibake and re-decode it (the four options below refine this)."""
    restore_byte_a0: bool = True
    """Allow a space to stand for a lost U+00A0 byte inside mojibake."""
    replace_lossy_sequences: bool = True
    """Replace mojibake partly lost to ``?``/``�`` with ``�``."""
    decode_inconsistent_utf8: bool = True
    """Fix UTF-8 mojibake embedded in otherwise correct text."""
    fix_c1_controls: bool = True
    """Read C1 controls (U+0080–U+009F) as their Windows-1252 characters."""
    fix_latin_ligatures: bool = True
    """Split Latin ligatures such as ``ﬁ`` into letters."""
    fix_character_width: bool = False
    """Replace full-width Latin and half-width Katakana (and U+3000) with standard widths.
    Off by default (ftfy: on): it rewrites Chinese full-width punctuation."""
    uncurl_quotes: bool = False
    """Replace curly quotes with straight ones. Off by default (ftfy: on)."""
    fix_line_breaks: bool = False
    """Turn CRLF, CR, U+2028, U+2029 and U+0085 into ``\\n``. Off by default (ftfy: on):
    ``control_chars``, which runs after this stage, does it with a code per line break."""
    fix_surrogates: bool = True
    """Join UTF-16 surrogate pairs, replace lone ones with U+FFFD."""
    remove_control_chars: bool = False
    """Remove ftfy's table of invisible control characters (C0 controls, U+FEFF, U+206A–U+206F,
    U+FFF9–U+FFFC). Off by default (ftfy: on): ``control_chars`` and ``invisible_chars``,
    which run after this stage, remove them with a code per character."""
    normalization: Literal["NFC", "NFD", "NFKC", "NFKD"] | None = "NFC"
    """Unicode normalization; NFKC also rewrites full-width CJK punctuation; None for none."""
    max_decode_length: int = Field(1_000_000, ge=1)
    """Longest segment ftfy fixes in one piece."""
    examples: ExampleCount = 5
    """Before/after examples kept per code per batch."""

    def ftfy_config(self) -> ftfy.TextFixerConfig:
        """The ``ftfy.TextFixerConfig`` this stage applies."""
        return ftfy.TextFixerConfig(
            unescape_html=self.unescape_html,
            remove_terminal_escapes=self.remove_terminal_escapes,
            fix_encoding=self.fix_encoding,
            restore_byte_a0=self.restore_byte_a0,
            replace_lossy_sequences=self.replace_lossy_sequences,
            decode_inconsistent_utf8=self.decode_inconsistent_utf8,
            fix_c1_controls=self.fix_c1_controls,
            fix_latin_ligatures=self.fix_latin_ligatures,
            fix_character_width=self.fix_character_width,
            uncurl_quotes=self.uncurl_quotes,
            fix_line_breaks=self.fix_line_breaks,
            fix_surrogates=self.fix_surrogates,
            remove_control_chars=self.remove_control_chars,
            normalization=self.normalization,
            max_decode_length=self.max_decode_length,
            explain=True,
        )

    def setup(self) -> None:
        # Building the proof tables takes about a second; do it once per process.
        needs_ftfy_regex(self.ftfy_config())

    def candidates(self, texts: pa.Array) -> np.ndarray:
        """Positions of the strings ftfy might change (all others it provably leaves alone)."""
        return np.flatnonzero(regex_mask(texts, needs_ftfy_regex(self.ftfy_config())))

    def transform(self, texts: pa.Array) -> TextResult:
        config = self.ftfy_config()
        found = Findings(self.name)
        cand = self.candidates(texts)
        metrics = {"strings": len(texts), "ftfy_strings": int(cand.size), "changed_strings": 0,
                   "bytes": int(pc.sum(pc.binary_length(texts)).as_py() or 0) if len(texts) else 0}
        if cand.size == 0:
            return TextResult(texts, found, metrics)
        changed: list[int] = []
        originals: list[str] = []
        fixed_list: list[str] = []
        fired: dict[str, list[tuple[int, int, str]]] = {}
        sub = texts.take(pa.array(cand))
        line_fixed = np.zeros(cand.size, dtype=bool)
        if config.fix_line_breaks:
            # Strings whose only business for ftfy is CR line breaks: once CRLF/CR become LF
            # the result is provably one ftfy leaves alone, and no earlier ftfy step can act on
            # the original (no entity, not "bad", no other unsafe character: the line-fixed
            # text has none, and CR is in no explicit class of those patterns), so
            # ftfy.fix_text gives exactly the line-fixed text. Done in bulk. Not for a string
            # longer than max_decode_length: ftfy may cut a CRLF there and make two breaks.
            lf = pc.replace_substring(pc.replace_substring(sub, "\r\n", "\n"), "\r", "\n")
            has_cr = pc.fill_null(pc.match_substring(sub, "\r"), False).to_numpy(
                zero_copy_only=False)
            length = pc.fill_null(pc.utf8_length(sub), 0).to_numpy(zero_copy_only=False)
            has_cr = has_cr & (length <= config.max_decode_length)
            line_fixed = has_cr & ~regex_mask(lf, needs_ftfy_regex(config))
            if line_fixed.any():
                for k, (old, new) in enumerate(zip(
                        sub.filter(pa.array(line_fixed)).to_pylist(),
                        lf.filter(pa.array(line_fixed)).to_pylist(), strict=True)):
                    p = int(cand[np.flatnonzero(line_fixed)[k]])
                    fired.setdefault("fix_line_breaks", []).append(
                        (p, len(changed), "fix_line_breaks"))
                    changed.append(p)
                    originals.append(old)
                    fixed_list.append(new)
        metrics["line_break_only_strings"] = int(line_fixed.sum())
        rest = cand[~line_fixed]
        originals_rest = texts.take(pa.array(rest)).to_pylist()
        fixes = _fix_until_stable(originals_rest, config, needs_ftfy_regex(config))
        for p, text, (fixed, steps) in zip(rest.tolist(), originals_rest, fixes, strict=True):
            if fixed == text:
                continue
            for code, detail in steps.items():
                fired.setdefault(code, []).append((p, len(changed), detail))
            changed.append(p)
            originals.append(text)
            fixed_list.append(fixed)
        # A string is rewritten only when every fix that fired on it has action "fix"; a
        # flag/drop/fail on any of them keeps it as it was (and records the finding).
        rewrite = [k for k, p in enumerate(changed)
                   if all(self.action_of(code) is Action.FIX for code, hits in fired.items()
                          if any(h[0] == p for h in hits))] if any(
            self.action_of(c) is not Action.FIX for c in fired) else list(range(len(changed)))
        order = sorted(rewrite, key=lambda k: changed[k])
        pos = np.asarray([changed[k] for k in order], dtype=np.int64)
        out = put(texts, pos, pa.array([fixed_list[k] for k in order], pa.large_string()))
        olds = pa.array(originals, pa.large_string())
        news = pa.array(fixed_list, pa.large_string())
        for code, hits in fired.items():
            hits.sort()
            hp = np.array([h[0] for h in hits], dtype=np.int64)
            local = np.array([h[1] for h in hits], dtype=np.int64)
            before, after = examples(local, olds, news, self.examples)
            found.add(hp, code, self.action_of(code), detail=[h[2] for h in hits],
                      before=before, after=after)
        metrics["changed_strings"] = len(rewrite)
        return TextResult(out, found, metrics)
