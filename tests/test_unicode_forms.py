"""unstable_class: the characters outside it are left alone by normalisation, alone and
next to each other, for every form (checked against Python's unicodedata)."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cleanpipe.text.unicode_forms import unstable_class

FORMS = ["NFC", "NFKC", "NFD", "NFKD"]
BMP = [chr(cp) for cp in range(0x80, 0x10000) if not 0xD800 <= cp <= 0xDFFF]


def _stable(form: str) -> list[str]:
    hit = pc.match_substring_regex(pa.array(BMP, pa.large_string()), unstable_class(form))
    mask = np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
    return [c for c, h in zip(BMP, mask, strict=True) if not h]


@pytest.mark.parametrize("form", FORMS)
def test_characters_outside_the_class_are_their_own_normal_form(form: str) -> None:
    stable = _stable(form)
    assert 40_000 < len(stable) < len(BMP)  # the class is neither empty nor everything
    moved = [c for c in stable
             if unicodedata.normalize(form, c) != c  # type: ignore[arg-type]
             or unicodedata.combining(c)]
    assert moved == []


@pytest.mark.parametrize("form", FORMS)
def test_stable_characters_do_not_compose_with_their_neighbours(form: str) -> None:
    stable = set(_stable(form))
    # every canonical pair that composes into one character, both halves stable
    pairs = []
    for c in BMP:
        dec = unicodedata.decomposition(c)
        if dec and not dec.startswith("<") and len(dec.split()) == 2:
            a, b = (chr(int(x, 16)) for x in dec.split())
            if a in stable and b in stable:
                pairs.append(a + b)
    assert [p for p in pairs if unicodedata.normalize(form, p) != p] == []  # type: ignore[arg-type]
    # and stable text at random stays as it is
    rng = random.Random(7)
    pool = sorted(stable)
    texts = ["".join(rng.choice(pool) for _ in range(16)) for _ in range(4000)]
    assert [t for t in texts if unicodedata.normalize(form, t) != t] == []  # type: ignore[arg-type]


def test_known_characters() -> None:
    text = pa.array(["plain", "caf\u00e9", "cafe\u0301", "\ufb01", "\uac00"], pa.large_string())
    hits = {f: pc.match_substring_regex(text, unstable_class(f)).to_pylist() for f in FORMS}
    assert hits["NFC"] == [False, False, True, False, False]
    assert hits["NFKC"] == [False, False, True, True, False]
    assert hits["NFD"] == [False, True, True, False, True]  # é and 가 decompose
    assert hits["NFKD"] == [False, True, True, True, True]
