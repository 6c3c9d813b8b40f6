"""``control_chars``: C0/C1 controls, NUL, CR line endings, U+2028/U+2029, lone surrogates, U+FFFD.

=====================  ===========================================  ==================
code                   characters                                   default
=====================  ===========================================  ==================
``nul``                U+0000                                       removed
``c0_control``         U+0001–U+0008, U+000B, U+000C, U+000E–U+001F,  removed
                       U+007F (tab and newline are kept)
``c1_control``         U+0080–U+009F (U+0085 NEXT LINE becomes       removed
                       ``\\n``)
``crlf``               ``\\r\\n``                                     → ``\\n``
``cr``                 a lone ``\\r``                                 → ``\\n``
``line_separator``     U+2028 LINE / U+2029 PARAGRAPH SEPARATOR     → ``\\n``
``lone_surrogate``     UTF-16 surrogates in the bytes (CESU-8):     pairs joined, lone
                       invalid UTF-8 that slipped into a string     ones → U+FFFD
``replacement_char``   U+FFFD: the text was damaged upstream        flagged
=====================  ===========================================  ==================

``line_endings: keep`` and ``unicode_line_breaks: keep`` switch the line policies off.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
from ftfy.fixes import fix_surrogates

from cleanpipe.stages._text_rules import Rule, RuleSet, cls, expand
from cleanpipe.stages._text_util import plain_input, put, regex_mask
from cleanpipe.stages.base import Action, Findings, TextResult, TextStage

_C0 = ((0x01, 0x08), 0x0B, 0x0C, (0x0E, 0x1F), 0x7F)
_C1 = ((0x80, 0x84), (0x86, 0x9F))
# A UTF-8 encoded surrogate (U+D800–U+DFFF): ED A0..BF 80..BF, read as Latin-1 bytes.
_SURROGATE_BYTES = r"\xED[\xA0-\xBF][\x80-\xBF]"


def _fix_surrogate_bytes(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    raw = texts.view(pa.large_binary() if pa.types.is_large_string(texts.type)
                     else pa.binary())
    hit = np.flatnonzero(regex_mask(raw, _SURROGATE_BYTES))
    if hit.size == 0:
        return texts, hit
    fixed = [fix_surrogates(b.decode("utf-8", "surrogatepass"))
             for b in raw.take(pa.array(hit)).to_pylist()]
    return put(texts, hit, pa.array(fixed, pa.large_string())), hit


class ControlChars(TextStage):
    """Remove control characters and normalise line breaks; flag U+FFFD.

        >>> stage = ControlChars()
        >>> stage("a\\x00b\\x07c\\r\\nd\\re\\u2028f\\x85g")
        'abc\\nd\\ne\\nf\\ng'
        >>> stage(["tab\\tand\\nnewline stay", "damaged \\ufffd text is only flagged"])
        ['tab\\tand\\nnewline stay', 'damaged \\ufffd text is only flagged']
    """

    name = "control_chars"
    codes = {
        "nul": Action.FIX, "c0_control": Action.FIX, "c1_control": Action.FIX,
        "crlf": Action.FIX, "cr": Action.FIX, "line_separator": Action.FIX,
        "lone_surrogate": Action.FIX, "replacement_char": Action.FLAG,
    }

    line_endings: Literal["lf", "keep"] = "lf"
    """``lf``: CRLF and lone CR become ``\\n``; ``keep``: leave them."""
    unicode_line_breaks: Literal["newline", "keep"] = "newline"
    """``newline``: U+2028/U+2029 become ``\\n``; ``keep``: leave them."""
    examples: int = 5
    """Before/after examples kept per code per batch."""

    def _rules(self) -> list[Rule]:
        rules = [
            Rule("nul", r"\x00", codepoints=(0,)),
            Rule("c0_control", cls(*_C0), codepoints=expand(*_C0)),
            Rule("c1_control", r"\x{85}", replacement="\n", codepoints=(0x85,)),
            Rule("c1_control", cls(*_C1), codepoints=expand(*_C1)),
        ]
        if self.line_endings == "lf":
            rules += [Rule("crlf", r"\r\n", replacement="\n", detail="CRLF"),
                      Rule("cr", r"\r", replacement="\n", detail="CR")]
        if self.unicode_line_breaks == "newline":
            rules.append(Rule("line_separator", r"[\x{2028}\x{2029}]", replacement="\n",
                              codepoints=(0x2028, 0x2029)))
        rules.append(Rule("replacement_char", r"\x{FFFD}", codepoints=(0xFFFD,),
                          replacement=""))
        return rules

    def transform(self, texts: pa.Array) -> TextResult:
        found = Findings(self.name)
        hit = np.zeros(0, dtype=np.int64)
        original = texts
        if pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type):
            fixed, hit = _fix_surrogate_bytes(texts)
            if hit.size:
                found.add(hit, "lone_surrogate", self.action_of("lone_surrogate"),
                          detail="surrogate code point in UTF-8 bytes")
                if self.action_of("lone_surrogate") is Action.FIX:
                    texts = fixed
        if hit.size and self.action_of("lone_surrogate") is not Action.FIX:
            # The other kernels need valid UTF-8: leave the damaged strings untouched.
            texts = put(texts, hit, fixed.take(pa.array(hit)))
        res = RuleSet(self.name, self._rules(), self.action_of, self.examples).apply(texts)
        if hit.size and self.action_of("lone_surrogate") is not Action.FIX:
            out = put(res.texts, hit, original.take(pa.array(hit)).cast(pa.large_string()))
            res = TextResult(out, res.findings, res.metrics)
        found.extend(res.findings)
        res.metrics["lone_surrogate_strings"] = int(hit.size)
        return TextResult(res.texts, found, res.metrics)

    def __call__(self, data: object) -> object:
        return super().__call__(plain_input(data))
