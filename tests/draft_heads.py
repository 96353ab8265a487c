"""Tiny EAGLE-3 and MTP heads for the tiny test targets, saved in every layout relaxbench reads, and an independent
line-by-line transcription of the references' arithmetic in plain torch (no transformers module), for the
drafters' logits to be held to.

References transcribed:
* EAGLE-3: SafeAILab/EAGLE ``eagle/model/cnets.py`` at 148042c5fed07822194a49b027c897c9c5494b0e (``Model.forward``,
  ``LlamaDecoderLayeremb``, ``LlamaAttention`` with 2H q/k/v inputs, ``topK_genrate``'s ``lm_head(norm(h))`` and
  ``token + d2t[token]``).
* MTP, DeepSeek-V3 layout: vLLM ``vllm/model_executor/models/deepseek_mtp.py`` at 03356f8c
  (``DeepSeekMultiTokenPredictorLayer.forward``, ``compute_logits``).
* MTP, Qwen3-Next layout: vLLM ``vllm/model_executor/models/qwen3_next_mtp.py`` at 055e47c2
  (``Qwen3NextMultiTokenPredictor.forward``), the layer being the target's (here Llama's) decoder layer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

EPS = 1e-6
EAGLE3_ROPE_THETA = 500000.0  # the head's own rope base, unlike the target's 10,000 (as Llama-3 heads ship)


def rand(gen: torch.Generator, *shape: int, scale: float = 0.3) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale


def llama_layer(gen: torch.Generator, hidden: int, inter: int, heads: int, kv: int, in_mult: int = 1) -> dict:
    hd = hidden // heads
    return {"self_attn.q_proj.weight": rand(gen, heads * hd, in_mult * hidden),
            "self_attn.k_proj.weight": rand(gen, kv * hd, in_mult * hidden),
            "self_attn.v_proj.weight": rand(gen, kv * hd, in_mult * hidden),
            "self_attn.o_proj.weight": rand(gen, hidden, heads * hd),
            "mlp.gate_proj.weight": rand(gen, inter, hidden), "mlp.up_proj.weight": rand(gen, inter, hidden),
            "mlp.down_proj.weight": rand(gen, hidden, inter),
            "input_layernorm.weight": 1 + rand(gen, hidden, scale=0.1),
            "post_attention_layernorm.weight": 1 + rand(gen, hidden, scale=0.1)}


def eagle3_weights(seed: int, target_config, draft_vocab: int) -> dict[str, torch.Tensor]:
    """The original checkpoint's keys (cnets.py): fc, midlayer.*, norm, lm_head, d2t, t2d."""
    gen = torch.Generator().manual_seed(seed)
    h, vocab = target_config.hidden_size, target_config.vocab_size
    weights = {"fc.weight": rand(gen, h, 3 * h, scale=0.15), "norm.weight": 1 + rand(gen, h, scale=0.1),
               "lm_head.weight": rand(gen, draft_vocab, h, scale=1.0)}
    layer = llama_layer(gen, h, 2 * h, target_config.num_attention_heads, target_config.num_key_value_heads, 2)
    layer["hidden_norm.weight"] = 1 + rand(gen, h, scale=0.1)
    weights |= {f"midlayer.{k}": v for k, v in layer.items()}
    kept = torch.sort(torch.randperm(vocab, generator=gen)[:draft_vocab]).values  # draft vocab -> target ids
    weights["d2t"] = kept - torch.arange(draft_vocab)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[kept] = True
    weights["t2d"] = t2d
    return weights


def eagle3_config(target_config, draft_vocab: int, layer_ids=None) -> dict:
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
              "hidden_size": target_config.hidden_size, "intermediate_size": 2 * target_config.hidden_size,
              "num_attention_heads": target_config.num_attention_heads,
              "num_key_value_heads": target_config.num_key_value_heads, "num_hidden_layers": 1,
              "rms_norm_eps": EPS, "rope_theta": EAGLE3_ROPE_THETA, "vocab_size": target_config.vocab_size,
              "draft_vocab_size": draft_vocab, "max_position_embeddings": 4096}
    if layer_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}
    return config


def save(path: Path, config: dict, weights: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(path / "model.safetensors"))
    return path


def save_eagle3_original(path: Path, target_config, seed: int = 0, draft_vocab: int = 200, layer_ids=None) -> Path:
    return save(path, eagle3_config(target_config, draft_vocab, layer_ids), eagle3_weights(seed, target_config,
                                                                                           draft_vocab))


