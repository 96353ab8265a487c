"""The one verification interface every method goes through.

One round: the drafter proposed ``k`` tokens; the target ran one forward over ``[last committed, d_1..d_k]``
(plus any extra tokens the policy asked for), giving a distribution for every draft position and the bonus
position. A policy turns that ``Block`` into a ``Verdict``: how many drafts to keep and which token follows.

What a policy declares beyond its decision is data: ``Origin`` (what it follows, how it is shown), ``Modes``
(where it runs and where it is strict) and ``needs`` (its inputs). What the engine derives from them lives in
``policies/compatibility.py`` (the drafter's duties, the compatibility check) and ``policies/strict.py`` (the strict
baseline).
"""

from __future__ import annotations

import abc
import enum
import functools
import inspect
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, overload

import torch

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import argmax
from tests.oracle.rejection import Verdict
from tests.oracle.rows import LazyRows, row_chunk
from tests.oracle.sampling import SamplingParams, logits_to_probs, next_token
from relaxbench.registry import Registry
from relaxbench.validation import Spec, validate

__all__ = ["MODES", "POLICIES", "Block", "Fidelity", "Modes", "Need", "Origin", "PolicyEnv", "Verdict",
           "VerificationPolicy", "make_policy", "mode_of", "policy_key_name", "register_policy"]

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
    """How a rule relates to its source (``relaxbench list policies`` shows it)."""

    REFERENCE = "as reference"  # follows the authors' (or a reference reproduction's) code at a named commit
    PAPER = "as paper (no code)"  # follows the paper; no public code was found
    PAPER_UNVERIFIED = "as paper (unverified: method section not retrieved)"  # the paper's details are not checked
    VARIANT = "variant"  # our rule, derived from a paper's rule; not in the authors' code
    BASELINE = "lossless baseline"


