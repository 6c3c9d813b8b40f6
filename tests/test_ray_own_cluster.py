"""Which Ray cluster the engine runs on when no ``--address`` is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cleanpipe import Pipeline
from cleanpipe.stages.exact_dedup import ExactDedup

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def test_without_an_address_the_engine_starts_its_own_cluster_beside_a_running_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster left running on this machine (``ray start``, another program's) is what
    ``ray.init()`` joins by default, and it refused the engine's ``num_cpus``: the run
    died with "When connecting to an existing cluster, num_cpus ... must not be provided".
    Without an address the engine starts a cluster of its own; ``RAY_ADDRESS`` still names
    one to join."""
    from ray.cluster_utils import Cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if ray.is_initialized():
        ray.shutdown()
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"row {i % 7}"}) + "\n" for i in range(30)),
                   encoding="utf-8")
    running = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        rep = Pipeline(stages=[ExactDedup()]).run(src, None, engine="ray", workers=2)
        assert rep["totals"]["kept"] == 7
        assert ray.cluster_resources()["CPU"] == 2  # its own: the running one has 1
        ray.shutdown()
        monkeypatch.setenv("RAY_ADDRESS", running.address)
        rep = Pipeline(stages=[ExactDedup()]).run(src, None, engine="ray", workers=2)
        assert rep["totals"]["kept"] == 7
        assert ray.cluster_resources()["CPU"] == 1  # the one RAY_ADDRESS names
    finally:
        ray.shutdown()
        running.shutdown()
