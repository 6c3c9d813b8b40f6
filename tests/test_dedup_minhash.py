"""minhash_dedup: datasketch-identical signatures, LSH params, clustering, external mode,
CJK shingling and contamination, on small fixtures and on ../shared/data."""

from __future__ import annotations

import random

import datasketch
import numpy as np
import pyarrow as pa
import pytest
import xxhash
from dedup_helpers import load_medical, load_t0, run_global

from cleanpipe.dedup import kernels
from cleanpipe.dedup.minhash import lsh_params, permutations, shingle_hashes, signatures
from cleanpipe.dedup.text import normalize, python_shingles, shingle_modes
from cleanpipe.stages.minhash_dedup import MinHashDedup
from cleanpipe.stages.registry import get_stage_class

BASE = ("the committee met on tuesday to discuss the new budget proposal for the city "
        "schools and decided to postpone the final vote until next month because several "
        "members wanted more time to read the report")


def _edit_words(text: str, k: int, rng: random.Random) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), k):
        words[i] = f"w{rng.randrange(10**6)}"
    return " ".join(words)


def _datasketch_sig(shingles: list[bytes], hash_name: str, scheme: str) -> np.ndarray:
    kw = {} if hash_name == "sha1" else {"hashfunc": xxhash.xxh32_intdigest}
    m = datasketch.MinHash(num_perm=128, seed=1, scheme=scheme, **kw)
    m.update_batch(shingles)
    return np.asarray(m.hashvalues, dtype=np.uint64)


def _compare(docs: list[str], hash_name: str, scheme: str) -> int:
    norm = normalize(pa.array(docs))
    modes = shingle_modes(norm, "auto", 0.3)
    sig = signatures(shingle_hashes(norm, modes, 5, 2, hash_name), 128, 1, scheme)
    mismatches = 0
    for i, text in enumerate(norm.to_pylist()):
        ref = _datasketch_sig(python_shingles(text, int(modes[i]), 5, 2), hash_name, scheme)
        mismatches += int(not np.array_equal(ref, sig[i].astype(np.uint64)))
    return mismatches


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
@pytest.mark.parametrize(("num_perm", "seed"), [(112, 1), (128, 1), (7, 42), (256, 0)])
def test_permutations_equal_datasketch(scheme, num_perm, seed):
    a, b = datasketch.MinHash(num_perm=num_perm, seed=seed, scheme=scheme).permutations
    got_a, got_b = permutations(num_perm, seed, scheme)
    assert np.array_equal(got_a, np.asarray(a, np.uint64))
    assert np.array_equal(got_b, np.asarray(b, np.uint64))


def test_xxh32_kernel_equals_xxhash():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 4000, dtype=np.uint8)
    for n in [0, 1, 3, 4, 7, 15, 16, 17, 31, 32, 33, 100, 1000]:
        for seed in (0, 7):
            got = int(kernels.xxh32(data, 5, 5 + n, np.uint64(seed)))
            assert got == xxhash.xxh32_intdigest(data[5:5 + n].tobytes(), seed)


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
@pytest.mark.parametrize("hash_name", ["xxh32", "sha1"])
def test_signatures_equal_datasketch_on_fixture(hash_name, scheme):
    docs = [BASE, "", "x", "two words", "中文医学问答，患者头痛三天。", "ภาษาไทย ทดสอบ",
            "Mixed 中文 and English text here, five words or more"]
    assert _compare(docs, hash_name, scheme) == 0


@pytest.mark.realdata
@pytest.mark.parametrize("hash_name", ["xxh32", "sha1"])
def test_signatures_equal_datasketch_on_1000_real_documents(shared_data, hash_name):
    t0 = load_t0(shared_data, limit_files=40)["text"].to_pylist()
    rng = random.Random(0)
    docs = rng.sample(t0, 700) + rng.sample(load_medical(shared_data), 300)
    assert len(docs) == 1000
    assert _compare(docs, hash_name, "affine32") == 0


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.05, 0.95)])
def test_bands_rows_as_datasketch_chooses(threshold, weights):
    lsh = datasketch.MinHashLSH(threshold=threshold, num_perm=128, weights=weights)
    assert lsh_params(threshold, 128, weights) == (lsh.b, lsh.r)
    stage = MinHashDedup(threshold=threshold, weights=weights)
    assert stage.band_rows() == (lsh.b, lsh.r)


