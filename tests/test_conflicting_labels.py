"""exact_dedup with label_field: same text with different labels is a contradiction to
report on every row, not a duplicate of which one label silently survives."""

from __future__ import annotations

import collections
import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cleanpipe import Pipeline
from tests.conftest import realdata


def _planted_banking77(path: Path) -> list[dict[str, str]]:
    with open(realdata("cls_banking77", "train.csv"), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))[:2000]
    cats = sorted({r["category"] for r in rows})
    planted = []
    for k, r in enumerate(rows[::97]):  # the same utterance again under another intent
        other = cats[(cats.index(r["category"]) + 1 + k) % len(cats)]
        planted.append({"text": r["text"], "category": other})
    planted += [dict(r) for r in rows[5::131]]  # plain duplicates, same intent
    rows = rows + planted
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return rows


@pytest.mark.realdata
def test_conflicting_labels_on_banking77(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    rows = _planted_banking77(data)
    pipe_yaml = tmp_path / "p.yaml"
    pipe_yaml.write_text("name: cls\nfields: [text]\nstages:\n  - stage: exact_dedup\n"
                         "    label_field: category\n", encoding="utf-8")
    report = Pipeline.from_yaml(pipe_yaml).run(str(data), tmp_path / "out")

    # Oracle: group by whitespace-folded text; groups with two labels conflict (all rows),
    # the others keep their first row.
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i, r in enumerate(rows):
        groups[" ".join(r["text"].split())].append(i)
    want_conflict, want_dup = set(), set()
    for members in groups.values():
        if len({rows[i]["category"] for i in members}) > 1:
            want_conflict.update(members)
        else:
            want_dup.update(members[1:])
    assert want_conflict and want_dup

    q = pq.read_table(sorted((tmp_path / "out" / "quarantine").glob("*.parquet"))).to_pylist()
    line = {f"{data.name}:{i + 1}": i for i in range(len(rows))}
    got = collections.defaultdict(set)
    for r in q:
        for code in r["_cleanpipe_reasons"]:
            got[code].add(line[r["_cleanpipe_row_id"].rsplit("/", 1)[-1]])
    assert got["conflicting_labels"] == want_conflict
    assert got["exact_duplicate"] == want_dup
    section = next(s for s in report["stages"] if s["name"] == "exact_dedup")["section"]
    assert section["conflicting_labels"]["rows"] == len(want_conflict)
    ex = section["conflicting_labels"]["examples"][0]["rows"]
    assert len({r["label"] for r in ex}) > 1


def test_conflicting_labels_flag_keeps_every_row() -> None:
    from cleanpipe.stages.exact_dedup import ExactDedup

    stage = ExactDedup(fields=["text"], label_field="label",
                       actions={"conflicting_labels": "flag"})
    out = stage({"text": ["a", "a", "b", "b"], "label": ["x", "y", "z", "z"]})
    assert out == {"text": ["a", "a", "b"], "label": ["x", "y", "z"]}


def test_label_field_must_exist() -> None:
    from cleanpipe.contract.stage import StageError
    from cleanpipe.stages.exact_dedup import ExactDedup

    with pytest.raises(StageError, match="label_field 'label' is not a column"):
        ExactDedup(fields=["text"], label_field="label")({"text": ["a"]})
