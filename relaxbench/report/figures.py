"""The report's figures (matplotlib, no pyplot state): drawn from a task's ``TaskSummary`` only, so every point
is a figure the tables also show. Each figure comes with the text saying how it was computed.

Scores are drawn in points (0–100: pass rate in %, or agreement × 100).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg", force=False)  # headless: the report never opens a window

from matplotlib.figure import Figure  # noqa: E402

from relaxbench.analysis.drafters import DrafterGain  # noqa: E402
from relaxbench.analysis.metrics import POINTS, CellSummary, Estimate, TaskSummary  # noqa: E402
from relaxbench.analysis.selection import MEASURED, Ranking  # noqa: E402
from relaxbench.profiles.measure import MACHINE_PROFILE  # noqa: E402

AR_COLOR = "#222222"
LINE_STYLES = ("-", "--", ":", "-.")  # the lines of one method (one per setting, over k)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f")

FIGURE_METHODS: dict[str, tuple[str, str]] = {
    "tradeoff": (
        "Trade-off: score vs speed-up",
        "x: measured speed-up over AR, Σ AR time / Σ method time over the task's paired units; horizontal bars: its "
        "95% paired-bootstrap CI. y: the arm's mean score in points; vertical bars: the 95% CI of the paired score "
        "difference to AR (Δ vs AR), drawn around the score. AR is the star at 1.0×; lossless arms (exact match, "
        "speculative sampling) are squares; arms that share a method file (the points of a knob sweep) are joined "
        "in sweep order and labelled with the knob values that vary (a sweep over the draft length k and a knob "
        "draws one line over k per knob value, labelled at its end); a relaxed method without a sweep is a single "
        "circle. Up and to the right is better. Intervals far wider than the spread of the points are cut at the "
        "axes; the tables give every interval."),
    "mal": (
        "Mean acceptance length per arm",
        "MAL = emitted tokens / verification rounds, over every sample of the task's paired units (bonus token "
        "included, so AR is 1.0 and a round that accepts all k drafts emits k + 1). The label gives the "
        "acceptance rate, accepted / drafted tokens."),
    "positions": (
        "Acceptance by draft position",
        "For each draft position i (1 = the first drafted token), vLLM's per-position acceptance rate: rounds that "
        "accepted position i / rounds with a draft (vLLM's num_accepted_tokens_per_pos / num_drafts), so the curve "
        "is P(accepted length ≥ i) and sums to the mean accepted drafts per round. Position i is accepted only when "
        "1..i-1 were, so a curve never rises; relaxed rules lift it."),
    "length": (
        "Output-length change",
        "Output-length ratio = the arm's output tokens / AR's output tokens, summed over the same units (1.0 = "
        "same length). Relaxed rules can lengthen outputs, which costs time that MAL does not show."),
    "proxy": (
        "This machine's proxy vs measured speed-up",
        "x: the proxy speed-up on this machine's own cost profile (measured at the start of the run's session): "
        "every sample priced as prefill + Σ rounds [target forward of (drafted + 1 + extra) tokens at the round's "
        "context + the drafter's recorded forwards and lookups]. y: measured speed-up with its 95% CI. Points on "
        "the diagonal mean the profile prices this machine's runs right, which is what lets another device's "
        "profile price them; points below it lose time to what the proxy leaves out (policy, Python overhead); a "
        "run on a busy machine scatters around it."),
    "drafters": (
        "Relaxation by drafter",
        "Per rule (a group of bars) and drafter (one colour each), every relaxed arm against the exact arm with the "
        "same drafter and k, over the task's paired units: left, MAL gain = the arm's MAL / exact's; then speed gain "
        "= exact's total time / the arm's, measured and, when the report prices a deployment profile, from its "
        "proxy times. Bars: the 95% paired-bootstrap CI over units. The dashed line at 1.0× is exact with that drafter: a "
        "rule above it gains with that drafter. The table 'relaxation by drafter' gives the figures with each arm's "
        "capability change against AR."),
    "categories": (
        "Acceptance by category",
        "Heat maps of the task's item categories (rows) × arms (columns), each cell over the category's paired units "
        "(the units every arm finished): left, MAL = emitted tokens / verification rounds; middle, acceptance rate = "
        "accepted / drafted tokens; right, the AR-paired relaxed fraction = relaxed acceptances / emitted tokens. "
        "Darker is higher; a blank cell has no drafted tokens (AR). The table 'acceptance by category' gives the same "
        "figures with each relaxed arm's gain over the strict reference."),
    "concurrency": (
        "Speed against concurrency",
        "One stored run per concurrency (requests in flight), read together. Left: output tokens/s, the engine's "
        "output tokens of an arm's batches over their wall time (each batch's wall time counted once). Right: a "
        "request's time per output token after its first, in ms, averaged over the arm's samples. One line per "
        "arm, AR in black; x on a log scale. Higher on the left and lower on the right is faster; the table beside "
        "the table above it gives each arm's speed-up over AR at the same concurrency."),
}

TRADEOFF_PROXY = (
    "x: the proxy speed-up over AR on cost profile {profile} (Σ AR proxy time / Σ method proxy time over the task's "
    "paired units, each sample priced from its stored rounds on the profile's device), with its 95% "
    "paired-bootstrap CI; hollow markers joined by a thin line: the same arm's measured speed-up on this machine. "
    "y: the arm's mean score in points with the 95% CI of Δ vs AR drawn around it. AR is the star at 1.0×; "
    "lossless arms are squares; the points of a knob sweep are joined in sweep order. Up and to the right is "
    "better.")


@dataclass
class FigureArt:
    """One drawn figure, rendered to SVG (HTML) or PNG (PDF) on demand."""

    key: str
    kind: str
    task: str
    figure: Figure
    note: str = ""  # what the figure leaves out (missing values), shown under the caption
    extra: dict[str, Any] = field(default_factory=dict)
    description: str = ""  # how it was computed, when it differs from the kind's (FIGURE_METHODS)

    @property
    def title(self) -> str:
        return f"{self.task}: {FIGURE_METHODS[self.kind][0]}"

    @property
    def method(self) -> str:
        return self.description or FIGURE_METHODS[self.kind][1]

    @cached_property
    def svg(self) -> str:
        """Inline SVG markup (no XML prolog); ids salted with the figure key so several figures share a page."""
        buffer = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": self.key}):
            self.figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
        text = buffer.getvalue()
        return text[text.index("<svg"):]

    def png(self, dpi: int = 200) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
        return buffer.getvalue()

    @property
    def size_inches(self) -> tuple[float, float]:
        width, height = self.figure.get_size_inches()
        return float(width), float(height)


def method_palette(methods: Sequence[str]) -> dict[str, str]:
    """A colour per method (curve), stable across a report's figures; AR is dark grey."""
    palette: dict[str, str] = {}
    for name in methods:
        if name not in palette:
            palette[name] = AR_COLOR if name == "ar" else PALETTE[(len(palette) - ("ar" in palette)) % len(PALETTE)]
    return palette