def test_word_and_char_shingles_chosen_by_script():
    norm = normalize(pa.array(["hello world this is english", "这是一个中文句子", "", "ภาษาไทย"]))
    assert shingle_modes(norm, "auto", 0.3).tolist() == [0, 1, 0, 1]
    assert shingle_modes(norm, "word", 0.3).tolist() == [0, 0, 0, 0]


def test_registered_and_validated():
    assert get_stage_class("minhash_dedup") is MinHashDedup
    with pytest.raises(ValueError):
        MinHashDedup(bands=20, rows=10)  # 200 > num_perm
    with pytest.raises(ValueError):
        MinHashDedup(bands=4)


def _fixture_table() -> pa.Table:
    rng = random.Random(1)
    # A changed last word touches one 5-gram (J ≈ 0.94); an appended word adds one.
    texts = [BASE, BASE.rsplit(" ", 1)[0] + " article",
             "an unrelated line about cooking pasta with garlic olive oil and fresh basil "
             "from the garden in summer evenings",
             BASE + " today", _edit_words(BASE, 12, rng),
             "an unrelated line about cooking pasta with garlic olive oil and fresh basil "
             "from the garden in summer evenings!!"]
    return pa.table({"text": texts, "id": list(range(len(texts)))})


def _jaccard(a: str, b: str) -> float:
    sa = set(python_shingles(" ".join(a.lower().split()), 0, 5, 2))
    sb = set(python_shingles(" ".join(b.lower().split()), 0, 5, 2))
    return len(sa & sb) / len(sa | sb)


def test_fixture_near_duplicates_dropped_with_named_representative():
    t = _fixture_table()
    texts = t["text"].to_pylist()
    out = run_global(MinHashDedup(), t, ["text"], batch_size=2)
    dups = out["near_duplicate"]
    # Which pairs really are ≥ threshold decides what must be found.
    expected = {i for i in range(1, len(texts))
                if any(_jaccard(texts[i], texts[j]) >= 0.8 for j in range(i))}
    assert set(dups) == expected
    assert 4 not in dups  # 12 of 37 words changed: far below 0.8
    assert dups[1].startswith("near-duplicate of row r0 (Jaccard ")
    assert "r2" in dups[5]


def test_keep_last_and_longest():
    t = _fixture_table()
    last = run_global(MinHashDedup(keep="last"), t, ["text"])["near_duplicate"]
    assert 0 in last and 3 not in last
    longest = run_global(MinHashDedup(keep="longest"), t, ["text"])["near_duplicate"]
    assert 3 not in longest and 0 in longest


def test_flag_action_and_no_ids():
    out = run_global(MinHashDedup(action="flag"), _fixture_table(), ["text"], with_ids=False)
    assert out["near_duplicate"][1].startswith("near-duplicate of row seq 0")


def test_batch_size_does_not_change_result():
    t = _fixture_table()
    a = run_global(MinHashDedup(), t, ["text"], batch_size=1)
    b = run_global(MinHashDedup(), t, ["text"], batch_size=100)
    assert a == b


def test_nested_messages_joined_per_row():
    msgs = [[{"role": "user", "content": BASE[:100]}, {"role": "assistant", "content": BASE[100:]}],
            [{"role": "user", "content": BASE[:100]}, {"role": "assistant", "content": BASE[100:]}],
            [{"role": "user", "content": BASE[:100]}, {"role": "assistant", "content": "no"}]]
    t = pa.table({"messages": msgs})
    out = run_global(MinHashDedup(), t, ["messages[*].content"])
    assert set(out["near_duplicate"]) == {1}


def test_empty_rows_are_not_clustered():
    t = pa.table({"text": ["", None, "", BASE]})
    assert run_global(MinHashDedup(), t, ["text"]) == {}


