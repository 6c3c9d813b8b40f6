"""minhash_dedup on records with a prompt and a response: near duplicates only when both
parts are, so rows sharing a passage but asking different questions stay; the report shows
where the rows differ. Fixtures, and the t0 adversarial_qa shards with an independent
oracle (the question read out of each prompt template)."""

from __future__ import annotations

import difflib
import json
import random
import re
from pathlib import Path

import datasketch
import numpy as np
import pyarrow as pa
import pytest
import xxhash
import yaml
from dedup_helpers import run_global

from cleanpipe.contract.stage import BatchContext
from cleanpipe.dedup import kernels
from cleanpipe.dedup.parts import resolve
from cleanpipe.dedup.text import normalize, python_shingles, shingle_modes
from cleanpipe.stages.minhash_dedup import MinHashDedup

PASSAGE = ("The committee met on Tuesday to discuss the new budget proposal for the city "
           "schools. It decided to postpone the final vote until next month, because several "
           "members wanted more time to read the long report. The mayor said she was "
           "disappointed by the delay but would respect the decision of the committee.")


ANSWER = "They met on Tuesday morning in the large hall of the town library"


def _qa(question: str, passage: str = PASSAGE) -> str:
    return f"Read the passage.\n\n\"{passage}\"\n\nQuestion: {question}\n"


def _dropped(stage: MinHashDedup, table: pa.Table, fields: list[str]) -> dict[int, str]:
    return run_global(stage, table, fields).get("near_duplicate", {})


def test_same_passage_different_question_kept_edited_copy_dropped() -> None:
    edited = PASSAGE.replace("new budget", "next budget")
    rows = {
        "prompt": [_qa("When did the committee meet?"),
                   _qa("Who was disappointed by the delay?"),   # different question
                   _qa("What did the committee postpone?"),      # different question,
                   _qa("When did the committee meet?", edited),  # same answer as row 1
                   _qa("When did the committee meet?")],
        "completion": ["On Tuesday.", "The mayor.", "On Tuesday.", "On Tuesday.",
                       "The final vote."],                       # different answer
    }
    table = pa.table(rows)
    dropped = _dropped(MinHashDedup(), table, ["prompt", "completion"])
    assert sorted(dropped) == [3]
    assert "near-duplicate of row r0" in dropped[3]
    # compared as one joined text, the shared passage outweighs the different answer
    joined = _dropped(MinHashDedup(parts="joined"), table, ["prompt", "completion"])
    assert 4 in joined


def test_scattered_edits_in_short_sentences_are_copies_replaced_questions_are_not() -> None:
    """One word edited in a one-word label, a two-word code line and a three-word sentence
    fails the sentence test but is a near copy; a question replaced by another (asked with
    or without ``?``, one word of three or a whole statement) is not."""
    body = " ".join(f"Line{i} of the long report says item {i} costs {i} dollars." for i in
                    range(40))
    code = "Read it: getline(cin, dummy); then stop."

    def prompt(head: str, tail: str, code_line: str = code, short: str = "It is late.") -> str:
        return f"{head} {body} {short} {code_line} {tail}"

    rows = {
        "prompt": [prompt("Summarize:", "Who came first?"),
                   prompt("A:", "Who came first?"),                             # label
                   prompt("Summarize:", "Who came first?",
                          code.replace("getline(cin,", "cin(cin,")),          # code line
                   prompt("Summarize:", "Who came first?", short="It is early."),
                   prompt("Summarize:", "Who came last?"),                      # question
                   prompt("Summarize:", "__ sat for Morbihan."),
                   prompt("Summarize:", "__ was succeeded by Adolphe Thiers.")],
        "completion": [ANSWER] * 7,
    }
    dropped = _dropped(MinHashDedup(), pa.table(rows), ["prompt", "completion"])
    assert sorted(dropped) == [1, 2, 3]
    assert all("near-duplicate of row r0" in dropped[i] for i in (1, 2, 3))