def _new(width: float, height: float) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _err(value: float | None, low: float | None, high: float | None, scale: float = 1.0) -> list[list[float]] | None:
    if value is None or low is None or high is None:
        return None
    return [[max(0.0, (value - low) * scale)], [max(0.0, (high - value) * scale)]]


def focus_limits(points: Sequence[float], bounds: Sequence[float], floor: float | None = None,
                 ceil: float | None = None, min_pad: float = 0.0) -> tuple[float, float]:
    """Axis limits that show every point with a margin and the intervals as far as one point-span beyond: a
    few-sample CI ten times wider than the spread of the estimates would otherwise squash every point together.
    Bars longer than that are cut at the axes (the tables give every interval)."""
    lo, hi = min(points), max(points)
    span = max(hi - lo, 0.1 * max(abs(hi), 1e-9), 1e-6)
    pad = max(0.12 * span, min_pad)
    low = max(min([lo - pad, *bounds]), lo - max(span, pad))
    high = min(max([hi + pad, *bounds]), hi + max(span, pad))
    if floor is not None:
        low = max(low, floor)
    if ceil is not None:
        high = min(high, ceil)
    return low, high


def curves(summary: TaskSummary) -> dict[str, list[CellSummary]]:
    """Non-baseline arms grouped by their method (a sweep's points share it), in table order."""
    out: dict[str, list[CellSummary]] = {}
    for cell in summary.cells:
        if not cell.is_baseline:
            out.setdefault(cell.method, []).append(cell)
    return out


def settings(cell: CellSummary) -> dict[str, Any]:
    """What a sweep can vary: the policy knobs, the draft length ``k`` and drafter knobs (``drafter.NAME``)."""
    return {**cell.knobs, "k": cell.k, **{f"drafter.{k}": v for k, v in cell.drafter_knobs.items()}}


