"""Which cost profiles a run's figures are priced with, and the proxy time of a stored sample under one.

The profiles of a summary: ``this-machine`` when the run measured one (the run's own calibration: every arm priced
with one measured table of this machine), then the ones asked for (``--profile``), else the ones ``compare``
recorded with the run (``--profile`` there, or a suite's ``profiles:``). The proxy time of a sample is
``relaxbench.profiles.proxy.proxy_time`` of its stored per-round records at the sample's batch size (the
concurrency it was decoded at); the metrics turn them into proxy speed-ups with the very functions that turn
measured times into speed-ups. A device name is resolved to an analytic profile at every batch size the run's
samples were decoded at; a profile file prices only the batch sizes it holds, and a sample at another is unpriced
(the summary's notice names the batch size and how to make a profile at it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from relaxbench.analysis.records import CellRecord, RunRecord
from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.errors import ConfigError, ModelError
from relaxbench.harness.store import SampleRow
from relaxbench.methods import DrafterSpec
from relaxbench.models.shape import ModelShape
from relaxbench.profiles import Profile, ProxyTime, Work, proxy_time
from relaxbench.profiles.measure import MACHINE_PROFILE
from relaxbench.profiles.proxy import uses_head
from relaxbench.profiles.resolve import recorded_shape, resolve_profile


def profile_refs(run: RunRecord, requested: Sequence[str] = ()) -> tuple[str, ...]:
    """``this-machine`` (when stored), then ``requested``, else the profiles recorded with the run; no repeats."""
    recorded = tuple(run.suite.get("profiles") or ())
    refs = [MACHINE_PROFILE] if run.machine_profile is not None else []
    refs += list(requested or recorded)
    return tuple(dict.fromkeys(refs))


def _shape(run: RunRecord, name: str) -> ModelShape:
    """A model's shape as the run recorded it (latest session first), else read from the model's config."""
    for env in reversed(run.environment):
        for role in ("target", "draft"):
            described = env.get(role)
            if isinstance(described, dict) and described.get("name") == name:
                shape = recorded_shape(env, role)
                if shape is not None:
                    return shape
    from relaxbench.models import model_shape

    return model_shape(name)


def sample_batch(sample: SampleRow) -> int:
    """The requests per step a sample was decoded among: the concurrency the vLLM engine ran it at (the run's
    ``--concurrency``), 1 for relaxbench's own loop (one request at a time, no concurrency recorded)."""
    return sample.concurrency or 1


def run_batch_sizes(run: RunRecord) -> tuple[int, ...]:
    """Every batch size the run's samples were decoded at, increasing (1 for a run with no samples)."""
    return tuple(sorted({sample_batch(s) for cell in run.cells for s in cell.samples})) or (1,)


def head_label(cell: CellRecord) -> str | None:
    """The label of the draft head an arm drafted with (``eagle3(head=trained)``), None for other drafters."""
    kind = drafter_kind(cell)
    if kind is None or not uses_head(kind):
        return None
    return DrafterSpec(kind=kind, knobs=dict((cell.drafter or {}).get("knobs") or {})).label


def run_head_shapes(run: RunRecord) -> dict[str, ModelShape]:
    """The shapes of the draft heads the run's arms drafted with, read from their checkpoints (config and weight
    headers). A head whose files are not at hand is left out: its arms are unpriced, and the notice says why."""
    shapes: dict[str, ModelShape] = {}
    for cell in run.cells:
        label = head_label(cell)
        if label is None or label in shapes:
            continue
        try:
            shapes[label] = head_shape(str(drafter_kind(cell)), (cell.drafter or {}).get("knobs"), run.target)
        except (ConfigError, ModelError, OSError):
            continue
    return shapes


def head_shape(kind: str, knobs: dict[str, Any] | None, target: str) -> ModelShape:
    """The shape of the head a ``kind`` drafter with ``knobs`` drafts with for ``target`` (from its checkpoint)."""
    return ModelShape(**DRAFTERS.get(kind).head_shape_for(knobs, target))


def run_profiles(run: RunRecord, refs: Sequence[str]) -> tuple[Profile, ...]:
    """The profiles ``refs`` name, for this run's models and draft heads (a one-line ``ConfigError`` for one that
    names nothing)."""
    batch_sizes = run_batch_sizes(run)
    heads = run_head_shapes(run)
    profiles = [resolve_profile(ref, run.target, run.draft, run.machine_profile, partial(_shape, run), batch_sizes,
                                heads) for ref in refs]
    names = [p.name for p in profiles]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        from relaxbench.errors import ConfigError

        raise ConfigError(f"two profiles are named {duplicate!r}; rename one (the 'name:' of its file)")
    return tuple(profiles)


MEASURED_AXIS = "measured"


@dataclass(frozen=True)
class ProfileChoice:
    """The profiles a summary prices with, and the one the trade-off plot's x-axis uses (None: measured)."""

    profiles: tuple[Profile, ...]
    x_axis: str | None = None


def choose_profiles(run: RunRecord, requested: Sequence[str] = (), x_axis: str | None = None) -> ProfileChoice:
    """``profile_refs`` resolved for the run; ``x_axis`` (``measured`` or a profile reference) is added when it
    names a profile not among them."""
    refs = list(profile_refs(run, requested))
    on_axis = x_axis not in (None, MEASURED_AXIS)
    if on_axis and x_axis not in refs:
        refs.append(x_axis)  # type: ignore[arg-type]
    profiles = run_profiles(run, refs)
    return ProfileChoice(profiles, profiles[refs.index(x_axis)].name if on_axis else None)  # type: ignore[arg-type]


def sample_work(sample: SampleRow) -> Work:
    r = sample.rounds
    return Work(sample.n_prompt_tokens, r.drafted, r.emitted, r.extra, r.draft_forwards, r.lookups)


def drafter_kind(cell: CellRecord) -> str | None:
    return None if cell.is_baseline or cell.drafter is None else str(cell.drafter.get("kind"))


def sample_proxy(profile: Profile, cell: CellRecord, sample: SampleRow) -> ProxyTime:
    """The proxy time of one stored sample on ``profile``'s device, at its batch size (raises ``Unpriced``)."""
    return proxy_time(profile, sample_work(sample), drafter_kind(cell), sample_batch(sample), head_label(cell))
