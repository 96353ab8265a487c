"""``relaxbench judge train``: fit the heads on a mining store and write them as head files.

The fitting is scikit-learn's, as in AutoJudge's ``src/train_head_gsm8k.py`` (l.46–128): ``StandardScaler`` then
``LogisticRegression(C=C)`` (lbfgs, L2, ``max_iter=100``, no class weights), with C from AutoJudge's grid
``(√10)^-14 … (√10)^-1`` plus ``1, 3, 10, 50, 100`` (19 values), chosen by held-out ROC-AUC. scikit-learn rather than torch:
it *is* the reference implementation, a small well-kept dependency (the ``judges`` extra), and fits a few thousand
rows in seconds on a CPU.

Held out by problem, never by token: the mined problems are shuffled with AutoJudge's seed (52) and cut into
``folds`` folds (AutoJudge's LiveCodeBench recipe, ``src/train_head_lcb.py``: 5 folds by question); every mismatch
is predicted by a head that never saw its problem, and the quality figures (ROC-AUC, precision and recall of
"important", the share of mismatches accepted at each tau) come from these out-of-fold predictions. The head
written to disk is refit on every mined problem with the chosen C (AutoJudge's ``--train_on_all_data``). C ties
on ROC-AUC — which AutoJudge breaks towards the smallest C — are broken by held-out log-loss, so perfectly
separable data does not end with the most flattened head.

Heads: ``autojudge`` on ``[draft, target]`` hidden states (AutoJudge's default ``DD-DT`` setup) and
``judge-decoding`` on the target's alone (AutoJudge's re-creation of the Judge Decoding head). The scaler folds into
the linear layer, so both are single linear heads at inference.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from typing import Any

import numpy as np
import torch

from relaxbench.errors import ConfigError, DataError
from relaxbench.policies.judge_head import KINDS, JudgeHead
from relaxbench.trained_judges.store import MinedData

C_GRID = tuple(float(c) for c in (10 ** 0.5) ** -np.arange(1, 15)[::-1]) + (1.0, 3.0, 10.0, 50.0, 100.0)
SEED = 52  # AutoJudge's --random_seed
DEFAULT_TAUS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
INPUTS = {"autojudge": ("draft", "target"), "judge-decoding": ("target",)}


@dataclass(frozen=True)
class TauRow:
    tau: float
    accepted: float  # share of held-out mismatches with P(important) < tau
    precision: float | None  # of "important" (P >= tau)
    recall: float | None
    accuracy: float
    important_accepted: int  # important mismatches the head would accept


@dataclass(frozen=True)
class Fit:
    """One head: the refit model's parameters and the out-of-fold quality figures."""

    kind: str
    C: float
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    roc_auc: float | None
    log_loss: float
    by_tau: tuple[TauRow, ...]
    by_c: tuple[tuple[float, float | None, float], ...]  # (C, ROC-AUC, log-loss)
    quantile_thresholds: tuple[float, ...]
    out_of_fold: np.ndarray = field(repr=False)


def sklearn_modules() -> Any:
    try:
        from sklearn import linear_model, metrics, preprocessing
    except ImportError:
        raise ConfigError("judge train needs scikit-learn: pip install 'relaxbench[trained-judges]'") from None
    return linear_model, metrics, preprocessing


def problem_folds(problems: Sequence[str], folds: int, seed: int = SEED) -> list[list[str]]:
    """The problems shuffled with ``seed`` and dealt into ``folds`` folds (fewer when there are fewer problems)."""
    if len(problems) < 2:
        raise DataError(f"need mismatches from at least 2 problems to hold some out, got {len(problems)}")
    order = [problems[i] for i in np.random.RandomState(seed).permutation(len(problems))]
    n = min(folds, len(order))
    return [order[i::n] for i in range(n)]


def features(data: MinedData, kind: str) -> np.ndarray:
    blocks = {"draft": data.draft_hidden, "target": data.target_hidden}
    return np.concatenate([blocks[name] for name in INPUTS[kind]], axis=1).astype(np.float64)


def fit_head(x: np.ndarray, y: np.ndarray, groups: Sequence[str], folds: int, kind: str,
             taus: Sequence[float] = DEFAULT_TAUS, c_grid: Sequence[float] = C_GRID, seed: int = SEED) -> Fit:
    """Choose C by out-of-fold ROC-AUC over folds of problems, then refit on everything with that C."""
    linear_model, metrics, preprocessing = sklearn_modules()
    if len(set(y.tolist())) < 2:
        raise DataError(f"all {len(y)} mined mismatches have the same label; mine more items before training")
    groups = np.asarray(groups)
    fold_sets = problem_folds(sorted(set(groups.tolist())), folds, seed)
    scored = []
    for c in c_grid:
        oof = np.empty(len(y))
        for held in fold_sets:
            test = np.isin(groups, held)
            oof[test] = _fit_predict(linear_model, preprocessing, c, x[~test], y[~test], x[test])
        auc = float(metrics.roc_auc_score(y, oof)) if len(set(y.tolist())) == 2 else None
        loss = float(metrics.log_loss(y, np.clip(oof, 1e-12, 1 - 1e-12), labels=[False, True]))
        scored.append((c, auc, loss, oof))
    best = max(scored, key=lambda s: (s[1] if s[1] is not None else -1.0, -s[2]))
    c, auc, loss, oof = best
    scaler = preprocessing.StandardScaler().fit(x)
    model = _logistic(linear_model, c).fit(scaler.transform(x), y)
    return Fit(kind, c, scaler.mean_.copy(), scaler.scale_.copy(), model.coef_[0].copy(), float(model.intercept_[0]),
               auc, loss, tuple(tau_row(y, oof, tau) for tau in taus),
               tuple((s[0], s[1], s[2]) for s in scored),
               tuple(float(q) for q in np.quantile(oof, np.linspace(0, 1, 26))), oof)


