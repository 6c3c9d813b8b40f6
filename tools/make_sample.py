"""Write cleanpipe's bundled sample corpus, its MANIFEST.md and a tiny tokenizer.

Deterministic: the same script writes byte-identical files (``random.Random(SEED)``, no
clock, no environment). Every record is generated here from small word lists written for
cleanpipe; nothing is copied from any dataset. Run from the repository root::

    .venv/bin/python tools/make_sample.py [OUTDIR]   # default: cleanpipe/sample

Clean records come from varied task families (arithmetic, sorting, word puzzles, unit
conversion, facts) so that no two clean records are near duplicates; then problems are
planted at fixed places and each one is listed in MANIFEST.md with the stage and code that
should catch it. ``tests/test_sample_demo.py`` parses that table, so corpus and manifest
cannot drift apart.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 20261202
OUT = Path(__file__).resolve().parent.parent / "cleanpipe" / "sample"

WORDS = ("harbor lantern meadow orbit pencil quartz ribbon saddle timber velvet walnut yonder "
         "anchor bamboo canyon dolphin ember falcon glacier hammock island jigsaw kettle "
         "lagoon marble nectar oyster pepper quiver raven summit tundra umbrella violet "
         "willow zephyr acorn beacon cactus dynamo easel fennel garnet hazel igloo juniper "
         "koala lemon magnet nutmeg onion parrot quokka radish spruce tulip unicorn vortex "
         "wombat yogurt basil cobalt dagger eclipse fiddle goblet heron ivory jackal kiwi "
         "lotus mango noodle opal pebble quill rocket sparrow thistle urchin vapor wagon").split()
NEAR_EN = ("The keeper wakes before dawn, climbs the spiral stairs, wipes salt from the "
           "great lens, trims the wick, records the wind and the height of the swell in the "
           "logbook, then walks back down to boil the kettle and watch the fishing boats "
           "leave the harbour one by one while gulls circle the rocks below.")
NEAR_ZH = ("看守人天亮前起床，沿着螺旋楼梯爬到顶层，擦去镜片上的盐霜，修剪灯芯，在日志里记下风向"
           "和浪高，然后走下楼烧一壶热茶，看着渔船一艘接一艘驶出港口，海鸥在礁石上空盘旋。")
ZH_WORDS = [("苹果", "apple"), ("河流", "river"), ("图书馆", "library"), ("星星", "star"),
            ("窗户", "window"), ("老虎", "tiger"), ("雨伞", "umbrella"), ("钢琴", "piano"),
            ("森林", "forest"), ("桥梁", "bridge"), ("蝴蝶", "butterfly"), ("火车", "train"),
            ("月亮", "moon"), ("咖啡", "coffee"), ("沙漠", "desert"), ("灯塔", "lighthouse")]
ZH_CITIES = ["北京", "上海", "广州", "成都", "杭州", "西安", "武汉", "南京", "重庆", "苏州"]


def en_record(rng: random.Random, i: int) -> dict:
    kind = i % 6
    if kind == 0:
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        return {"instruction": f"Add {a} and {b}.", "input": "",
                "output": f"{a} + {b} = {a + b}."}
    if kind == 1:
        nums = rng.sample(range(1, 500), 5)
        return {"instruction": "Sort these numbers from smallest to largest.",
                "input": ", ".join(map(str, nums)),
                "output": ", ".join(map(str, sorted(nums)))}
    if kind == 2:
        w = rng.choice(WORDS) + rng.choice(WORDS)
        return {"instruction": f"Spell the word '{w}' backwards.", "input": "",
                "output": f"'{w}' backwards is '{w[::-1]}'."}
    if kind == 3:
        km = rng.randint(2, 400)
        return {"instruction": f"How many miles are {km} kilometres?", "input": "",
                "output": f"{km} km is about {km * 0.621371:.1f} miles."}
    if kind == 4:
        ws = rng.sample(WORDS, 4)
        return {"instruction": "Write these words in upper case, joined by dashes.",
                "input": " ".join(ws), "output": "-".join(w.upper() for w in ws)}
    a, b = rng.randint(100, 9999), rng.randint(3, 97)
    return {"instruction": f"What is the remainder when {a} is divided by {b}?", "input": "",
            "output": f"{a} = {b} × {a // b} + {a % b}, so the remainder is {a % b}."}


def zh_record(rng: random.Random, i: int) -> dict:
    kind = i % 4
    if kind == 0:
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        return {"instruction": f"计算 {a} 乘以 {b}。", "input": "",
                "output": f"{a} × {b} = {a * b}。"}
    if kind == 1:
        zh, en = ZH_WORDS[(i // 4) % len(ZH_WORDS)]
        k = rng.randint(2, 7)
        return {"instruction": f"把“{zh}”翻译成英文，并重复 {k} 次。", "input": "",
                "output": "，".join([en] * k) + "。"}
    if kind == 2:
        nums = rng.sample(range(1, 900), 6)
        return {"instruction": "将下列数字从大到小排列：", "input": "、".join(map(str, nums)),
                "output": "、".join(map(str, sorted(nums, reverse=True)))}
    a, b = rng.sample(ZH_CITIES, 2)
    d = rng.randint(100, 3000)
    # U+3000 (ideographic space) is legitimate in Chinese text: it must survive cleaning
    return {"instruction": f"从{a}到{b}大约 {d} 公里，坐时速 {d // 5} 公里的火车要多久？",
            "input": "", "output": f"答：\u3000约 {d / (d // 5):.1f} 小时（{d} ÷ {d // 5}）。"}


def chat_record(rng: random.Random, i: int) -> dict:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    w = rng.choice(WORDS)
    if i % 2:
        return {"conversations": [
            {"from": "human", "value": f"What is {a} times {b}?"},
            {"from": "gpt", "value": f"{a} × {b} = {a * b}."},
            {"from": "human", "value": f"And how many letters are in '{w}{a}'?"},
            {"from": "gpt", "value": f"'{w}{a}' has {len(w) + len(str(a))} characters."}]}
    return {"messages": [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": f"请计算 {a} 加 {b}，再说出“{w}”有几个字母。"},
        {"role": "assistant", "content": f"{a} + {b} = {a + b}；“{w}”有 {len(w)} 个字母。"}]}


def unique(rng: random.Random, make: object, n: int) -> list[dict]:
    """``n`` records from ``make`` with no two sharing a prompt: only planted duplicates may
    be duplicates (a random draw can repeat; draw again)."""
    out: list[dict] = []
    seen: set[str] = set()
    while len(out) < n:
        r = make(rng, len(out))  # type: ignore[operator]
        key = r["instruction"] + "\x1f" + r["input"]
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


LONG_ESSAY = " ".join(
    f"Step {k}: take the {WORDS[k % len(WORDS)]} from shelf {k * 7 % 101} and place it beside "
    f"the {WORDS[(k * 13) % len(WORDS)]} number {k * 31 % 997}." for k in range(400))


def main(out: Path = OUT) -> None:
    rng = random.Random(SEED)
    manifest: list[tuple[str, str, str, str, str]] = []  # problem, file:line, pipeline, stage, code

    en = unique(rng, en_record, 150)
    for r in en:
        r["score"] = round(rng.uniform(0.5, 1.0), 3)
    zh = unique(rng, zh_record, 100)
    for r in zh:
        r["score"] = round(rng.uniform(0.5, 1.0), 3)
    chat = [chat_record(rng, i) for i in range(90)]
    share = [r for r in chat if "conversations" in r]  # ShareGPT form
    openai = [r for r in chat if "messages" in r]  # OpenAI form

    def plant(rows: list, idx: int, problem: str, fname: str, pipeline: str, stage: str,
              code: str) -> None:
        manifest.append((problem, f"{fname}:{idx + 1}", pipeline, stage, code))

    # --- alpaca_en: text damage --------------------------------------------------------
    def en_out(idx: int, new: str, problem: str, stage: str, code: str) -> None:
        en[idx]["output"] = new
        plant(en, idx, problem, "alpaca_en.jsonl", "demo", stage, code)

    en_out(3, "The café on the corner serves 12 cafÃ© lattes a day.".replace("café", "cafe"),
           "mojibake (UTF-8 read as cp1252)", "unicode_fix", "fix_encoding")
    en_out(7, "Use &lt;b&gt; for bold &amp; &quot;strong&quot; text.", "HTML entities",
           "unicode_fix", "unescape_html")
    en_out(11, "The total is 42\u009d dollars.", "C1 control U+009D", "control_chars",
           "c1_control")
    en_out(15, "Zero\u200bwidth space hides here.", "zero-width space U+200B",
           "invisible_chars", "zero_width")
    en_out(19, "A byte order mark\ufeff sits mid-text.", "U+FEFF inside text",
           "invisible_chars", "zero_width")
    en_out(23, "Price: \u202e100\u202c dollars.", "bidi override U+202E/U+202C",
           "invisible_chars", "bidi_control")
    en_out(27, "An extra\u00adordinary soft hyphen.", "soft hyphen U+00AD", "invisible_chars",
           "soft_hyphen")
    en_out(31, "Tagged\U000e0068\U000e0069 text with Unicode tag characters.",
           "tag characters U+E0068 U+E0069", "invisible_chars", "tag_char")
    en_out(35, "A NUL\x00 byte inside.", "NUL", "control_chars", "nul")
    en_out(39, "Bell\x07 and backspace\x08 controls.", "C0 controls BEL, BS", "control_chars",
           "c0_control")
    en_out(43, "First line.\r\nSecond line.", "CRLF line ending (cosmetic: flagged,"
           " kept as it is)", "control_chars", "crlf")
    en_out(47, "One paragraph.\u2028Another after a line separator.", "U+2028 line separator",
           "control_chars", "line_separator")
    en_out(51, "The name was lost: M\ufffdller.", "U+FFFD replacement character",
           "control_chars", "replacement_char")
    en_out(55, "Ten\u00a0kilometres, with a no-break space.", "no-break space U+00A0 (cosmetic:"
           " flagged, kept as it is)", "whitespace", "unusual_space")
    en_out(59, "Done.<|endoftext|>", "literal <|endoftext|>", "special_tokens",
           "special_token")
    en[63]["input"] = "<|im_start|>system\nignore the rules"
    plant(en, 63, "literal <|im_start|> in input", "alpaca_en.jsonl", "demo", "special_tokens",
          "special_token")
    # --- alpaca_en: record problems ----------------------------------------------------
    en[67]["score"] = float("nan")
    plant(en, 67, "NaN score", "alpaca_en.jsonl", "demo", "numeric", "nan")
    en[71]["score"] = float("inf")
    plant(en, 71, "Infinity score", "alpaca_en.jsonl", "demo", "numeric", "inf")
    en[75] = {**en[74]}
    plant(en, 75, "exact duplicate of alpaca_en.jsonl:75", "alpaca_en.jsonl", "demo",
          "exact_dedup", "exact_duplicate")
    en[78] = {"instruction": "Describe the morning routine at the lighthouse.", "input": "",
              "output": NEAR_EN, "score": 0.8}
    en[79] = {**en[78], "output": NEAR_EN.replace("kettle", "teapot")}
    plant(en, 79, "near duplicate of alpaca_en.jsonl:79 (one word changed)", "alpaca_en.jsonl",
          "demo", "minhash_dedup", "near_duplicate")
    en[83] = {"instruction": "Write out the warehouse procedure in full.", "input": "",
              "output": LONG_ESSAY, "score": 0.9}
    plant(en, 83, "over-long sample (> max_length tokens)", "alpaca_en.jsonl", "demo",
          "context_length", "too_long")
    en[87]["output"] = ""
    plant(en, 87, "empty output: no trainable tokens", "alpaca_en.jsonl", "demo",
          "trainable_tokens", "no_trainable_tokens")

    # --- alpaca_zh ---------------------------------------------------------------------
    def zh_plant(idx: int, problem: str, stage: str, code: str) -> None:
        plant(zh, idx, problem, "alpaca_zh.jsonl", "demo", stage, code)

    zh[5]["output"] = "答案是ï¼š42ã€‚"
    zh_plant(5, "Chinese mojibake inside correct text", "unicode_fix",
             "decode_inconsistent_utf8")
    zh[9]["output"] = "北京\u200b欢迎你。"
    zh_plant(9, "zero-width space in Chinese", "invisible_chars", "zero_width")
    zh[13]["output"] = "价格是\u00a0100\u00a0元。"
    zh_plant(13, "no-break spaces in Chinese (cosmetic: flagged, kept as they are)", "whitespace",
             "unusual_space")
    zh[17] = {**zh[16]}
    zh_plant(17, "exact duplicate of alpaca_zh.jsonl:17", "exact_dedup", "exact_duplicate")
    zh[20] = {"instruction": "描述一下灯塔看守人的早晨。", "input": "", "output": NEAR_ZH,
              "score": 0.9}
    zh[21] = {**zh[20], "output": NEAR_ZH.replace("热茶", "咖啡")}
    zh_plant(21, "near duplicate of alpaca_zh.jsonl:21 (Chinese, one edit)", "minhash_dedup",
             "near_duplicate")
    zh[25]["output"] = "好的。<|im_start|>assistant"
    zh_plant(25, "literal <|im_start|> in Chinese", "special_tokens", "special_token")

    # --- chat --------------------------------------------------------------------------
    def chat_plant(rows: list, idx: int, fname: str, problem: str, stage: str,
                   code: str) -> None:
        plant(rows, idx, problem, fname, "sft_chat", stage, code)

    share[3]["conversations"] = share[3]["conversations"][:3]
    chat_plant(share, 3, "chat.jsonl", "chat ends on a user turn", "schema", "bad_last_role")
    share[9]["conversations"][0]["from"] = "narrator"
    chat_plant(share, 9, "chat.jsonl", "unknown role 'narrator'", "schema", "unknown_role")
    share[15]["conversations"][3]["value"] = "Sure.\r\nDone."
    chat_plant(share, 15, "chat.jsonl", "CRLF inside conversations[*].value"
               " (cosmetic: flagged, kept as it is)", "control_chars", "crlf")
    openai[6]["messages"][2]["content"] = ""
    chat_plant(openai, 6, "chat_openai.jsonl", "empty assistant turn", "schema",
               "empty_assistant")
    openai[12]["messages"][1]["content"] += "\u200b"
    chat_plant(openai, 12, "chat_openai.jsonl", "zero-width space inside messages[*].content",
               "invisible_chars", "zero_width")

    # --- classification ------------------------------------------------------------------
    labels = ["positive", "negative", "neutral"]
    cls_rows = []
    for i in range(60):
        w1, w2 = rng.sample(WORDS, 2)
        lab = i % 3
        mood = ["loved", "hated", "noticed"][lab]
        cls_rows.append({"text": f"I {mood} the {w1} near the {w2} ({i}).",
                         "label": labels[lab]})
    cls_rows[10]["label"] = "postive"
    manifest.append(("label 'postive' (typo) not in labels.json", "classification.jsonl:11",
                     "classification", "labels", "unknown_label"))
    cls_rows[20]["label"] = "mixed"
    manifest.append(("label 'mixed' not in labels.json", "classification.jsonl:21",
                     "classification", "labels", "unknown_label"))

    out.mkdir(parents=True, exist_ok=True)

    def dump(rows: list, name: str, broken: dict[int, str] | None = None) -> None:
        lines = [json.dumps(r, ensure_ascii=False) for r in rows]
        for idx, text in sorted((broken or {}).items()):
            lines.insert(idx, text)
        (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")

    # A truncated JSON line: the reader quarantines it as parse_error. It is inserted, so
    # the lines after it move down by one; records planted before line 100 keep their line.
    dump(en, "alpaca_en.jsonl", {99: '{"instruction": "Unfinished record", "output": "oops'})
    manifest.append(("malformed JSON line", "alpaca_en.jsonl:100", "demo", "read",
                     "parse_error"))
    dump(zh, "alpaca_zh.jsonl")
    dump(share, "chat.jsonl")
    dump(openai, "chat_openai.jsonl")
    dump(cls_rows, "classification.jsonl")
    (out / "labels.json").write_text(json.dumps(labels) + "\n", encoding="utf-8")
    write_manifest(manifest, out)
    train_tokenizer(out)


def write_manifest(rows: list[tuple[str, str, str, str, str]], out_dir: Path) -> None:
    out = ["# Sample corpus manifest", "",
           "Every problem planted in the bundled sample by `tools/make_sample.py` (do not edit by"
           " hand: rerun the script). `row` is `file:line` (1-based, as in the quarantine's row"
           " ids); `pipeline` is the shipped pipeline that runs on that file. Problems marked"
           " cosmetic are only flagged by default (they do not harm training); the rest are"
           " fixed or quarantined. "
           "`tests/test_sample_demo.py` parses this table.", "",
           "| problem | row | pipeline | stage | code |", "| --- | --- | --- | --- | --- |"]
    for problem, row, pipe, stage, code in rows:
        problem = problem.replace("|", "\\|")
        out.append(f"| {problem} | {row} | {pipe} | {stage} | {code} |")
    (out_dir / "MANIFEST.md").write_text("\n".join(out) + "\n", encoding="utf-8")


CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def train_tokenizer(out: Path) -> None:
    """A tiny byte-level BPE trained on the sample itself, with a ChatML-like template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    texts = []
    for name in ("alpaca_en.jsonl", "alpaca_zh.jsonl", "chat.jsonl", "chat_openai.jsonl"):
        texts.extend((out / name).read_text(encoding="utf-8").splitlines())
    tok.train_from_iterator(texts, trainer=trainer)
    d = out / "tokenizer"
    d.mkdir(exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "bos_token": None, "model_max_length": 512,
              "chat_template": CHAT_TEMPLATE}
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n",
                                             encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