def test_contamination_with_reference_table():
    ref = pa.table({"question": [BASE + " again", "something else entirely in "
                                 "the evaluation set that nobody trains on ever again"]})
    out = run_global(MinHashDedup(reference=[ref], reference_fields=["question"]),
                     _fixture_table(), ["text"])
    contaminated = out["contaminated_near"]
    assert set(contaminated) >= {0}
    assert all("row 0" in d for d in contaminated.values())
    assert 2 not in contaminated and 4 not in contaminated


def test_external_mode_keeps_same_rows_on_fixture(tmp_path):
    t = _fixture_table()
    mem = run_global(MinHashDedup(), t, ["text"], batch_size=2)
    ext = run_global(MinHashDedup(external=True, spill_dir=str(tmp_path)), t, ["text"],
                     batch_size=2)
    assert mem == ext
    assert list(tmp_path.iterdir()) == []  # spill cleaned up


@pytest.mark.realdata
def test_external_mode_keeps_same_rows_on_t0(shared_data, tmp_path):
    t = load_t0(shared_data, limit_files=60)
    fields = ["text"]
    for verify in ("exact", "none"):
        mem_stage = MinHashDedup(verify=verify, max_bucket_pairs=8)
        mem = run_global(mem_stage, t, fields, batch_size=4096, through_pickle=False)
        ext_stage = MinHashDedup(verify=verify, max_bucket_pairs=8, external=True,
                                 spill_dir=str(tmp_path))
        ext = run_global(ext_stage, t, fields, batch_size=4096, through_pickle=False)
        assert len(mem.get("near_duplicate", {})) > 100  # t0 is full of template variants
        assert mem == ext
        assert mem_stage.report_section()["clusters"] == ext_stage.report_section()["clusters"]


def _edit_chars(text: str, frac: float, rng: random.Random) -> str:
    chars = list(text)
    han = [i for i, c in enumerate(chars) if "\u4e00" <= c <= "\u9fff"]
    for i in rng.sample(han, max(1, round(frac * len(chars)))):
        chars[i] = chr(rng.randrange(0x4E00, 0x9FFF))
    return "".join(chars)


@pytest.mark.realdata
def test_chinese_copy_with_5_percent_chars_changed_is_merged(shared_data):
    med = [m for m in load_medical(shared_data) if len(m) >= 200]
    rng = random.Random(11)
    originals = rng.sample(med, 20)
    copies = [_edit_chars(m, 0.05, rng) for m in originals]
    t = pa.table({"text": originals + copies})
    # 5% random character edits leave a bigram Jaccard of 0.79-0.83 (measured on these
    # records), straddling 0.8; 0.7 is the threshold that decides such copies reliably.
    out = run_global(MinHashDedup(threshold=0.7), t, ["text"])
    dups = out.get("near_duplicate", {})
    # Every copy is merged with its own original, and no original with another original.
    assert set(dups) == set(range(20, 40))
    for k in range(20):
        assert dups[20 + k].startswith(f"near-duplicate of row r{k} ")


@pytest.mark.realdata
def test_distinct_chinese_records_not_merged(shared_data):
    med = load_medical(shared_data)
    t = pa.table({"text": med})
    stage = MinHashDedup(threshold=0.7)
    out = run_global(stage, t, ["text"], batch_size=300)
    dups = out.get("near_duplicate", {})
    # Any pair merged must truly be ≥ threshold on its shingle sets.
    norm = normalize(pa.array(med)).to_pylist()
    for i, detail in dups.items():
        j = int(detail.split(" row r")[1].split(" ")[0])
        a = set(python_shingles(norm[i], 1, 5, 2))
        b = set(python_shingles(norm[j], 1, 5, 2))
        assert len(a & b) / len(a | b) >= 0.7
    assert len(dups) < 0.05 * len(med)


def test_report_section_has_clusters_and_memory():
    stage = MinHashDedup()
    run_global(stage, _fixture_table(), ["text"])
    rep = stage.report_section()
    assert rep["clusters"] == 2 and rep["duplicates"] == 3
    assert rep["cluster_sizes"]["3"] == 1 and rep["cluster_sizes"]["2"] == 1
    top = rep["largest_clusters"][0]
    assert top["size"] == 3 and top["representative"] == "r0"
    assert top["members"][0]["jaccard"] >= 0.8 and top["members"][0]["snippet"]
    assert rep["memory"]["index_bytes_per_row"] <= 200


