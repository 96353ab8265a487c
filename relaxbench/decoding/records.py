"""What one generation leaves behind: output, stop reason, per-round counters and timings.

A round's facts are declared once, in ``ROUND_FIELDS`` (name, kind, unit, meaning): the loop and the vLLM executor
fill a ``RoundLog`` by name, the store keeps a sample's ``Rounds`` in one columnar column, and the analysis reads
them by name. A new per-round fact is one more ``RoundField``.

Counters are the raw ones vLLM V1 keeps (drafts, draft tokens, accepted tokens, accepted per position) plus relaxed
acceptances and emitted tokens; every reported figure is derived from them. ``Counters`` is the one type that holds
their totals and the one place the ratios over them (mean acceptance length, acceptance rate, relaxed fraction,
acceptance by position) are defined: a generation, a stored sample, a cell of a run and an lm-eval run all sum
``Counters`` and read the same properties.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _add(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip_longest(a, b, fillvalue=0))


def per_position(drafted: Sequence[int], accepted: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(rounds that accepted draft position i, rounds that drafted it), i = 0 .. the longest draft − 1. A round
    that accepted n drafts accepted positions 0..n−1 (acceptance is a prefix)."""
    width = max(drafted, default=0)
    accepted_at, drafted_at = [0] * width, [0] * width
    for d, a in zip(drafted, accepted):
        for i in range(d):
            drafted_at[i] += 1
            accepted_at[i] += i < a
    return tuple(accepted_at), tuple(drafted_at)


@dataclass(frozen=True)
class Counters:
    """Token and round totals of one or more generations; ``+`` adds them (``sum(items, Counters())``).

    ``emitted`` counts output token ids (bonus and correction tokens included); ``relaxed`` counts accepted drafts
    that strict verification would have rejected."""

    emitted: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    relaxed: int = 0
    accepted_per_position: tuple[int, ...] = ()  # rounds that accepted draft position i
    drafted_per_position: tuple[int, ...] = ()  # rounds that drafted draft position i

    @classmethod
    def of_rounds(cls, drafted: Sequence[int], accepted: Sequence[int], relaxed: Sequence[int],
                  emitted: int) -> Counters:
        """The counters of one generation from its per-round columns and its output length."""
        accepted_at, drafted_at = per_position(drafted, accepted)
        return cls(emitted, len(drafted), sum(drafted), sum(accepted), sum(relaxed), accepted_at, drafted_at)

    def __add__(self, other: Counters) -> Counters:
        return Counters(self.emitted + other.emitted, self.rounds + other.rounds, self.drafted + other.drafted,
                        self.accepted + other.accepted, self.relaxed + other.relaxed,
                        _add(self.accepted_per_position, other.accepted_per_position),
                        _add(self.drafted_per_position, other.drafted_per_position))

    @property
    def mean_acceptance_length(self) -> float | None:
        """Emitted tokens / verification rounds, bonus included (1.0 for the target alone); None without rounds."""
        return _ratio(self.emitted, self.rounds)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / drafted tokens; None when nothing was drafted."""
        return _ratio(self.accepted, self.drafted)

    @property
    def relaxed_fraction(self) -> float | None:
        """Relaxed acceptances / emitted tokens: the share of the output that strict verification would not have
        let through (per emitted token, so it reads as a share of the text and is comparable across k)."""
        return _ratio(self.relaxed, self.emitted)

    @property
    def drafts(self) -> int:
        """Rounds that drafted at least one token (vLLM's ``num_drafts``)."""
        return self.drafted_per_position[0] if self.drafted_per_position else 0

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        """vLLM's per-position acceptance rate (``vllm/v1/spec_decode/metrics.py``: ``num_accepted_tokens_per_pos /
        num_drafts``): rounds that accepted draft position i / rounds with a draft, i.e. P(accepted length > i).
        A round whose draft was shorter than i + 1 (the budget's last rounds, a short n-gram match) counts as not
        accepting position i, as in vLLM."""
        return tuple(a / self.drafts for a in self.accepted_per_position) if self.drafts else ()


_REQUIRED: Any = object()  # a field every round must fill


@dataclass(frozen=True)
class RoundField:
    """One per-round fact, declared once: the generation loop and the vLLM executor fill it by ``name``
    (``RoundLog.add``), the store keeps it under that name in the sample's ``rounds`` column and the analysis reads
    it by that name (``sample.rounds.name``). ``kind`` is ``int``, ``float`` or ``tuple`` (a tuple of ints per
    round); a field with a ``default`` may be left out of a round, and one whose every round holds ``None`` is not
    stored (reads ``None``: not recorded)."""

    name: str
    kind: type
    unit: str
    doc: str
    default: Any = _REQUIRED

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


ROUND_FIELDS: tuple[RoundField, ...] = (
    RoundField("drafted", int, "tokens", "draft tokens verified this round"),
    RoundField("accepted", int, "tokens", "draft tokens accepted (a prefix of the draft)"),
    RoundField("relaxed", int, "tokens", "accepted drafts that strict verification would have rejected"),
    RoundField("emitted", int, "tokens", "tokens appended to the output (accepted drafts and the next token, cut at "
               "a stop)"),
    RoundField("t_draft", float, "s", "drafting"),
    RoundField("t_verify", float, "s", "the target's verify forward"),
    RoundField("t_policy", float, "s", "the rule's decision"),
    RoundField("extra", int, "tokens", "tokens the rule appended to the verify forward (the reflective rule's "
               "reflection), for pricing", 0),
    RoundField("draft_forwards", tuple, "tokens per forward", "new tokens fed to each draft-model forward, for "
               "pricing", ()),
    RoundField("lookups", int, "lookups", "n-gram lookups of the drafter, for pricing", 0),
    RoundField("emitted_in_span", int, "tokens", "a span-gated rule's emitted tokens inside the thinking span "
               "(None: an ungated rule)", None),
    RoundField("relaxed_in_span", int, "tokens", "a span-gated rule's relaxed acceptances inside the thinking span "
               "(None: an ungated rule)", None),
)


def round_fields() -> tuple[RoundField, ...]:
    """The declared per-round fields (read at call time, so a field declared in a test is seen everywhere)."""
    return ROUND_FIELDS


def _field(name: str) -> RoundField:
    for declared in round_fields():
        if declared.name == name:
            return declared
    raise AttributeError(f"no per-round field {name!r} (declared: {', '.join(f.name for f in round_fields())})")


def _value(declared: RoundField, value: Any) -> Any:
    if value is None:
        return None
    if declared.kind is tuple:
        return tuple(int(v) for v in value)
    return declared.kind(value)


class RoundLog:
    """The rounds of one generation as they happen: one column per declared field (``ROUND_FIELDS``), filled a
    round at a time by name. ``rounds.drafted`` is a field's column (a list)."""

    def __init__(self, columns: dict[str, list[Any]] | None = None) -> None:
        self.columns: dict[str, list[Any]] = {f.name: [] for f in round_fields()}
        for name, values in (columns or {}).items():
            _field(name)
            self.columns[name] = list(values)

    def add(self, **values: Any) -> None:
        """One round, its fields by name (a field with a default may be left out)."""
        unknown = sorted(set(values) - set(self.columns))
        if unknown:
            raise TypeError(f"no per-round field {unknown[0]!r} (declared: {', '.join(self.columns)})")
        row = {}
        for declared in round_fields():
            if declared.name in values:
                row[declared.name] = _value(declared, values[declared.name])
            elif declared.required:
                raise TypeError(f"a round needs {declared.name!r} ({declared.doc})")
            else:
                row[declared.name] = declared.default
        for name, value in row.items():  # checked whole first: a refused round leaves nothing half-written
            self.columns[name].append(value)

    def __getattr__(self, name: str) -> list[Any]:
        if name.startswith("__") or name == "columns":
            raise AttributeError(name)
        _field(name)
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns["drafted"])

    def __add__(self, other: RoundLog) -> RoundLog:
        """These rounds, then ``other``'s (a generation continued in a second phase)."""
        return RoundLog({name: values + other.columns[name] for name, values in self.columns.items()})

    def frozen(self) -> Rounds:
        """The rounds as stored: a field with a value in some round (one with none is not recorded; with no rounds
        at all, the fields that cannot be None are kept, empty)."""
        return Rounds({f.name: tuple(self.columns[f.name]) for f in round_fields()
                       if any(v is not None for v in self.columns[f.name])
                       or not self.columns[f.name] and f.default is not None})

    def to_record(self) -> dict[str, list[Any]]:
        return {name: list(values) for name, values in self.columns.items()}


