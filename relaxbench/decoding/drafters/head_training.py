"""A small trainer of our own for EAGLE-3 and MTP heads (``relaxbench drafter train``).

speculators, the reference trainer, pins a transformers older than relaxbench's 5.23 and cannot be installed beside
it, so this module trains a head with the EAGLE-3 recipe reduced to its core: the target is frozen; for every
position t of a training sequence the head reads (token t+1, the target's feature at t) and is taught the target's
own next-token distribution at t+1 (soft cross-entropy, teacher-forced on the target's features; EAGLE-3's draft
vocabulary is the training data's most frequent tokens, the target's distribution restricted to it). Stated
simplifications: no training-time-test unrolling (EAGLE-3 also trains on the head's own features over several
steps), one sequence per step, AdamW at a constant rate, no data augmentation, and the target's distribution kept as
its ``TEACHER_TOP`` most likely tokens, renormalised (the full rows of a 150k vocabulary over tens of thousands of
positions would not fit in memory; the target's top-1, what exact match accepts, is always among them).

The head is saved in speculators' layout (``config.json`` with ``speculators_config``, ``model.safetensors``), which
the ``eagle3`` and ``mtp`` drafters read (``head_files``).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from relaxbench.decoding.drafters.head_files import HeadSpec
from relaxbench.decoding.drafters.head_modules import Eagle3Head, MTPHead, Shared
from relaxbench.ui import clock


@dataclass(frozen=True)
class TrainSettings:
    kind: str  # 'eagle3' or 'mtp'
    steps: int = 200
    max_minutes: float | None = None
    lr: float = 1e-3
    seed: int = 0
    draft_vocab: int = 32000  # EAGLE-3: the draft vocabulary's size (cut to the target's)
    heldout_fraction: float = 0.1


TEACHER_TOP = 64  # the target's most likely tokens kept per position as the head's soft label


@dataclass
class Example:
    """A training sequence and the frozen target's view of it: the features at each position and its next-token
    distribution there, as its ``TEACHER_TOP`` largest logits and their token ids (the first: its top-1)."""

    ids: torch.Tensor  # [n]
    features: torch.Tensor  # [n, F] float32
    top_logits: torch.Tensor  # [n, TEACHER_TOP] float32, descending
    top_ids: torch.Tensor  # [n, TEACHER_TOP] long


def target_layers(kind: str, config: Any) -> tuple[int, ...]:
    """The target hidden states a new head reads: EAGLE-3's (2, N//2, N-3), MTP's last (after the final norm)."""
    n = int(config.num_hidden_layers)
    return (2, n // 2, n - 3) if kind == "eagle3" else (n,)


@torch.no_grad()
def examples(target: Any, sequences: list[list[int]], layers: tuple[int, ...]) -> list[Example]:
    """Run the frozen target once over every sequence (at least three tokens: one pair and its label)."""
    out = []
    for ids in sequences:
        if len(ids) < 3:
            continue
        tensor = torch.tensor(ids, device=target.device)
        result = target.model(input_ids=tensor[None], output_hidden_states=True)
        feats = torch.cat([result.hidden_states[i][0] for i in layers], dim=-1).float()
        top = result.logits[0].float().topk(min(TEACHER_TOP, int(result.logits.shape[-1])), dim=-1)
        out.append(Example(tensor, feats, top.values, top.indices))
    return out


def draft_vocabulary(sequences: list[list[int]], vocab: int, size: int) -> torch.Tensor:
    """EAGLE-3's draft vocabulary: the ``size`` most frequent tokens of the data (ties and unseen tokens by id),
    sorted, so ``d2t`` = kept - arange is the offset to the target id."""
    counts = Counter(t for seq in sequences for t in seq)
    order = sorted(range(vocab), key=lambda t: (-counts.get(t, 0), t))
    return torch.tensor(sorted(order[: min(size, vocab)]), dtype=torch.long)


def new_head(kind: str, target: Any, kept: torch.Tensor | None) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A freshly initialised head for ``target`` (float32) and the transformer-layer config it is saved with."""
    from transformers import LlamaConfig

    config = target.model.config
    if kind == "eagle3":
        fields = {"model_type": "llama", "hidden_size": int(config.hidden_size),
                 "intermediate_size": int(config.intermediate_size),
                 "num_attention_heads": int(config.num_attention_heads),
                 "num_key_value_heads": int(getattr(config, "num_key_value_heads", config.num_attention_heads)),
                 "head_dim": int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads),
                 "rms_norm_eps": float(getattr(config, "rms_norm_eps", 1e-6)), "num_hidden_layers": 1,
                 "max_position_embeddings": int(getattr(config, "max_position_embeddings", 4096)),
                 "rope_parameters": dict(getattr(config, "rope_parameters", None) or {"rope_type": "default",
                                                                                       "rope_theta": 10000.0}),
                 "vocab_size": int(config.vocab_size)}
        # the whole Llama layer config, as speculators saves it (vLLM builds the draft layer from it: hidden_act, ...)
        layer = {k: v for k, v in LlamaConfig(**fields).to_dict().items()
                 if k not in ("architectures", "transformers_version", "dtype", "torch_dtype")}
        layer["rope_theta"] = layer["rope_parameters"].get("rope_theta", 10000.0)  # for readers predating rope_parameters
        spec = HeadSpec("eagle3", "speculators", Path("."), layer, int(kept.shape[0]))
        head = Eagle3Head(spec, int(config.hidden_size), int(target.logit_dim))
        head.target_embed = Shared(target.model.get_input_embeddings())
        with torch.no_grad():
            head.d2t.copy_(kept - torch.arange(kept.shape[0]))
    else:
        layer = {k: v for k, v in config.to_dict().items() if k not in ("architectures", "auto_map")}
        head = MTPHead(HeadSpec("mtp", "speculators", Path("."), layer), target.model)
    return head.float(), layer  # the target's own modules are not the head's (``Shared``): they stay as they are


