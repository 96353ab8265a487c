"""A model's shape: the few numbers an analytic cost model needs (parameters, embedding size, tied head, layers,
attention heads, KV heads, head size). Read from a loaded model or from a config alone (on the meta device: no
weight is read), and recorded with every run, so a stored run can be priced on another device later without its
checkpoint at hand."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ModelShape:
    parameters: int  # every parameter, the input embedding included
    embedding_parameters: int  # the input embedding matrix
    tied_embeddings: bool  # the LM head reuses the input embedding
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int

    @property
    def parameters_read_per_forward(self) -> int:
        """Weights a forward reads: all but the input embedding, of which a forward reads a few rows only — unless
        the LM head is the same matrix, which the head reads whole."""
        return self.parameters if self.tied_embeddings else self.parameters - self.embedding_parameters

    def kv_values_per_token(self) -> int:
        """Cached values (keys and values) per token of context, over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim

    def record(self) -> dict[str, Any]:
        return asdict(self)


def shape_of(model: torch.nn.Module) -> ModelShape:
    """The shape of a (possibly meta-device) transformers causal LM."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    hidden = int(text.hidden_size)
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding or bool(getattr(text, "tie_word_embeddings", False))
    return ModelShape(
        parameters=sum(p.numel() for p in model.parameters()), embedding_parameters=int(embedding.numel()),
        tied_embeddings=bool(tied), layers=int(text.num_hidden_layers), hidden_size=hidden, attention_heads=heads,
        kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=int(head_dim))


def shape_from_config(ref: str, offline: bool) -> ModelShape:
    """The shape of the checkpoint at ``ref`` from its config alone (built on the meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ref, local_files_only=offline)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return shape_of(model)