def varying_knobs(cells: Sequence[CellSummary]) -> list[str]:
    keys = sorted({k for c in cells for k in settings(c)})
    return [k for k in keys if len({repr(settings(c).get(k)) for c in cells}) > 1]


def point_label(cell: CellSummary, varying: Sequence[str]) -> str:
    return ", ".join(f"{k}={settings(cell).get(k)}" for k in varying)


def lines_of(cells: Sequence[CellSummary]) -> list[tuple[str, list[CellSummary]]]:
    """A method's points as lines to draw: when its sweep varies the draft length k and something else, one line
    over k per setting of the rest (labelled with that setting), so each relaxed setting reads against the strict
    rule's curve over k; otherwise one line in sweep order."""
    varying = varying_knobs(cells)
    if "k" not in varying or len(varying) == 1:
        return [("", list(cells))]
    others = [key for key in varying if key != "k"]
    groups: dict[str, list[CellSummary]] = {}
    for cell in cells:
        groups.setdefault(point_label(cell, others), []).append(cell)
    return [(label, sorted(group, key=lambda c: c.k)) for label, group in groups.items()]


def _plottable(cell: CellSummary, x: Ranking = MEASURED) -> bool:
    return x.speed(cell).value is not None and cell.score is not None


def tradeoff(summary: TaskSummary, palette: Mapping[str, str], x_axis: Ranking = MEASURED) -> FigureArt:
    """Score vs speed-up; the x-axis is the measured speed-up, or a profile's proxy speed-up (``x_axis``) with the
    measured one drawn beside each point."""
    fig, ax = _new(7.2, 4.6)
    missing = []
    xs_all, ys_all, x_bounds, y_bounds = [], [], [], []
    ar = summary.baseline
    if _plottable(ar, x_axis):
        ax.plot([x_axis.speed(ar).value], [ar.score * POINTS], marker="*", markersize=16, color=AR_COLOR,
                linestyle="none", label="AR (baseline)", zorder=5)
        xs_all.append(x_axis.speed(ar).value)
        ys_all.append(ar.score * POINTS)
    else:
        missing.append(ar.arm)
    ax.axvline(1.0, color="#999999", linewidth=0.8, linestyle="--", zorder=1)
    for method, cells in curves(summary).items():
        color = palette.get(method, PALETTE[0])
        points = [c for c in cells if _plottable(c, x_axis)]
        missing += [c.arm for c in cells if not _plottable(c, x_axis)]
        if not points:
            continue
        lossless = all(c.lossless for c in points)
        marker = "s" if lossless else "o"
        label = f"{method} ({'lossless' if lossless else 'relaxed'})"
        for index, (setting, line) in enumerate(lines_of(points)):
            speeds: list[Estimate] = [x_axis.speed(c) for c in line]
            xs = [e.value for e in speeds]
            ys = [c.score * POINTS for c in line]
            xerr = [_err(e.value, e.low, e.high) for e in speeds]
            yerr = [_err(c.score_delta.value, c.score_delta.low, c.score_delta.high, POINTS) for c in line]
            xs_all += xs
            ys_all += ys
            for x, y, xe, ye in zip(xs, ys, xerr, yerr):
                if xe is not None:
                    x_bounds += [x - xe[0][0], x + xe[1][0]]
                if ye is not None:
                    y_bounds += [y - ye[0][0], y + ye[1][0]]
                if xe is not None or ye is not None:
                    ax.errorbar([x], [y], xerr=xe, yerr=ye, fmt="none", ecolor=color, alpha=0.45, elinewidth=1,
                                capsize=2, zorder=2)
            if x_axis.profile is not None:  # the measured speed-up of each point, hollow, joined to it
                for cell, x, y in zip(line, xs, ys):
                    measured = cell.speedup_total.value
                    if measured is None:
                        continue
                    ax.plot([measured, x], [y, y], color=color, linewidth=0.7, linestyle=":", zorder=2)
                    ax.plot([measured], [y], marker=marker, markersize=6, markerfacecolor="none", color=color,
                            linestyle="none", zorder=3)
                    xs_all.append(measured)
            style = LINE_STYLES[index % len(LINE_STYLES)] if len(line) > 1 else "none"
            ax.plot(xs, ys, marker=marker, markersize=8 if lossless else 6, color=color, linestyle=style,
                    linewidth=1.4, label=label if index == 0 else f"_{label} {setting}", zorder=4)
            varying = ["k"] if setting else varying_knobs(points)
            if varying:
                for cell, x, y in zip(line, xs, ys):
                    ax.annotate(point_label(cell, varying), (x, y), textcoords="offset points", xytext=(5, 4),
                                fontsize=7, color=color)
            if setting:
                ax.annotate(setting, (xs[-1], ys[-1]), textcoords="offset points", xytext=(5, -9), fontsize=7,
                            color=color, fontweight="bold")
    if xs_all:
        ax.set_xlim(*focus_limits(xs_all + [1.0], x_bounds, floor=0.0, min_pad=0.05))
        ax.set_ylim(*focus_limits(ys_all, y_bounds, floor=-3.0, ceil=103.0, min_pad=3.0))
    if x_axis.profile is None:
        ax.set_xlabel("speed-up over AR (×), 95% CI")
    else:
        ax.set_xlabel(f"proxy speed-up over AR on {x_axis.profile} (×), 95% CI; hollow: measured on this machine")
    score = ("pass@1 (%)" if summary.binary else "grader rating × 10 (points)" if summary.rated_by_grader
             else "score (points)" if summary.measure == "capability" else "fidelity to AR (points)")
    ax.set_ylabel(f"{score}, 95% CI of Δ vs AR")
    what = "score" if summary.measure == "capability" else "fidelity to AR (capability not measured)"
    ax.set_title(f"{summary.task}: {what} vs {x_axis.label} (n = {summary.n_units})", fontsize=10, loc="left")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best", frameon=False)
    description = "" if x_axis.profile is None else TRADEOFF_PROXY.format(profile=x_axis.profile)
    return FigureArt(f"{summary.task}-tradeoff", "tradeoff", summary.task, fig, _missing(missing),
                     description=description)


