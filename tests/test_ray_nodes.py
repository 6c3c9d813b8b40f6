"""The Ray engine on a cluster of two worker nodes: which node runs which rows."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cleanpipe import Pipeline
from cleanpipe.engine.core import Sinks
from cleanpipe.engine.local import execute
from cleanpipe.engine.rows import QuarantineRows
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.minhash_dedup import MinHashDedup
from tests.ray_worker_facts import WorkerFacts

ray = pytest.importorskip("ray")
from cleanpipe.engine.ray_engine import execute_ray  # noqa: E402

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 1 << 28, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=1 << 28)
    cluster.wait_for_nodes()
    # workers import tests.ray_worker_facts to unpickle the test stage
    path = os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
    ray.init(address=cluster.address, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()
    cluster.shutdown()


def _run(executor: Any, pipe: Pipeline, src: Path) -> dict[str, Any]:
    quarantine: list[tuple[str, str, tuple[str, ...]]] = []

    def on_q(q: QuarantineRows) -> None:
        quarantine.extend((i, q.stage, tuple(r)) for i, r in
                          zip(q.row_ids, q.reasons, strict=True))

    events: list[pa.Table] = []
    run = executor(pipe.spec, src, Sinks(quarantine=on_q, events=events.append))
    kept = [i for rows in run for i in rows.row_ids.to_pylist()]
    ev = pa.concat_tables(events)
    nodes = ev.filter(pa.compute.equal(ev.column("code"), "node")).sort_by("seq")
    return {"kept": kept, "quarantine": sorted(quarantine),
            "nodes": nodes.column("detail").to_pylist()}


@pytest.mark.usefixtures("two_nodes")
def test_each_node_runs_consecutive_rows(tmp_path: Path) -> None:
    """Each node runs a block of consecutive task groups, in the first pass and (where the
    rows wait) after each dedup: a node's caches see neighbouring rows (context_length
    encodes a passage once, not once per node). The results are the local engine's.
    Handed to whichever node was free, the groups alternated between the nodes."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"row {i % 170} of the corpus " * (1 + i % 3)})
                           + "\n" for i in range(600)), encoding="utf-8")

    def make() -> Pipeline:  # task groups of 20 rows: 30 of them
        return Pipeline(stages=[ExactDedup(), MinHashDedup(threshold=0.9), WorkerFacts()],
                        batch_size=20)

    local = _run(execute, make(), src)
    on_ray = _run(execute_ray, make(), src)
    assert on_ray["kept"] == local["kept"] and on_ray["quarantine"] == local["quarantine"]
    nodes = on_ray["nodes"]
    assert len(nodes) == len(on_ray["kept"]) > 100
    assert len(set(nodes)) == 2  # both nodes worked
    # a block each, and at most a few groups taken from the far end of the other's
    changes = sum(a != b for a, b in itertools.pairwise(nodes))
    assert changes <= 4, changes
