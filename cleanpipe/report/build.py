"""Build the report dict from what the engine counted (never by re-reading data)."""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from cleanpipe.contract import published as pub
from cleanpipe.contract.stage import GlobalStage, Stage
from cleanpipe.engine.apply import CHAR_EDGES
from cleanpipe.engine.core import RunState
from cleanpipe.report.schema import SCHEMA_VERSION
from cleanpipe.spec import PipelineSpec
from cleanpipe.version import __version__

_KEY_DEPS = ("pyarrow", "polars", "datasets", "datasketch", "ftfy", "tokenizers", "numpy",
             "numba", "pydantic")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "cleanpipe": __version__}
    for name in _KEY_DEPS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


#: Run-level distributions (the report's charts): each from the first stage publishing it.
_CHARTED = (pub.TOKENS_BEFORE, pub.TOKENS_AFTER, pub.LABELS)


def published_entry(stage: Stage, metrics: dict[str, Any]) -> dict[str, Any]:
    """A stage's report entry fields from what it publishes: its ``distributions`` and
    ``totals`` (typed, by :attr:`Stage.publishes`) and its other ``metrics``."""
    summary = stage.summary(metrics)
    if set(summary.values) != set(stage.publishes):
        raise RuntimeError(f"{stage.name}: summary() returned {sorted(summary.values)}, "
                           f"but the stage publishes {sorted(stage.publishes)}")
    return {
        "metrics": {k: v for k, v in metrics.items() if k not in stage.publishes},
        "distributions": {k: v.to_json() for k, v in sorted(summary.distributions().items())},
        "totals": {k: v.to_json() for k, v in sorted(summary.totals().items())},
    }


def _section(stage: Stage) -> tuple[dict[str, Any], dict[str, Any]]:
    """A global stage's section, less its memory internals (returned apart, as
    diagnostics)."""
    if not isinstance(stage, GlobalStage):
        return {}, {}
    section = dict(stage.report_section())
    memory = section.pop(pub.MEMORY, None)
    return section, ({pub.MEMORY: memory} if memory else {})


def build_report(spec: PipelineSpec, state: RunState, *, input_desc: list[str],
                 output_path: str | None, output_written: bool) -> dict[str, Any]:
    stages = []
    reasons = []
    examples: list[dict[str, Any]] = list(state.read_examples)
    changed = flagged = failed = 0
    for i, (stage, st) in enumerate(zip(spec.stages, state.stage_stats, strict=True)):
        section, diagnostics = _section(stage)
        stages.append({
            "index": i, "name": stage.name, "params": stage.describe(),
            "rows_in": st.rows_in, "rows_out": st.rows_out, "changed": st.changed,
            "dropped": st.dropped, "flagged": st.flagged, "failed": st.failed,
            "seconds": round(st.seconds, 4),
            "codes": {c: {"action": a, "events": e, "rows": r}
                      for c, (a, e, r) in sorted(st.codes.items())},
            **published_entry(stage, st.metrics), "section": section,
            "diagnostics": diagnostics,
        })
        changed += st.changed
        flagged += st.flagged
        failed += st.failed
        for c, (a, e, r) in sorted(st.codes.items()):
            reasons.append({"stage": stage.name, "code": c, "action": a, "events": e, "rows": r})
        for code in sorted(st.examples):
            examples.extend(st.examples[code])
    for code, n in sorted(state.read_codes.items()):
        reasons.insert(0, {"stage": "read", "code": code, "action": "drop", "events": n,
                           "rows": n})
    for i, (code, (n_events, n_rows)) in enumerate(sorted(state.read_fixes.items())):
        # the reader's own changes ({} stored as null) count as changes, like a stage's
        reasons.insert(len(state.read_codes) + i, {
            "stage": "read", "code": code, "action": "fix", "events": n_events, "rows": n_rows})
        changed += n_events
    dist: dict[str, Any] = {
        "chars_before": {"edges": CHAR_EDGES, "counts": state.hist_before.tolist()},
        "chars_after": {"edges": CHAR_EDGES, "counts": state.hist_after.tolist()},
    }
    if state.fields_before or state.fields_after:
        dist["fields"] = {"before": state.fields_before, "after": state.fields_after}
    for name in _CHARTED:
        dist.update(next(({name: s["distributions"][name]} for s in stages
                          if name in s["distributions"]), {}))
    wall = max(state.wall, 1e-9)
    return {
        "schema_version": SCHEMA_VERSION,
        "cleanpipe_version": __version__,
        "versions": versions(),
        "pipeline": {"name": spec.name, "path": spec.source, "config_hash": spec.config_hash(),
                     "config": spec.config_dict()},
        "input": {"paths": input_desc, "files": state.shards, "bytes": state.input_bytes,
                  "fingerprint": "xxh3_128:" + state.fingerprint.hexdigest(),
                  "text_fields": state.text_fields,
                  **({"revisions": state.revisions} if state.revisions else {})},
        "output": {"path": output_path, "format": spec.output.format, "written": output_written},
        "totals": {"read": state.read, "kept": state.kept, "quarantined": state.quarantined,
                   "changed": changed, "flagged": flagged, "failed": failed},
        "stages": stages,
        "reasons": reasons,
        "examples": examples,
        "distributions": dist,
        "timing": {
            "wall_seconds": round(state.wall, 4),
            "rows_per_second": round(state.read / wall, 1),
            "started": datetime.fromtimestamp(state.started, timezone.utc).isoformat(),
            # how the run was executed: changes the timings above, never the results
            "batch_size": spec.batch_size,
            "workers": state.workers,
            "engine": spec.engine,
        },
        "verdict": {"passed": failed == 0, "exit_code": 0 if failed == 0 else 1, "rules": []},
    }