def acceptance_length(summary: TaskSummary, palette: Mapping[str, str]) -> FigureArt:
    cells = [c for c in summary.cells if c.mean_acceptance_length is not None]
    fig, ax = _new(7.2, 0.9 + 0.32 * max(1, len(cells)))
    names = [c.arm for c in cells][::-1]
    values = [c.mean_acceptance_length for c in cells][::-1]
    colors = [palette.get(c.method, PALETTE[0]) for c in cells][::-1]
    bars = ax.barh(names, values, color=colors, height=0.65)
    for bar, cell in zip(bars, cells[::-1]):
        rate = "" if cell.acceptance_rate is None else f"  (acc. rate {cell.acceptance_rate:.1%})"
        ax.annotate(f"{cell.mean_acceptance_length:.2f}{rate}", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                    textcoords="offset points", xytext=(3, 0), va="center", fontsize=7)
    ax.axvline(1.0, color="#999999", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, max(values, default=1.0) * 1.35 + 0.1)
    ax.set_xlabel("mean acceptance length (tokens per verification round)")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"{summary.task}: mean acceptance length", fontsize=10, loc="left")
    missing = [c.arm for c in summary.cells if c.mean_acceptance_length is None]
    return FigureArt(f"{summary.task}-mal", "mal", summary.task, fig, _missing(missing))


def acceptance_by_position(summary: TaskSummary, palette: Mapping[str, str]) -> FigureArt:
    fig, ax = _new(7.2, 4.0)
    markers = "osD^v<>ph*"
    drawn = 0
    for method, cells in curves(summary).items():
        for j, cell in enumerate(cells):
            if not cell.acceptance_by_position:
                continue
            positions = list(range(1, len(cell.acceptance_by_position) + 1))
            ax.plot(positions, list(cell.acceptance_by_position), marker=markers[j % len(markers)], markersize=4,
                    linewidth=1.2, color=palette.get(method, PALETTE[0]), alpha=1.0 - 0.5 * j / max(1, len(cells)),
                    label=cell.arm)
            drawn += 1
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("accepted at i / rounds with a draft")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{summary.task}: acceptance by draft position", fontsize=10, loc="left")
    if drawn:
        ax.legend(fontsize=6.5, loc="upper right", frameon=False, ncol=2 if drawn > 6 else 1)
    else:
        ax.text(0.5, 0.5, "no drafted tokens", ha="center", va="center", transform=ax.transAxes)
    return FigureArt(f"{summary.task}-positions", "positions", summary.task, fig)


