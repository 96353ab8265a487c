"""The one verification interface every method goes through.

One step: each request of a batch drafted up to K tokens; the target ran one forward over its drafts (plus any extra
tokens the policy asked for), giving a distribution for every draft position and the bonus position. A policy judges
the whole ``Batch`` at once (``judge``: per position, on the device, no host synchronisation) and ``decide`` turns that
into a ``Verdict`` per request: how many drafts to keep and which token follows. The transformers loop decides a
batch of one request per round, the vLLM adapter the batch of a step.

What a policy declares beyond its decision is data: ``Origin`` (what it follows, how it is shown), ``Modes``
(where it runs, where it is strict, how its knobs loosen it) and ``needs`` (its inputs). What the engine derives from
them lives in ``policies/compatibility.py`` (the drafter's duties, the compatibility check) and ``policies/strict.py``
(the strict baseline).
"""

from __future__ import annotations

import abc
import enum
import inspect
import re
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, overload

import torch

from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies.batch import Batch, Block, draw_uniforms
from relaxbench.policies.verdict import Judgement, Outcome, Verdict, finish, plain_verdict
from relaxbench.registry import Registry
from relaxbench.validation import Spec, validate

__all__ = ["MODES", "POLICIES", "Batch", "Block", "Fidelity", "Judgement", "Modes", "Need", "Origin", "Outcome",
           "PolicyEnv", "Verdict", "VerificationPolicy", "make_policy", "mode_of",
           "register_policy"]

MODES = ("greedy", "sampling")


def mode_of(sampling: SamplingParams) -> str:
    """'greedy' or 'sampling': the decoding mode of a run's sampling settings."""
    return "greedy" if sampling.greedy else "sampling"


class Need(enum.Enum):
    """Inputs beyond target logits and draft ids that a policy reads; the required ones are checked when a run is
    configured (``policies.compatibility.check_compatibility``)."""

    DRAFT_PROBS = "draft-model probabilities (q)"
    DRAFT_PROBS_IF_ANY = "draft-model probabilities when the drafter has them (point-mass drafts otherwise)"
    HIDDEN_STATES = "the target's last hidden states"
    DRAFT_HIDDEN_STATES = "the draft model's last hidden states at its draft tokens"
    EXTRA_TOKENS = "extra tokens appended to the verify forward"


class Fidelity(enum.Enum):
    """How a rule relates to its source (``relaxbench list rules`` shows it)."""

    REFERENCE = "as reference"  # follows the authors' (or a reference reproduction's) code at a named commit
    PAPER = "as paper (no code)"  # follows the paper; no public code was found
    PAPER_UNVERIFIED = "as paper (unverified: method section not retrieved)"  # the paper's details are not checked
    VARIANT = "variant"  # our rule, derived from a paper's rule; not in the authors' code
    BASELINE = "lossless baseline"


