"""The dataset card's features, written without importing datasets: entry for entry what
datasets writes, or left to datasets where cleanpipe cannot vouch for that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow as pa
import pytest
import yaml
from conftest import realdata

from cleanpipe.io.features_yaml import features_yaml
from cleanpipe.io.readers import read_table
from cleanpipe.io.writers import dataset_card

REPO = Path(__file__).resolve().parents[1]


def datasets_own(schema: pa.Schema) -> list:
    # datasets has no public name for the card's YAML form of its features; this is the
    # function its own card writer calls, used here as the reference only
    return datasets.Features.from_arrow_schema(schema)._to_yaml_list()


CHAT = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SCHEMAS = {
    "plain": pa.schema([(n, t) for n, t in [
        ("null", pa.null()), ("bool", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()),
        ("i32", pa.int32()), ("i64", pa.int64()), ("u8", pa.uint8()), ("u16", pa.uint16()),
        ("u32", pa.uint32()), ("u64", pa.uint64()), ("f16", pa.float16()),
        ("f32", pa.float32()), ("f64", pa.float64()), ("s", pa.string()),
        ("ls", pa.large_string()), ("b", pa.binary()), ("lb", pa.large_binary()),
        ("d32", pa.date32()), ("d64", pa.date64())]]),
    "timestamps": pa.schema([("s", pa.timestamp("s")), ("ms", pa.timestamp("ms")),
                             ("us_utc", pa.timestamp("us", tz="UTC")),
                             ("ns_tz", pa.timestamp("ns", tz="Asia/Shanghai"))]),
    "chat": pa.schema([("id", pa.string()), ("messages", CHAT), ("tools", pa.string())]),
    "nested": pa.schema([
        ("list_of_lists", pa.list_(pa.list_(pa.int64()))),
        ("large_list_of_structs", pa.large_list(pa.struct([("a", pa.list_(pa.float32()))]))),
        ("struct", pa.struct([("a", pa.list_(pa.string())),
                              ("b", pa.struct([("c", pa.int32()), ("d", CHAT)]))])),
        ("empty_struct", pa.struct([])), ("list_of_null", pa.list_(pa.null())),
        ("list_of_lists_of_structs", pa.list_(pa.list_(pa.struct([("k", pa.string())]))))]),
    "fixed": pa.schema([("fixed", pa.list_(pa.int16(), 3)),
                        ("fixed_structs", pa.list_(pa.struct([("x", pa.bool_())]), 2))]),
    "quarantine": pa.schema([("row_id", pa.string()), ("reasons", pa.list_(pa.string())),
                             ("record", pa.string())]),
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_features_are_what_datasets_writes(name: str) -> None:
    schema = SCHEMAS[name]
    got = features_yaml(schema)
    assert got is not None
    assert got == datasets_own(schema)


@pytest.mark.realdata
@pytest.mark.parametrize("parts", [
    ("sft_llamafactory_demos", "dpo_en_demo.json"),
    ("sft_llamafactory_demos", "glaive_toolcall_en_demo.json"),
    ("sft_llamafactory_demos", "kto_en_demo.json"),
    ("sft_medicalgpt_zh", "dpo_zh_500.jsonl"),
    ("cls_banking77", "train.csv"),
])
def test_features_of_real_corpora_are_what_datasets_writes(parts: tuple[str, str]) -> None:
    schema = read_table(realdata(*parts)).schema
    assert features_yaml(schema) == datasets_own(schema)


@pytest.mark.parametrize("schema", [
    pa.schema([("label", pa.dictionary(pa.int32(), pa.string()))]),
    pa.schema([("price", pa.decimal128(10, 2))]),
    pa.schema([("t", pa.time32("s"))]),
    pa.schema([("d", pa.duration("ms"))]),
    pa.schema([("nested", pa.list_(pa.struct([("p", pa.decimal128(5, 1))])))]),
    # datasets' own features ride in the metadata (a ClassLabel's names): it reads them there
    datasets.Features({"label": datasets.ClassLabel(names=["neg", "pos"])}).arrow_schema,
], ids=["dictionary", "decimal", "time", "duration", "nested decimal", "hf metadata"])
def test_other_schemas_are_left_to_datasets(schema: pa.Schema) -> None:
    assert features_yaml(schema) is None
    card = yaml.safe_load(dataset_card("data/*", "quarantine/*", schema).split("---")[1])
    assert card["dataset_info"][0]["features"] == datasets_own(schema)


class _Uuid(pa.ExtensionType):
    """An extension type a user registered, which (defining __eq__) does not hash."""

    def __init__(self) -> None:
        super().__init__(pa.binary(16), "test.uuid")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, _storage: pa.DataType, _serialized: bytes) -> _Uuid:
        return cls()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Uuid)

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("schema", [
    pa.schema([("id", _Uuid()), ("text", pa.string())]),
    pa.schema([("s", pa.struct([("x", pa.int64()), ("x", pa.string())]))]),
], ids=["extension type", "duplicate field names"])
def test_schemas_datasets_reads_its_own_way_are_left_to_it(schema: pa.Schema) -> None:
    assert features_yaml(schema) is None
    card = yaml.safe_load(dataset_card("data/*", "quarantine/*", schema).split("---")[1])
    try:
        want = datasets_own(schema)
    except Exception:  # datasets has no feature for it: the card declares none
        assert "dataset_info" not in card
    else:
        assert card["dataset_info"][0]["features"] == want


@pytest.mark.parametrize("version", ["3.6.0", "6.0.0", "2.18.0", "not-a-version"])
def test_other_datasets_versions_are_left_to_datasets(version: str) -> None:
    assert features_yaml(SCHEMAS["chat"], datasets_version=version) is None
    # the layout of 4.x is the one the installed 5.x writes (checked against a 4.0.0
    # package by hand; only the installed version can be compared here)
    assert features_yaml(SCHEMAS["chat"], datasets_version="4.0.0") is not None


def test_a_run_writes_its_card_without_importing_datasets(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    rows = [{"text": f"text {i // 2 if i < 20 else i}",
             "messages": [{"role": "user", "content": f"q{i}"},
                          {"role": "assistant", "content": f"a{i}"}],
             "score": i / 2} for i in range(30)]  # rows 1, 3, ..., 19 copy the one before
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pipe = tmp_path / "p.yaml"
    pipe.write_text("fields: [text]\nstages:\n  - stage: exact_dedup\n", encoding="utf-8")
    out = tmp_path / "out"
    code = ("import sys; from cleanpipe.cli import main; rc = main(sys.argv[1:]);"
            " print(rc, 'datasets' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code, "run", str(pipe), "-i", str(src),
                          "-o", str(out), "-q", "-j", "1"], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert res.stdout.split() == ["0", "False"], res.stderr
    header = yaml.safe_load((out / "README.md").read_text(encoding="utf-8").split("---")[1])
    ds = datasets.load_dataset(str(out), split="train")
    info = {c["config_name"]: c["features"] for c in header["dataset_info"]}
    assert info["default"] == datasets_own(ds.data.schema)
    assert ds.num_rows == 20 and ds.features["score"] == datasets.Value("float64")
    assert ds.features["messages"] == datasets.List({"role": datasets.Value("string"),
                                                     "content": datasets.Value("string")})


def test_an_output_with_fixed_size_lists_loads_with_its_features(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from cleanpipe import Pipeline
    from cleanpipe.stages.exact_dedup import ExactDedup

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({
        "text": ["a b c", "d e f", "a b c"],
        "emb": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float32(), 2))}), src)
    Pipeline(stages=[ExactDedup(fields=["text"])]).run(str(src), tmp_path / "out")
    ds = datasets.load_dataset(str(tmp_path / "out"), split="train")
    assert ds["text"] == ["a b c", "d e f"]
    assert ds.features["emb"] == datasets.List(datasets.Value("float32"), length=2)
