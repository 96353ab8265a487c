"""What relaxbench reads from a stored run, as plain JSON: every table row the analysis loads (samples as their
row type, per-round values by name) and the text of ``summary`` and ``summary --wide``.

``tests/data/legacy_store_v1.reading.json`` is this reading of ``tests/data/legacy_store_v1.sqlite`` taken by the
code that read schema version 1 in place; ``test_store_upgrade.py`` compares it with the reading of the upgraded
store. Its two summary texts were retaken once, when the diagnostics table's columns were renamed (policy, policy
ms/round, policy share → rule, rule ms/round, rule share), after checking that they differed from the version-1
texts by that rename and the columns' widths alone; its tables are the version-1 reading's. The module uses only interfaces both versions have, so it regenerates the reading from any checkout:

    PYTHONPATH=CHECKOUT python tests/legacy_reading.py STORE.sqlite OUT.json
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

# the per-round values of a sample, by the name a round declares them (version 1 kept each in a round_* column)
ROUND_NAMES = ("drafted", "accepted", "relaxed", "emitted", "t_draft", "t_verify", "t_policy", "extra",
               "draft_forwards", "lookups", "emitted_in_span", "relaxed_in_span")
TABLES = ("runs", "environment", "cells")


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _sample(sample: Any) -> dict[str, Any]:
    """A sample's fields, with its rounds as {name: values or None} whichever way the version holds them."""
    out = {f.name: _plain(getattr(sample, f.name)) for f in dataclasses.fields(sample)
           if not f.name.startswith("round_") and f.name != "rounds"}
    rounds = getattr(sample, "rounds", None)
    out["rounds"] = {name: _plain(rounds[name] if rounds is not None else getattr(sample, f"round_{name}", None))
                     for name in ROUND_NAMES}
    return out


def _summary(run_dir: Path, *flags: str) -> str:
    from relaxbench.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", str(run_dir), *flags]) == 0
    return out.getvalue().replace(str(run_dir), "RUN_DIR")


def reading(run_dir: Path) -> dict[str, Any]:
    """The reading of the store in ``run_dir`` (its results.sqlite)."""
    from relaxbench.analysis import load_run

    run = load_run(run_dir)
    tables = {"run": {"run_id": run.run_id, "run_key": run.run_key, "created_at": run.created_at,
                      "updated_at": run.updated_at, "target": run.target, "draft": run.draft, "suite": run.suite},
              "environment": _plain(list(run.environment)),
              "machine_profile": run.machine_profile,
              "graders": {h: dataclasses.asdict(g) for h, g in run.graders.items()},
              "cells": [{**{f.name: _plain(getattr(c, f.name)) for f in dataclasses.fields(c)
                            if f.name not in ("samples", "verdicts")},
                         "samples": [_sample(s) for s in c.samples],
                         "verdicts": [dataclasses.asdict(v) for v in c.verdicts]} for c in run.cells]}
    return {"tables": tables, "summary": _summary(run_dir), "summary_wide": _summary(run_dir, "--wide")}


def main(store: str, out: str) -> None:
    os.environ["COLUMNS"] = "160"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(store, Path(tmp) / "results.sqlite")
        Path(out).write_text(json.dumps(reading(Path(tmp)), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
