"""Model loading details that the other tests take for granted."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_quiet_load_draws_no_progress_bar(capfd):
    """``load_model(..., quiet=True)`` (lm-eval's model, tests) shows no "Loading weights" bar, and leaves
    transformers' progress-bar setting as it found it."""
    from transformers.utils import logging as hf_logging

    from relaxbench.models import load_model

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()  # conftest turns the bars off for the whole session
    try:
        capfd.readouterr()
        load_model("tiny-random-target", quiet=True)
        quiet = capfd.readouterr().err
        still_enabled = hf_logging.is_progress_bar_enabled()
        load_model("tiny-random-target", quiet=False)
        loud = capfd.readouterr().err
    finally:
        if not was_enabled:
            hf_logging.disable_progress_bar()
    assert "Loading weights" in loud  # the bar exists, so its absence below means something
    assert "Loading weights" not in quiet
    assert still_enabled


def test_auto_dtype_follows_the_measured_cpu_table():
    import torch

    from relaxbench.models.dtypes import BF16_TARGET_MIN_PARAMS, default_dtype

    big, small = 1_500_000_000, 135_000_000
    assert BF16_TARGET_MIN_PARAMS > small
    # CPU with bf16 units: large targets in bf16, small targets and drafts in fp32
    assert default_dtype("cpu", "target", big, bf16_units=True) == torch.bfloat16
    assert default_dtype("cpu", "target", small, bf16_units=True) == torch.float32
    assert default_dtype("cpu", "draft", big, bf16_units=True) == torch.float32
    # CPU without them (AVX2): fp32 target, bf16 draft, whatever the size
    assert default_dtype("cpu", "target", big, bf16_units=False) == torch.float32
    assert default_dtype("cpu", "draft", small, bf16_units=False) == torch.bfloat16
    assert default_dtype("cuda", "draft", small) == torch.bfloat16


def test_parameter_count_reads_the_config_only(tiny_target):
    from relaxbench.models.convert import materialize
    from relaxbench.models.dtypes import parameter_count
    from relaxbench.models.resolve import resolve_model

    ref = materialize(resolve_model("tiny-random-target"), quiet=True)
    assert parameter_count(ref, offline=True) == sum(p.numel() for p in tiny_target.model.parameters())


def test_dtype_copy_has_exactly_the_weights_of_a_cast_load(tmp_path, tiny_target):
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from relaxbench.models.convert import dtype_copy, materialize
    from relaxbench.models.resolve import resolve_model

    source = tmp_path / "ckpt"
    shutil.copytree(materialize(resolve_model("tiny-random-target"), quiet=True), source)
    copy = dtype_copy(source, torch.bfloat16)
    assert copy.name == "ckpt.bfloat16" and (copy / "config.json").is_file()
    assert dtype_copy(source, torch.bfloat16) == copy  # made once
    cast = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.bfloat16)
    loaded = AutoModelForCausalLM.from_pretrained(str(copy), dtype=torch.bfloat16)
    cast_state, loaded_state = cast.state_dict(), loaded.state_dict()
    assert cast_state.keys() == loaded_state.keys()
    for key, value in cast_state.items():
        assert loaded_state[key].dtype == torch.bfloat16 and torch.equal(loaded_state[key], value), key


def test_a_device_map_places_the_model_and_its_inputs(tiny_target):
    """--device-map on a CPU run puts everything on the CPU (one device), with the same weights; the input device is
    the first layer's. A placement that offloads to CPU memory or disk is refused on CUDA (its timings would measure
    weight copies)."""
    import torch

    from relaxbench.errors import ConfigError, ModelError
    from relaxbench.models import load_model
    from relaxbench.models.load import _check_placed, input_device

    spread = load_model("tiny-random-target", dtype="float64", quiet=True, device_map="auto")
    assert spread.device == input_device(spread.model) == torch.device("cpu")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    assert torch.equal(spread.model(ids).logits, tiny_target.model(ids).logits)
    with pytest.raises(ConfigError, match="did you mean 'auto'"):
        load_model("tiny-random-target", dtype="float64", quiet=True, device_map="autoo")

    class Offloaded:
        hf_device_map = {"model.embed_tokens": 0, "model.layers.0": 1, "model.layers.1": "cpu", "lm_head": "disk"}

    with pytest.raises(ModelError, match="offloaded part of it to cpu and disk"):
        _check_placed("big", Offloaded())
    Offloaded.hf_device_map = {"model.embed_tokens": 0, "model.layers.0": 1, "lm_head": 1}
    _check_placed("big", Offloaded())


@pytest.mark.slow
@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"])
def test_the_streaming_conversion_equals_transformers_own_gguf_load(alias):
    """The checkpoint written tensor by tensor holds exactly the weights, and the config, that transformers'
    ``from_pretrained(gguf_file=...)`` builds (Llama-style with its Q/K permutation, and Qwen2)."""
    import torch
    from transformers import AutoModelForCausalLM

    from relaxbench.models.convert import materialize
    from relaxbench.models.resolve import resolve_model
    from relaxbench.models.zoo import MODELS

    # the cache's own conversion (made here on an empty cache, once for every test that loads the model)
    out = Path(materialize(resolve_model(alias), quiet=True))
    gguf = MODELS.get(alias).gguf_path()
    ours = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    theirs = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    assert type(ours) is type(theirs)
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == reference.keys()
    assert all(torch.equal(mine[name], reference[name]) for name in reference)
    # the whole config, but where it was read from (a folder; a GGUF, which transformers' load records as its
    # quantization_config) and the two fields a saved checkpoint names (its class, fp32)
    written = {"_name_or_path", "quantization_config", "architectures", "dtype"}
    mine_config, their_config = ours.config.to_dict(), theirs.config.to_dict()
    assert {k: v for k, v in mine_config.items() if k not in written} == \
        {k: v for k, v in their_config.items() if k not in written}
    assert mine_config["architectures"] == [type(theirs).__name__]
    assert len(list(out.glob("*.safetensors"))) >= 1 and (out / "relaxbench-source.json").is_file()