def _logistic(linear_model: Any, c: float) -> Any:
    return linear_model.LogisticRegression(C=c, max_iter=100)


def _fit_predict(linear_model: Any, preprocessing: Any, c: float, x_train: np.ndarray, y_train: np.ndarray,
                 x_test: np.ndarray) -> np.ndarray:
    """P(important) for ``x_test`` from a scaler + logistic regression fitted on the training problems (the
    training share of important mismatches when those are all of one label)."""
    if len(set(y_train.tolist())) < 2:
        return np.full(len(x_test), float(np.mean(y_train)))
    scaler = preprocessing.StandardScaler().fit(x_train)
    with warnings.catch_warnings():  # lbfgs at max_iter=100 warns at large C, as in AutoJudge's own runs
        warnings.simplefilter("ignore")
        model = _logistic(linear_model, c).fit(scaler.transform(x_train), y_train)
    return model.predict_proba(scaler.transform(x_test))[:, 1]


def tau_row(y: np.ndarray, p: np.ndarray, tau: float) -> TauRow:
    """Quality at ``tau``: a mismatch is called important when P(important) >= tau, accepted otherwise."""
    called = p >= tau
    true_pos = int(np.sum(called & y))
    precision = true_pos / int(called.sum()) if called.any() else None
    recall = true_pos / int(y.sum()) if y.any() else None
    return TauRow(tau, float(np.mean(~called)), precision, recall, float(np.mean(called == y)),
                  int(np.sum(~called & y)))


def train_heads(data: MinedData, kinds: Sequence[str] = KINDS, folds: int = 5, taus: Sequence[float] = DEFAULT_TAUS,
                seed: int = SEED) -> list[Fit]:
    if len(data.important) == 0:
        raise DataError("the store has no mismatches of finished items yet; mine some first")
    for kind in kinds:
        if kind not in INPUTS:
            raise ConfigError(f"unknown head {kind!r} (heads: {', '.join(INPUTS)})")
    y = data.important.astype(bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [fit_head(features(data, kind), y, data.item_ids, folds, kind, taus, seed=seed) for kind in kinds]


def head_of(fit: Fit, data: MinedData, store_path: str, folds: int, seed: int) -> JudgeHead:
    """The head file's content: weights, feature recipe, pair, training record, data provenance, metrics."""
    config = data.config
    dims = {name: int(config["dims"][name]) for name in INPUTS[fit.kind]}
    pair = {role: {key: config[role].get(key) for key in ("name", "ref", "dtype", "hidden_size", "parameters",
                                                          "architecture", "vocab")} for role in ("target", "draft")}
    task = config["task"]
    n_important = int(data.important.sum())
    data_record = {
        "store": store_path, "mining_key": data.mining_key, "task": task["name"], "scorer": task["scorer"],
        "data_fingerprint": task["data_fingerprint"], "item_ids": list(data.items), "n_items": len(data.items),
        "n_mismatches": int(len(data.important)), "n_important": n_important,
        "mining_options": config["options"], "device": config["device"],
        "label_rule": "important = the target's greedy continuation after the swapped-in draft token changes the "
                      "outcome (scorer's outcome: pass/fail for code, the extracted answer for GSM8K)",
    }
    training = {
        "library": f"scikit-learn {version('scikit-learn')}",
        "estimator": "StandardScaler + LogisticRegression(C, lbfgs, L2, max_iter=100)",
        "C": fit.C, "C_grid": list(C_GRID), "folds": folds, "seed": seed,
        "selection": "out-of-fold ROC-AUC, folds by problem; ties by out-of-fold log-loss",
        "refit": "on all mined problems with the chosen C", "trained_at": datetime.now(timezone.utc).isoformat(
            timespec="seconds"),
        "reference": "garipovroma/autojudge@8a4beb1 src/train_head_gsm8k.py, src/train_head_lcb.py",
    }
    metrics = {
        "held_out": "out-of-fold predictions (every mismatch by a head that never saw its problem)",
        "roc_auc": fit.roc_auc, "log_loss": fit.log_loss, "important_share": n_important / len(data.important),
        "by_tau": [vars(row) for row in fit.by_tau],
        "by_C": [{"C": c, "roc_auc": auc, "log_loss": loss} for c, auc, loss in fit.by_c],
        "quantile_thresholds": list(fit.quantile_thresholds),
    }
    vector = lambda values: torch.tensor(np.asarray(values, dtype=np.float64))  # noqa: E731
    return JudgeHead(kind=fit.kind, inputs=INPUTS[fit.kind], dims=dims, mean=vector(fit.mean),
                     scale=vector(fit.scale), weights=vector(fit.weights), bias=fit.bias, pair=pair,
                     training=training, data=data_record, metrics=metrics)
