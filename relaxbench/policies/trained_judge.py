"""Trained judges: AutoJudge (Garipov et al., arXiv 2504.20039, code ``garipovroma/autojudge``) and a
Judge-Decoding-style head (Bachmann et al., arXiv 2501.19309). Both accept a mismatching draft token when a
linear head on last hidden states calls it unimportant; the heads are mined and trained on the user's own pair by
``relaxbench judge mine`` / ``judge train`` and named by the knob ``head`` (a JSON head file).

Rule (greedy only), as AutoJudge's ``eval/generation_utils.py::run_spec_dec`` (commit 8a4beb1): accept ``d_i``
iff it is the target's argmax or ``P(important | features_i) < tau``; the accepted length is the leading run of
acceptances (any number of mismatches per block may be accepted) and the next token is the target's argmax at the
first rejection.
``tau = 0`` accepts no mismatch: exactly ``exact``.

Features of draft ``d_i``: the last hidden state (after the final norm) at ``d_i``'s own position, on the sequence
that holds ``d_i`` — the target's from the same verify forward (``Need.HIDDEN_STATES``, row i + 1 of the block's
``hidden_states``; row 0 is the last committed token) and, for ``autojudge``, the draft model's
(``Need.DRAFT_HIDDEN_STATES``, row i of ``draft_hidden_states``): AutoJudge's default ``DD-DT`` setup,
``[draft, target]``. The draft model never reads its last draft token while drafting, so the drafter runs one
extra forward for it, as AutoJudge's drafting loop does (window_size + 1 draft forwards); that forward is timed as
drafting.

``judge-decoding`` reads the target's embedding alone, the one input of Judge Decoding's judge head. Judge
Decoding has no public code and we could not read its training section; AutoJudge's repository re-creates it as
the same standardised logistic regression on the target hidden state (``src/train_head_gsm8k.py
--judge_decoding_setup``), which is what ``judge train`` fits. Its score for "acceptable" is 1 − P(important), so
its threshold δ on that score is ``1 − tau`` here.

Deviations, by name:

* Labels: both heads learn AutoJudge's mined labels. Judge Decoding trained on a hand-annotated data set of
  correct and deliberately wrong answers (every token labelled), which relaxbench cannot build for a user's pair.
* Bonus token: AutoJudge drops the target's prediction after the last draft when all are accepted (at most
  ``window_size`` tokens per round); relaxbench keeps the bonus token for every rule alike.
* Sampling: AutoJudge's code and rule are greedy only. Judge Decoding describes OR-ing its judge with standard
  verification, but how it draws the correction token after a judged rejection under sampling is unverified, so
  neither rule offers a sampling mode (a sampling extension would be relaxbench's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from pydantic import Field

from relaxbench.errors import ConfigError
from relaxbench.policies.base import (
    Batch,
    Fidelity,
    Judgement,
    Modes,
    Need,
    Origin,
    PolicyEnv,
    VerificationPolicy,
    register_policy,
)
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.policies.judge_head import JudgeHead, file_digest, load_head
from relaxbench.validation import Number, Spec, Text

# hidden-state block of the Block's extras for each head input, and the row of draft i in it
_SOURCES = {"target": ("hidden_states", 1), "draft": ("draft_hidden_states", 0)}


class TrainedJudge(VerificationPolicy):
    """A greedy rule that accepts a mismatch when its trained head says P(important) < tau."""

    kind: ClassVar[str] = ""
    modes = Modes(supported={"greedy"}, strict_knobs={"tau": 0.0}, loosening={"tau": (0.0, 0.05, 0.1, 0.3, 1.0)})

    class Knobs(Spec):
        head: Text  # a head file written by `relaxbench judge train`; no default: a head is trained per pair
        tau: Number = Field(0.1, ge=0, le=1)

    def __init__(self, knobs: Any = None) -> None:
        super().__init__(knobs)
        self.where = f"rule {self.name!r}"
        self.head: JudgeHead = load_head(self.knobs.head, self.where)
        if self.head.kind != self.kind:
            raise ConfigError(f"{self.where}: {self.knobs.head} is a {self.head.kind!r} head; use it with rule "
                              f"{self.head.kind!r}")
        self.digest = file_digest(self.knobs.head)
        self._widths_checked = False

    def bind(self, env: PolicyEnv) -> None:
        self.head.check_pair(self.where, env.target_name, env.draft_name)
        self.head = self.head.to(env.device)

    def features(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The head's inputs at every real draft position [T, H]: each model's hidden state at the draft token."""
        requests, positions = batch.pairs
        out = {}
        for name in self.head.inputs:
            key, offset = _SOURCES[name]
            states = batch.extras.get(key)
            if states is None:
                raise RuntimeError(f"{self.where}: the batch has no {key!r} (the engine did not provide {name} "
                                   "hidden states)")
            if not self._widths_checked:
                self.head.check_width(self.where, name, int(states.source.shape[-1]))
            out[name] = states.source.index_select(0, states.index[requests, positions + offset])
        self._widths_checked = True
        return out

    def judge(self, batch: Batch) -> Judgement:
        tau = self.knobs.tau
        if tau == 0:
            return greedy_judgement(batch)
        unimportant = self.head.p_important(self.features(batch)) < tau
        return greedy_judgement(batch, batch.per_position(unimportant, False))

    # -- records -----------------------------------------------------------------------------------------------
    def provenance(self) -> Mapping[str, Any]:
        data, pair = self.head.data, self.head.pair
        trained_on = [{"task": data.get("task"), "data_fingerprint": data.get("data_fingerprint"),
                       "item_ids": list(data.get("item_ids", ()))}] if data.get("item_ids") else []
        return {"head": str(self.knobs.head), "sha256": self.digest, "kind": self.head.kind,
                "inputs": list(self.head.inputs), "pair": {role: (pair.get(role) or {}).get("name")
                                                             for role in ("target", "draft")},
                "trained_on": trained_on, "summary": head_summary(self.knobs.head, self.digest, self.head)}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "head": dict(self.provenance())}


