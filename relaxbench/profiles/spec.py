"""The cost-profile file format: what a forward pass of each model costs on one device, as a table.

A profile gives, for the target (and the draft model, when there is one, and each dedicated draft head a run drafted
with: ``heads``, each named by its drafter's label):

* ``forward``: seconds of one forward step of ``batch`` requests, each feeding ``n`` new tokens on top of its own KV
  cache of ``L`` tokens, on a grid of n (``new_tokens``) × L (``context``), one row per context; one such table per
  batch size the profile was made at (``forward`` at the smallest, 1 unless made otherwise; ``forward_batches`` at
  the larger ones, increasing). A table without ``batch`` is a batch-1 table. A request decoded at concurrency B is
  priced with the batch-B table and with no other: a step of B requests does not cost what B steps of one do, nor
  what one does, so a profile without that batch size cannot price it (``relaxbench.profiles.proxy``);
* ``prefill``: seconds of one request's prompt forward (``tokens`` tokens on an empty cache);

and ``ngram_lookup``: seconds of one prompt-lookup over a context of ``tokens`` tokens (drafters that copy n-grams).

**Why a table with interpolation, not a fitted ``a + b·n + c·L + d·n·L``.** Forward cost is not bilinear where it
matters: on a CPU without bf16 units a k-token pass grows with k while with AMX it stays flat up to 16 tokens and
then bends (docs/performance.md's forward-cost table), and on a GPU it is a roofline — flat while memory-bound,
then linear once compute-bound — whose knee a bilinear fit smears over exactly the verify sizes (k + 1 = 6 … 32)
that decide a speed-up. A table reproduces what was measured at every grid point whatever the shape, is what a
measurement produces directly (no fitting step to validate), and lets an analytic profile be written the same way
(the roofline evaluated on a dense grid), so pricing has one code path. Between grid points the cost is linear in
each axis (bilinear); beyond the last point it is extended along the last segment and never falls below the last
value; below the first point it is the first value. Pricing counts the forwards it had to extend beyond the grid,
so a report can say when a profile did not cover a run.

Validation: ``load_profile`` reads a YAML file through the one validation mechanism (``relaxbench.validation``); a
missing field, a negative or non-finite cost, a grid that does not increase or a table whose shape does not match
its grid is a one-line ``ConfigError`` naming the file and the field.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, field_validator, model_validator

from relaxbench.errors import ConfigError
from relaxbench.validation import Spec as BaseSpec
from relaxbench.validation import Text, load_yaml, validate

FORMAT = "relaxbench-cost-profile/1"


def _seconds(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _size(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a token count (an integer >= 0), got {value!r}")
    return value


def _batch(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a number of requests (an integer >= 1), got {value!r}")
    return value


Seconds = Annotated[float, BeforeValidator(_seconds)]
Size = Annotated[int, BeforeValidator(_size)]
Batch = Annotated[int, BeforeValidator(_batch)]


def check_batch_sizes(batch_sizes: Sequence[int]) -> tuple[int, ...]:
    """Batch sizes to make a profile at: distinct, increasing integers >= 1 (a one-line ``ConfigError`` otherwise)."""
    sizes = tuple(batch_sizes)
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes) \
            or list(sizes) != sorted(set(sizes)):
        raise ConfigError(f"batch sizes must be distinct, increasing integers >= 1, got {list(sizes)}")
    return sizes


def batch_text(sizes: Sequence[int]) -> str:
    """``batch size 1`` / ``batch sizes 1, 8, 32``: how listings and assumptions name a profile's batch sizes."""
    return f"batch size{'s' if len(sizes) > 1 else ''} {', '.join(map(str, sizes))}"


def _increasing(values: Sequence[int], what: str) -> None:
    if not values:
        raise ValueError(f"{what} must list at least one size")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"{what} must increase strictly, got {list(values)}")


def interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear ``y(x)`` through the points; beyond the last point, the last segment extended (never below
    the last value); below the first point, the first value."""
    if len(xs) == 1 or x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return float(max(ys[-1], ys[-1] + slope * (x - xs[-1])))
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))


class Curve(BaseSpec):
    """Seconds as a function of one token count."""

    tokens: tuple[Size, ...]
    seconds: tuple[Seconds, ...]

    @model_validator(mode="after")
    def _check(self) -> Curve:
        _increasing(self.tokens, "tokens")
        if len(self.seconds) != len(self.tokens):
            raise ValueError(f"seconds has {len(self.seconds)} values for {len(self.tokens)} token counts")
        return self

    def at(self, tokens: float) -> float:
        return interpolate(self.tokens, self.seconds, tokens)

    def covers(self, tokens: float) -> bool:
        return tokens <= self.tokens[-1]


class ForwardTable(BaseSpec):
    """Seconds of one forward step of ``batch`` requests, each feeding ``n`` new tokens on top of its own KV cache of
    ``L`` tokens: ``seconds[i][j]`` at ``context[i]``, ``new_tokens[j]``."""

    batch: Batch = 1
    new_tokens: tuple[Size, ...]
    context: tuple[Size, ...]
    seconds: tuple[tuple[Seconds, ...], ...]

    @model_validator(mode="after")
    def _check(self) -> ForwardTable:
        _increasing(self.new_tokens, "new_tokens")
        _increasing(self.context, "context")
        if self.new_tokens[0] < 1:
            raise ValueError("new_tokens must start at 1 or more (a forward feeds at least one token)")
        if len(self.seconds) != len(self.context) or any(len(row) != len(self.new_tokens) for row in self.seconds):
            raise ValueError(f"seconds must have one row per context ({len(self.context)}) and one value per "
                             f"new_tokens entry ({len(self.new_tokens)}) in each row")
        return self

    def at(self, new_tokens: float, context: float) -> float:
        per_context = [interpolate(self.new_tokens, row, new_tokens) for row in self.seconds]
        return interpolate(self.context, per_context, context)

    def covers(self, new_tokens: float, context: float) -> bool:
        return new_tokens <= self.new_tokens[-1] and context <= self.context[-1]


class ModelCosts(BaseSpec):
    """One model's costs on the profile's device: a forward table per batch size, and one request's prefill."""

    model: Text  # the name a run records (``relaxbench compare --target``/``--draft``)
    dtype: Text
    forward: ForwardTable  # at the smallest batch size (1 unless the profile was made otherwise)
    forward_batches: tuple[ForwardTable, ...] = ()  # at the larger batch sizes, increasing
    prefill: Curve

    @model_validator(mode="after")
    def _check(self) -> ModelCosts:
        sizes = self.batch_sizes
        if any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError(f"forward tables must be at increasing batch sizes (forward first, then "
                             f"forward_batches), got {list(sizes)}")
        return self

    @property
    def forward_tables(self) -> tuple[ForwardTable, ...]:
        return (self.forward, *self.forward_batches)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(table.batch for table in self.forward_tables)

    def forward_at(self, batch: int) -> ForwardTable | None:
        """The forward table of a step of ``batch`` requests; None when the profile was not made at that size."""
        return next((table for table in self.forward_tables if table.batch == batch), None)


