"""Measure the unit costs a modelled speed-up needs: a target step (1-token forward), a verify pass (a (k+1)-token
forward) and a draft step (the drafter's cost per proposed token), on the run's own prompt length.

Modelled speed-up of an arm = (emitted tokens × target step) / (rounds × verify pass + drafted tokens × draft
step): what the counters predict on a machine with these costs. Measured on a noisy machine it is steadier than
wall-clock, and comparing the two shows overheads the model leaves out (prefill, policy, Python).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from relaxbench.decoding.cache import CachedLM
from relaxbench.decoding.drafters import Drafter
from relaxbench.ops.sampling import SamplingParams
from relaxbench.timing import Clock


@dataclass(frozen=True)
class Calibration:
    context_tokens: int
    k: int
    t_target_step: float
    t_verify: float | None  # None for the AR arm (k = 0)
    t_draft_step: float | None
    raw: dict[str, Any]


@torch.inference_mode()
def calibrate(target: Any, drafter: Drafter | None, k: int, prompt_ids: list[int], repetitions: int = 5,
              sampling: SamplingParams = SamplingParams()) -> Calibration:
    """Median of ``repetitions`` timings of each unit, on top of a cache holding ``prompt_ids``."""
    clock = Clock(target.device)
    context = torch.tensor(prompt_ids, dtype=torch.long, device=target.device)
    lm = CachedLM(target.model)
    lm.run(context[:-1], n_logits=0)
    base = lm.length
    verify_feed = context[-1:].repeat(k + 1) if k > 0 else None
    raw: dict[str, list[float]] = {"target_step": [], "verify": [], "draft_step": []}
    for _ in range(repetitions + 1):  # the first round warms the kernels and is dropped
        t0 = clock.now()
        lm.run(context[-1:], n_logits=1)
        t1 = clock.now()
        lm.truncate(base)
        raw["target_step"].append(t1 - t0)
        if verify_feed is not None:
            t0 = clock.now()
            lm.run(verify_feed, n_logits=k + 1)
            t1 = clock.now()
            lm.truncate(base)
            raw["verify"].append(t1 - t0)
    if drafter is not None and k > 0:
        generator = torch.Generator(target.device).manual_seed(0)
        drafter.reset(context)
        drafter.propose(context, k, sampling, generator)  # prefill of the drafter's own cache, not timed
        drafter.commit(context)
        for _ in range(repetitions):
            t0 = clock.now()
            drafter.propose(context, k, sampling, generator)
            t1 = clock.now()
            drafter.commit(context)
            raw["draft_step"].append((t1 - t0) / k)
    raw = {key: values[1:] if key != "draft_step" else values for key, values in raw.items()}
    median = {key: statistics.median(values) if values else None for key, values in raw.items()}
    return Calibration(int(context.shape[0]), k, float(median["target_step"]), median["verify"],
                       median["draft_step"], raw)