def output_length(summary: TaskSummary, palette: Mapping[str, str]) -> FigureArt:
    cells = [c for c in summary.cells if not c.is_baseline and c.output_length_ratio is not None]
    fig, ax = _new(7.2, 0.9 + 0.32 * max(1, len(cells)))
    names = [c.arm for c in cells][::-1]
    values = [c.output_length_ratio for c in cells][::-1]
    bars = ax.barh(names, [v - 1.0 for v in values], left=1.0, height=0.65,
                   color=[palette.get(c.method, PALETTE[0]) for c in cells][::-1])
    for bar, value in zip(bars, values):
        ax.annotate(f"{value:.3f}", (value, bar.get_y() + bar.get_height() / 2), textcoords="offset points",
                    xytext=(3 if value >= 1 else -3, 0), ha="left" if value >= 1 else "right", va="center",
                    fontsize=7)
    ax.axvline(1.0, color=AR_COLOR, linewidth=1.0)
    spread = max([abs(v - 1.0) for v in values], default=0.05)
    ax.set_xlim(1.0 - 1.4 * spread - 0.02, 1.0 + 1.4 * spread + 0.02)
    ax.set_xlabel("output tokens relative to AR (1.0 = same length)")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"{summary.task}: output-length ratio vs AR", fontsize=10, loc="left")
    missing = [c.arm for c in summary.cells if not c.is_baseline and c.output_length_ratio is None]
    return FigureArt(f"{summary.task}-length", "length", summary.task, fig, _missing(missing))


def proxy_vs_measured(summary: TaskSummary, palette: Mapping[str, str]) -> FigureArt:
    """This machine's proxy speed-up against the measured one: how well the run's own profile prices it."""
    fig, ax = _new(5.6, 4.6)
    machine = Ranking(MACHINE_PROFILE)
    points = [c for c in summary.cells if machine.speed(c).value is not None and c.speedup_total.value is not None]
    for cell in points:
        color = AR_COLOR if cell.is_baseline else palette.get(cell.method, PALETTE[0])
        x = machine.speed(cell).value
        ax.errorbar([x], [cell.speedup_total.value],
                    yerr=_err(cell.speedup_total.value, cell.speedup_total.low, cell.speedup_total.high),
                    fmt="*" if cell.is_baseline else ("s" if cell.lossless else "o"), color=color, ecolor=color,
                    elinewidth=1, capsize=2, markersize=12 if cell.is_baseline else 6, alpha=0.9)
        ax.annotate(cell.arm, (x, cell.speedup_total.value), textcoords="offset points",
                    xytext=(4, 3), fontsize=6.5, color=color)
    values = [v for c in points for v in (machine.speed(c).value, c.speedup_total.value)] + [1.0]
    bounds = [b for c in points for b in (c.speedup_total.low, c.speedup_total.high) if b is not None]
    low, high = focus_limits(values, bounds, floor=0.0)
    ax.plot([low, high], [low, high], color="#999999", linestyle="--", linewidth=0.8)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel(f"proxy speed-up (×) on {MACHINE_PROFILE}, from the stored rounds and the run's profile")
    ax.set_ylabel("measured speed-up (×), 95% CI")
    ax.set_title(f"{summary.task}: {MACHINE_PROFILE} proxy vs measured speed-up", fontsize=10, loc="left")
    missing = [c.arm for c in summary.cells if machine.speed(c).value is None]
    return FigureArt(f"{summary.task}-proxy", "proxy", summary.task, fig,
                     _missing(missing, f"no {MACHINE_PROFILE} profile stored, or not priceable"))


