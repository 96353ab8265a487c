"""The one verification interface every method goes through.

One round: the drafter proposed ``k`` tokens; the target ran one forward over ``[last committed, d_1..d_k]``
(plus any extra tokens the policy asked for), giving a distribution for every draft position and the bonus
position. A policy turns that ``Block`` into a ``Verdict``: how many drafts to keep and which token follows.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import torch

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import argmax
from relaxbench.ops.rejection import Verdict
from relaxbench.ops.rows import LazyRows, row_chunk
from relaxbench.ops.sampling import SamplingParams, logits_to_probs, next_token
from relaxbench.registry import Registry
from relaxbench.validation import Spec, validate

__all__ = ["POLICIES", "Block", "Fidelity", "Need", "PolicyEnv", "Verdict", "VerificationPolicy", "make_policy",
           "register_policy"]


class Need(enum.Enum):
    """Inputs beyond target logits and draft ids that a policy requires; checked when a run is configured."""

    DRAFT_PROBS = "draft-model probabilities (q)"
    HIDDEN_STATES = "the target's last hidden states"
    DRAFT_HIDDEN_STATES = "the draft model's last hidden states at its draft tokens"
    EXTRA_TOKENS = "extra tokens appended to the verify forward"


class Fidelity(enum.Enum):
    """How a rule relates to its source (``relaxbench list policies`` and the policy table of docs/policies.md show it)."""

    REFERENCE = "as reference"  # follows the authors' (or a reference reproduction's) code at a named commit
    PAPER = "as paper (no code)"  # follows the paper; no public code was found
    PAPER_UNVERIFIED = "as paper (unverified: method section not retrieved)"  # the paper's details are not checked
    VARIANT = "variant"  # our rule, derived from a paper's rule; not in the authors' code
    BASELINE = "lossless baseline"


@dataclass(frozen=True)
class Block:
    """Everything one verification round knows. Distributions and the argmax are computed lazily, at most once.

    Nothing cached here may refer back to the block (a reference cycle would keep every round's distributions
    alive until the cyclic garbage collector runs: fresh memory, page faults, each round)."""

    draft_tokens: torch.Tensor  # [k] long
    target_logits: torch.Tensor  # [k+1, V] float32; row i is the target's distribution for draft position i
    draft_logits: torch.Tensor | None  # [k, V]; None when the drafter has no distribution
    sampling: SamplingParams
    generator: torch.Generator | None
    extras: Mapping[str, torch.Tensor] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.draft_tokens.shape[0])

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

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


class VerificationPolicy:
    """Base class. Subclasses set ``name``, ``needs``, ``modes``, ``fidelity``, ``reference``, a ``Knobs`` spec, and
    ``decide``.

    ``modes`` lists the decoding modes the rule supports ('greedy', 'sampling'); others are configuration errors.
    ``strict_knobs`` is the knob setting at which a relaxed rule is its lossless baseline: exact match under greedy
    decoding, and speculative sampling under sampling except in ``lossy_modes`` (FLy's, typical acceptance's and
    MARS's sampling modes, as their authors run them, are lossy at every setting); the tests hold every rule to it.
    ``greedy_is_exact``: under greedy decoding the rule is exact match at every knob setting, as its reference.
    ``greedy_drafts`` asks the engine for greedy drafts even when the run samples (the authors' drafts are the
    drafter's top-1 path). ``uses_draft_probs_if_any``: under sampling the rule reads the drafter's distribution
    when it has one and treats drafts as point masses otherwise (so the engine keeps the draft logits).
    ``fidelity`` and ``reference`` (repo@commit and file, or the paper) say what the rule follows; its module
    docstring lists every deliberate deviation. ``revision`` is bumped when a rule's verdicts change, so a stored
    compare run of the earlier rule is not resumed as the new one (it enters the run key when above 0).
    """

    name: ClassVar[str] = ""
    needs: ClassVar[frozenset[Need]] = frozenset()
    modes: ClassVar[frozenset[str]] = frozenset({"greedy", "sampling"})
    lossless: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    strict_knobs: ClassVar[Mapping[str, Any]] = types.MappingProxyType({})
    lossy_modes: ClassVar[frozenset[str]] = frozenset()
    greedy_is_exact: ClassVar[bool] = False
    greedy_drafts: ClassVar[bool] = False
    uses_draft_probs_if_any: ClassVar[bool] = False
    fidelity: ClassVar[Fidelity | None] = None
    reference: ClassVar[str] = ""
    revision: ClassVar[int] = 0  # bumped when the rule's verdicts change: part of a compare run's key

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

    def decide(self, block: Block) -> Verdict:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "knobs": self.knobs.model_dump()}


POLICIES: Registry[type[VerificationPolicy]] = Registry("policy", "relaxbench.policies")


def register_policy(cls: type[VerificationPolicy]) -> type[VerificationPolicy]:
    """Class decorator: register under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    POLICIES.add(cls.name, cls)
    return cls


def make_policy(name: str, knobs: Mapping[str, Any] | None = None) -> VerificationPolicy:
    import relaxbench.policies  # noqa: F401  (registers the built-in policies)

    return POLICIES.get(name).from_knobs(knobs)
