"""Tiny randomly initialised causal LMs with a byte-level tokenizer, built offline in a second.

They exist so that the engine, the policies and the harness can be tested end to end without a download.
Weights are drawn with a large init scale so that next-token distributions are peaked (a near-flat random model
puts many logits within float rounding of each other, which makes greedy decoding ill-defined).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from relaxbench.models.zoo import MODELS, TinyRandomModel

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCAB_SIZE = 264  # 256 bytes + 3 specials, padded


def build_tokenizer():
    """A byte-level BPE tokenizer with no merges: every byte is a token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _random_model(spec: TinyRandomModel, vocab_size: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.hidden_size * 2,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.3,
        tie_word_embeddings=False,
        bos_token_id=SPECIAL_TOKENS.index("<|endoftext|>") + 256,
        eos_token_id=SPECIAL_TOKENS.index("<|im_end|>") + 256,
        pad_token_id=SPECIAL_TOKENS.index("<|endoftext|>") + 256,
    )
    torch.manual_seed(spec.seed)
    return LlamaForCausalLM(config).float()


def build_tiny_model(spec: TinyRandomModel, out: Path) -> Path:
    """Create the checkpoint for ``spec`` in ``out`` (a normal HF folder)."""
    tokenizer = build_tokenizer()
    model = _random_model(spec, VOCAB_SIZE)
    if spec.perturb_of is not None:
        base_spec = MODELS.get(spec.perturb_of)
        assert isinstance(base_spec, TinyRandomModel)
        base = _random_model(base_spec, VOCAB_SIZE)
        generator = torch.Generator().manual_seed(spec.seed)
        with torch.no_grad():
            for p, q in zip(model.parameters(), base.parameters(), strict=True):
                noise = torch.randn(q.shape, generator=generator) * q.std().clamp_min(1e-3) * spec.noise
                p.copy_(q + noise if q.dim() > 1 else q)
    model.generation_config.eos_token_id = model.config.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "relaxbench-source.json").write_text(json.dumps({"spec": asdict(spec)}))
    return out