def test_contamination_with_reference_path(tmp_path):
    import json

    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({"text": BASE + " again"}) + "\n" +
                    json.dumps({"text": "nothing like the training data at all here"}) + "\n",
                    encoding="utf-8")
    stage = MinHashDedup(reference=[str(path)])
    out = run_global(stage, _fixture_table(), ["text"])
    assert 0 in out["contaminated_near"]
    assert out["contaminated_near"][0].startswith("near-duplicate of eval.jsonl row 0")
    assert stage.report_section()["contamination"]["rows"] == len(out["contaminated_near"])


# -- the fast paths equal the plain ones they replace --------------------------------------
TRICKY = ["e\u0301cole ｆｕｌｌ，ｗｉｄｔｈ", "中文测试，全角：ＡＢＣ。",
          "한국어 \u1100\u1161\u11a8",
          "ﬁnance ① Ⅻ ㎏", "\U0001d400\U0001d401 math", "“curly” café naïve", "plain ascii",
          "x\u0308 a\u030a", "", "\u00a0nbsp\u2003em", "日本語のテキスト"]


@pytest.mark.parametrize("form", ["NFC", "NFKC", "NFD", "NFKD"])
def test_normalize_skips_only_rows_the_form_leaves_unchanged(form):
    import pyarrow.compute as pc

    arr = pa.array(TRICKY * 3, pa.large_string())
    want = normalize(pc.utf8_normalize(arr, form), unicode_form="none")
    assert normalize(arr, unicode_form=form).equals(want)


@pytest.mark.realdata
def test_normalize_fast_path_on_real_chinese_and_english(shared_data):
    import pyarrow.compute as pc

    english = load_t0(shared_data, limit_files=3)["text"].to_pylist()
    # Only the rows with non-ASCII text exercise the skip.
    english = [t for t in english if not t.isascii()][:300]
    assert english
    texts = pa.array(load_medical(shared_data)[:300] + english, pa.large_string())
    want = normalize(pc.utf8_normalize(texts, "NFKC"), unicode_form="none")
    assert normalize(texts).equals(want)


def test_fused_xxh32_shingles_equal_spans_then_hash():
    docs = [BASE, "", "one", "a b c d e f g", "中文的句子没有空格", " spaced  out  ",
            BASE + " 中文"]
    norm = normalize(pa.array(docs))
    modes = shingle_modes(norm, "auto", 0.3).astype(np.int8)
    from cleanpipe.dedup.text import buffers

    data, off = buffers(norm)
    for seed in (0, 5):
        s, e, doc_off = kernels.shingle_spans(data, off, modes, 5, 2)
        want = kernels.xxh32_spans(data, s, e, np.uint64(seed))
        got, got_off = kernels.xxh32_shingles(data, off, modes, 5, 2, np.uint64(seed))
        assert np.array_equal(got, want) and np.array_equal(got_off, doc_off)


def test_pair_jaccard_cutoff_keeps_exactly_the_pairs_at_or_above_it():
    rng = np.random.default_rng(11)
    sizes = rng.integers(0, 40, 300)
    sets = [np.unique(rng.integers(0, 60, s)).astype(np.uint32) for s in sizes]
    off = np.zeros(len(sets) + 1, dtype=np.int64)
    off[1:] = np.cumsum([x.size for x in sets])
    flat = np.concatenate(sets)
    left = rng.integers(0, len(sets), 5000)
    right = rng.integers(0, len(sets), 5000)
    full = kernels.pair_jaccard(flat, off, left, right)
    for t in (0.3, 0.5, 0.8):
        cut = kernels.pair_jaccard(flat, off, left, right, t)
        keep = full >= t
        assert keep.any() and (~keep).any()
        assert np.array_equal(cut >= t, keep)
        assert np.array_equal(cut[keep], full[keep])


def test_shared_bands_counts_equal_keys():
    keys = np.array([[1, 2, 3, 4], [1, 2, 9, 4], [7, 8, 9, 6]], dtype=np.uint64)
    got = kernels.shared_bands(keys, np.array([0, 0, 1]), np.array([1, 2, 2]))
    assert got.tolist() == [3, 0, 1]
