"""How closely two arms of a run agree on the same prompts: identical outputs, the tokens they share before they
first differ, the rounds they decide alike, and each arm's MAL over the same samples.

Two implementations of one rule (relaxbench's ``fly-vllm`` and vLLM's own FLy, the ``fly-native`` arm) should agree
token for token; this is where a run says how far they do. The pairs are the ones a rule declares
(``VerificationPolicy.counterpart``: an arm whose rule names another arm's rule, with the same drafter, k, decoding
mode and knobs) and any the user names (``--agree A:B``).

Pairing: the units (item, turn) both arms finished (``metrics.complete_units`` over the two cells), and within a
unit the repeats both have, so each compared sample of A meets B's sample of the same (item, turn, repeat).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relaxbench.analysis.metrics import by_unit, complete_units, is_greedy, is_target_alone, total_counters
from relaxbench.analysis.records import CellRecord, RunRecord
from relaxbench.errors import ConfigError
from relaxbench.harness.store import SampleRow
from relaxbench.registry import did_you_mean

ArmPair = tuple[str, str]  # (arm A, arm B)
CounterpartOf = Callable[[str], "str | None"]  # a policy name → the policy name its rule declares as counterpart
KnobsOf = Callable[[str, Mapping[str, Any]], Mapping[str, Any]]  # a policy's stored knobs, defaults filled


@dataclass(frozen=True)
class Agreement:
    """Arm A against arm B on one task, over the samples both finished (``n`` of them).

    ``token_agreement``: mean over the samples of (tokens the two outputs share before they first differ) / (tokens
    of the longer output), 1 for two empty outputs. ``median_first_divergence``: the median of that shared-prefix
    length over the samples whose outputs differ (None when none does). ``rounds_alike``: Σ rounds whose (drafted,
    accepted) equal B's from the first round until the first that does not / Σ A's rounds; it reads as decisions
    only when both arms draft alike (``same_drafts``: the same drafter and k). ``declared``: found from a rule's
    counterpart rather than named by the user."""

    task: str
    arm_a: str
    arm_b: str
    n: int
    identical: int
    token_agreement: float | None
    median_first_divergence: float | None
    rounds_alike: float | None
    mal_a: float | None
    mal_b: float | None
    same_drafts: bool
    declared: bool = False

    @property
    def identical_share(self) -> float | None:
        return self.identical / self.n if self.n else None


# ------------------------------------------------------------------------------------------------ one pair


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Tokens two outputs share before they first differ (the shorter one's length when it is a prefix)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def rounds_decided_alike(a: SampleRow, b: SampleRow) -> int:
    """A's rounds whose (drafted, accepted) equal B's, from the first round until the first that does not."""
    rounds_a = list(zip(a.rounds.drafted or (), a.rounds.accepted or ()))
    rounds_b = list(zip(b.rounds.drafted or (), b.rounds.accepted or ()))
    return shared_prefix(rounds_a, rounds_b)


def paired_samples(a: CellRecord, b: CellRecord) -> list[tuple[SampleRow, SampleRow]]:
    """(A's sample, B's sample) of every (item, turn, repeat) both arms finished, in data order."""
    groups_a, groups_b = by_unit(a.samples), by_unit(b.samples)
    out = []
    for unit in complete_units([a, b]):
        repeats_b = {s.repeat: s for s in groups_b[unit]}
        out += [(s, repeats_b[s.repeat]) for s in sorted(groups_a[unit], key=lambda s: s.repeat)
                if s.repeat in repeats_b]
    return out


def same_drafts(a: CellRecord, b: CellRecord) -> bool:
    """Whether the two arms draft alike (the same drafter with the same knobs, the same k), so their rounds can be
    compared decision by decision."""
    return a.drafter == b.drafter and a.k == b.k


def agreement(a: CellRecord, b: CellRecord, declared: bool = False) -> Agreement:
    """Arm ``a`` against arm ``b`` of one task (see ``Agreement``)."""
    pairs = paired_samples(a, b)
    prefixes = [shared_prefix(x.output_ids, y.output_ids) for x, y in pairs]
    shares = [p / longest if (longest := max(len(x.output_ids), len(y.output_ids))) else 1.0
              for p, (x, y) in zip(prefixes, pairs)]
    differing = [p for p, (x, y) in zip(prefixes, pairs) if tuple(x.output_ids) != tuple(y.output_ids)]
    rounds_a = sum(len(x.rounds.drafted or ()) for x, _ in pairs)
    alike = sum(rounds_decided_alike(x, y) for x, y in pairs)
    return Agreement(
        task=a.task, arm_a=a.arm, arm_b=b.arm, n=len(pairs), identical=len(pairs) - len(differing),
        token_agreement=statistics.fmean(shares) if shares else None,
        median_first_divergence=float(statistics.median(differing)) if differing else None,
        rounds_alike=alike / rounds_a if rounds_a else None,
        mal_a=total_counters([x for x, _ in pairs]).mean_acceptance_length,
        mal_b=total_counters([y for _, y in pairs]).mean_acceptance_length,
        same_drafts=same_drafts(a, b), declared=declared)


# ------------------------------------------------------------------------------------------------ which pairs


def policy_counterpart(policy: str) -> str | None:
    """The policy name the rule ``policy`` declares as its counterpart (None for a rule that declares none, or one
    this installation does not know)."""
    from relaxbench.errors import UnknownNameError
    from relaxbench.policies import POLICIES

    try:
        return POLICIES.get(policy).counterpart
    except UnknownNameError:
        return None


def policy_knobs(policy: str, knobs: Mapping[str, Any]) -> Mapping[str, Any]:
    """A cell's knobs with the rule's defaults filled in (a method names only the knobs it sets), so two arms that
    set the same values in different words compare equal; as stored when the rule is unknown here."""
    from relaxbench.errors import RelaxbenchError
    from relaxbench.policies import POLICIES

    try:
        return POLICIES.get(policy).from_knobs(knobs).knobs.model_dump()
    except RelaxbenchError:
        return dict(knobs)


def declared_pairs(cells: Sequence[CellRecord], counterpart_of: CounterpartOf = policy_counterpart,
                   knobs_of: KnobsOf = policy_knobs) -> list[ArmPair]:
    """(A, B) for every arm A whose rule declares B's rule as its counterpart, where the two have the same drafter,
    k, decoding mode and knobs (so a sweep of both pairs each point with its own), in the cells' order."""
    out = []
    for a in cells:
        declared = counterpart_of(a.policy)
        if not declared:
            continue
        for b in cells:
            if (b is not a and b.policy == declared and same_drafts(a, b) and is_greedy(a) == is_greedy(b)
                    and knobs_of(a.policy, a.knobs) == knobs_of(b.policy, b.knobs)):
                out.append((a.arm, b.arm))
    return out


