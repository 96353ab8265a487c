"""A GGUF file's layout from its header alone: every metadata entry and tensor description readable, the file long
enough for every tensor it describes, and the context it states. A file cut short (an interrupted download or copy)
is refused in one line when the model name is resolved, before the tokenizer, the config or any weight is read.
The conversion reads its tensors through the same walk (``read_layout``): it skips the metadata values instead of
building a record for each of a vocabulary's hundreds of thousands of entries, as ``gguf.GGUFReader`` does (12 s
for Qwen2.5-1.5B's file on the reference CPU, where this walk takes well under a second)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from relaxbench.errors import ModelError

_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
_STRING, _ARRAY = 8, 9
_ALIGNMENT_KEY = "general.alignment"
_ARCHITECTURE_KEY = "general.architecture"
_CONTEXT_SUFFIX = b".context_length"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's description: GGUF's dimensions (fastest-varying first), its GGML type and its byte offset from
    the start of the data section."""

    name: str
    dims: tuple[int, ...]
    kind: int
    offset: int


@dataclass(frozen=True)
class GgufLayout:
    architecture: str | None
    data_start: int  # where the data section begins (aligned)
    tensors: tuple[TensorInfo, ...]
    context_length: int | None = None  # ``<architecture>.context_length``: transformers' max_position_embeddings


class _Cut(Exception):
    """The header ends (or names more than the file holds) before it is complete."""


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise _Cut()
    return data


def _u32(f: BinaryIO) -> int:
    return struct.unpack("<I", _read(f, 4))[0]


def _u64(f: BinaryIO) -> int:
    return struct.unpack("<Q", _read(f, 8))[0]


def _string(f: BinaryIO, size: int) -> bytes:
    length = _u64(f)
    if length > size:
        raise _Cut()
    return _read(f, length)


def _skip_value(f: BinaryIO, kind: int, size: int) -> int | None:
    """Skip one value; return it when it is an unsigned integer (the alignment is one)."""
    if kind in _SCALARS:
        raw = _read(f, _SCALARS[kind])
        return int.from_bytes(raw, "little") if kind in (4, 10) else None
    if kind == _STRING:
        _string(f, size)
        return None
    if kind == _ARRAY:
        item, count = _u32(f), _u64(f)
        if item in _SCALARS:
            if count * _SCALARS[item] > size:
                raise _Cut()
            f.seek(count * _SCALARS[item], 1)
        else:
            if count > size:
                raise _Cut()
            for _ in range(count):
                _skip_value(f, item, size)
        return None
    raise ValueError(f"unknown metadata value type {kind}")


def _tensor_bytes(kind: int, dims: list[int]) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    elements = 1
    for d in dims:
        elements *= d
    return elements // block * type_size


def read_layout(path: Path, name: str) -> GgufLayout:
    """The architecture, the data section's start and every tensor's description; refused in one line unless the
    header reads whole and the file holds every tensor it describes."""
    size = path.stat().st_size
    architecture = None
    tensors = []
    lengths: dict[str, int] = {}  # every ``*.context_length`` entry, by its key
    try:
        with open(path, "rb", buffering=1 << 20) as f:
            _read(f, 4)  # the magic, checked by the caller
            version = _u32(f)
            if version not in (2, 3):
                raise ModelError(f"{name}: GGUF version {version} (relaxbench reads versions 2 and 3)")
            n_tensors, n_entries = _u64(f), _u64(f)
            alignment = 32
            for _ in range(n_entries):
                key = _string(f, size)
                kind = _u32(f)
                if key == _ARCHITECTURE_KEY.encode() and kind == _STRING:
                    architecture = _string(f, size).decode("utf-8")
                    continue
                value = _skip_value(f, kind, size)
                if key == _ALIGNMENT_KEY.encode() and value:
                    alignment = value
                elif key.endswith(_CONTEXT_SUFFIX) and value:
                    lengths[key.decode("utf-8")] = value
            end = 0
            for _ in range(n_tensors):
                tensor = _string(f, size).decode("utf-8")
                n_dims = _u32(f)
                if n_dims > 8:
                    raise ValueError(f"a tensor with {n_dims} dimensions")
                dims = tuple(_u64(f) for _ in range(n_dims))
                kind, offset = _u32(f), _u64(f)
                tensors.append(TensorInfo(tensor, dims, kind, offset))
                end = max(end, offset + _tensor_bytes(kind, list(dims)))
            data_start = -(-f.tell() // alignment) * alignment
    except _Cut:
        raise ModelError(f"{name}: a GGUF file cut short ({size:,} bytes end inside its header); fetch or copy it "
                         "again") from None
    except (ValueError, KeyError, OSError, struct.error, UnicodeDecodeError) as exc:
        raise ModelError(f"{name}: a damaged GGUF file ({exc}); fetch or copy it again") from None
    if data_start + end > size:
        raise ModelError(f"{name}: a GGUF file cut short: its tensors need {data_start + end:,} bytes, the file has "
                         f"{size:,}; fetch or copy it again")
    return GgufLayout(architecture, data_start, tuple(tensors), lengths.get(f"{architecture}.context_length"))


def check_gguf(path: Path, name: str) -> None:
    """Refuse ``path`` in one line unless its header reads whole and the file holds every tensor it describes."""
    read_layout(path, name)
