"""What a kit step reports: checks (a value against a target, PASS/MISS when held) and the data written as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, MISS, INFO, NOT_HELD = "PASS", "MISS", "info", "not held"


@dataclass(frozen=True)
class Check:
    """One line of the final table. ``verdict``: PASS or MISS when the target is held here, ``info`` when there is
    no target, ``not held`` when the target only means something on a GPU and this is the CPU dry run."""

    step: str
    name: str
    value: str
    target: str = "-"
    verdict: str = INFO

    @property
    def missed(self) -> bool:
        return self.verdict == MISS


def verdict(ok: bool, held: bool = True) -> str:
    return (PASS if ok else MISS) if held else NOT_HELD


def within(ratio: float, tolerance: float) -> bool:
    """``ratio`` within 1 ± ``tolerance``."""
    return abs(ratio - 1.0) <= tolerance


@dataclass
class StepResult:
    """A step's checks, its wall time and its data (one JSON file per step, named after it)."""

    step: str
    checks: list[Check] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def add(self, name: str, value: str, target: str = "-", result: str = INFO) -> None:
        self.checks.append(Check(self.step, name, value, target, result))

    def record(self) -> dict[str, Any]:
        return {"step": self.step, "seconds": round(self.seconds, 2), "error": self.error,
                "checks": [asdict(c) for c in self.checks], "data": self.data}


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path
