"""Random-weight models of real shapes, built from the shipped configs (``profiles/shapes/NAME.json``, each the
published ``config.json`` of the model it names) directly on the device: no checkpoint is read or written.

What they are for: timing. A dense forward costs the same whatever its weights hold, so a random model of a real
shape measures the forward costs of the real one (a cost profile, a speed-up at a planned acceptance pattern) on a
machine that cannot fetch the weights. Their outputs mean nothing. The tokenizer is a two-word stand-in with no
end-of-sequence token, so generation always runs to its length (ids outside it decode to nothing).

``shrink=True`` keeps the architecture (model type, tied head, grouped KV heads) but cuts every size to a few
dozen, for a CPU dry run of the same code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from relaxbench.errors import ConfigError
from relaxbench.models.load import LoadedModel
from relaxbench.models.resolve import ModelLocation
from relaxbench.registry import did_you_mean
from relaxbench.validation import builtin_dir

SHAPES_DIR = "shapes"  # under the shipped profiles/ folder
SHRUNK = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 16384,
          "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def shapes_dir() -> Path:
    return builtin_dir("profiles") / SHAPES_DIR


def shape_names() -> list[str]:
    """The shipped configs, by name (the file stem)."""
    return sorted(p.stem for p in shapes_dir().glob("*.json"))


def shipped_config(name: str, shrink: bool = False) -> dict[str, Any]:
    """The shipped config ``name`` as a plain mapping (keys starting with ``_``, such as its source, dropped)."""
    path = shapes_dir() / f"{name}.json"
    if not path.is_file():
        names = shape_names()
        raise ConfigError(f"no shipped model config {name!r}{did_you_mean(name, names)} (configs: {', '.join(names)})")
    raw = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    if shrink:
        raw.update(SHRUNK)
        raw["num_key_value_heads"] = min(raw["num_key_value_heads"], SHRUNK["num_attention_heads"])
        for key in ("max_window_layers",):
            if key in raw:
                raw[key] = SHRUNK["num_hidden_layers"]
    return raw


def stand_in_tokenizer() -> Any:
    """A two-word tokenizer with no special tokens: generation never stops early."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={"a": 0, "b": 1}, unk_token="a"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core)


def random_model(name: str, dtype: torch.dtype, device: str | torch.device, shrink: bool = False,
                 seed: int = 0) -> LoadedModel:
    """The shipped config ``name`` with seeded random weights, allocated and initialised on ``device`` (a GPU
    initialises tens of GB in seconds; nothing passes through host memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = shipped_config(name, shrink)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None
    model.eval()
    label = f"{name}-random" + ("-shrunk" if shrink else "")
    return LoadedModel(label, ModelLocation(label, "random", str(shapes_dir() / f"{name}.json")), model,
                       stand_in_tokenizer(), dtype, torch.device(device))
