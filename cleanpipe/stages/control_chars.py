"""``control_chars``: C0/C1 controls, NUL, CR line endings, U+2028/U+2029, lone surrogates, U+FFFD.

=====================  ===========================================  ==================
code                   characters                                   default
=====================  ===========================================  ==================
``nul``                U+0000                                       removed
``c0_control``         U+0001–U+0008, U+000B, U+000C, U+000E–U+001F,  removed
                       U+007F (tab and newline are kept)
``c1_control``         U+0080–U+009F (U+0085 NEXT LINE becomes       removed
                       ``\\n``)
``crlf``               ``\\r\\n`` (Windows line endings: cosmetic)     flagged (fix: → ``\\n``)
``cr``                 a lone ``\\r`` (a broken line break)           → ``\\n``
``line_separator``     U+2028 LINE / U+2029 PARAGRAPH SEPARATOR     → ``\\n``
``lone_surrogate``     UTF-16 surrogates in the bytes (CESU-8):     pairs joined, lone
                       invalid UTF-8 that slipped into a string     ones → U+FFFD
``replacement_char``   U+FFFD: the text was damaged upstream        flagged
=====================  ===========================================  ==================

``line_endings: keep`` and ``unicode_line_breaks: keep`` switch the line policies off.
CRLF is only flagged by default: it is a consistent line break the trainer sees as such
(T0's samsum dialogues use it), so rewriting it changes clean rows; ``actions: {crlf: fix}``
normalises it. A lone CR is fixed: it is a line break that most tools show as none.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

import numpy as np
import pyarrow as pa
from ftfy.fixes import fix_surrogates

from cleanpipe.columns import is_utf8
from cleanpipe.contract.stage import Action, ExampleCount, Findings, TextResult, TextStage
from cleanpipe.text.arrays import put, regex_mask
from cleanpipe.text.byte_scan import ByteScan
from cleanpipe.text.rules import Rule, RuleSet, cls, expand

_C0 = ((0x01, 0x08), 0x0B, 0x0C, (0x0E, 0x1F), 0x7F)
_C1 = ((0x80, 0x84), (0x86, 0x9F))
# A UTF-8 encoded surrogate (U+D800–U+DFFF): ED A0..BF 80..BF, read as Latin-1 bytes.
_SURROGATE_BYTES = r"\xED[\xA0-\xBF][\x80-\xBF]"


def _fix_surrogate_bytes(texts: pa.Array, cand: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Join/replace UTF-16 surrogates in the strings at ``cand`` (the byte scan's hits)."""
    if cand.size == 0:
        return texts, cand
    raw = texts.view(pa.large_binary() if pa.types.is_large_string(texts.type)
                     else pa.binary()).take(pa.array(cand))
    hit_local = np.flatnonzero(regex_mask(raw, _SURROGATE_BYTES))
    hit = cand[hit_local]
    if hit.size == 0:
        return texts, hit
    fixed = [fix_surrogates(b.decode("utf-8", "surrogatepass"))
             for b in raw.take(pa.array(hit_local)).to_pylist()]
    return put(texts, hit, pa.array(fixed, pa.large_string())), hit


_LONE_CR = re.compile(r"\r(?!\n)")


def _lone_cr_to_lf(texts: list[str]) -> list[str]:
    # RE2 has no look-ahead, and the CR of a CRLF that is kept (flagged) must stay a CR.
    return [_LONE_CR.sub("\n", t) for t in texts]


