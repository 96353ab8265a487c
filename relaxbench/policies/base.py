"""The one verification interface every method goes through.

One round: the drafter proposed ``k`` tokens; the target ran one forward over ``[last committed, d_1..d_k]``
(plus any extra tokens the policy asked for), giving a distribution for every draft position and the bonus
position. A policy turns that ``Block`` into a ``Verdict``: how many drafts to keep and which token follows.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import torch

from relaxbench.decoding import kernels
from relaxbench.decoding.sampling import (
    CHUNK,
    GreedyReductions,
    SamplingParams,
    logits_to_probs,
    next_token,
    softmax_sums,
    top_values,
    torch_greedy_reductions,
)
from relaxbench.errors import ConfigError
from relaxbench.registry import Registry, did_you_mean


class Need(enum.Enum):
    """Inputs beyond target logits and draft ids that a policy requires; checked when a run is configured."""

    DRAFT_PROBS = "draft-model probabilities (q)"
    HIDDEN_STATES = "the target's last hidden states"
    EXTRA_TOKENS = "extra tokens appended to the verify forward"


@dataclass(frozen=True)
class Block:
    """Everything one verification round knows. Distributions are computed lazily and at most once."""

    draft_tokens: torch.Tensor  # [k] long
    target_logits: torch.Tensor  # [k+1, V] float32; row i is the target's distribution for draft position i
    draft_logits: torch.Tensor | None  # [k, V]; None when the drafter has no distribution
    sampling: SamplingParams
    generator: torch.Generator | None
    extras: Mapping[str, torch.Tensor] = field(default_factory=dict)
    _top_values: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def k(self) -> int:
        return int(self.draft_tokens.shape[0])

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    @cached_property
    def target_probs(self) -> torch.Tensor:
        """p: [k+1, V] after temperature/top-k/top-p (softmax at temperature 1 under greedy decoding)."""
        return logits_to_probs(self.target_logits, self.sampling)

    @cached_property
    def draft_probs(self) -> torch.Tensor:
        """q: [k, V], the distribution the drafter sampled from."""
        if self.draft_logits is None:
            raise ConfigError("this policy needs draft probabilities but the drafter provides none")
        return logits_to_probs(self.draft_logits, self.sampling)

    @cached_property
    def greedy_rows(self) -> GreedyRows:
        """The target rows' greedy reductions, computed in row order as far as the verdict needs."""
        return GreedyRows(self.target_logits, self.draft_tokens)

    @property
    def target_reductions(self) -> GreedyReductions:
        """Chunk maxima, argmax and maximum of every target row: the one full-vocabulary pass of a round that
        reads them all (``GreedyRows.full``)."""
        return self.greedy_rows.full()

    @property
    def target_maxima(self) -> torch.Tensor:
        """[k+1, chunks] chunk maxima of the target logits."""
        return self.target_reductions.maxima

    @property
    def target_argmax(self) -> torch.Tensor:
        """t: [k+1] greedy target tokens (argmax's exact result: the first index of the maximum)."""
        return self.target_reductions.argmax

    @property
    def target_max(self) -> torch.Tensor:
        """[k+1] the largest target logit of each row (float)."""
        return self.target_reductions.max

    def target_top_values(self, n: int) -> torch.Tensor:
        """[k+1, n] the n largest target logits of every row, descending (float). From the shared chunk maxima, so
        it reads only n chunks per row; computed once per n."""
        if n not in self._top_values:
            self._top_values[n] = top_values(self.target_logits, n, maxima=self.target_maxima).float()
        return self._top_values[n]

    def target_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """[n, V] target logits (float) at ``rows``: a view when the rows are consecutive (a relaxation judged one
        row at a time), so it does not copy a full-vocabulary row before reading it."""
        return take_rows(self.target_logits, rows).float()

    @cached_property
    def matches(self) -> torch.Tensor:
        """m: [k] bool, draft token == target argmax (the exact-match test)."""
        return self.draft_tokens == self.target_argmax[: self.k]


