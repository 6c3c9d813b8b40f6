"""``invisible_chars``: remove zero-width, bidi, soft-hyphen, tag and other format characters.

The table (code → characters):

=========================  ==========================================================
``bom``                    U+FEFF at the start of a string
``zero_width``             U+200B, U+2060, U+180E, U+FEFF elsewhere; U+200C ZWNJ and
                           U+200D ZWJ outside the contexts kept below
``bidi_control``           U+200E, U+200F, U+061C, U+202A–U+202E, U+2066–U+2069
``soft_hyphen``            U+00AD
``tag_char``               U+E0000–U+E007F (except inside an emoji tag sequence, 🏴 + tags
                           + U+E007F, such as the flag of Wales)
``interlinear_annotation`` U+FFF9–U+FFFB
``invisible_operator``     U+2061–U+2064 (function application, invisible times/separator/plus)
``deprecated_format``      U+206A–U+206F
=========================  ==========================================================

Kept unless ``keep_joiners`` is off: ZWJ between two emoji (👩‍💻), and ZWNJ/ZWJ between two
letters or marks of the scripts that need them for shaping (Arabic and Persian, Syriac,
N'Ko, and the Indic scripts Devanagari through Sinhala).
"""

from __future__ import annotations

import functools
import re

import pyarrow as pa

from cleanpipe.contract.stage import Action, ExampleCount, TextResult, TextStage
from cleanpipe.text.byte_scan import ByteScan
from cleanpipe.text.rules import Rule, RuleSet, cls, expand

_ZW = (0x200B, 0x2060, 0x180E)
_BIDI = (0x200E, 0x200F, 0x061C, (0x202A, 0x202E), (0x2066, 0x2069))
_TAGS = (0xE0000, 0xE007F)

# Joining scripts: Arabic (incl. supplements and presentation forms), Syriac, N'Ko, Indic.
_JOINING = (
    "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff"
    "\u0700-\u074f\u07c0-\u07ff\u0900-\u0dff"
)
_EMOJI = (
    "\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u21aa\u231a-\u23ff\u24c2\u25aa-\u27bf"
    "\u2934\u2935\u2b00-\u2bff\u3030\u303d\u3297\u3299\ufe0f\u20e3"
    "\U0001f000-\U0001faff"
)
_KEEP_JOINER = re.compile(
    f"(?<=[{_JOINING}])[\u200c\u200d](?=[{_JOINING}])|(?<=[{_EMOJI}])\u200d(?=[{_EMOJI}])"
)
_JOINER = re.compile("[\u200c\u200d]")
_TAG_SEQ = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
_TAG = re.compile("[\U000e0000-\U000e007f]")


def _drop_joiners(keep: bool):
    def fix(texts: list[str]) -> list[str]:
        if not keep:
            return [_JOINER.sub("", t) for t in texts]
        out = []
        for t in texts:
            kept = {m.start() for m in _KEEP_JOINER.finditer(t)}
            out.append("".join(ch for i, ch in enumerate(t)
                               if ch not in "\u200c\u200d" or i in kept))
        return out
    return fix


def _drop_tags(keep_sequences: bool):
    def fix(texts: list[str]) -> list[str]:
        out = []
        for t in texts:
            if not keep_sequences:
                out.append(_TAG.sub("", t))
                continue
            parts, last = [], 0
            for m in _TAG_SEQ.finditer(t):
                parts.append(_TAG.sub("", t[last:m.start()]))
                parts.append(m.group(0))
                last = m.end()
            parts.append(_TAG.sub("", t[last:]))
            out.append("".join(parts))
        return out
    return fix


class InvisibleChars(TextStage):
    """Remove invisible characters: zero-width, bidi controls, soft hyphens, tags, BOMs.

    Counts every removed character by code point in the metrics (``codepoints``), and names
    them in each finding's ``detail``.

        >>> stage = InvisibleChars()
        >>> stage("\\ufeffzero\\u200bwidth \\u202eflip\\u202c soft\\u00adhyphen")
        'zerowidth flip softhyphen'

    A joiner that shapes the text (inside an emoji sequence, or the ZWNJ of Persian script)
    is part of the writing and stays; a stray one between Latin letters goes::

        >>> stage(["👩\\u200d💻", "می\\u200cخواهم", "a\\u200db"])
        ['👩\\u200d💻', 'می\\u200cخواهم', 'ab']
    """

    name = "invisible_chars"
    codes = {
        "bom": Action.FIX, "zero_width": Action.FIX, "bidi_control": Action.FIX,
        "soft_hyphen": Action.FIX, "tag_char": Action.FIX,
        "interlinear_annotation": Action.FIX, "invisible_operator": Action.FIX,
        "deprecated_format": Action.FIX,
    }

    keep_joiners: bool = True
    """Keep ZWJ inside emoji sequences and ZWNJ/ZWJ between letters of joining scripts."""
    keep_emoji_tags: bool = True
    """Keep tag characters that form an emoji tag sequence (subdivision flags)."""
    examples: ExampleCount = 5
    """Before/after examples kept per code per batch."""

    def _rules(self) -> list[Rule]:
        return [
            Rule("bom", r"^\x{FEFF}", replace=r"^\x{FEFF}+", codepoints=(0xFEFF,), detail="U+FEFF"),
            Rule("zero_width", cls(*_ZW) + r"|(?s:.)\x{FEFF}", replace=cls(*_ZW, 0xFEFF),
                 codepoints=(*_ZW, 0xFEFF)),
            Rule("zero_width", cls(0x200C, 0x200D), codepoints=(0x200C, 0x200D), exact=True,
                 fixer=_drop_joiners(self.keep_joiners)),
            Rule("bidi_control", cls(*_BIDI), codepoints=expand(*_BIDI), exact=True),
            Rule("soft_hyphen", cls(0xAD), codepoints=(0xAD,), exact=True),
            Rule("tag_char", cls(_TAGS), fixer=_drop_tags(self.keep_emoji_tags), exact=True,
                 detail="U+E0000..U+E007F"),
            Rule("interlinear_annotation", cls((0xFFF9, 0xFFFB)),
                 codepoints=expand((0xFFF9, 0xFFFB)), exact=True),
            Rule("invisible_operator", cls((0x2061, 0x2064)),
                 codepoints=expand((0x2061, 0x2064)), exact=True),
            Rule("deprecated_format", cls((0x206A, 0x206F)),
                 codepoints=expand((0x206A, 0x206F)), exact=True),
        ]

    def transform(self, texts: pa.Array) -> TextResult:
        return RuleSet(self.name, self._rules(), self.action_of, self.examples,
                       scan=_scan()).apply(texts)


@functools.cache
def _scan() -> ByteScan:
    # One group per rule of ``InvisibleChars._rules``, in the same order.
    return ByteScan([(0xFEFF,), (*_ZW, 0xFEFF), (0x200C, 0x200D), _BIDI, (0xAD,), (_TAGS,),
                     ((0xFFF9, 0xFFFB),), ((0x2061, 0x2064),), ((0x206A, 0x206F),)])