class ControlChars(TextStage):
    """Remove control characters, mend broken line breaks; flag CRLF and U+FFFD.

        >>> stage = ControlChars()
        >>> stage("a\\x00b\\x07c\\r\\nd\\re\\u2028f\\x85g")
        'abc\\r\\nd\\ne\\nf\\ng'
        >>> ControlChars(actions={"crlf": "fix"})("a\\r\\nb\\r\\r\\nc")
        'a\\nb\\n\\nc'
        >>> stage(["tab\\tand\\nnewline stay", "damaged \\ufffd text is only flagged"])
        ['tab\\tand\\nnewline stay', 'damaged \\ufffd text is only flagged']
    """

    name = "control_chars"
    codes = {
        "nul": Action.FIX, "c0_control": Action.FIX, "c1_control": Action.FIX,
        "crlf": Action.FLAG, "cr": Action.FIX, "line_separator": Action.FIX,
        "lone_surrogate": Action.FIX, "replacement_char": Action.FLAG,
    }

    line_endings: Literal["lf", "keep"] = "lf"
    """``lf``: find CRLF (flagged by default) and lone CRs (→ ``\\n``); ``keep``: leave both."""
    unicode_line_breaks: Literal["newline", "keep"] = "newline"
    """``newline``: U+2028/U+2029 become ``\\n``; ``keep``: leave them."""
    examples: ExampleCount = 5
    """Before/after examples kept per code per batch."""

    def _rules(self) -> tuple[list[Rule], list[tuple]]:
        """The rules, and for each the code points the byte scan looks for."""
        rules = [
            Rule("nul", r"\x00", codepoints=(0,), exact=True),
            Rule("c0_control", cls(*_C0), codepoints=expand(*_C0), exact=True),
            Rule("c1_control", r"\x{85}", replacement="\n", codepoints=(0x85,),
                 exact=True),
            Rule("c1_control", cls(*_C1), codepoints=expand(*_C1), exact=True),
        ]
        groups: list[tuple] = [(0,), _C0, (0x85,), _C1]
        if self.line_endings == "lf":
            rules.append(Rule("crlf", r"\r\n", replacement="\n", detail="CRLF"))
            if self.action_of("crlf") is Action.FIX:
                # every CRLF is a LF by now: any CR left is a lone one
                rules.append(Rule("cr", r"\r", replacement="\n", detail="CR", exact=True))
            else:
                rules.append(Rule("cr", r"\r(?:[^\n]|$)", fixer=_lone_cr_to_lf, detail="CR"))
            groups += [(0x0D,), (0x0D,)]
        if self.unicode_line_breaks == "newline":
            rules.append(Rule("line_separator", r"[\x{2028}\x{2029}]", replacement="\n",
                              codepoints=(0x2028, 0x2029), exact=True))
            groups.append((0x2028, 0x2029))
        rules.append(Rule("replacement_char", r"\x{FFFD}", codepoints=(0xFFFD,),
                          replacement="", exact=True))
        groups.append((0xFFFD,))
        return rules, groups

    def transform(self, texts: pa.Array) -> TextResult:
        found = Findings(self.name)
        hit = np.zeros(0, dtype=np.int64)
        original = texts
        rules, groups = self._rules()
        scan = _scan(tuple(groups))
        surrogate_bit = np.uint32(1 << len(rules))
        bits = scan(texts)
        if is_utf8(texts.type):
            fixed, hit = _fix_surrogate_bytes(texts, np.flatnonzero(bits & surrogate_bit))
            if hit.size:
                found.add(hit, "lone_surrogate", self.action_of("lone_surrogate"),
                          detail="surrogate code point in UTF-8 bytes")
                if self.action_of("lone_surrogate") is Action.FIX:
                    texts = fixed
        if hit.size and self.action_of("lone_surrogate") is not Action.FIX:
            # The other kernels need valid UTF-8: leave the damaged strings untouched.
            texts = put(texts, hit, fixed.take(pa.array(hit)))
        if hit.size:
            # Those strings changed: scan them again.
            bits[hit] = scan(fixed.take(pa.array(hit)))
        bits &= ~surrogate_bit
        res = RuleSet(self.name, rules, self.action_of, self.examples,
                      scan=scan).apply(texts, bits)
        if hit.size and self.action_of("lone_surrogate") is not Action.FIX:
            out = put(res.texts, hit, original.take(pa.array(hit)).cast(pa.large_string()))
            res = TextResult(out, res.findings, res.metrics)
        found.extend(res.findings)
        res.metrics["lone_surrogate_strings"] = int(hit.size)
        return TextResult(res.texts, found, res.metrics)


@functools.cache
def _scan(groups: tuple) -> ByteScan:
    # One group per rule, then the UTF-16 surrogates (CESU-8 bytes decode into that range).
    return ByteScan([*groups, ((0xD800, 0xDFFF),)])
