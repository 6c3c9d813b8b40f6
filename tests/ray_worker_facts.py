"""A test stage that tells, row by row, where and how a Ray task ran it.

Lives in a module of its own so both Ray test modules use one stage, and Ray's workers
(with the tests folder on their path) can unpickle it.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from cleanpipe.contract.stage import Action, BatchContext, BatchResult, BatchStage, Findings


class WorkerFacts(BatchStage):
    """Flags every row twice: ``parallelism``, with the worker's ``TOKENIZERS_PARALLELISM``
    (``unset`` when unset), and ``node``, with the id of the Ray node that ran it (``local``
    off Ray)."""

    name = "_test_worker_facts"
    codes = {"parallelism": Action.FLAG, "node": Action.FLAG}

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        import ray

        every = np.ones(batch.num_rows, dtype=bool)
        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
        f = Findings(self.name)
        f.add(every, "parallelism", Action.FLAG,
              detail=os.environ.get("TOKENIZERS_PARALLELISM", "unset"))
        f.add(every, "node", Action.FLAG, detail=node)
        return BatchResult(batch, f)
