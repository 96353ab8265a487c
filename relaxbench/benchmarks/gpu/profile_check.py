"""The proxy against the device, part one: for each shipped shape, a random-weight model built on the device, its
cost profile measured here (``profiles.measure.measure_profile``, what ``relaxbench profile`` writes) against the
analytic roofline of the same shape (``profiles.analytic``, what ``relaxbench profile --analytic`` writes) on the
H200, cell by cell.

Target: on the cells the roofline calls memory-bound (streaming the weights and KV cache takes longer than the
arithmetic), measured / analytic within 1 ± 0.15. The same measured cells are also held, as information, against
the h100-sxm roofline after scaling by the two devices' bandwidths (the H200 standing in for the H100 that the
default suite's proxy names): a memory-bound forward on the H100 takes the H200's time × 4.8 / 3.35.
"""

from __future__ import annotations

import gc
import math

import torch

from relaxbench.benchmarks.gpu.results import StepResult, verdict, within
from relaxbench.models.random_shapes import random_model
from relaxbench.models.shape import shape_of
from relaxbench.profiles.analytic import roofline
from relaxbench.profiles.devices import device_catalog
from relaxbench.profiles.measure import Grid, measure_profile

PROFILE_TOLERANCE = 0.15
MEASURED_ON, STANDS_IN_FOR = "h200", "h100-sxm"


def geometric_mean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def profile_model(step: StepResult, name: str, device: str, grid: Grid, repeats: int, warmup: int, shrink: bool,
                  held: bool) -> None:
    loaded = random_model(name, torch.bfloat16, device, shrink=shrink)
    try:
        shape = shape_of(loaded.model)
        measured = measure_profile(loaded, None, grid, repeats=repeats, warmup=warmup, name=f"{name}-measured")
    finally:
        del loaded
        free(device)
    catalog = device_catalog()
    here, there = roofline(MEASURED_ON, shape), roofline(STANDS_IN_FOR, shape)
    scale = catalog.get(MEASURED_ON).bandwidth / catalog.get(STANDS_IN_FOR).bandwidth
    cells = []
    table = measured.target.forward
    for i, ctx in enumerate(table.context):
        for j, n in enumerate(table.new_tokens):
            seconds = table.seconds[i][j]
            cells.append({"new_tokens": n, "context": ctx, "measured_s": seconds,
                          "analytic_h200_s": here.seconds(n, ctx), "memory_bound_h200": here.memory_bound(n, ctx),
                          "ratio_h200": seconds / here.seconds(n, ctx),
                          "analytic_h100_s": there.seconds(n, ctx), "memory_bound_h100": there.memory_bound(n, ctx),
                          "ratio_h100_scaled": seconds * scale / there.seconds(n, ctx)})
    bound = [c for c in cells if c["memory_bound_h200"]]
    ratios = [c["ratio_h200"] for c in bound]
    outside = [r for r in ratios if not within(r, PROFILE_TOLERANCE)]
    overall = geometric_mean([c["ratio_h200"] for c in cells])
    bound_mean = geometric_mean(ratios)
    worst = max(ratios, key=lambda r: abs(math.log(r))) if ratios else None
    label = name + (" (shrunk)" if shrink else "")
    if ratios:
        step.add(f"{label}: measured / analytic h200, memory-bound cells",
                 f"geo-mean {bound_mean:.2f}, worst {worst:.2f}; {len(ratios) - len(outside)}/{len(ratios)} within",
                 f"each 1 ± {PROFILE_TOLERANCE:g}", verdict(not outside, held))
    else:
        step.add(f"{label}: measured / analytic h200", "no memory-bound cell in the grid", "-")
    step.add(f"{label}: measured / analytic h200, all cells", f"geo-mean {overall:.2f} over {len(cells)} cells")
    scaled = geometric_mean([c["ratio_h100_scaled"] for c in cells if c["memory_bound_h100"]])
    if scaled is not None:
        step.add(f"{label}: measured × {scale:.2f} / analytic h100-sxm, memory-bound", f"geo-mean {scaled:.2f}")
    step.data.setdefault("models", {})[name] = {
        "shape": shape.record(), "shrunk": shrink, "cells": cells, "memory_bound_geo_mean": bound_mean,
        "all_cells_geo_mean": overall, "h100_scaled_geo_mean": scaled, "bandwidth_scale": scale,
        "measured_profile": measured.record()}