# fidelities whose module docstring must list the rule's deviations (a baseline has no source to deviate from; a
# rule as paper with no code states its choices where the paper is silent, in its docstring)
LISTS_DEVIATIONS = (Fidelity.REFERENCE, Fidelity.VARIANT, Fidelity.PAPER_UNVERIFIED)
# owner/repo@commit (or @vX.Y.Z, a release tag of a library relaxbench pins), in a REFERENCE rule's ``reference``
COMMIT_PIN = re.compile(r"[\w.-]+/[\w.-]+@([0-9a-f]{7}|v\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class Origin:
    """What a rule follows and how it is listed.

    ``reference``: for ``Fidelity.REFERENCE`` the authors' repository at a commit and the file/function followed
    (``owner/repo@abc1234 path.py function``); otherwise the paper. ``summary``: one line for ``relaxbench list
    policies``. ``revision``: bumped when the rule's verdicts change, so a stored compare run of the earlier rule is
    not resumed as the new one (it enters the run key when above 0)."""

    fidelity: Fidelity
    reference: str
    summary: str = ""
    revision: int = 0


@dataclass(frozen=True)
class Modes:
    """Where a rule runs and where it is strict.

    ``supported``: the decoding modes it accepts ('greedy', 'sampling'); others are configuration errors.
    ``lossless``: the rule is a lossless baseline at every setting (``exact``, ``speculative-sampling``, ``none``).
    ``strict_knobs``: for a relaxed rule, the knob setting at which it is lossless — exact match under greedy
    decoding, speculative sampling under sampling — except in ``lossy`` modes (a mode the authors' own rule is lossy
    in at every setting, such as FLy's sampling mode); the tests hold every rule to it.
    ``greedy_is_exact``: under greedy decoding the rule is exact match at every knob setting, as its reference.
    ``greedy_drafts``: the rule verifies the drafter's top-1 path even when the run samples (its authors' drafts).
    ``relax_in``: where the rule relaxes unless a method says otherwise ('all', or 'thinking' as TensorRT-LLM's
    relaxed acceptance does; ``policies/span.py``).
    ``loosening``: for a relaxed rule, each knob that loosens it monotonically with its values from strict to loose
    (every step may only add acceptances on the same block with the same uniforms: the tests hold it), or a sentence
    saying why no knob does (a mixing weight, a gate that can also reject).
    Iterating over, or testing membership in, a ``Modes`` means its supported modes."""

    supported: frozenset[str] = frozenset(MODES)
    lossless: bool = False
    strict_knobs: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}))
    lossy: frozenset[str] = frozenset()
    greedy_is_exact: bool = False
    greedy_drafts: bool = False
    relax_in: str = "all"
    loosening: Mapping[str, Sequence[Any]] | str = field(default_factory=lambda: types.MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.loosening, str):
            object.__setattr__(self, "loosening",
                               types.MappingProxyType({k: tuple(v) for k, v in self.loosening.items()}))
        object.__setattr__(self, "supported", frozenset(self.supported))
        object.__setattr__(self, "lossy", frozenset(self.lossy))
        object.__setattr__(self, "strict_knobs", types.MappingProxyType(dict(self.strict_knobs)))
        if not self.supported or not self.supported <= set(MODES):
            raise ValueError(f"supported modes must be a non-empty subset of {MODES}, got {sorted(self.supported)}")
        if not self.lossy <= self.supported:
            raise ValueError(f"lossy modes {sorted(self.lossy)} are not all supported")

    def __contains__(self, mode: object) -> bool:
        return mode in self.supported

    def __iter__(self):
        return iter(sorted(self.supported))

    def strict_in(self, mode: str) -> bool:
        """Whether the rule has a lossless setting in ``mode``: lossless, or strict knobs in a mode not lossy."""
        return mode in self.supported and (self.lossless or (bool(self.strict_knobs) and mode not in self.lossy))


@dataclass(frozen=True)
class PolicyEnv:
    """What a policy may read about the run when it is configured."""

    tokenizer: Any
    vocab_size: int
    device: torch.device
    target_name: str | None = None  # the target model's name as given (a trained head checks its pair)
    draft_name: str | None = None  # the draft model's name when the drafter is a model
    draft_length: int | None = None  # the run's draft length k (a rule whose knobs depend on it checks them)


