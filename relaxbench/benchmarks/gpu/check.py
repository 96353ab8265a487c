"""Run the kit: each step in turn under a time budget, a failing step recorded and the next one run (a lent GPU's
minutes are not spent twice), the JSON files written as each step ends, and one table printed last.

Files in the output folder (seven, all small, so that with the launcher's log they stay within what a device run
brings back): ``summary.json`` (every check, each step's seconds and error, the configuration) and one file per
group of steps (``FILES``) holding each step's record: the environment, the clock and placement, losslessness and
the distribution test, every rule's batched decision, per-cell profile ratios with the measured profiles, the
oracle runs.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from relaxbench.benchmarks.gpu.plan import KitConfig, estimate, model_estimate, plan_lines
from relaxbench.benchmarks.gpu.results import MISS, PASS, Check, StepResult, write_json

FILES = {"environment": "environment.json", "clock": "clock.json", "device-map": "clock.json",
         "lossless": "lossless.json", "distribution": "lossless.json", "verify": "verify.json",
         "profile": "profile.json", "oracle": "oracle.json", "loop": "oracle.json"}


def _step_runner(config: KitConfig, step: str, started: float) -> Callable[[StepResult], None]:
    c = config
    if step == "environment":
        from relaxbench.benchmarks.gpu.clock import environment_check
        return lambda r: environment_check(r, c.device, c.held)
    if step == "clock":
        from relaxbench.benchmarks.gpu.clock import clock_check
        return lambda r: clock_check(r, c.device, c.clock_size, c.clock_matmuls, c.held)
    if step == "device-map":
        from relaxbench.benchmarks.gpu.clock import device_map_check
        return lambda r: device_map_check(r, c.device, c.held)
    if step == "lossless":
        from relaxbench.benchmarks.gpu.lossless import exact_vs_ar

        def lossless(r: StepResult) -> None:
            for dtype in c.dtypes:
                exact_vs_ar(r, dtype, c.device, c.lossless_prompts, c.lossless_tokens, c.lossless_ks)
        return lossless
    if step == "distribution":
        from relaxbench.benchmarks.gpu.lossless import distribution

        def sampled(r: StepResult) -> None:
            for dtype in c.dtypes:
                distribution(r, dtype, c.device, c.distribution_samples, c.power_samples, power_held=not c.dry)
        return sampled
    if step == "profile":
        from relaxbench.benchmarks.gpu.profile_check import profile_model
        from relaxbench.profiles.measure import Grid

        grid = Grid(new_tokens=c.new_tokens, context=c.contexts, prefill=c.prefill)

        def profiles(r: StepResult) -> None:
            for name in c.profile_models:
                spent = time.perf_counter() - started
                if spent + model_estimate(c, name) > c.budget_s:
                    r.add(f"{name}: profile", f"skipped: {spent:.0f} s spent, ~{model_estimate(c, name):.0f} s more "
                          f"would pass the {c.budget_s:g} s budget", "runs", MISS)
                    continue
                try:
                    profile_model(r, name, c.device, grid, c.repeats, c.warmup, c.dry, c.held)
                except Exception as exc:  # one shape failing (out of memory, an API) must not cost the others
                    r.add(f"{name}: profile", _one_line(exc), "runs", MISS)
                    r.data.setdefault("errors", {})[name] = traceback.format_exc(limit=8)
        return profiles
    if step == "verify":
        from relaxbench.benchmarks.gpu.verify_check import verify_check
        return lambda r: verify_check(r, c.device, c.verify_batches, c.verify_k, c.verify_vocab, c.verify_repeats,
                                      c.held)
    if step == "loop":
        from relaxbench.benchmarks.gpu.loop_check import loop_check
        return lambda r: loop_check(r, c)
    if step == "oracle":
        from relaxbench.benchmarks.gpu.oracle_compare import run_oracle
        return lambda r: run_oracle(r, c)
    raise AssertionError(step)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def run_kit(config: KitConfig, out: Path, echo: Callable[[str], None] = print) -> list[StepResult]:
    """Run the configured steps into ``out``; a step that would overrun the time budget is skipped (and says so)."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: list[StepResult] = []
    for step in config.steps:
        result = StepResult(step)
        elapsed = time.perf_counter() - started
        # the profile step checks the budget again before each shape: here it needs room for its first one
        need = model_estimate(config, config.profile_models[0]) if step == "profile" else estimate(config, step)
        if elapsed + need > config.budget_s:
            result.error = f"skipped: {elapsed:.0f} s spent, ~{need:.0f} s more would pass the " \
                           f"{config.budget_s:g} s budget"
            result.add("step", result.error, "runs", MISS)
            results.append(result)
            continue
        echo(f"[{elapsed:6.1f} s] {step} ...")
        t0 = time.perf_counter()
        try:
            _step_runner(config, step, started)(result)
        except Exception as exc:  # recorded; the next step still runs
            result.error = traceback.format_exc(limit=12)
            result.add("step", _one_line(exc), "runs", MISS)
        result.seconds = time.perf_counter() - t0
        echo(f"[{time.perf_counter() - started:6.1f} s] {step}: {result.seconds:.1f} s, "
             f"{sum(c.verdict == PASS for c in result.checks)} pass, {sum(c.missed for c in result.checks)} miss")
        results.append(result)
        _write_step_files(out, results)
        _write_summary(config, out, results, time.perf_counter() - started)
    _write_summary(config, out, results, time.perf_counter() - started)
    return results


def _write_step_files(out: Path, results: list[StepResult]) -> None:
    grouped: dict[str, dict] = {}
    for r in results:
        grouped.setdefault(FILES[r.step], {})[r.step] = r.record()
    for name, records in grouped.items():
        write_json(out / name, records)


def _write_summary(config: KitConfig, out: Path, results: list[StepResult], seconds: float) -> None:
    checks = [asdict(c) for r in results for c in r.checks]
    write_json(out / "summary.json", {
        "config": asdict(config), "plan": plan_lines(config), "seconds": round(seconds, 1),
        "steps": {r.step: {"seconds": round(r.seconds, 2), "error": r.error} for r in results},
        "checks": checks, "missed": sum(c["verdict"] == MISS for c in checks)})


def all_checks(results: list[StepResult]) -> list[Check]:
    return [c for r in results for c in r.checks]
