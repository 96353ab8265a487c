"""A trained judge head on file: a standardised linear classifier of hidden states, P(important | features).

The file is JSON (no pickle: a head file is data, never code), written by ``relaxbench judge train`` and read by
the ``autojudge`` and ``judge-decoding`` policies. It holds the weights, the exact feature recipe, the (target,
draft) pair it was trained for, the training data's provenance and the held-out metrics:

* ``features``: which last hidden states, in which order, with their widths (``inputs``: ``["draft", "target"]``
  for AutoJudge's default ``DD-DT`` setup, ``["target"]`` for a Judge-Decoding-style head), always the last layer
  after the final norm, at the draft token's own position, on the sequence that holds the draft token;
* ``scaler`` (``mean``, ``scale``) and ``linear`` (``weights``, ``bias``): P(important) = sigmoid(w · (x − mean) /
  scale + b), which is scikit-learn's ``StandardScaler`` + ``LogisticRegression.predict_proba(...)[:, 1]``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from relaxbench.errors import ConfigError

FORMAT = "relaxbench-judge-head"
VERSION = 1
KINDS = ("autojudge", "judge-decoding")
LAYER = "last hidden state (after the final norm; hidden_states[-1])"
POSITION = "the draft token's own position, on the sequence that holds the draft token"


@dataclass(frozen=True)
class JudgeHead:
    """A loaded head. ``inputs`` names the feature blocks in order; ``dims`` their widths."""

    kind: str
    inputs: tuple[str, ...]
    dims: Mapping[str, int]
    mean: torch.Tensor  # [width] float64
    scale: torch.Tensor  # [width] float64
    weights: torch.Tensor  # [width] float64
    bias: float
    pair: Mapping[str, Any]  # {"target": {...}, "draft": {...}}: name, hidden size, dtype, parameters, vocab
    training: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return sum(int(self.dims[name]) for name in self.inputs)

    def to_record(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "kind": self.kind,
            "features": {"inputs": list(self.inputs), "dims": {n: int(self.dims[n]) for n in self.inputs},
                         "layer": LAYER, "position": POSITION, "order": "concatenated in the order of 'inputs'",
                         "dtype": "float32 features, float64 arithmetic"},
            "scaler": {"mean": self.mean.tolist(), "scale": self.scale.tolist()},
            "linear": {"weights": self.weights.tolist(), "bias": self.bias},
            "output": "P(important) = sigmoid(weights . (x - mean) / scale + bias); a mismatch is accepted when "
                      "P(important) < tau",
            "pair": dict(self.pair), "training": dict(self.training), "data": dict(self.data),
            "metrics": dict(self.metrics),
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_record(), indent=1) + "\n")
        return path

    # -- inference -----------------------------------------------------------------------------------------------
    def to(self, device: torch.device) -> JudgeHead:
        return replace(self, mean=self.mean.to(device), scale=self.scale.to(device), weights=self.weights.to(device))

    def p_important(self, blocks: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """[m] P(important) for m mismatches; ``blocks`` maps each input name to its [m, dim] hidden states.

        In float64 with the scaler folded into the weights, ``x · (w / scale) − mean · (w / scale) + b``, block by
        block: the value of ``(x − mean) / scale · w + b`` up to float64 rounding, without standardising (and
        concatenating) every feature of every row."""
        coef = self.weights / self.scale
        logit = (self.mean * coef).sum().neg().add(self.bias)
        start = 0
        for name in self.inputs:
            width = int(self.dims[name])
            logit = logit + blocks[name].to(torch.float64) @ coef[start: start + width]
            start += width
        return torch.sigmoid(logit)

    # -- checks --------------------------------------------------------------------------------------------------
    def check_pair(self, where: str, target_name: str | None, draft_name: str | None) -> None:
        """A head trained for another (target, draft) pair is a configuration error."""
        want_target = self.pair.get("target", {}).get("name")
        want_draft = self.pair.get("draft", {}).get("name")
        if (target_name, draft_name) != (want_target, want_draft):
            raise ConfigError(f"{where}: the head was trained for target {want_target!r} with draft {want_draft!r}, "
                              f"but this run has target {target_name!r} with draft {draft_name!r}; mine and train "
                              "a head for this pair (relaxbench judge mine / judge train)")

    def check_width(self, where: str, name: str, width: int) -> None:
        if int(self.dims[name]) != width:
            raise ConfigError(f"{where}: the head expects {name} hidden states of size {self.dims[name]}, but the "
                              f"{name} model's are of size {width}; it was trained for another model")


def load_head(path: str | Path, where: str) -> JudgeHead:
    """Read and check a head file; every problem is a one-line ``ConfigError`` naming ``where`` and the file."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: no head file {path} (train one with `relaxbench judge train`, or set the "
                          "knob head=PATH)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot read head file {path} ({type(exc).__name__})") from None
    try:
        return head_from_record(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {path} is not a relaxbench judge head ({exc})") from None


def head_from_record(record: Mapping[str, Any]) -> JudgeHead:
    if record.get("format") != FORMAT:
        raise ValueError(f"format is {record.get('format')!r}, expected {FORMAT!r}")
    if record.get("version") != VERSION:
        raise ValueError(f"version {record.get('version')!r}, this relaxbench reads version {VERSION}")
    if record["kind"] not in KINDS:
        raise ValueError(f"unknown kind {record['kind']!r}")
    features = record["features"]
    inputs = tuple(str(name) for name in features["inputs"])
    dims = {str(name): int(features["dims"][name]) for name in inputs}
    head = JudgeHead(kind=str(record["kind"]), inputs=inputs, dims=dims,
                     mean=_vector(record["scaler"]["mean"]), scale=_vector(record["scaler"]["scale"]),
                     weights=_vector(record["linear"]["weights"]), bias=float(record["linear"]["bias"]),
                     pair=dict(record["pair"]), training=dict(record.get("training", {})),
                     data=dict(record.get("data", {})), metrics=dict(record.get("metrics", {})))
    if not (len(head.mean) == len(head.scale) == len(head.weights) == head.width):
        raise ValueError(f"weights of length {len(head.weights)} for features of width {head.width}")
    if not bool((head.scale > 0).all()):
        raise ValueError("the scaler has a non-positive scale")
    return head


def _vector(values: Sequence[Any]) -> torch.Tensor:
    return torch.tensor([float(v) for v in values], dtype=torch.float64)


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
