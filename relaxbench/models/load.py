"""Load a model by name: resolve it (``resolve.py``), fetch or convert it once (``convert.py``), pick its dtype
(``dtypes.py``), and load it with its tokenizer; check that a draft and a target share a vocabulary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from relaxbench.errors import ConfigError, ModelError
from relaxbench.models.convert import dtype_copy
from relaxbench.models.device import DEVICE_MAPS
from relaxbench.models.dtypes import parameter_count, parse_dtype
from relaxbench.models.preview import ModelPreview, Vocabulary, load_errors, locate
from relaxbench.models.resolve import ModelLocation
from relaxbench.models.shape import ModelShape, shape_from_config, shape_of
from relaxbench.registry import did_you_mean


@dataclass
class LoadedModel:
    """A loaded causal LM with its tokenizer and the facts the engine and the records need."""

    name: str
    location: ModelLocation
    model: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    dtype: torch.dtype
    device: torch.device

    @property
    def logit_dim(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif isinstance(source, (list, tuple)):
                ids.update(int(i) for i in source)
        return frozenset(ids)

    def describe(self) -> dict[str, Any]:
        """What a run record stores about this model."""
        return {
            "name": self.name,
            "kind": self.location.kind,
            "ref": self.location.ref,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "architecture": type(self.model).__name__,
            "vocab": vocab_fingerprint(self.tokenizer),
            "shape": self.shape.record(),  # what an analytic cost profile of another device needs
        }

    @property
    def shape(self) -> ModelShape:
        return shape_of(self.model)


@contextmanager
def transformers_progress_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' (and the hub client's) progress bars off for the block when ``enabled`` is False — its
    "Loading weights" bar is drawn on every load — and back to how they were afterwards."""
    from transformers.utils import logging as hf_logging

    turn_off = not enabled and hf_logging.is_progress_bar_enabled()
    if turn_off:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if turn_off:
            hf_logging.enable_progress_bar()


def load_model(name: str, dtype: str | torch.dtype = "auto", device: str = "cpu", quiet: bool = False,
               role: str = "target", device_map: str | None = None) -> LoadedModel:
    """Resolve, fetch if needed, and load ``name`` with its tokenizer, in eval mode: on ``device``, or, with a
    ``device_map`` ("auto", "balanced", "balanced_low_0", "sequential"), spread by accelerate over the GPUs this
    process sees (a model larger than one GPU), with the input on the device of its first layer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parse_dtype(dtype, device, role)  # a bad name fails before anything is fetched
    placement = {} if device_map is None else {"device_map": _device_map(device_map, device)}
    location, ref, offline = locate(name, quiet)
    with load_errors(name, location, ref, offline), transformers_progress_bars(enabled=not quiet):
        n_params = parameter_count(ref, offline) if dtype == "auto" and torch.device(device).type == "cpu" else None
        torch_dtype = parse_dtype(dtype, device, role, n_params)
        if location.kind in ("packaged", "gguf") and torch_dtype in (torch.bfloat16, torch.float16):
            ref = str(dtype_copy(Path(ref), torch_dtype))  # half the bytes mapped while loading
        tokenizer = AutoTokenizer.from_pretrained(ref, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch_dtype, local_files_only=offline, **placement)
    if device_map is None:
        model.to(device)
    elif torch.device(device).type == "cuda":
        _check_placed(name, model)
    model.eval()
    return LoadedModel(name, location, model, tokenizer, torch_dtype,
                       torch.device(device) if device_map is None else input_device(model))



def _device_map(strategy: str, device: str) -> str | dict[str, str]:
    """What ``from_pretrained`` gets: accelerate's strategy over the visible GPUs, or everything on the CPU (a CPU
    run has one device to place on)."""
    if strategy not in DEVICE_MAPS:
        raise ConfigError(f"unknown device map {strategy!r}{did_you_mean(strategy, list(DEVICE_MAPS))} "
                          f"(device maps: {', '.join(DEVICE_MAPS)})")
    return strategy if torch.device(device).type == "cuda" else {"": "cpu"}


def _check_placed(name: str, model: Any) -> None:
    """A model that accelerate had to offload to CPU memory or disk is refused: each forward would copy weights
    over, and the speed figures would measure that copying."""
    offloaded = sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()} & {"cpu", "disk"})
    if offloaded:
        raise ModelError(f"{name!r} does not fit on the GPUs of this process (accelerate offloaded part of it to "
                         f"{' and '.join(offloaded)}); give it more GPUs (--gpus-per-worker N on Ray) or a smaller "
                         "dtype")


def input_device(model: Any) -> torch.device:
    """Where a model's input ids go: the device of its input embeddings (its first layer). For a model spread over
    several GPUs by accelerate, its hooks bring the outputs back to this device too."""
    return model.get_input_embeddings().weight.device


def load_tokenizer(name: str, quiet: bool = False) -> Any:
    """The tokenizer of ``name`` alone, resolved and fetched like ``load_model`` (prompts that need the chat
    template can then be built before the weights load)."""
    from transformers import AutoTokenizer

    location, ref, offline = locate(name, quiet)
    with load_errors(name, location, ref, offline):
        return AutoTokenizer.from_pretrained(ref, local_files_only=offline)


def model_shape(name: str, quiet: bool = True) -> ModelShape:
    """The shape of ``name`` from its config alone (resolved and fetched like ``load_model``; no weights loaded)."""
    location, ref, offline = locate(name, quiet)
    with load_errors(name, location, ref, offline):
        return shape_from_config(ref, offline)


def vocab_fingerprint(tokenizer: Any) -> str:
    """A short description of a tokenizer vocabulary: its class, size and a hash of its token→id map."""
    vocabulary = Vocabulary.of(tokenizer)
    return f"{type(tokenizer).__name__}, {vocabulary.size} tokens, #{vocabulary.digest[:12]}"


def check_shared_vocab(target: LoadedModel | ModelPreview, draft: LoadedModel | ModelPreview) -> None:
    """Draft and target must map the same strings to the same ids (their logit widths may differ by padding);
    decided from the tokenizers alone, so a preview settles it before the weights load."""
    if target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
        raise ConfigError(
            f"draft {draft.name!r} and target {target.name!r} do not share a tokenizer vocabulary "
            f"(draft: {vocab_fingerprint(draft.tokenizer)}; target: {vocab_fingerprint(target.tokenizer)})"
        )