class GreedyRows:
    """The greedy reductions of one round's target rows (max, first argmax, chunk maxima, the draft's logit),
    computed as far as the verdict needs: a greedy verdict never reads the rows after its first rejection.
    Natively that is a row-order scan that stops at each mismatch (``kernels.RowScan``) and resumes when a
    relaxation accepts one; otherwise all rows at once by torch (``torch_greedy_reductions``). The ``*_at``
    readers give Python numbers: a relaxation judges one row at a time, where tensor ops would cost more than the
    rule."""

    def __init__(self, logits: torch.Tensor, drafts: torch.Tensor) -> None:
        self.logits, self.drafts, self.k = logits, drafts, int(drafts.shape[0])
        self.draft_ids: list[int] = drafts.tolist()
        self.scan = kernels.start_scan(logits, drafts, CHUNK)  # None: torch answers everything
        self.mismatches: list[int] = []  # mismatching rows among the scanned ones, ascending
        self._full: GreedyReductions | None = None
        self._matches: list[bool] | None = None

    def _extend(self, stop_at_mismatch: bool) -> bool:
        scan, before = self.scan, self.scan.done
        if not scan.extend(stop_at_mismatch):
            self.scan = None  # a NaN (torch's semantics) or a thread that did not start
            return False
        argmax = scan.argmax
        self.mismatches.extend(r for r in range(before, min(scan.done, self.k)) if argmax[r] != self.draft_ids[r])
        return True

    def full(self) -> GreedyReductions:
        """Every row's reductions, as tensors."""
        if self._full is None:
            scan = self.scan
            if scan is not None and (scan.done == scan.rows or self._extend(stop_at_mismatch=False)):
                row_max, argmax, maxima = scan.tensors()
                self._full = GreedyReductions(maxima, argmax, row_max)
            else:  # the native scan did not apply or met a NaN: asking the kernels again would repeat that
                self._full = torch_greedy_reductions(self.logits)
        return self._full

    def first_mismatch(self, start: int) -> int:
        """The first draft position ``>= start`` whose draft is not the target's argmax; ``k`` when none."""
        while self.scan is not None:
            found = next((j for j in self.mismatches if j >= start), None)
            if found is not None:
                return found
            if self.scan.done == self.scan.rows:
                return self.k
            self._extend(stop_at_mismatch=True)
        if self._matches is None:
            self._matches = (self.drafts == self.full().argmax[: self.k]).tolist()
        return next((j for j in range(start, self.k) if not self._matches[j]), self.k)

    def _scanned(self, row: int) -> kernels.RowScan | None:
        """The native scan, once it has computed ``row`` (it runs on when needed); None on the torch path."""
        if self.scan is not None and row >= self.scan.done:
            self.full()
        return self.scan

    def argmax_at(self, row: int) -> int:
        scan = self._scanned(row)
        return int(scan.argmax[row]) if scan is not None else int(self.full().argmax[row])

    def max_at(self, row: int) -> float:
        scan = self._scanned(row)
        return float(scan.row_max[row]) if scan is not None else float(self.full().max[row])

    def draft_logit_at(self, row: int) -> float:
        """The target's logit of the draft token at draft position ``row``."""
        scan = self._scanned(row)
        return float(scan.draft_logit[row]) if scan is not None else float(self.logits[row, self.draft_ids[row]])

    def top_values_at(self, row: int, n: int) -> list[float]:
        """The n largest target logits of ``row``, descending (ties repeated)."""
        scan = self._scanned(row)
        values = scan.top_values(row, n) if scan is not None else None
        if values is None:
            values = top_values(self.logits[row: row + 1], n, maxima=self.full().maxima[row: row + 1])[0].tolist()
        return values

    def softmax_sums_at(self, row: int) -> tuple[float, float]:
        """``(S, T)`` of ``row`` (``softmax_sums``): ``S = Σ e^s``, ``T = Σ e^s·s`` with ``s = z − max z``."""
        row_max = self.max_at(row)
        if self.scan is not None:
            return self.scan.softmax_sums(row, row_max)
        total, weighted = softmax_sums(self.logits[row: row + 1], torch.tensor([row_max], device=self.logits.device))
        return float(total[0]), float(weighted[0])


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # length of the accepted draft prefix, 0..k
    next_token: int  # correction token (n < k) or bonus token (n == k)
    n_relaxed: int = 0  # accepted tokens that strict verification would have rejected


