"""Engines benchmark: relaxbench's own loop and vLLM, AR and exact, at concurrency 1, 8 and 32, in one run; and
the adapter's cost against vLLM's native rejection sampler.

* tokens/s of AR and exact (n-gram drafts) on both engines at each concurrency. The transformers loop runs one
  request at a time whatever the concurrency, so its figure is its tokens over its total time;
* exact through the adapter ≥ 0.98× vLLM's native spec-decode throughput at concurrency 8 and 32 (the same
  engine, batches alternating native, adapter, native, ...: drift hits both alike; the median of the paired
  ratios): the adapter decides each step's batch at once, so its cost must not grow with the batch;
* the policy's share of the adapter's step time ≤ 2 % at concurrency 8 and 32 (the adapter's measured policy time
  over the batch's wall time: the policy runs inside the step, so this is the share of the step it takes).

vLLM runs in its own environment; this module gets it as an ``EngineDriver`` (``start``, ``generate``) from the
command, so it imports neither vLLM nor the integration that drives it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

ADAPTER_RATIO_TARGET = 0.98
POLICY_SHARE_TARGET = 0.02
CHECKED_CONCURRENCY = (8, 32)
LEVELS = (1, *CHECKED_CONCURRENCY)


class EngineDriver(Protocol):
    """A vLLM worker: ``start`` an engine (target, speculative config or None, max_num_seqs), ``generate`` a
    batch (the worker's answer: results and the batch's wall time)."""

    def start(self, target: str, speculative: Mapping[str, Any] | None, concurrency: int) -> None: ...

    def generate(self, requests: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]: ...


@dataclass
class Line:
    """One engine × arm × concurrency: tokens/s per repeat, and (vLLM adapter) the policy's share per repeat."""

    engine: str
    arm: str
    concurrency: int
    tokens_per_second: list[float] = field(default_factory=list)
    policy_share: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_second) if self.tokens_per_second else float("nan")


@dataclass
class Check:
    label: str
    value: float
    target: str
    holds: bool


def vllm_lines(driver: EngineDriver, target: str, prompts: Sequence[list[int]], speculative: Mapping[str, Any],
               max_new_tokens: int, repeats: int, levels: Sequence[int]) -> list[Line]:
    """AR, native spec decode and exact through the adapter on vLLM, at every concurrency level: each batch is
    every prompt once per level slot (so a level of 8 keeps 8 requests in flight)."""
    lines = []
    for level in levels:
        batch = [list(prompts[i % len(prompts)]) for i in range(max(level, len(prompts)))]

        def requests(rule: Mapping[str, Any] | None) -> list[dict[str, Any]]:
            return [{"prompt_ids": p, "max_tokens": max_new_tokens, "ignore_eos": True, "rule": rule}
                    for p in batch]

        ar, native, adapter = (Line("vllm", "ar", level), Line("vllm", "native exact", level),
                               Line("vllm", "adapter exact", level))
        driver.start(target, None, level)
        driver.generate(requests(None)[:1])  # untimed: the first batch builds caches
        for _ in range(repeats):
            ar.tokens_per_second.append(_tps(driver.generate(requests(None))))
        driver.start(target, speculative, level)
        driver.generate(requests({"policy": "exact"})[:1])
        for repeat in range(repeats):
            order = [(native, {"policy": "native"}), (adapter, {"policy": "exact"})]
            for line, rule in (order if repeat % 2 == 0 else order[::-1]):
                answer = driver.generate(requests(rule))
                line.tokens_per_second.append(_tps(answer))
                line.policy_share.append(_policy_time(answer) / answer["wall"])
        lines += [ar, native, adapter]
    return lines


def transformers_lines(run: Callable[[str], tuple[int, float]], levels: Sequence[int], repeats: int) -> list[Line]:
    """relaxbench's own loop: ``run(arm)`` generates every prompt one after another and returns (tokens,
    seconds); the figure is the same at every concurrency (the loop keeps one request in flight)."""
    lines = []
    for arm in ("ar", "exact"):
        figures = []
        for _ in range(repeats):
            tokens, seconds = run(arm)
            figures.append(tokens / seconds)
        lines += [Line("transformers", arm, level, list(figures)) for level in levels]
    return lines


def checks(lines: Sequence[Line], levels: Sequence[int] = CHECKED_CONCURRENCY) -> list[Check]:
    """The targets at each checked concurrency the lines measured (the command measures them all)."""
    out = []
    for level in levels:
        native = next((line for line in lines if line.engine == "vllm" and line.arm == "native exact"
                       and line.concurrency == level), None)
        adapter = next((line for line in lines if line.engine == "vllm" and line.arm == "adapter exact"
                        and line.concurrency == level), None)
        if native is None or adapter is None:
            continue
        ratios = [a / n for a, n in zip(adapter.tokens_per_second, native.tokens_per_second)]
        ratio = statistics.median(ratios)
        share = statistics.median(adapter.policy_share)
        out += [Check(f"adapter exact / native spec decode tokens/s at concurrency {level}", ratio,
                      f"≥ {ADAPTER_RATIO_TARGET:.2f}", ratio >= ADAPTER_RATIO_TARGET),
                Check(f"rule time / step time, adapter at concurrency {level}", share,
                      f"≤ {POLICY_SHARE_TARGET:.0%}", share <= POLICY_SHARE_TARGET)]
    if not out:
        raise ValueError(f"no vLLM native and adapter lines at a checked concurrency ({levels})")
    return out


def _tps(answer: Mapping[str, Any]) -> float:
    tokens = sum(len(r["output_ids"]) for r in answer["results"])
    return tokens / answer["wall"]


def _policy_time(answer: Mapping[str, Any]) -> float:
    return sum(sum(r["rounds"]["t_policy"]) for r in answer["results"])