def _loss_and_hits(head: torch.nn.Module, kind: str, example: Example, draft_index: torch.Tensor | None
                   ) -> tuple[torch.Tensor, int, int]:
    """Soft cross-entropy of the head's distribution against the target's (its top tokens, renormalised; for
    EAGLE-3 those inside the draft vocabulary, ``draft_index`` mapping a target id to its draft id or -1),
    teacher-forced, and how many of the pairs' top-1 agree with the target's (its first draft's acceptance under
    exact match)."""
    n = int(example.ids.shape[0])
    positions = torch.arange(n - 2, device=example.ids.device)
    hidden = head(example.ids[1: n - 1], example.features[: n - 2], positions, None, True)
    top_logits, top_ids = example.top_logits[1: n - 1], example.top_ids[1: n - 1]
    if kind == "eagle3":
        assert draft_index is not None
        student = head.lm_head(head.norm(hidden)).log_softmax(-1)
        columns = draft_index[top_ids]
        inside = columns >= 0
        weights = top_logits.masked_fill(~inside, float("-inf")).softmax(-1).nan_to_num(0.0)
        picked = student.gather(-1, columns.clamp(min=0))
        guess = (student.argmax(-1) == draft_index[top_ids[:, 0]])
    else:
        student = torch.nn.functional.linear(hidden, head.output_weight().to(hidden.device, torch.float32))
        student = student.log_softmax(-1)
        weights = top_logits.softmax(-1)
        picked = student.gather(-1, top_ids)
        guess = student.argmax(-1) == top_ids[:, 0]
    loss = -(weights * picked).sum(-1).mean()
    return loss, int(guess.sum()), n - 2