# fidelities whose module docstring must list the rule's deviations (a baseline has no source to deviate from; a
# rule as paper with no code states its choices where the paper is silent, in its docstring)
LISTS_DEVIATIONS = (Fidelity.REFERENCE, Fidelity.VARIANT, Fidelity.PAPER_UNVERIFIED)
COMMIT_PIN = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{7}")  # owner/repo@commit, in a REFERENCE rule's ``reference``


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
    Iterating over, or testing membership in, a ``Modes`` means its supported modes."""

    supported: frozenset[str] = frozenset(MODES)
    lossless: bool = False
    strict_knobs: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}))
    lossy: frozenset[str] = frozenset()
    greedy_is_exact: bool = False
    greedy_drafts: bool = False
    relax_in: str = "all"

    def __post_init__(self) -> None:
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


_BLOCK_EXTRAS = ("hidden_states", "draft_hidden_states", "extra_logits")


@dataclass(frozen=True)
class Block:
    """Everything one verification round knows. Distributions and the argmax are computed lazily, at most once.

    ``extras`` holds what the policy's ``needs`` asked for: ``hidden_states`` [k+1, H] (the target's, row 0 at the
    last committed token, row i+1 at draft i), ``draft_hidden_states`` [k, H] (the draft model's, row i at draft i)
    and ``extra_logits`` (the target's logits at the policy's extra tokens; when those end with the drafts again, as
    the reflective rule's do, their last k+1 rows align with the draft positions 0..k). ``context`` is the committed
    sequence before the round (prompt and generated tokens; ``prompt_len`` of them the prompt), for rules that
    depend on where they are in the text.

    Nothing cached here may refer back to the block (a reference cycle would keep every round's distributions
    alive until the cyclic garbage collector runs: fresh memory, page faults, each round)."""

    draft_tokens: torch.Tensor  # [k] long
    target_logits: torch.Tensor  # [k+1, V] float32; row i is the target's distribution for draft position i
    draft_logits: torch.Tensor | None  # [k, V]; None when the drafter has no distribution
    sampling: SamplingParams
    generator: torch.Generator | None
    extras: Mapping[str, torch.Tensor] = field(default_factory=dict)
    context: torch.Tensor | None = None  # [n] long, the committed tokens before this round
    prompt_len: int = 0

    @property
    def k(self) -> int:
        return int(self.draft_tokens.shape[0])

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    @property
    def mode(self) -> str:
        return mode_of(self.sampling)

    def sub(self, start: int, stop: int | None = None) -> Block:
        """The round restricted to drafts ``start..stop − 1`` (``stop`` defaults to k), as if ``d_1..d_start`` were
        already committed: its bonus position is ``stop``. For a rule that verifies parts of a block differently
        (a span boundary inside the block); a verdict on the sub-block counts drafts from ``start``."""
        stop = self.k if stop is None else stop
        if not 0 <= start <= stop <= self.k:
            raise ValueError(f"sub-block {start}..{stop} of a block of {self.k} drafts")
        extras: dict[str, torch.Tensor] = {}
        for key, value in self.extras.items():
            if key == "hidden_states":
                extras[key] = value[start: stop + 1]
            elif key == "draft_hidden_states":
                extras[key] = value[start:stop]
            elif key == "extra_logits":  # keep the rows before the aligned ones, then the aligned rows start..stop
                m = int(value.shape[0]) - self.k
                extras[key] = torch.cat([value[: m - 1], value[m - 1 + start: m + stop]])
            else:
                raise ValueError(f"cannot take a sub-block of extra {key!r} (known: {', '.join(_BLOCK_EXTRAS)})")
        context = self.context
        if context is not None and start:
            context = torch.cat([context, self.draft_tokens[:start].to(context.device)])
        return replace(self, draft_tokens=self.draft_tokens[start:stop],
                       target_logits=self.target_logits[start: stop + 1],
                       draft_logits=None if self.draft_logits is None else self.draft_logits[start:stop],
                       extras=extras, context=context)

    @cached_property
    def p_rows(self) -> LazyRows:
        """p row by row, each computed when first read: after temperature/top-k/top-p (softmax at temperature 1
        under greedy decoding)."""
        return self.lazy_rows(self.target_logits, self.sampling)

    @cached_property
    def target_probs(self) -> torch.Tensor:
        """p: [k+1, V], every row of ``p_rows``."""
        return self.p_rows.all()

    @cached_property
    def q_rows(self) -> LazyRows:
        """q row by row: the distribution the drafter sampled from."""
        if self.draft_logits is None:
            raise ConfigError("this policy needs draft probabilities but the drafter provides none")
        return self.lazy_rows(self.draft_logits, self.sampling)

    @cached_property
    def draft_probs(self) -> torch.Tensor:
        """q: [k, V], every row of ``q_rows``."""
        return self.q_rows.all()

    @cached_property
    def tempered_rows(self) -> LazyRows:
        """softmax(z / T) row by row: the temperature alone, without the run's top-k/top-p (the test distribution of
        the rules whose authors apply only the temperature); ``p_rows`` itself when the run has no truncation."""
        tempered = SamplingParams(self.sampling.temperature)
        if tempered == self.sampling:
            return self.p_rows
        return self.lazy_rows(self.target_logits, tempered)

    @staticmethod
    def lazy_rows(logits: torch.Tensor, params: SamplingParams) -> LazyRows:
        """The distributions of ``logits`` under ``params``, row by row (a function that does not refer to the
        block, so the block is freed as soon as the round is over)."""
        return LazyRows(logits, functools.partial(logits_to_probs, params=params),
                        row_chunk(logits.device, int(logits.shape[0])))

    @cached_property
    def target_argmax(self) -> torch.Tensor:
        """t: [k+1] greedy target tokens (the first index of each row's maximum, as ``torch.argmax``)."""
        return argmax(self.target_logits)

    @cached_property
    def matches(self) -> torch.Tensor:
        """m: [k] bool, draft token == target argmax (the exact-match test)."""
        return self.draft_tokens == self.target_argmax[: self.k]

    def target_logit_of_drafts(self, rows: torch.Tensor) -> torch.Tensor:
        """[m] the target's logit of the draft token at draft positions ``rows`` (float)."""
        return self.target_logits[rows, self.draft_tokens[rows]].float()


@dataclass(frozen=True)
class PolicyEnv:
    """What a policy may read about the run when it is configured."""

    tokenizer: Any
    vocab_size: int
    device: torch.device
    target_name: str | None = None  # the target model's name as given (a trained head checks its pair)
    draft_name: str | None = None  # the draft model's name when the drafter is a model


class VerificationPolicy(abc.ABC):
    """A verification rule. To add one, subclass and define:

    * ``name`` — the registry name (``--policy NAME``, ``policy:`` in a method YAML);
    * ``Knobs`` — a ``relaxbench.validation.Spec`` of its knobs with defaults (the class's own docstring "No knobs"
      when it has none);
    * ``decide(block) -> Verdict`` — one round with ``k ≥ 1`` drafts (``verify`` handles ``k = 0``);
    * ``origin = Origin(fidelity, reference, summary)`` — what it follows;
    * ``modes = Modes(...)`` when it differs from the default (both modes, relaxed, no strict setting): a relaxed
      rule must name its ``strict_knobs``;
    * ``needs`` when it reads more than target logits and draft ids;
    * a module docstring that names the reference's functions it follows and lists its deviations from them under
      "Deviations" (unless its fidelity is ``BASELINE`` or ``PAPER``); the line-by-line mapping to the reference
      belongs in docs/conformance.md;

    then decorate it with ``@register_policy``, which checks all of the above and says what is missing, and import
    its module from ``relaxbench/policies/__init__.py`` (or expose it through the ``relaxbench.policies`` entry
    point). Every registered rule is then held by the tests to its declared modes and strict setting.

    Optional hooks: ``bind`` (once per run), ``reset`` (per sequence), ``extra_verify_tokens`` (with
    ``Need.EXTRA_TOKENS``), ``provenance`` (files the knobs point to). A rule that wraps another may set ``needs``
    and ``modes`` on the instance; ``policies.compatibility`` reads them from the object it is given.
    """

    name: ClassVar[str] = ""
    origin: ClassVar[Origin | None] = None
    modes: ClassVar[Modes] = Modes()
    needs: ClassVar[frozenset[Need]] = frozenset()

    class Knobs(Spec):
        """No knobs."""

    def __init__(self, knobs: Any = None) -> None:
        self.knobs = knobs if knobs is not None else self.Knobs()

    # -- configuration ---------------------------------------------------------------------------------------
    @classmethod
    def from_knobs(cls, raw: Mapping[str, Any] | None = None) -> VerificationPolicy:
        """Build from untyped knobs (YAML/CLI): unknown names and wrong types are one-line errors."""
        return cls(validate(cls.Knobs, dict(raw or {}), f"policy {cls.name!r}", "knob"))

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

    # -- one round ---------------------------------------------------------------------------------------------
    def verify(self, block: Block) -> Verdict:
        if block.k == 0:  # nothing drafted (e.g. an n-gram miss): a plain decoding step
            return Verdict(0, int(next_token(block.target_logits[0], block.sampling, block.generator)), 0)
        return self.decide(block)

    @abc.abstractmethod
    def decide(self, block: Block) -> Verdict:
        """The verdict of a round with ``block.k ≥ 1`` drafts."""

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "knobs": self.knobs.model_dump()}


POLICIES: Registry[type[VerificationPolicy]] = Registry("oracle policy", "relaxbench.oracle_policies")
_KEY_NAMES: dict[str, str] = {}  # registered name -> the name run keys record (when they differ)


def registration_problems(cls: type) -> list[str]:
    """Everything that keeps ``cls`` from being a complete policy ([] when it is one)."""
    if not (isinstance(cls, type) and issubclass(cls, VerificationPolicy)):
        return ["is not a VerificationPolicy subclass"]
    problems = []
    if not cls.name or not isinstance(cls.name, str):
        problems.append("set `name`")
    if inspect.isabstract(cls):
        problems.append(f"define {', '.join(sorted(cls.__abstractmethods__))}(block) -> Verdict")
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
def register_policy(*, aliases: tuple[str, ...] = (), key_name: str | None = None
                    ) -> Callable[[type[VerificationPolicy]], type[VerificationPolicy]]: ...


def register_policy(cls=None, *, aliases=(), key_name=None):
    """Class decorator: check the class (``registration_problems``: one error naming everything missing) and
    register it under ``cls.name``, and under each of ``aliases`` (names that still resolve, not listed).
    ``key_name`` is the name compare run keys record for the rule (default: its name); a renamed rule keeps the
    name its stored runs were keyed with, so they resume."""
    def add(cls: type[VerificationPolicy]) -> type[VerificationPolicy]:
        problems = registration_problems(cls)
        if problems:
            raise TypeError(f"policy {getattr(cls, 'name', '') or cls.__qualname__!r} ({cls.__module__}."
                            f"{cls.__qualname__}) cannot be registered: {'; '.join(problems)} "
                            "(see relaxbench.policies.base.VerificationPolicy)")
        POLICIES.add(cls.name, cls)
        for alias in aliases:
            POLICIES.alias(alias, cls.name)
        if key_name is not None and key_name != cls.name:
            _KEY_NAMES[cls.name] = key_name
        return cls

    return add if cls is None else add(cls)


def canonical_policy_name(name: str) -> str:
    """The registered name of ``name`` (an alias resolves to its rule's name)."""
    return POLICIES.get(name).name


def policy_key_name(name: str) -> str:
    """The name compare run keys record for policy ``name`` (or an alias of it): the same for every spelling."""
    canonical = canonical_policy_name(name)
    return _KEY_NAMES.get(canonical, canonical)


def make_policy(name: str, knobs: Mapping[str, Any] | None = None) -> VerificationPolicy:
    import tests.oracle.rules  # noqa: F401  (registers the oracle rules)

    return POLICIES.get(name).from_knobs(knobs)
