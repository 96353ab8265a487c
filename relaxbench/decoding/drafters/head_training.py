"""A small trainer of our own for EAGLE-3 and MTP heads (``relaxbench drafter train``).

speculators, the reference trainer, pins a transformers older than relaxbench's 5.23 and cannot be installed beside
it, so this module trains a head with the EAGLE-3 recipe reduced to its core: the target is frozen; for every
position t of a training sequence the head reads (token t+1, the target's feature at t) and is taught the target's
own next-token distribution at t+1 (soft cross-entropy on the target's features; EAGLE-3's draft vocabulary is the
training data's most frequent tokens, the target's distribution restricted to it), and, over ``unroll`` chained
steps, the distribution at t+j from its own output of the step before (EAGLE-3's training-time test: the head
learns to draft from its own features, as it does after the first draft; step j's loss weighs 0.8^(j-1)). Whole
sequences are packed into one forward per step (``batch_tokens`` pairs), each attending to itself only. A new
EAGLE-3 head starts from the target's output rows and final norm (``warm_start``). Stated simplifications: fewer
unrolled steps than EAGLE-3's seven, AdamW at a constant rate, no data augmentation, and the target's distribution
kept as its ``TEACHER_TOP`` most likely tokens, renormalised (the full rows of a 150k vocabulary over tens of
thousands of positions would not fit in memory; the target's top-1, what exact match accepts, is always among
them). The held-out sequences are whole source texts (``heldout_split``), so the card's held-out acceptance is on
text the head never saw.

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
    # train()'s whole call: the feature pass, the steps (at least one) and the evaluations after them
    max_minutes: float | None = None
    lr: float = 3e-4
    seed: int = 0
    draft_vocab: int = 32000  # EAGLE-3: the draft vocabulary's size (cut to the target's)
    heldout_fraction: float = 0.1
    batch_tokens: int = 512  # pairs per optimizer step: whole training sequences packed up to this many
    unroll: int = 1  # chained steps trained per pair (EAGLE-3's training-time test; 1: teacher-forced only)
    warm_start: bool = True  # EAGLE-3: start from the target's output rows and final norm (``warm_start``)


PROGRESS_EVERY_S = 30.0  # a training run cut by --max-minutes long before --steps still reports as it goes
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
def examples(target: Any, sequences: list[list[int]], layers: tuple[int, ...],
             progress: Callable[[str], None] | None = None) -> list[Example]:
    """Run the frozen target once over every sequence (at least three tokens: one pair and its label), with a
    progress line per tenth of the tokens (this is minutes for a 1.5B target on a CPU)."""
    out = []
    total, done, start, shown = sum(len(ids) for ids in sequences), 0, time.monotonic(), 0
    for ids in sequences:
        if len(ids) >= 3:
            tensor = torch.tensor(ids, device=target.device)
            result = target.model(input_ids=tensor[None], output_hidden_states=True)
            feats = torch.cat([result.hidden_states[i][0] for i in layers], dim=-1).float()
            top = result.logits[0].float().topk(min(TEACHER_TOP, int(result.logits.shape[-1])), dim=-1)
            out.append(Example(tensor, feats, top.values, top.indices))
        done += len(ids)
        if progress is not None and done * 10 // max(total, 1) > shown:
            shown = done * 10 // max(total, 1)
            elapsed = time.monotonic() - start
            progress(f"target features {done}/{total} tokens  elapsed {clock(elapsed)}  "
                     f"eta {clock(elapsed / done * (total - done))}")
    return out


def draft_vocabulary(sequences: list[list[int]], vocab: int, size: int) -> torch.Tensor:
    """EAGLE-3's draft vocabulary: the ``size`` most frequent tokens of the data (ties and unseen tokens by id),
    sorted, so ``d2t`` = kept - arange is the offset to the target id."""
    counts = Counter(t for seq in sequences for t in seq)
    order = sorted(range(vocab), key=lambda t: (-counts.get(t, 0), t))
    return torch.tensor(sorted(order[: min(size, vocab)]), dtype=torch.long)


def draft_columns(kept: torch.Tensor, vocab: int) -> torch.Tensor:
    """[vocab]: each target id's column in the draft vocabulary ``kept``, -1 outside it."""
    index = torch.full((vocab,), -1, dtype=torch.long, device=kept.device)
    index[kept] = torch.arange(kept.shape[0], device=kept.device)
    return index


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