def save_eagle3_speculators(path: Path, target_config, seed: int = 0, draft_vocab: int = 200) -> Path:
    """The same weights under speculators' names (``layers.0.*``) and config (``speculators_config``)."""
    layer = {k: v for k, v in eagle3_config(target_config, draft_vocab).items()
             if k not in ("architectures", "draft_vocab_size")}
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
              "transformer_layer_config": layer, "draft_vocab_size": draft_vocab, "norm_before_residual": False,
              "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 5}],
                                     "verifier": {"name_or_path": "tiny-random-target",
                                                  "architectures": ["LlamaForCausalLM"]}}}
    weights = {k.replace("midlayer.", "layers.0."): v for k, v in eagle3_weights(seed, target_config,
                                                                                  draft_vocab).items()}
    return save(path, config, weights)


def mtp_weights(seed: int, target_config) -> dict[str, torch.Tensor]:
    """Our names: two norms, the 2H -> H projection, one decoder layer, the output norm."""
    gen = torch.Generator().manual_seed(seed)
    h = target_config.hidden_size
    weights = {"norm_e": 1 + rand(gen, h, scale=0.1), "norm_h": 1 + rand(gen, h, scale=0.1),
               "proj": rand(gen, h, 2 * h, scale=0.15), "norm": 1 + rand(gen, h, scale=0.1)}
    layer = llama_layer(gen, h, target_config.intermediate_size, target_config.num_attention_heads,
                        target_config.num_key_value_heads)
    return weights | {f"layer.{k}": v for k, v in layer.items()}


def save_mtp_in_target(path: Path, target_dir: Path, layout: str, seed: int = 0) -> Path:
    """A copy of the target's checkpoint with an MTP module added in ``layout`` ('qwen3_next' or 'deepseek')."""
    from safetensors.torch import load_file

    config = json.loads((target_dir / "config.json").read_text())
    base = load_file(str(target_dir / "model.safetensors"))
    ours = mtp_weights(seed, _Cfg(config))
    n = config["num_hidden_layers"]
    if layout == "qwen3_next":
        config["mtp_num_hidden_layers"] = 1
        names = {"norm_e": "mtp.pre_fc_norm_embedding.weight", "norm_h": "mtp.pre_fc_norm_hidden.weight",
                 "proj": "mtp.fc.weight", "norm": "mtp.norm.weight"}
        layer_prefix = "mtp.layers.0."
    else:
        config["num_nextn_predict_layers"] = 1
        names = {"norm_e": f"model.layers.{n}.enorm.weight", "norm_h": f"model.layers.{n}.hnorm.weight",
                 "proj": f"model.layers.{n}.eh_proj.weight", "norm": f"model.layers.{n}.shared_head.norm.weight"}
        layer_prefix = f"model.layers.{n}."
    extra = {names[k] if k in names else layer_prefix + k[len("layer."):]: v for k, v in ours.items()}
    for file in target_dir.iterdir():
        if file.name not in ("config.json", "model.safetensors"):
            (path / file.name).parent.mkdir(parents=True, exist_ok=True)
            (path / file.name).write_bytes(file.read_bytes())
    return save(path, config, base | extra)


def save_mtp_speculators(path: Path, target_config_dict: dict, seed: int = 0) -> Path:
    """speculators' MTP file: ``mtp_layers.0.*`` (token_layernorm, hidden_layernorm, input_proj, final_layernorm and
    the decoder layer); embed_tokens and lm_head come from the verifier."""
    ours = mtp_weights(seed, _Cfg(target_config_dict))
    names = {"norm_e": "mtp_layers.0.token_layernorm.weight", "norm_h": "mtp_layers.0.hidden_layernorm.weight",
             "proj": "mtp_layers.0.input_proj.weight", "norm": "mtp_layers.0.final_layernorm.weight"}
    weights = {names.get(k, "mtp_layers.0." + k[len("layer."):]): v for k, v in ours.items()}
    config = {"architectures": ["MTPDraftModel"], "speculators_model_type": "mtp", "num_nextn_predict_layers": 1,
              "transformer_layer_config": {k: v for k, v in target_config_dict.items() if k != "architectures"},
              "speculators_config": {"algorithm": "mtp", "default_proposal_method": "greedy",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                     "verifier": {"name_or_path": "tiny-random-target",
                                                  "architectures": ["LlamaForCausalLM"]}}}
    return save(path, config, weights)


class _Cfg:
    def __init__(self, d: dict) -> None:
        self.__dict__.update(d)


# ---- the references' arithmetic, transcribed in plain torch ------------------------------------------------------