def head_summary(path: Any, digest: str, head: JudgeHead) -> str:
    """One sentence naming the head file and its training data (the report's method definitions show it)."""
    data, pair = head.data, head.pair
    ids = list(data.get("item_ids", ()))
    items = f"{len(ids)} items ({ids[0]} … {ids[-1]})" if len(ids) > 1 else f"item {ids[0]}" if ids else "? items"
    auc = head.metrics.get("roc_auc")
    return (f"head {path} (sha256 {digest[:12]}): {head.kind}, logistic regression on the "
            f"[{', '.join(head.inputs)}] last hidden states; trained for {(pair.get('target') or {}).get('name')} "
            f"with draft {(pair.get('draft') or {}).get('name')} on {data.get('n_mismatches', '?')} mismatches "
            f"({data.get('n_important', '?')} important) mined from {data.get('task', '?')} {items}"
            + (f"; held-out ROC-AUC {auc:.3f}" if isinstance(auc, (int, float)) else ""))


@register_policy
class AutoJudge(TrainedJudge):
    name = kind = "autojudge"
    needs = frozenset({Need.HIDDEN_STATES, Need.DRAFT_HIDDEN_STATES})
    origin = Origin(Fidelity.REFERENCE,
                    "garipovroma/autojudge@8a4beb1 eval/generation_utils.py run_spec_dec (bonus token kept)",
                    "AutoJudge: accept a mismatch when a logistic regression on [draft, target] hidden states gives "
                    "P(important) < tau (head mined and trained by relaxbench judge)")


@register_policy
class JudgeDecoding(TrainedJudge):
    name = kind = "judge-decoding"
    needs = frozenset({Need.HIDDEN_STATES})
    origin = Origin(Fidelity.VARIANT,
                    "Judge Decoding (2501.19309), as AutoJudge re-creates it: its head on AutoJudge-mined labels, "
                    "not the paper's hand-annotated data",
                    "Judge-Decoding-style: accept a mismatch when a linear head on the target's embedding gives "
                    "P(important) < tau (head mined and trained by relaxbench judge)")
