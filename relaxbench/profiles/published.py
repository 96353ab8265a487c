"""Published batch-size-1 decode latencies (the shipped ``profiles/published.yaml``, every figure with its source)
and how the analytic roofline compares with them: the sanity check of ``relaxbench bench proxy --published``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from relaxbench.models.shape import ModelShape
from relaxbench.profiles.analytic import roofline
from relaxbench.profiles.devices import DeviceCatalog, device_catalog
from relaxbench.validation import Flag, Integer, Number, Spec, Text, builtin_dir, load_yaml, validate

PUBLISHED_FILE = "published.yaml"


class Entry(Spec):
    name: Text
    device: Text
    tp: Integer = 1
    dtype: Text = "bfloat16"
    context: Integer
    published_ms: Number
    checked: Flag
    why_unchecked: Text = ""
    source: Text
    shape: dict[str, int | bool]


class Published(Spec):
    factor: Number
    entries: tuple[Entry, ...] = Field(min_length=1)


@dataclass(frozen=True)
class Comparison:
    entry: Entry
    analytic_ms: float
    factor: float

    @property
    def ratio(self) -> float:
        """Analytic / published."""
        return self.analytic_ms / self.entry.published_ms

    @property
    def holds(self) -> bool | None:
        if not self.entry.checked:
            return None
        return 1 / self.factor <= self.ratio <= self.factor


def load_published(path: str | Path | None = None) -> Published:
    path = Path(path) if path is not None else builtin_dir("profiles") / PUBLISHED_FILE
    return validate(Published, load_yaml(path), str(path))


def compare_published(published: Published | None = None, catalog: DeviceCatalog | None = None) -> list[Comparison]:
    """The analytic 1-token forward of every published entry next to its published figure."""
    published = published or load_published()
    catalog = catalog or device_catalog()
    out = []
    for entry in published.entries:
        line = roofline(entry.device, ModelShape(**entry.shape), entry.dtype, entry.tp, catalog)
        out.append(Comparison(entry, 1e3 * line.seconds(1, entry.context), published.factor))
    return out
