"""Reading draft-head checkpoints (EAGLE-3 and MTP) and deciding, from ``config.json`` alone, whether a head fits
its target: every refusal is one ``ConfigError`` line raised before any head weight is read.

Layouts read (each mapped onto one set of our own key names, ``HeadSpec.weights``):

* original EAGLE-3 (SafeAILab/EAGLE ``eagle/model/cnets.py`` at 148042c5; ``LlamaForCausalLMEagle3`` config): keys
  ``fc``, ``midlayer.*``, ``norm``, ``lm_head``, ``d2t``, ``t2d`` (``embed_tokens`` optional);
* speculators' EAGLE-3 (vllm-project/speculators ``src/speculators/models/eagle3.py``, 0.9-era): ``speculators_config``
  in config.json, ``transformer_layer_config``, keys ``layers.0.*`` for the midlayer;
* speculators' MTP (``src/speculators/models/mtp/{config,model_definitions,core}.py``): keys ``mtp_layers.0.*`` with
  ``token_layernorm``/``hidden_layernorm``/``input_proj``/``final_layernorm`` — the Qwen3-Next arithmetic;
* an MTP module inside a target checkpoint: Qwen3-Next/Qwen3.5 ``mtp.*`` (``mtp_num_hidden_layers``) or DeepSeek-V3
  ``model.layers.{num_hidden_layers}.*`` (``num_nextn_predict_layers``). transformers drops these keys when it loads
  the target, so they are read here from the safetensors files.

A hub id is fetched with ``huggingface_hub.snapshot_download`` (config and weights only).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from relaxbench.errors import ConfigError, ModelError
from relaxbench.paths import TRAINED, trained_head

EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
CONFIG_PATTERNS = ["config.json", "*.safetensors.index.json"]  # fetched first: the fit is decided from these
WEIGHT_PATTERNS = ["*.safetensors", "pytorch_model*.bin"]


@dataclass
class HeadSpec:
    """What a head checkpoint is, decided from its config: ``kind`` 'eagle3' or 'mtp', ``layout`` (eagle3:
    'eagle' or 'speculators'; mtp: 'deepseek', 'qwen3_next' or 'speculators'), the config of its decoder layer, and
    how its stored keys map onto ours (``prefix`` kept, renamed by ``rename``)."""

    kind: str
    layout: str
    path: Path
    layer_config: dict[str, Any]
    draft_vocab: int | None = None
    aux_layers: tuple[int, ...] = ()
    norm_before_residual: bool = False
    prefix: str = ""
    rename: dict[str, str] = field(default_factory=dict)
    hub_id: str | None = None  # fetched from the hub: its weight files are fetched by ``read_weights``


def head_dir(head: str, kind: str | None = None, target: str | None = None) -> tuple[Path, str | None]:
    """A local folder, or a hub id's snapshot holding only its config (and weight index) so far: (folder, hub id or
    None). The weights are fetched once the config fits (``read_weights``). ``trained`` is the head of ``kind``
    cached for ``target`` (its ``name_or_path``) by ``relaxbench drafter train``."""
    if head == TRAINED and kind is not None and target is not None:
        return trained_head(target, kind), None
    path = Path(head).expanduser()
    if path.is_dir():
        return path, None
    if path.exists() or head.startswith(("/", "./", "../", "~")) or head.count("/") != 1:
        raise ModelError(f"draft head {head!r}: no such folder (give a local checkpoint folder or a hub id)")
    return _fetch(head, CONFIG_PATTERNS), head


def _fetch(hub_id: str, patterns: list[str]) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(hub_id, allow_patterns=patterns))
    except Exception as exc:  # noqa: BLE001  (offline, unknown id, gated: one line)
        raise ModelError(f"draft head {hub_id!r}: cannot fetch from the hub: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def read_config(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"draft head {path}: cannot read config.json: {type(exc).__name__}: {exc}") from None


def _layer_ids(config: dict[str, Any], n_layers: int) -> tuple[int, ...]:
    """EAGLE-3's three target layers: the config's ``eagle_aux_hidden_state_layer_ids`` (top level, as speculators
    writes it, or under ``eagle_config``, as vLLM reads it), else (2, N//2, N-3) as EAGLE-3 and vLLM choose."""
    ids = config.get("eagle_aux_hidden_state_layer_ids") or (config.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids) if ids else (2, n_layers // 2, n_layers - 3)


def describe_head(path: Path, target_config: Any, target_vocab: int, want: str) -> HeadSpec:
    """Classify the checkpoint at ``path`` and check it fits the target (hidden size, vocabulary, layer ids,
    architecture); ``want`` is the drafter's kind. One ``ConfigError`` line on any mismatch."""
    config = read_config(path)
    spec = _classify(path, config)
    where = f"drafter {want!r}: head {path}"
    if spec is None or spec.kind != want:
        found = "no EAGLE-3 or MTP head" if spec is None else f"an {spec.kind} head ({spec.layout} layout)"
        raise ConfigError(f"{where} holds {found}; drafter {want!r} needs "
                          f"{'an EAGLE-3' if want == 'eagle3' else 'an MTP'} head")
    layer = spec.layer_config
    hidden, n_target = int(target_config.hidden_size), int(target_config.num_hidden_layers)
    head_target_hidden = int(config.get("target_hidden_size") or layer.get("hidden_size", -1))
    if want == "mtp" and int(layer.get("hidden_size", -1)) != hidden:
        raise ConfigError(f"{where}: hidden size {layer.get('hidden_size')} does not fit the target's {hidden}")
    if want == "eagle3" and head_target_hidden != hidden:
        raise ConfigError(f"{where}: reads target hidden states of size {head_target_hidden}, the target's are "
                          f"{hidden}")
    vocab = int(layer.get("vocab_size", -1))
    if vocab not in (target_vocab, int(target_config.vocab_size)):
        raise ConfigError(f"{where}: vocabulary of {vocab} tokens does not fit the target's {target_vocab}")
    if want == "eagle3":
        if layer.get("model_type", "llama") != "llama":
            raise ConfigError(f"{where}: its layer is {layer.get('model_type')!r}; relaxbench reads EAGLE-3 heads "
                              "with a Llama layer")
        if not 0 < int(spec.draft_vocab or 0) <= vocab:
            raise ConfigError(f"{where}: draft vocabulary {spec.draft_vocab} is not within the target's {vocab}")
        spec.aux_layers = _layer_ids(config, n_target)
        if len(spec.aux_layers) != 3 or not all(0 <= i < n_target for i in spec.aux_layers):
            # (vLLM's id N would be the pre-norm final state, which transformers' hidden_states does not hold)
            raise ConfigError(f"{where}: target layer ids {list(spec.aux_layers)} are not three layers of the "
                              f"target's 0..{n_target - 1}")
    else:
        target_type = getattr(target_config, "model_type", None)
        if layer.get("model_type", target_type) != target_type:
            raise ConfigError(f"{where}: its layer is {layer.get('model_type')!r}, the target is {target_type!r}")
        spec.aux_layers = (n_target,)
    return spec


# speculators' EAGLE-3 options beyond norm_before_residual (later releases; vLLM 0.32 reads them): refused when set
UNIMPLEMENTED_EAGLE3_FIELDS = ("norm_before_fc", "fc_norm", "norm_output")


def _classify(path: Path, config: dict[str, Any]) -> HeadSpec | None:
    """The layout of ``config`` (see the module docstring), or None when it names no head. A multimodal checkpoint
    (Qwen3.5) keeps its language model's fields, MTP ones included, under ``text_config``."""
    if isinstance(config.get("text_config"), dict) and "speculators_config" not in config:
        config = {**config, **config["text_config"]}
    model_type = config.get("speculators_model_type")
    if "speculators_config" in config and model_type == "eagle3":
        unsupported = [name for name in UNIMPLEMENTED_EAGLE3_FIELDS if config.get(name)]
        if unsupported:
            raise ConfigError(f"{path}: an EAGLE-3 head with {', '.join(unsupported)} set, which relaxbench's EAGLE-3 "
                              "head does not implement (its drafts would not be the checkpoint's)")
        layer = dict(config.get("transformer_layer_config") or {})
        return HeadSpec("eagle3", "speculators", path, layer, int(config.get("draft_vocab_size", 0)),
                        norm_before_residual=bool(config.get("norm_before_residual", False)),
                        rename={"layers.0.": "midlayer."})
    if "speculators_config" in config and model_type == "mtp":
        layer = dict(config.get("transformer_layer_config") or {})
        _one_layer(path, int(config.get("num_nextn_predict_layers", 1)))
        rename = {"mtp_layers.0.token_layernorm.": "pre_fc_norm_embedding.",
                  "mtp_layers.0.hidden_layernorm.": "pre_fc_norm_hidden.",
                  "mtp_layers.0.input_proj.": "fc.", "mtp_layers.0.final_layernorm.": "norm.",
                  "mtp_layers.0.": "layer."}
        return HeadSpec("mtp", "speculators", path, layer, rename=rename)
    if set(config.get("architectures") or ()) & set(EAGLE3_ARCHITECTURES) or "draft_vocab_size" in config:
        return HeadSpec("eagle3", "eagle", path, config, int(config.get("draft_vocab_size") or config["vocab_size"]))
    qwen_next = str(config.get("model_type", "")).startswith(("qwen3_next", "qwen3_5"))
    if config.get("mtp_num_hidden_layers") or (qwen_next and config.get("num_nextn_predict_layers")):
        _one_layer(path, int(config.get("mtp_num_hidden_layers") or config["num_nextn_predict_layers"]))
        return HeadSpec("mtp", "qwen3_next", path, config, prefix="mtp.", rename={"mtp.layers.0.": "layer.",
                                                                               "mtp.": ""})
    if config.get("num_nextn_predict_layers"):
        _one_layer(path, int(config["num_nextn_predict_layers"]))
        n = int(config["num_hidden_layers"])
        block = f"model.layers.{n}."
        rename = {f"{block}{name}.": f"{name}." for name in ("enorm", "hnorm", "eh_proj", "embed_tokens")}
        rename |= {f"{block}shared_head.norm.": "norm.", f"{block}shared_head.head.": "lm_head.", block: "layer."}
        return HeadSpec("mtp", "deepseek", path, config, prefix=block, rename=rename)
    return None


def _one_layer(path: Path, n: int) -> None:
    if n != 1:
        raise ConfigError(f"head {path}: {n} MTP layers; relaxbench drafts with a checkpoint's single MTP layer")


def _weight_files(path: Path, prefix: str = "", hub_id: str | None = None) -> list[Path]:
    """The checkpoint's weight files; of a sharded safetensors checkpoint with an index, only the shards holding
    keys under ``prefix`` (an MTP module inside a large target reads one or two shards). A hub checkpoint fetches
    just those files."""
    index = path / "model.safetensors.index.json"
    if hub_id is not None:
        shards = _shards(index, prefix) if prefix and index.is_file() else []
        path = _fetch(hub_id, shards or WEIGHT_PATTERNS)
    if prefix and index.is_file():
        shards = _shards(index, prefix)
        if shards:
            return [path / shard for shard in shards]
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise ModelError(f"draft head {path}: no *.safetensors or pytorch_model*.bin file")
    return files


def _shards(index: Path, prefix: str) -> list[str]:
    """The shard files of ``index`` that hold a key under ``prefix``."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"draft head {index.parent}: cannot read {index.name}: {type(exc).__name__}: {exc}") from None
    return sorted({file for key, file in weight_map.items() if key.startswith(prefix)})


def read_weights(spec: HeadSpec) -> dict[str, torch.Tensor]:
    """The head's tensors under our key names; only keys under ``spec.prefix`` are read (an MTP module inside a
    large target checkpoint reads just its own tensors). Keys no rename maps keep their stored name."""
    return _stored(spec, sizes=False)


def _stored(spec: HeadSpec, sizes: bool) -> dict[str, Any]:
    """The head's tensors under ``spec.prefix``, renamed to our keys; with ``sizes``, each tensor's element count
    instead, from the safetensors headers (no tensor is read)."""
    found: dict[str, Any] = {}
    for file in _weight_files(spec.path, spec.prefix, spec.hub_id):
        if file.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():
                    if key.startswith(spec.prefix):
                        found[key] = math.prod(handle.get_slice(key).get_shape()) if sizes else handle.get_tensor(key)
        else:
            loaded = torch.load(file, map_location="cpu", weights_only=True, mmap=sizes)
            found.update({k: v.numel() if sizes else v for k, v in loaded.items() if k.startswith(spec.prefix)})
    if not found:
        raise ModelError(f"draft head {spec.path}: no weights under {spec.prefix or 'the checkpoint'!r}")
    return {_rename(key, spec.rename): value for key, value in found.items()}


def classify_head(path: Path) -> HeadSpec:
    """The head checkpoint at ``path`` as ``describe_head`` classifies it, without checking it against a target
    (a stored run's head was checked when it ran)."""
    spec = _classify(path, read_config(path))
    if spec is None:
        raise ModelError(f"draft head {path}: config.json names no EAGLE-3 or MTP head")
    return spec


INDEX_TABLES = ("d2t", "t2d")  # EAGLE-3's vocabulary maps: looked up, not multiplied


def head_shape(spec: HeadSpec) -> dict[str, Any]:
    """The head as a cost model sees it, as the fields of a ``relaxbench.models.shape.ModelShape`` (a layer this
    package does not import): one decoder layer (its attention's heads and head size from the layer's
    config) whose forward reads every weight of the head's files but an embedding, plus the target's output head
    when the head uses the target's (an MTP layer inside its target, speculators' MTP). Sizes come from the
    safetensors headers (no tensor is read). Like a target's shape, a mixture-of-experts layer counts every
    expert."""
    sizes: dict[str, int] = _stored(spec, sizes=True)
    layer = spec.layer_config
    hidden = int(layer["hidden_size"])
    heads = int(layer.get("num_attention_heads") or 1)
    embedding = sum(n for key, n in sizes.items() if key.startswith("embed_tokens."))
    parameters = sum(n for key, n in sizes.items() if key not in INDEX_TABLES)
    if not any(key.startswith("lm_head.") for key in sizes):
        parameters += int(layer["vocab_size"]) * hidden  # the target's output head, read at every draft step
    return {"parameters": parameters, "embedding_parameters": embedding, "tied_embeddings": False, "layers": 1,
            "hidden_size": hidden, "attention_heads": heads, "kv_heads": int(layer.get("num_key_value_heads") or heads),
            "head_dim": int(layer.get("head_dim") or hidden // heads)}


def _rename(key: str, rename: dict[str, str]) -> str:
    for old, new in rename.items():  # the first (most specific) prefix that matches
        if key.startswith(old):
            return new + key[len(old):]
    return key