class VerificationPolicy(abc.ABC):
    """A verification rule. To add one, write one module in ``relaxbench/policies/`` (it is discovered: no list to
    edit) with a subclass that defines:

    * ``name`` — the registry name (``--rule NAME``, ``policy:`` in a method YAML);
    * ``Knobs`` — a ``relaxbench.validation.Spec`` of its knobs with defaults (the class's own docstring "No knobs"
      when it has none);
    * ``judge(batch) -> Judgement`` — every draft position of every request of a ``Batch`` at once (K ≥ 1; requests
      with no drafts are handled for it), with tensor operations only: no host synchronisation (``int()``,
      ``bool()``, ``.item()``, ``.tolist()``, ``nonzero``) and no Python loop over requests or positions, so its
      operation count does not grow with the batch (the tests count both);
    * ``origin = Origin(fidelity, reference, summary)`` — what it follows;
    * ``modes = Modes(...)`` when it differs from the default (both modes, relaxed, no strict setting): a relaxed
      rule names its ``strict_knobs`` and its ``loosening``;
    * ``needs`` when it reads more than target logits and draft ids;
    * a module docstring that names the reference's functions it follows and lists its deviations from them under
      "Deviations" (unless its fidelity is ``BASELINE`` or ``PAPER``); the line-by-line mapping to the reference
      belongs in docs/conformance.md;

    then decorate it with ``@register_policy``, which checks all of the above and says what is missing. Every
    registered rule is then held by the tests to its declared modes, strict setting and loosening, and to the
    batch contract. ``uniform_dtype``: the dtype of the acceptance uniforms the engine draws for it (float32 unless
    its authors draw float64); ``draws = False`` for a rule that decides a round without random numbers (its
    authors draw none, so the run's stream, which the drafter shares, stays theirs).

    ``counterpart``: the name of another registered rule that makes the same decision in another implementation
    (an engine's own version of a rule relaxbench ports, or the reverse); a run with an arm of each, with the same
    drafter, k, decoding mode and knobs, shows how closely the two agree (``relaxbench.analysis.agreement``, the
    report's agreement table). None for a rule with no such twin.

    Optional hooks: ``bind`` (once per run), ``reset`` (per sequence), ``observe`` (the sequence's committed tokens
    as they grow), ``extra_verify_tokens`` (with ``Need.EXTRA_TOKENS``), ``provenance`` (files the knobs point to).
    A rule that wraps another may set ``needs`` and ``modes`` on the instance; ``policies.compatibility`` reads them
    from the object it is given.
    """

    name: ClassVar[str] = ""
    origin: ClassVar[Origin | None] = None
    modes: ClassVar[Modes] = Modes()
    needs: ClassVar[frozenset[Need]] = frozenset()
    counterpart: ClassVar[str | None] = None

    class Knobs(Spec):
        """No knobs."""

    def __init__(self, knobs: Any = None) -> None:
        self.knobs = knobs if knobs is not None else self.Knobs()

    # -- configuration ---------------------------------------------------------------------------------------
    @classmethod
    def from_knobs(cls, raw: Mapping[str, Any] | None = None) -> VerificationPolicy:
        """Build from untyped knobs (YAML/CLI): unknown names and wrong types are one-line errors."""
        return cls(validate(cls.Knobs, dict(raw or {}), f"rule {cls.name!r}", "knob"))

    def bind(self, env: PolicyEnv) -> None:
        """Called once when a run is configured (e.g. to tokenize a prompt the policy appends)."""

    def reset(self) -> None:
        """Called before every sequence; stateful policies clear per-sequence state here."""

    def provenance(self) -> Mapping[str, Any]:
        """What the knobs point to beyond their values, e.g. a trained head file: its digest, the pair and the
        data it was trained on. Stored with each cell and hashed into the run key (so a retrained file is a new
        run); a ``trained_on`` list of ``{task, data_fingerprint, item_ids}`` makes ``compare`` refuse to evaluate
        on those items. Empty for rules without such inputs."""
        return {}

    def extra_verify_tokens(self, draft_tokens: torch.Tensor) -> torch.Tensor | None:
        """Tokens to append after the drafts in the verify forward (their cache entries are dropped)."""
        return None

    def observe(self, tokens: Sequence[int]) -> None:
        """Called with the sequence's committed tokens as they grow (after ``reset``: the prompt, then each round's
        new tokens), for a rule that depends on where it is in the text. Host data: no synchronisation."""

    # -- one step ----------------------------------------------------------------------------------------------
    uniform_dtype: ClassVar[torch.dtype] = torch.float32
    draws: ClassVar[bool] = True

    def uniforms(self, generator: torch.Generator | None, k: int,
                 sampling: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
        """One request's uniforms for a round of ``k`` drafts from its stream (``draw_uniforms``); a rule that
        draws nothing takes zeros, except in a plain step (k = 0), which draws its token."""
        return draw_uniforms(generator if self.draws or k == 0 else None, k, sampling, self.uniform_dtype)

    @abc.abstractmethod
    def judge(self, batch: Batch) -> Judgement:
        """Every draft position of ``batch`` (K ≥ 1): accepted, relaxed, and the token after the accepted drafts."""

    def decide(self, batch: Batch) -> Verdict:
        """The verdict of every request of ``batch``: a plain decoding step where a request drafted nothing."""
        if batch.width == 0:
            return plain_verdict(batch)
        judgement = self.judge(batch)
        verdict = finish(batch, judgement)
        if batch.any_empty and not judgement.plain_when_empty:
            verdict = plain_verdict(batch).where(batch.num_drafts == 0, verdict)
        return verdict

    def verify(self, block: Block) -> Outcome:
        """One request's round on the host (tests, benchmarks): ``decide`` on a batch of one, its uniforms drawn
        from the block's generator."""
        uniforms = self.uniforms(block.generator, block.k, block.sampling)
        return self.decide(Batch.of_blocks([block], self.uniform_dtype, [uniforms])).to_host()[0]

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "knobs": self.knobs.model_dump()}


