"""Resolve a model name and load it: local directory or GGUF file, packaged alias, or Hugging Face hub id.

The names below are read on first use (PEP 562): importing a light sibling (``models.zoo``, ``models.fetch``)
must not import torch and transformers, which only loading a model needs."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relaxbench.models.load import LoadedModel, check_shared_vocab, load_model, load_tokenizer, model_shape
    from relaxbench.models.preview import ModelPreview, Vocabulary, check_vocabularies, preview_model, vocabulary
    from relaxbench.models.resolve import resolve_model
    from relaxbench.models.shape import ModelShape
    from relaxbench.models.zoo import MODELS, cache_root

_HOMES = {
    "LoadedModel": "load", "check_shared_vocab": "load", "load_model": "load", "load_tokenizer": "load",
    "model_shape": "load", "ModelPreview": "preview", "preview_model": "preview", "Vocabulary": "preview",
    "check_vocabularies": "preview", "vocabulary": "preview", "resolve_model": "resolve",
    "ModelShape": "shape", "MODELS": "zoo", "cache_root": "zoo",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"relaxbench.models.{home}"), name)