@dataclass(frozen=True)
class Rounds:
    """A stored sample's rounds: each declared field's values by name (``rounds.drafted``, ``rounds["drafted"]``),
    ``None`` for a field not recorded (a store written before it, or a rule that has no value for it)."""

    columns: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lengths = {name: len(values) for name, values in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"per-round fields of different lengths: {lengths}")

    @classmethod
    def of(cls, **columns: Sequence[Any] | None) -> Rounds:
        """Rounds from their columns by name (None or left out: not recorded)."""
        return cls({name: tuple(_value(_field(name), v) for v in values)
                    for name, values in columns.items() if values is not None})

    def __getitem__(self, name: str) -> tuple[Any, ...] | None:
        if name not in self.columns:
            _field(name)  # a name nobody declared is an error, a declared one not recorded reads None
            return None
        return self.columns[name]

    def __getattr__(self, name: str) -> tuple[Any, ...] | None:
        if name.startswith("__") or name == "columns":
            raise AttributeError(name)
        return self[name]

    def __len__(self) -> int:
        return len(self.columns.get("drafted", ()))

    def to_json(self) -> str:
        """The ``rounds`` column: a JSON object, field name → its values (columnar; see docs/design.md)."""
        return json.dumps({name: [list(v) if isinstance(v, tuple) else v for v in values]
                           for name, values in self.columns.items()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Rounds:
        """The stored column read back (a field this version does not declare is kept as read)."""
        columns = json.loads(text)
        declared = {f.name: f for f in round_fields()}
        return cls({name: tuple(_value(declared[name], v) for v in values) if name in declared else tuple(values)
                    for name, values in columns.items()})


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    stop_reason: str  # "eos", "stop", "length"
    rounds: RoundLog
    time_prefill: float
    time_total: float
    forced_tokens: int = 0  # output tokens a thinking budget appended (decoding/budget.py); no round emitted them

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    @property
    def n_emitted(self) -> int:
        return len(self.output_ids)

    @property
    def counters(self) -> Counters:
        """This generation's counters (tokens counted from the output ids, less those a thinking budget forced)."""
        r = self.rounds
        return Counters.of_rounds(r.drafted, r.accepted, r.relaxed, self.n_emitted - self.forced_tokens)

    @property
    def tokens_per_second(self) -> float:
        return self.n_emitted / self.time_total if self.time_total > 0 else 0.0

    def to_record(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "output_ids": self.output_ids,
            "text": self.text,
            "stop_reason": self.stop_reason,
            "rounds": self.rounds.to_record(),
            "time_prefill": self.time_prefill,
            "time_total": self.time_total,
            **({"forced_tokens": self.forced_tokens} if self.forced_tokens else {}),
        }
