"""Token counts from LLaMA-Factory's own supervised dataset processor, for the comparison in
tests/test_trainer_profiles.py. Runs in the LLaMA-Factory environment (``make
.venv-llamafactory``), not in the project's: it reads a JSON list of jobs on stdin and writes,
per job name and cutoff_len, ``{row_id: [tokens, supervised tokens]}`` for the rows
LLaMA-Factory keeps.

LLaMA-Factory is installed without its dependencies (they pin a torch and transformers that
conflict with the project's); ``torchaudio`` is imported by its multimodal plugin module at
import time and used only to decode audio, so an empty module stands in for it here.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import os
import sys
import types
from typing import Any

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
os.environ.setdefault("LLAMAFACTORY_VERBOSITY", "ERROR")
_audio = types.ModuleType("torchaudio")
_audio.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
sys.modules.setdefault("torchaudio", _audio)

from llamafactory.data.converter import get_dataset_converter  # noqa: E402
from llamafactory.data.parser import DatasetAttr  # noqa: E402
from llamafactory.data.processor.supervised import SupervisedDatasetProcessor  # noqa: E402
from llamafactory.data.template import get_template_and_fix_tokenizer  # noqa: E402
from llamafactory.extras.constants import IGNORE_INDEX  # noqa: E402
from llamafactory.hparams import DataArguments  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402


@functools.lru_cache
def load_tokenizer(path: str) -> Any:
    return AutoTokenizer.from_pretrained(path)


def run_job(job: dict) -> dict:
    tokenizer = load_tokenizer(job["tokenizer"])
    attr = DatasetAttr("file", "rows", formatting=job["formatting"])
    for key, value in job.get("columns", {}).items():
        setattr(attr, key, value)
    out = {}
    for cutoff in job["cutoff_len"]:
        args = DataArguments(template=job.get("template"), cutoff_len=cutoff,
                             train_on_prompt=job.get("train_on_prompt", False),
                             mask_history=job.get("mask_history", False))
        template = get_template_and_fix_tokenizer(tokenizer, args)
        convert = get_dataset_converter(attr.formatting, attr, args)
        processor = SupervisedDatasetProcessor(template=template, tokenizer=tokenizer,
                                               processor=None, data_args=args)
        counts = {}
        for row in job["rows"]:
            ex = convert(row)
            batch = {k: [ex.get(k)] for k in ("_prompt", "_response", "_system", "_tools",
                                              "_images", "_videos", "_audios")}
            done = processor.preprocess_dataset(batch)
            if done.get("input_ids"):  # the processor drops what it cannot align
                labels = done["labels"][0]
                counts[row["row_id"]] = [len(done["input_ids"][0]),
                                         sum(1 for t in labels if t != IGNORE_INDEX)]
        out[str(cutoff)] = counts
    return out


def main() -> None:
    json.dump({job["name"]: run_job(job) for job in json.load(sys.stdin)}, sys.stdout)


if __name__ == "__main__":
    main()
