"""Resolve a model name and load it: local directory or GGUF file, packaged alias, or Hugging Face hub id."""

from relaxbench.models.load import LoadedModel, check_shared_vocab, load_model, load_tokenizer, model_shape
from relaxbench.models.resolve import resolve_model
from relaxbench.models.shape import ModelShape
from relaxbench.models.zoo import MODELS, cache_root

__all__ = ["MODELS", "LoadedModel", "ModelShape", "cache_root", "check_shared_vocab", "load_model",
           "load_tokenizer", "model_shape", "resolve_model"]
