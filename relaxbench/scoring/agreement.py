"""Open-ended prompts have no reference answer to check: without a grader, what can be measured is fidelity to the
AR output (exact match and ROUGE-L) plus the target's mean log-likelihood of what was produced. That is not
capability (a different wording of a good answer loses points), so the measure is named "fidelity"; capability on
such tasks is an LLM grader's (``llm_grader.py``)."""

from __future__ import annotations

from functools import cache

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer


@cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"])


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L F-measure (rouge_score's tokenizer: lower case, alphanumeric tokens). Identical texts score 1.0
    even when they hold no alphanumeric token (which rouge_score would score 0)."""
    if reference == candidate:
        return 1.0
    return float(_rouge().score(reference, candidate)["rougeL"].fmeasure)


@register_scorer
class AgreementScorer(Scorer):
    """Score = ROUGE-L F against the AR output of the same item and turn (1.0 for the AR arm itself); details
    hold the exact-match flag and the target's mean log-likelihood of the output."""

    name = "agreement"
    summary = "agreement with the AR output: ROUGE-L (score), exact match, target mean log-likelihood"
    needs_baseline = True
    needs_logprob = True
    detail_metrics = ("exact_match", "rouge_l", "mean_logprob")
    measure = "fidelity"

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        reference = text if context.baseline_text is None else context.baseline_text
        details = {"exact_match": text == reference, "rouge_l": rouge_l(reference, text)}
        if context.mean_logprob is not None:
            details["mean_logprob"] = context.mean_logprob()
        return Score(details["rouge_l"], None, details)