def test_report_shows_where_each_part_differs() -> None:
    edited = PASSAGE.replace("several members", "several council members")
    table = pa.table({"prompt": [_qa("When did the committee meet?"),
                                 _qa("When did the committee meet?", edited)],
                      "completion": [ANSWER + ".", ANSWER + "!"]})
    stage = MinHashDedup(threshold=0.7)
    assert sorted(_dropped(stage, table, ["prompt", "completion"])) == [1]
    section = stage.report_section()
    assert section["compared"] == "prompt and response"
    member = section["largest_clusters"][0]["members"][0]
    diffs = {d["part"]: d for d in member["differences"]}
    assert set(diffs) == {"prompt", "response"}
    assert "several members" in diffs["prompt"]["kept"]
    assert "several council members" in diffs["prompt"]["dropped"]
    assert diffs["prompt"]["at"] == _qa("x").index('"') + PASSAGE.index("several") + 9
    assert diffs["response"]["kept"].endswith("library.")
    assert diffs["response"]["dropped"].endswith("library!")


def test_alpaca_and_chat_parts_found_by_name() -> None:
    alpaca = pa.record_batch({"instruction": ["a"], "input": ["b"], "output": ["c"],
                              "category": ["d"]})
    parts = resolve("auto", None, None, None, BatchContext(alpaca, alpaca.schema.names))
    assert parts is not None
    assert [s.field for s in parts.prompt] == ["instruction", "input", "category"]
    assert [s.field for s in parts.response] == ["output"]
    plain = pa.record_batch({"text": ["a"]})
    assert resolve("auto", None, None, None, BatchContext(plain, ["text"])) is None
    assert resolve("joined", None, None, None, BatchContext(alpaca, ["instruction",
                                                                     "output"])) is None