class Profile(BaseSpec):
    """A cost profile (see the module docstring). ``kind``: ``measured`` on a device by ``relaxbench profile`` (or at
    the start of a ``compare`` session: ``this-machine``), or ``analytic`` (a roofline from a device spec)."""

    format: Literal["relaxbench-cost-profile/1"] = FORMAT
    name: Text
    kind: Literal["measured", "analytic"]
    device: Text  # what it describes, in words
    assumptions: tuple[Text, ...] = ()
    sources: dict[str, Text] = Field(default_factory=dict)  # where each number of the profile comes from
    settings: dict[str, Any] = Field(default_factory=dict)  # how it was made (repeats, threads, versions, ...)
    target: ModelCosts
    draft: ModelCosts | None = None
    # dedicated draft heads (EAGLE-3, MTP) the run's arms drafted with, each named by its drafter's label
    # (``eagle3(head=trained)``): an analytic profile prices them from their checkpoints; a measured one has none
    heads: tuple[ModelCosts, ...] = ()
    ngram_lookup: Curve | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() for c in value):
            raise ValueError(f"must be a non-empty name without spaces, got {value!r}")
        return value

    @model_validator(mode="after")
    def _same_batches(self) -> Profile:
        if self.draft is not None and self.draft.batch_sizes != self.target.batch_sizes:
            raise ValueError(f"the draft's forward tables must be at the target's batch sizes (target "
                             f"{list(self.target.batch_sizes)}, draft {list(self.draft.batch_sizes)}): a step of B "
                             "requests runs both models at B")
        for head in self.heads:
            if head.batch_sizes != self.target.batch_sizes:
                raise ValueError(f"head {head.model!r}'s forward tables must be at the target's batch sizes "
                                 f"({list(self.target.batch_sizes)}), not {list(head.batch_sizes)}")
        return self

    def head(self, label: str) -> ModelCosts | None:
        """The costs of the draft head a drafter ``label`` names, if the profile has them."""
        return next((costs for costs in self.heads if costs.model == label), None)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes the profile can price (its target's, which its draft's equal)."""
        return self.target.batch_sizes

    def record(self) -> dict[str, Any]:
        """The profile as a plain mapping (what a file holds; the store keeps it as JSON)."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.record(), sort_keys=False, width=120, default_flow_style=None)


def profile_from_mapping(data: Any, where: str) -> Profile:
    return validate(Profile, data, where)


def load_profile(path: str | Path) -> Profile:
    """A profile file; any problem is a one-line ``ConfigError`` naming the file."""
    path = Path(path)
    return profile_from_mapping(load_yaml(path), str(path))


def write_profile(profile: Profile, path: str | Path) -> Path:
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise ConfigError(f"{path}: the folder {path.parent} does not exist")
    path.write_text(profile.to_yaml())
    return path


def check_models(profile: Profile, target: str, draft: str | None, where: str) -> None:
    """A profile prices a run only if it describes the run's own models (a cost table of another model would
    price counters it did not produce)."""
    if profile.target.model != target:
        raise ConfigError(f"{where}: profile {profile.name!r} is for target {profile.target.model!r}, the run's "
                          f"target is {target!r}")
    if draft is not None and profile.draft is not None and profile.draft.model != draft:
        raise ConfigError(f"{where}: profile {profile.name!r} is for draft {profile.draft.model!r}, the run's draft "
                          f"is {draft!r}")


def describe(profile: Profile) -> Mapping[str, str]:
    """One line per part of the profile, for listings."""
    parts = {"device": profile.device, "kind": profile.kind, "target": f"{profile.target.model} "
             f"({profile.target.dtype})", "batch": batch_text(profile.batch_sizes)}
    if profile.draft is not None:
        parts["draft"] = f"{profile.draft.model} ({profile.draft.dtype})"
    if profile.heads:
        parts["heads"] = ", ".join(head.model for head in profile.heads)
    return parts