def rms(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """[heads, n, d] rotated as Llama's rotate_half convention."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = positions.double()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + half * sin


def attention(w: dict, prefix: str, x: torch.Tensor, positions: torch.Tensor, heads: int, kv: int, theta: float,
              past: tuple | None) -> tuple[torch.Tensor, tuple]:
    """Causal attention over the cached (k, v) of earlier positions and the new ones; returns output and cache."""
    n = x.shape[0]
    hd = w[prefix + "o_proj.weight"].shape[1] // heads
    q = (x @ w[prefix + "q_proj.weight"].T).view(n, heads, hd).transpose(0, 1)
    k = (x @ w[prefix + "k_proj.weight"].T).view(n, kv, hd).transpose(0, 1)
    v = (x @ w[prefix + "v_proj.weight"].T).view(n, kv, hd).transpose(0, 1)
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    if past is not None:
        k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)
    kr, vr = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
    scores = q @ kr.transpose(1, 2) / math.sqrt(hd)
    total = kr.shape[1]
    mask = torch.ones(n, total, dtype=torch.bool).tril(total - n)
    scores = scores.masked_fill(~mask, float("-inf"))
    out = (scores.softmax(-1) @ vr).transpose(0, 1).reshape(n, heads * hd)
    return out @ w[prefix + "o_proj.weight"].T, (k, v)


def mlp(w: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    gate = x @ w[prefix + "gate_proj.weight"].T
    return (torch.nn.functional.silu(gate) * (x @ w[prefix + "up_proj.weight"].T)) @ w[prefix + "down_proj.weight"].T


def eagle3_step(w: dict, cfg: dict, embed: torch.Tensor, tokens, feats, positions, past, from_target: bool):
    """cnets.py: Model.forward (fc when the input is the fused 3H feature) + LlamaDecoderLayeremb.forward."""
    hidden = feats @ w["fc.weight"].T if from_target else feats
    emb = embed[tokens]
    residual = hidden
    hidden = rms(hidden, w["midlayer.hidden_norm.weight"])
    emb = rms(emb, w["midlayer.input_layernorm.weight"])
    x = torch.cat([emb, hidden], -1)
    a, past = attention(w, "midlayer.self_attn.", x, positions, cfg["num_attention_heads"],
                        cfg["num_key_value_heads"], cfg["rope_theta"], past)
    hidden = residual + a
    residual = hidden
    hidden = residual + mlp(w, "midlayer.mlp.", rms(hidden, w["midlayer.post_attention_layernorm.weight"]))
    return hidden, past


def eagle3_logits(w: dict, hidden: torch.Tensor, vocab: int) -> torch.Tensor:
    """topK_genrate: lm_head(norm(h)) over the draft vocabulary, token id = index + d2t[index]."""
    draft = rms(hidden, w["norm.weight"]) @ w["lm_head.weight"].T
    full = torch.full((hidden.shape[0], vocab), float("-inf"), dtype=draft.dtype)
    full[:, torch.arange(draft.shape[1]) + w["d2t"]] = draft
    return full


def mtp_step(w: dict, cfg: dict, embed: torch.Tensor, tokens, feats, positions, past, layout: str):
    """deepseek_mtp.py (position-0 embedding zeroed; returns residual + block output, pre-norm) or
    qwen3_next_mtp.py (returns the normed output)."""
    emb = embed[tokens].clone()
    if layout == "deepseek":
        emb[positions == 0] = 0
    x = torch.cat([rms(emb, w["norm_e"], cfg["rms_norm_eps"]), rms(feats, w["norm_h"], cfg["rms_norm_eps"])], -1)
    x = x @ w["proj"].T
    residual = x
    a, past = attention(w, "layer.self_attn.", rms(x, w["layer.input_layernorm.weight"], cfg["rms_norm_eps"]),
                        positions, cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rope_theta"], past)
    x = residual + a
    x = x + mlp(w, "layer.mlp.", rms(x, w["layer.post_attention_layernorm.weight"], cfg["rms_norm_eps"]))
    return (x if layout == "deepseek" else rms(x, w["norm"], cfg["rms_norm_eps"])), past


def mtp_logits(w: dict, hidden: torch.Tensor, lm_head: torch.Tensor, layout: str, eps: float) -> torch.Tensor:
    return (rms(hidden, w["norm"], eps) if layout == "deepseek" else hidden) @ lm_head.T


def reference_chain(step, logits_of, tokens: torch.Tensor, feats: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Greedy chain drafting from the pairs (tokens[t+1], feats[t]) at positions t: the logits of k drafts."""
    n = int(tokens.shape[0]) - 1
    hidden, past = step(tokens[1:], feats[:n], torch.arange(n), None, True)
    last, rows = hidden[-1:], []
    for j in range(k):
        row = logits_of(last)[0]
        rows.append(row)
        if j + 1 < k:
            last, past = step(row.argmax().view(1), last, torch.tensor([n + j]), past, False)
    return rows