def train(target: Any, sequences: list[list[int]], settings: TrainSettings,
          progress: Callable[[str], None] = print) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]:
    """Train a head for ``target`` on ``sequences``; returns the head, its layer config and the training record."""
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    for p in target.model.parameters():
        p.requires_grad_(False)
    layers = target_layers(settings.kind, target.model.config)
    kept = (draft_vocabulary(sequences, int(target.logit_dim), settings.draft_vocab).to(target.device)
            if settings.kind == "eagle3" else None)
    draft_index = None
    if kept is not None:  # a target id's column in the draft vocabulary, -1 outside it
        draft_index = torch.full((int(target.logit_dim),), -1, dtype=torch.long, device=target.device)
        draft_index[kept] = torch.arange(kept.shape[0], device=target.device)
    data = examples(target, sequences, layers)
    if len(data) < 2:
        raise ValueError("need at least two training sequences of three or more tokens")
    rng.shuffle(data)
    n_held = max(1, int(len(data) * settings.heldout_fraction))
    held, train_set = data[:n_held], data[n_held:]
    head, layer = new_head(settings.kind, target, kept.cpu() if kept is not None else None)
    head.to(target.device).train()
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr)
    start, losses, step = time.monotonic(), [], 0
    deadline = None if settings.max_minutes is None else start + 60 * settings.max_minutes
    every = max(1, settings.steps // 20)
    while step < settings.steps and (deadline is None or time.monotonic() < deadline):
        example = train_set[step % len(train_set)]
        loss, _, _ = _loss_and_hits(head, settings.kind, example, draft_index)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % every == 0 or step == settings.steps:
            progress(_progress_line(step, settings.steps, losses, start, deadline))
    head.eval()
    with torch.no_grad():
        scored = [_loss_and_hits(head, settings.kind, ex, draft_index) for ex in held]
        fitted = [_loss_and_hits(head, settings.kind, ex, draft_index) for ex in train_set[:64]]  # how well it fits
    tail = losses[-max(1, min(10, len(losses))):]
    record = {"kind": settings.kind, "target_layers": list(layers), "steps": step, "steps_asked": settings.steps,
              "stopped_by_time": step < settings.steps, "lr": settings.lr, "seed": settings.seed,
              "train_sequences": len(train_set), "heldout_sequences": len(held),
              "train_tokens": sum(int(ex.ids.shape[0]) for ex in train_set),
              "final_loss": sum(tail) / len(tail) if tail else None,
              "heldout_loss": sum(float(s[0]) for s in scored) / len(scored),
              "heldout_acceptance": sum(s[1] for s in scored) / max(1, sum(s[2] for s in scored)),
              "train_acceptance": sum(s[1] for s in fitted) / max(1, sum(s[2] for s in fitted)),
              "minutes": (time.monotonic() - start) / 60}
    return head, layer, record


def _progress_line(step: int, steps: int, losses: list[float], start: float, deadline: float | None) -> str:
    elapsed = time.monotonic() - start
    eta = elapsed / step * (steps - step)
    if deadline is not None:
        eta = min(eta, max(0.0, deadline - time.monotonic()))
    recent = losses[-min(len(losses), 10):]
    return (f"step {step}/{steps}  loss {sum(recent) / len(recent):.4f}  elapsed {clock(elapsed)}  "
            f"eta {clock(eta)}")


def save(head: torch.nn.Module, kind: str, layer: dict[str, Any], target: Any, out: Path,
         card: dict[str, Any]) -> Path:
    """Write the head in speculators' layout (``config.json`` + ``model.safetensors``) and ``card.json``."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}  # the head's own tensors
    verifier = {"name_or_path": str(getattr(target, "name", None) or target.model.name_or_path),
                "architectures": list(getattr(target.model.config, "architectures", None) or [])}
    if kind == "eagle3":
        weights = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v
                   for k, v in state.items()}
        if int(head.d2t.shape[0]) == int(target.model.config.vocab_size):
            del weights["d2t"]  # the target's own vocabulary: no map, as speculators saves it (vLLM refuses one)
        else:
            t2d = torch.zeros(int(target.logit_dim), dtype=torch.bool)
            t2d[torch.arange(head.d2t.shape[0]) + head.d2t.cpu()] = True
            weights["t2d"] = t2d
        config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                  "transformer_layer_config": layer, "draft_vocab_size": int(head.d2t.shape[0]),
                  "norm_before_residual": False, "target_hidden_size": int(target.model.config.hidden_size),
                  "eagle_aux_hidden_state_layer_ids": card["target_layers"]}
    else:
        rename = {"pre_fc_norm_embedding.": "mtp_layers.0.token_layernorm.",
                  "pre_fc_norm_hidden.": "mtp_layers.0.hidden_layernorm.", "fc.": "mtp_layers.0.input_proj.",
                  "norm.": "mtp_layers.0.final_layernorm.", "layer.": "mtp_layers.0."}
        weights = {next(new + k[len(old):] for old, new in rename.items() if k.startswith(old)): v
                   for k, v in state.items()}
        config = {"architectures": ["MTPDraftModel"], "speculators_model_type": "mtp",
                  "transformer_layer_config": layer, "num_nextn_predict_layers": 1}
    config["speculators_config"] = {"algorithm": kind, "default_proposal_method": "greedy",
                                    "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                    "verifier": verifier}
    save_file(weights, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))
    (out / "card.json").write_text(json.dumps(card, indent=2, default=str))
    return out
