"""Model loading details that the other tests take for granted."""

from __future__ import annotations


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