def test_chat_user_turns_against_user_turns_assistant_against_assistant() -> None:
    def chat(user: str, answer: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": "You are helpful."},
                {"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    long_answer = " ".join(f"step{i} of the recipe" for i in range(40))
    table = pa.table({"messages": [
        chat("How do I bake bread at home with a simple oven?", long_answer),
        chat("Which flour keeps a sourdough starter alive longest?", long_answer),  # other
        chat("How do I bake bread at home with a simple oven?", long_answer + " Enjoy."),
    ]})
    fields = ["messages[*].role", "messages[*].content"]
    stage = MinHashDedup(threshold=0.7)
    assert sorted(_dropped(stage, table, fields)) == [2]
    assert stage.report_section()["compared"] == "prompt and response"


def test_empty_response_only_matches_empty_response() -> None:
    prompt = _qa("When did the committee meet?")
    table = pa.table({"prompt": [prompt, prompt, prompt, ""],
                      "completion": ["", "", "On Tuesday.", ""]})
    dropped = _dropped(MinHashDedup(), table, ["prompt", "completion"])
    # two empty answers to the same prompt are the same example; an answered one is not;
    # a row with no text at all is never clustered
    assert sorted(dropped) == [1]


def test_explicit_parts_and_their_errors() -> None:
    table = pa.table({"q": [_qa("When did the committee meet?"),
                            _qa("Who was disappointed by the delay?")],
                      "a": ["On Tuesday.", "On Tuesday."]})
    stage = MinHashDedup(prompt_fields=["q"], response_fields=["a"])
    assert _dropped(stage, table, ["q", "a"]) == {}
    with pytest.raises(ValueError, match="both prompt_fields and response_fields"):
        MinHashDedup(prompt_fields=["q"])
    with pytest.raises(ValueError, match="parts: joined"):
        MinHashDedup(prompt_fields=["q"], response_fields=["a"], parts="joined")
    with pytest.raises(ValueError, match="verify: exact"):
        MinHashDedup(prompt_fields=["q"], response_fields=["a"], verify="none")


def test_reference_without_parts_is_refused() -> None:
    table = pa.table({"prompt": [_qa("When?")], "completion": ["Tuesday."]})
    stage = MinHashDedup(reference=[pa.table({"text": [PASSAGE]})])
    with pytest.raises(ValueError, match=r"reference .* no separate prompt and response"):
        run_global(stage, table, ["prompt", "completion"])


def test_joined_mode_keys_are_datasketch_lsh_keys() -> None:
    """parts: joined signs the fields' joined text exactly as datasketch does."""
    batch = pa.record_batch({"instruction": [PASSAGE, "Name a colour."],
                             "output": ["On Tuesday, the committee met.", "Blue."]})
    stage = MinHashDedup(parts="joined")
    sketch = stage.prepare(batch, BatchContext(batch, ["instruction", "output"]))
    assert not sketch.parts
    texts = normalize(pa.array([f"{i}\n{o}" for i, o in zip(
        batch.column("instruction").to_pylist(), batch.column("output").to_pylist(),
        strict=True)]))
    modes = shingle_modes(texts, "auto", 0.3)
    sigs = []
    for text, mode in zip(texts.to_pylist(), modes.tolist(), strict=True):
        m = datasketch.MinHash(num_perm=128, seed=1, hashfunc=xxhash.xxh32_intdigest)
        m.update_batch(python_shingles(text, mode, 5, 2))
        sigs.append(np.asarray(m.hashvalues, dtype=np.uint32))
    b, r = stage.band_rows()
    assert np.array_equal(sketch.keys, kernels.band_keys(np.stack(sigs), b, r))


def test_parts_mode_keys_are_datasketch_keys_of_both_parts() -> None:
    """With parts, a row's band keys are datasketch's LSH keys of its prompt's and its
    response's shingles together, also where the prompt repeats shingles (the prompt is
    signed from its shingles as they come, the response from its set)."""
    again = "say it again and again and again and again and again. "
    batch = pa.record_batch({
        "prompt": [PASSAGE + " Who won?", again * 4, "Name a colour.", "", again],
        "completion": ["On Tuesday, the committee met.", "Again.", "Blue.", "Empty prompt.",
                       again * 3]})
    stage = MinHashDedup()
    sketch = stage.prepare(batch, BatchContext(batch, ["prompt", "completion"]))
    assert sketch.parts
    sigs = []
    for prompt, completion in zip(batch.column("prompt").to_pylist(),
                                  batch.column("completion").to_pylist(), strict=True):
        m = datasketch.MinHash(num_perm=128, seed=1, hashfunc=xxhash.xxh32_intdigest)
        for text in (prompt, completion):
            norm = normalize(pa.array([text]))
            mode = int(shingle_modes(norm, "auto", 0.3)[0])
            m.update_batch(python_shingles(norm[0].as_py(), mode, 5, 2))
        sigs.append(np.asarray(m.hashvalues, dtype=np.uint32))
    b, r = stage.band_rows()
    assert np.array_equal(sketch.keys, kernels.band_keys(np.stack(sigs), b, r))


# -- t0 adversarial_qa: every different question kept, planted copies dropped -------------

TEMPLATES = {
    "answer_the_following_q": r'^Given the following passage\n\n"(?P<p>.*)",\n\nanswer the '
                              r"following question\. Note that the answer is present within "
                              r"the text\.\n\nQuestion: (?P<q>.*)\n$",
    "based_on": r"^Extract the answer to the question from the following context\.\n"
                r"Question: (?P<q>.*?)\nContext: (?P<p>.*)\n$",
    "generate_question": r"^I want to test the ability of students to read a passage and "
                         r"answer questions about it\. Could you please come up with a good "
                         r'question for the passage "(?P<p>.*)"\?\n$',
    "question_context_answer": r'^Question: "(?P<q>.*?)"\n\nContext: "(?P<p>.*)"\n\n'
                               r"Answer:\n$",
    "tell_what_it_is": r'^I know that the answer to the question "(?P<q>.*?)" is in '
                       r'"(?P<p>.*)"\. Can you tell me what it is\?\n$',
}


def _norm(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def _near(a: str, b: str) -> bool:
    """The oracle's near copy: normalised strings at least 80% alike (difflib)."""
    a, b = _norm(a), _norm(b)
    return a == b or difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= 0.8


def _shipped_minhash() -> dict:
    """minhash_dedup as the shipped SFT pipeline configures it (prompt/completion pipeline
    when there is one, else the alpaca one), for fields [prompt, completion]."""
    root = Path(__file__).resolve().parents[1] / "cleanpipe" / "pipelines"
    spec = root / "sft_prompt_completion.yaml"
    spec = spec if spec.exists() else root / "sft_alpaca.yaml"
    stages = yaml.safe_load(spec.read_text(encoding="utf-8"))["stages"]
    cfg = dict(next(s for s in stages if s["stage"] == "minhash_dedup"))
    cfg.pop("stage")
    cfg.pop("action", None)
    return cfg


def _adversarial_qa(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("adversarial_qa_*.jsonl")):
        name = next(t for t in TEMPLATES if path.name.endswith(f"_{t}.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            m = re.match(TEMPLATES[name], rec["prompt"], re.S)
            assert m, f"{path.name}: prompt does not follow its template"
            answer = rec["completion"].removesuffix("<|endoftext|>")
            rows.append({**rec, "passage": m["p"], "answer": answer,
                         "question": m["q"] if "q" in m.groupdict() else answer})
    return rows


def _plant(rows: list[dict], k: int, rng: random.Random) -> list[dict]:
    """``k`` copies of random rows with passage words replaced: same question and answer, a
    few words edited. Two words, one in passages under 100 words: each edit changes up to
    five 5-word shingles on each side, so at the shipped threshold (0.8) a 50-word passage
    tolerates one, joined or not."""
    out = []
    for src in rng.sample(rows, k):
        words = src["passage"].split(" ")
        for i in rng.sample(range(len(words)), 2 if len(words) >= 100 else 1):
            words[i] = rng.choice(["river", "seven", "quietly", "market", "blue"])
        passage = " ".join(words)
        out.append({**src, "prompt": src["prompt"].replace(src["passage"], passage),
                    "passage": passage})
    return out


@pytest.mark.realdata
def test_t0_adversarial_qa_different_questions_kept_planted_copies_dropped(shared_data):
    rows = _adversarial_qa(shared_data / "sft_self_instruct_t0_50k" / "data_per_template")
    assert len(rows) == 3000
    planted = _plant(rows, 200, random.Random(14))
    everything = rows + planted
    table = pa.table({"prompt": [r["prompt"] for r in everything],
                      "completion": [r["completion"] for r in everything]})
    stage = MinHashDedup(fields=["prompt", "completion"], **_shipped_minhash())
    dropped = set(_dropped(stage, table, ["prompt", "completion"]))

    recall = len(dropped & set(range(len(rows), len(everything)))) / len(planted)
    assert recall >= 0.95, f"planted copies removed: {recall:.3f}"

    kept = [i for i in range(len(rows)) if i not in dropped]
    by_passage: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_passage.setdefault(_norm(r["passage"]), []).append(i)
    by_passage_kept: dict[str, list[int]] = {}
    by_answer_kept: dict[str, list[int]] = {}
    for j in kept:
        by_passage_kept.setdefault(_norm(rows[j]["passage"]), []).append(j)
        by_answer_kept.setdefault(_norm(rows[j]["answer"]), []).append(j)
    wrong = []
    for i in sorted(dropped):
        if i >= len(rows):
            continue
        r = rows[i]
        siblings = by_passage[_norm(r["passage"])]
        if not any(_norm(rows[j]["question"]) != _norm(r["question"]) for j in siblings):
            continue  # shares its passage with no other question
        # a kept near copy: looked for among kept rows with the same passage or answer
        # (difflib over every kept row would take minutes)
        near = set(by_passage_kept.get(_norm(r["passage"]), ())) | set(
            by_answer_kept.get(_norm(r["answer"]), ()))
        if not any(_near(rows[j]["question"], r["question"])
                   and _near(rows[j]["answer"], r["answer"]) for j in near):
            wrong.append((i, r["question"], r["answer"]))
    assert not wrong, f"{len(wrong)} distinct questions dropped, e.g. {wrong[:3]}"
    # the shards do hold such rows: passages asked about several times
    assert sum(len({_norm(rows[j]["question"]) for j in v}) > 1
               for v in by_passage.values()) > 50