@torch.no_grad()
def warm_start(head: torch.nn.Module, kind: str, target: Any, kept: torch.Tensor | None) -> None:
    """Start a new EAGLE-3 head from the target's own weights where the head has their shape: its ``lm_head`` from
    the target's output rows of the draft vocabulary and its ``norm`` from the target's final norm (as speculators
    initialises a draft head from its verifier's head), so minutes of CPU training teach it the step ahead instead of
    the vocabulary. An MTP head already uses the target's own head; copying the target's last decoder layer into
    its layer trained worse here than a random start (held-out acceptance 0.10 against 0.35 after 4 minutes on the
    Qwen2.5-Coder-1.5B target), so it starts at random."""
    if kind != "eagle3":
        return
    assert kept is not None
    model = target.model
    base = getattr(model, getattr(model, "base_model_prefix", "model"), model)
    rows = model.get_output_embeddings().weight
    head.lm_head.weight.copy_(rows[kept.to(rows.device)].to(head.lm_head.weight.device, torch.float32))
    norm = getattr(base, "norm", None)
    if norm is not None and tuple(norm.weight.shape) == tuple(head.norm.weight.shape):
        head.norm.weight.copy_(norm.weight.float())


SOURCE_PREFIX = 24  # sequences that open with the same tokens are one source (a text and its continuation)


def heldout_split(data: list[Example], fraction: float, rng: random.Random) -> tuple[list[Example], list[Example]]:
    """Held-out and training examples, split by source: a text and the same text continued by the target (and any
    sequences opening with the same ``SOURCE_PREFIX`` tokens) fall on the same side, so the held-out acceptance is
    measured on text the head never saw."""
    sources: dict[tuple[int, ...], list[Example]] = {}
    for example in sorted(data, key=lambda ex: int(ex.ids.shape[0])):  # a text before its continuations
        opening = tuple(example.ids[:SOURCE_PREFIX].tolist())
        # a text shorter than SOURCE_PREFIX is its own key: its continuation opens with all of it
        key = next((opening[:n] for n in range(1, len(opening)) if opening[:n] in sources), opening)
        sources.setdefault(key, []).append(example)
    if len(sources) < 2:
        raise ValueError("need training sequences from at least two texts of three or more tokens")
    keys = list(sources)
    rng.shuffle(keys)
    n_held = max(1, int(len(keys) * fraction))
    return ([ex for key in keys[:n_held] for ex in sources[key]],
            [ex for key in keys[n_held:] for ex in sources[key]])


def packs(examples: list[Example], budget: int) -> list[list[Example]]:
    """Consecutive examples grouped so each group's pairs (n - 2 per sequence) stay within ``budget`` (a longer
    sequence is a group of its own): one optimizer step per group."""
    groups: list[list[Example]] = []
    size = budget + 1
    for example in examples:
        n = int(example.ids.shape[0]) - 2
        if size + n > budget:
            groups.append([])
            size = 0
        groups[-1].append(example)
        size += n
    return groups