def task_agreements(run: RunRecord, task: str, named: Sequence[ArmPair] = (),
                    counterpart_of: CounterpartOf = policy_counterpart,
                    knobs_of: KnobsOf = policy_knobs) -> tuple[Agreement, ...]:
    """Every pair of one task: those the user named that the task has both arms of, in their order, then the
    declared ones not named already (in either order). None for a task the target alone scores (no outputs)."""
    cells = run.cells_of(task)
    if any(c.is_baseline and is_target_alone(c) for c in cells):
        return ()
    by_arm = {c.arm: c for c in cells}
    chosen = [(pair, False) for pair in dict.fromkeys(named) if pair[0] in by_arm and pair[1] in by_arm]
    seen = {frozenset(pair) for pair, _ in chosen}
    for pair in declared_pairs(cells, counterpart_of, knobs_of):
        if frozenset(pair) not in seen:
            seen.add(frozenset(pair))
            chosen.append((pair, True))
    return tuple(agreement(by_arm[a], by_arm[b], declared) for (a, b), declared in chosen)


def run_agreements(run: RunRecord, named: Sequence[ArmPair] = (), counterpart_of: CounterpartOf = policy_counterpart,
                   knobs_of: KnobsOf = policy_knobs) -> dict[str, tuple[Agreement, ...]]:
    """Each task's pairs (``task_agreements``), by task."""
    return {task: task_agreements(run, task, named, counterpart_of, knobs_of) for task in run.tasks()}


# ------------------------------------------------------------------------------------------------ named pairs

AGREE_FLAG = "--agree"


def parse_pair(value: str, arms: Sequence[str]) -> ArmPair:
    """``A:B`` → (A, B), both arms of the run and not the same; anything else is one line naming the run's arms.
    An arm name with a colon in it (a knob value) is found by trying each colon."""
    known = f"this run's arms: {', '.join(arms)}"
    splits = [(value[:i].strip(), value[i + 1:].strip()) for i, c in enumerate(value) if c == ":"]
    splits = [(a, b) for a, b in splits if a and b]
    if not splits:
        raise ConfigError(f"{AGREE_FLAG} {value!r}: give two arms as A:B ({known})")
    found = [(a, b) for a, b in splits if a in arms and b in arms]
    if not found:
        a, b = splits[0]
        unknown = a if a not in arms else b
        raise ConfigError(f"{AGREE_FLAG} {value!r}: unknown arm {unknown!r}{did_you_mean(unknown, list(arms))} "
                          f"({known})")
    a, b = found[0]
    if a == b:
        raise ConfigError(f"{AGREE_FLAG} {value!r}: the same arm twice; name two different arms ({known})")
    return a, b


def parse_pairs(values: Sequence[str], arms: Sequence[str]) -> tuple[ArmPair, ...]:
    """Every ``--agree`` value as a pair of the run's arms (``parse_pair``), duplicates once."""
    return tuple(dict.fromkeys(parse_pair(v, arms) for v in values))