def take_rows(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``tensor[rows]`` for a 1-D long ``rows``: a slice (no copy) when the rows are consecutive, else a gather."""
    first, count = int(rows[0]), int(rows.numel())
    if int(rows[-1]) - first + 1 == count:
        return tensor[first: first + count]
    return tensor.index_select(0, rows)


def accepted_prefix_length(accept: torch.Tensor) -> int:
    """Length of the leading run of True in a 1-D bool tensor (on the host: k is small, tensor ops are not)."""
    flags = accept.tolist()
    return next((i for i, flag in enumerate(flags) if not flag), len(flags))


def relax_mismatches(matches: torch.Tensor, relax: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """[k] ``matches`` plus the mismatches that ``relax(rows)`` accepts, judged in order up to the first one it
    rejects.

    Only the accepted prefix decides a round, so once a mismatch is rejected no later position can change the
    verdict: later mismatches are left rejected and the relaxation — often a full-vocabulary pass per row — is
    never computed for them. Each row is passed alone (a one-row slice), so it reads a view, not a copy."""
    accept = matches.clone()
    for row in (~matches).nonzero().flatten().tolist():
        accepted = bool(relax(torch.tensor([row], device=matches.device))[0])
        accept[row] = accepted
        if not accepted:
            break
    return accept


def greedy_scan(block: Block, relax: Callable[[int], bool] | None = None) -> Verdict:
    """Verdict of a greedy rule that accepts exact matches plus the mismatches ``relax(position)`` accepts, judged
    in order up to the first one it rejects.

    The one greedy verification walk: it reads the target rows only up to that rejection (``first_mismatch``), so
    exact match pays for the accepted prefix and a relaxation is computed only where it can change the verdict.
    The correction/bonus token is the target's argmax at the first rejected position."""
    rows = block.greedy_rows
    n_relaxed, start = 0, 0
    while True:
        j = rows.first_mismatch(start)
        if j >= block.k or relax is None or not relax(j):
            return Verdict(j, rows.argmax_at(j), n_relaxed)
        n_relaxed += 1
        start = j + 1


@dataclass(frozen=True)
class PolicyEnv:
    """What a policy may read about the run when it is configured."""

    tokenizer: Any
    vocab_size: int
    device: torch.device


class VerificationPolicy:
    """Base class. Subclasses set ``name``, ``needs``, ``modes``, a frozen ``Knobs`` dataclass, and ``decide``.

    ``modes`` lists the decoding modes the rule supports ('greedy', 'sampling'); others are configuration errors.
    ``strict_knobs`` is the knob setting at which a relaxed rule is its lossless baseline: exact match under greedy
    decoding, and speculative sampling under sampling for the rules whose sampling mode has a lossless end (FLy's
    and typical acceptance's, as their authors run them, are lossy at every setting); the tests hold every rule to
    it. ``greedy_drafts`` asks the engine for greedy drafts even when the run samples (FLy's sampling mode).
    """

    name: ClassVar[str] = ""
    needs: ClassVar[frozenset[Need]] = frozenset()
    modes: ClassVar[frozenset[str]] = frozenset({"greedy", "sampling"})
    lossless: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    strict_knobs: ClassVar[Mapping[str, Any]] = types.MappingProxyType({})
    greedy_drafts: ClassVar[bool] = False

    @dataclass(frozen=True)
    class Knobs:
        pass

    def __init__(self, knobs: Any = None) -> None:
        self.knobs = knobs if knobs is not None else self.Knobs()

    # -- configuration ---------------------------------------------------------------------------------------
    @classmethod
    def from_knobs(cls, raw: Mapping[str, Any] | None = None) -> VerificationPolicy:
        """Build from untyped knobs (YAML/CLI): unknown names and wrong types are one-line errors."""
        return cls(parse_knobs(cls.Knobs, dict(raw or {}), f"policy {cls.name!r}"))

    def bind(self, env: PolicyEnv) -> None:
        """Called once when a run is configured (e.g. to tokenize a prompt the policy appends)."""

    def reset(self) -> None:
        """Called before every sequence; stateful policies clear per-sequence state here."""

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
        return {"policy": self.name, "knobs": dataclasses.asdict(self.knobs)}


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


def parse_knobs(knob_cls: type, raw: dict[str, Any], owner: str) -> Any:
    """Validate ``raw`` against the fields of a frozen dataclass; coerce int→float and list→tuple."""
    fields = {f.name: f for f in dataclasses.fields(knob_cls)}
    hints = typing.get_type_hints(knob_cls)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in fields:
            raise ConfigError(f"{owner} has no knob {key!r}{did_you_mean(name, list(fields))} "
                              f"(knobs: {', '.join(fields) or 'none'})")
        values[name] = _coerce(value, hints[name], f"{owner} knob {key!r}")
    try:
        return knob_cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{owner}: {exc}") from None


def _coerce(value: Any, hint: Any, what: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, what)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{what}: invalid value {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{what} must be a list, got {value!r}")
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, what) for v in value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and value.lower() in ("inf", "+inf", "-inf", "infinity", "-infinity"):
                return float(value)
            raise ConfigError(f"{what} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{what} must be an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{what} must be true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{what} must be a string, got {value!r}")
        return value
    return value