def unroll_mask(q_seg: torch.Tensor, q_t: torch.Tensor, k_seg: torch.Tensor, k_t: torch.Tensor,
                k_first: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, Q, K] additive mask of one unrolled training step over the keys of every step so far (packed
    sequences, ``seg``; pair index within its sequence, ``t``; ``first``: a key of the first, teacher-forced step):
    a query sees its own sequence's first-step keys up to its pair, and the later steps' keys of its own chain only,
    as a chained draft at inference sees the committed pairs and the drafts before it (EAGLE-3's training-time test)."""
    same = q_seg[:, None] == k_seg[None, :]
    earlier = k_t[None, :] <= q_t[:, None]
    own = k_t[None, :] == q_t[:, None]
    first = k_first[None, :]
    allowed = same & ((first & earlier) | (~first & own))
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q_seg.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def unrolled_hidden(head: torch.nn.Module, group: list[Example], unroll: int = 1
                    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The head's outputs at each of ``unroll`` chained steps over packed sequences, as (hidden, label logits,
    label ids): step 1 reads the pairs (token t+1, target feature t) at position t and is taught the target's
    distribution at t+1; step j reads (token t+j, its own step j-1 output for the same t) at position t+j-1 and is
    taught the target's distribution at t+j, attending as ``unroll_mask`` says."""
    from transformers import DynamicCache

    lengths = [int(ex.ids.shape[0]) - 2 for ex in group]
    device = group[0].ids.device
    seg = torch.repeat_interleave(torch.arange(len(group), device=device), torch.tensor(lengths, device=device))
    tee = torch.cat([torch.arange(n, device=device) for n in lengths])
    size = torch.tensor(lengths, device=device)[seg]  # the pairs of each row's sequence
    features = torch.cat([ex.features[:-2] for ex in group])
    cache = DynamicCache() if unroll > 1 else None
    keys = (seg, tee, torch.ones_like(seg, dtype=torch.bool))
    mask = unroll_mask(seg, tee, *keys, features.dtype) if len(group) > 1 or cache is not None else None
    hidden = head(torch.cat([ex.ids[1:-1] for ex in group]), features, tee, cache, True, mask=mask)
    out = [(hidden, torch.cat([ex.top_logits[1:-1] for ex in group]), torch.cat([ex.top_ids[1:-1] for ex in group]))]
    for j in range(2, unroll + 1):
        keep = tee <= size - j
        if not bool(keep.any()):
            break
        seg, tee, size, previous = seg[keep], tee[keep], size[keep], hidden[keep]
        keys = (torch.cat([keys[0], seg]), torch.cat([keys[1], tee]),
                torch.cat([keys[2], torch.zeros_like(seg, dtype=torch.bool)]))
        cut = [(ex, n + 1) for ex, n in zip(group, lengths) if n + 1 > j]
        hidden = head(torch.cat([ex.ids[j:end] for ex, end in cut]), previous, tee + j - 1, cache, False,
                      mask=unroll_mask(seg, tee, *keys, previous.dtype))
        out.append((hidden, torch.cat([ex.top_logits[j:end] for ex, end in cut]),
                    torch.cat([ex.top_ids[j:end] for ex, end in cut])))
    return out


def _step_loss(head: torch.nn.Module, kind: str, hidden: torch.Tensor, top_logits: torch.Tensor,
               top_ids: torch.Tensor, draft_index: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft cross-entropy of one step's distribution against the target's and whether each top-1 is the target's."""
    if kind == "eagle3":
        assert draft_index is not None
        student = head.lm_head(head.norm(hidden)).log_softmax(-1)
        columns = draft_index[top_ids]
        inside = columns >= 0
        weights = top_logits.masked_fill(~inside, float("-inf")).softmax(-1).nan_to_num(0.0)
        picked = student.gather(-1, columns.clamp(min=0))
        guess = student.argmax(-1) == draft_index[top_ids[:, 0]]
    else:
        student = torch.nn.functional.linear(hidden, head.output_weight().to(hidden.device, torch.float32))
        student = student.log_softmax(-1)
        weights = top_logits.softmax(-1)
        picked = student.gather(-1, top_ids)
        guess = student.argmax(-1) == top_ids[:, 0]
    return -(weights * picked).sum(-1).mean(), guess


UNROLL_DECAY = 0.8  # step j's loss weighs 0.8 ** (j - 1), as EAGLE-3's training weighs its steps


def _loss_and_hits(head: torch.nn.Module, kind: str, example: Example | list[Example],
                   draft_index: torch.Tensor | None, unroll: int = 1) -> tuple[torch.Tensor, int, int]:
    """Soft cross-entropy of the head's distribution against the target's (its top tokens, renormalised; for
    EAGLE-3 those inside the draft vocabulary, ``draft_index`` mapping a target id to its draft id or -1) over
    ``unroll`` chained steps (``unrolled_hidden``), and how many first-step top-1 agree with the target's (its first
    draft's acceptance under exact match), of how many pairs. Several examples are packed into one forward."""
    group = example if isinstance(example, list) else [example]
    total, hits, pairs = None, 0, 0
    for j, (hidden, top_logits, top_ids) in enumerate(unrolled_hidden(head, group, unroll)):
        loss, guess = _step_loss(head, kind, hidden, top_logits, top_ids, draft_index)
        total = loss if total is None else total + UNROLL_DECAY ** j * loss
        if j == 0:
            hits, pairs = int(guess.sum()), int(guess.shape[0])
    assert total is not None
    return total, hits, pairs


FITTED = 64  # training sequences the card's training agreement is measured on


def train(target: Any, sequences: list[list[int]], settings: TrainSettings,
          progress: Callable[[str], None] = print) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]:
    """Train a head for ``target`` on ``sequences``; returns the head, its layer config and the training record."""
    called = time.monotonic()  # max_minutes counts from here: the target's feature pass is inside the budget
    deadline = None if settings.max_minutes is None else called + 60 * settings.max_minutes
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    for p in target.model.parameters():
        p.requires_grad_(False)
    layers = target_layers(settings.kind, target.model.config)
    kept = (draft_vocabulary(sequences, int(target.logit_dim), settings.draft_vocab).to(target.device)
            if settings.kind == "eagle3" else None)
    draft_index = None if kept is None else draft_columns(kept, int(target.logit_dim))
    data = examples(target, sequences, layers, progress)
    held, train_set = heldout_split(data, settings.heldout_fraction, rng)
    head, layer = new_head(settings.kind, target, kept.cpu() if kept is not None else None)
    if settings.warm_start:
        warm_start(head, settings.kind, target, kept)
    head.to(target.device).train()
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr)
    start, losses, step = time.monotonic(), [], 0
    every, shown = max(1, settings.steps // 20), start  # a line per twentieth of the steps, and at least every 30 s
    groups: list[list[Example]] = []
    # the evaluations after the last step are inside the budget too: reserved at the training's seconds per pair
    evaluated, trained = sum(int(ex.ids.shape[0]) for ex in held + train_set[:FITTED]), 0
    while step < settings.steps and (step == 0 or deadline is None
                                     or time.monotonic() + (time.monotonic() - start) / trained * evaluated
                                     < deadline):
        if not groups:  # a new epoch: the training set in a new order, packed again
            rng.shuffle(train_set)
            groups = packs(train_set, settings.batch_tokens)[::-1]
        pack = groups.pop()
        trained += sum(int(ex.ids.shape[0]) for ex in pack)
        loss, _, _ = _loss_and_hits(head, settings.kind, pack, draft_index, settings.unroll)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % every == 0 or step == settings.steps or time.monotonic() - shown >= PROGRESS_EVERY_S:
            progress(_progress_line(step, settings.steps, losses, start, deadline))
            shown = time.monotonic()
    head.eval()
    with torch.no_grad():
        scored = [_loss_and_hits(head, settings.kind, ex, draft_index) for ex in held]
        fitted = [_loss_and_hits(head, settings.kind, ex, draft_index) for ex in train_set[:FITTED]]  # how well it fits
    tail = losses[-max(1, min(10, len(losses))):]
    record = {"kind": settings.kind, "target_layers": list(layers), "steps": step, "steps_asked": settings.steps,
              "stopped_by_time": step < settings.steps, "lr": settings.lr, "seed": settings.seed,
              "train_sequences": len(train_set), "heldout_sequences": len(held),
              "train_tokens": sum(int(ex.ids.shape[0]) for ex in train_set),
              "final_loss": sum(tail) / len(tail) if tail else None,
              "batch_tokens": settings.batch_tokens, "warm_start": settings.warm_start, "unroll": settings.unroll,
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