def category_heatmap(summary: TaskSummary) -> FigureArt | None:
    """MAL, acceptance rate and the AR-paired relaxed fraction by category × arm (None without two categories)."""
    categories = sorted({name for c in summary.cells for name in c.acceptance.categories})
    if len(categories) < 2:
        return None
    cells = list(summary.cells)
    panels = (("MAL", "mean_acceptance_length", "{:.2f}"), ("acceptance rate", "acceptance_rate", "{:.0%}"),
              ("relaxed fraction (AR-paired)", "relaxed_fraction", "{:.0%}"))
    fig = Figure(figsize=(min(16.0, 3.0 + 1.5 * len(panels) * (0.55 * len(cells) + 0.6)),
                          1.6 + 0.34 * len(categories)), layout="constrained")
    axes = fig.subplots(1, len(panels))
    for ax, (title, name, label) in zip(axes, panels):
        grid = np.full((len(categories), len(cells)), np.nan)
        for j, cell in enumerate(cells):
            for i, category in enumerate(categories):
                part = cell.acceptance.categories.get(category)
                value = None if part is None else getattr(part, name)
                if value is not None:
                    grid[i, j] = value
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", aspect="auto")
        for i in range(len(categories)):
            for j in range(len(cells)):
                if not np.isnan(grid[i, j]):
                    bright = image.norm(grid[i, j]) > 0.6  # viridis is light at the top: dark text there
                    ax.text(j, i, label.format(grid[i, j]), ha="center", va="center", fontsize=6,
                            color="black" if bright else "white")
        ax.set_xticks(range(len(cells)), [c.arm for c in cells], rotation=60, ha="right", fontsize=6.5)
        ax.set_yticks(range(len(categories)), categories, fontsize=7)
        ax.set_title(title, fontsize=9, loc="left")
    fig.suptitle(f"{summary.task}: acceptance by category", fontsize=10, x=0.01, ha="left")
    return FigureArt(f"{summary.task}-categories", "categories", summary.task, fig)


def drafter_gains_figure(task: str, gains: Sequence[DrafterGain]) -> FigureArt | None:
    """MAL gain and speed gain over exact (measured, and on the deployment's profile when priced), per drafter and
    rule, with their CIs (None without gains)."""
    if not gains:
        return None
    drafters = sorted({g.drafter for g in gains})
    # one group of bars per rule, a bar per drafter (an arm's own name where a drafter has several of one rule)
    by_rule = len({(g.drafter, g.policy) for g in gains}) == len(gains)
    group = {id(g): g.policy if by_rule else g.arm for g in gains}
    arms = sorted(set(group.values()))
    colours = {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(drafters)}
    width = 0.8 / len(drafters)
    panels = [("MAL gain over exact", "mal_gain"), ("speed gain over exact", "speed_gain")]
    priced = next((g.proxy_profile for g in gains if g.proxy_gain.value is not None), None)
    if priced is not None:
        panels.append((f"proxy speed gain over exact ({priced})", "proxy_gain"))
    fig = Figure(figsize=(min(16.0, 4.0 + 1.1 * len(arms) * len(drafters)) * len(panels) / 2, 3.4),
                 layout="constrained")
    for ax, (title, name) in zip(fig.subplots(1, len(panels)), panels):
        labelled: set[str] = set()
        for i, drafter in enumerate(drafters):
            for j, arm in enumerate(arms):
                gain = next((g for g in gains if g.drafter == drafter and group[id(g)] == arm), None)
                estimate = None if gain is None else getattr(gain, name)
                if estimate is None or estimate.value is None:
                    continue
                x = j - 0.4 + width * (i + 0.5)
                errors = None
                if estimate.low is not None and estimate.high is not None:
                    errors = [[max(0.0, estimate.value - estimate.low)], [max(0.0, estimate.high - estimate.value)]]
                ax.bar(x, estimate.value, width * 0.9, color=colours[drafter], yerr=errors, capsize=2,
                       label=None if drafter in labelled else drafter)
                labelled.add(drafter)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_ylabel("× exact with the same drafter", fontsize=7)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), fontsize=7, loc="outside right upper")
    fig.suptitle(f"{task}: relaxation by drafter", fontsize=10, x=0.01, ha="left")
    return FigureArt(f"{task}-drafters", "drafters", task, fig)


def _missing(arms: Sequence[str], why: str = "missing values") -> str:
    return f"Not drawn ({why}): {', '.join(arms)}." if arms else ""


FIGURES = (tradeoff, acceptance_length, acceptance_by_position, output_length, proxy_vs_measured)


def task_figures(summary: TaskSummary, palette: Mapping[str, str], x_axis: Ranking = MEASURED,
                 gains: Sequence[DrafterGain] = ()) -> list[FigureArt]:
    """Every figure of one task, in report order; the trade-off plot's x-axis is ``x_axis``'s speed-up; relaxation
    by drafter when ``gains`` holds any."""
    optional = (category_heatmap(summary), drafter_gains_figure(summary.task, gains))
    return [tradeoff(summary, palette, x_axis), *(draw(summary, palette) for draw in FIGURES[1:]),
            *(f for f in optional if f is not None)]