POLICIES: Registry[type[VerificationPolicy]] = Registry("rule", "relaxbench.policies")


def registration_problems(cls: type) -> list[str]:
    """Everything that keeps ``cls`` from being a complete policy ([] when it is one)."""
    if not (isinstance(cls, type) and issubclass(cls, VerificationPolicy)):
        return ["is not a VerificationPolicy subclass"]
    problems = []
    if not cls.name or not isinstance(cls.name, str):
        problems.append("set `name`")
    if inspect.isabstract(cls):
        problems.append(f"define {', '.join(sorted(cls.__abstractmethods__))}(batch) -> Judgement (the batched "
                        "decision: see relaxbench.policies.base.VerificationPolicy)")
    if not (isinstance(cls.Knobs, type) and issubclass(cls.Knobs, Spec)):
        problems.append("`Knobs` must be a relaxbench.validation.Spec")
    if not isinstance(cls.modes, Modes):
        problems.append("`modes` must be a Modes record")
    elif not cls.modes.lossless and not cls.modes.strict_knobs:
        problems.append("a relaxed rule must name the knob setting at which it is strict: "
                        "modes = Modes(strict_knobs={...})")
    elif isinstance(cls.Knobs, type) and issubclass(cls.Knobs, Spec):
        unknown = sorted(set(cls.modes.strict_knobs) - set(cls.Knobs.model_fields))
        if unknown:
            problems.append(f"strict_knobs name unknown knobs {unknown}")
        loosening = cls.modes.loosening
        if not cls.modes.lossless and not loosening:
            problems.append("a relaxed rule must say how its knobs loosen it: modes = Modes(loosening={knob: (strict, "
                            "..., loose)}), or a sentence saying why no knob loosens it monotonically")
        elif not isinstance(loosening, str):
            unknown = sorted(set(loosening) - set(cls.Knobs.model_fields))
            if unknown:
                problems.append(f"loosening names unknown knobs {unknown}")
    if not (isinstance(cls.needs, frozenset) and all(isinstance(n, Need) for n in cls.needs)):
        problems.append("`needs` must be a frozenset of Need")
    origin = cls.origin
    if not isinstance(origin, Origin):
        problems.append("set origin = Origin(fidelity=Fidelity..., reference='...', summary='...')")
        return problems
    if not origin.reference:
        problems.append("origin.reference is empty")
    if origin.fidelity is Fidelity.REFERENCE and not COMMIT_PIN.search(origin.reference):
        problems.append(f"origin.reference must pin the authors' code as owner/repo@commit (got {origin.reference!r})")
    doc = (getattr(sys.modules.get(cls.__module__), "__doc__", None) or "").lower()
    if origin.fidelity in LISTS_DEVIATIONS and "deviation" not in doc:
        problems.append(f"its module docstring ({cls.__module__}) must list its deviations from its reference "
                        f"under 'Deviations' (fidelity {origin.fidelity.name})")
    return problems


@overload
def register_policy(cls: type[VerificationPolicy]) -> type[VerificationPolicy]: ...
@overload
def register_policy(*, aliases: tuple[str, ...] = ()) -> Callable[[type[VerificationPolicy]], type[VerificationPolicy]]:
    ...


def register_policy(cls=None, *, aliases=()):
    """Class decorator: check the class (``registration_problems``: one error naming everything missing) and
    register it under ``cls.name``, and under each of ``aliases`` (names that still resolve, not listed)."""
    def add(cls: type[VerificationPolicy]) -> type[VerificationPolicy]:
        problems = registration_problems(cls)
        if problems:
            raise TypeError(f"rule {getattr(cls, 'name', '') or cls.__qualname__!r} ({cls.__module__}."
                            f"{cls.__qualname__}) cannot be registered: {'; '.join(problems)} "
                            "(see relaxbench.policies.base.VerificationPolicy)")
        POLICIES.add(cls.name, cls)
        for alias in aliases:
            POLICIES.alias(alias, cls.name)
        return cls

    return add if cls is None else add(cls)



def make_policy(name: str, knobs: Mapping[str, Any] | None = None) -> VerificationPolicy:
    import relaxbench.policies  # noqa: F401  (registers the built-in policies)

    return POLICIES.get(name).from_knobs(knobs)
