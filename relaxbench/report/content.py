"""What a report says, decided once for every output format: the summary, per-task sections (tables, figures,
headline, notices), speed against concurrency when the store holds the run at several, method definitions, setup,
environment and definitions.

Run → summarize → present: this module reads a stored run through ``relaxbench.analysis`` (``load_run``,
``summarize_run``, the arm selection, the notices that apply, the runs that differ from it only in concurrency) and
only words and arranges what those return; it computes no metric. The tables are ``relaxbench.report.tables``'
model, which the terminal renders too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relaxbench.analysis import RunRecord, TaskSummary, load_run, summarize_run
from relaxbench.analysis.agreement import Agreement, ArmPair, run_agreements
from relaxbench.analysis.concurrency import concurrency_points, concurrency_runs, run_concurrency
from relaxbench.analysis.drafters import DrafterGain, run_drafter_gains
from relaxbench.analysis.metrics import CellSummary, report_definitions
from relaxbench.analysis.notices import run_notices, task_notices
from relaxbench.analysis.proxy import choose_profiles
from relaxbench.analysis.records import CellRecord
from relaxbench.analysis.selection import (
    DEFAULT_BUDGET,
    MEASURED,
    Ranking,
    best_within_budget,
    fastest,
    loss_beyond_budget,
    lossless_reference,
    ranks_by_capability,
)
from relaxbench.profiles import Profile
from relaxbench.profiles.measure import MACHINE_PROFILE
from relaxbench.report.concurrency import FIGURE_KIND, concurrency_figure_art, concurrency_tables, tasks_of
from relaxbench.report.figures import FIGURE_METHODS, TRADEOFF_PROXY, FigureArt, method_palette, task_figures
from relaxbench.report.tables import (
    Cell,
    Row,
    Table,
    est,
    failures_brief,
    fmt,
    knobs_text,
    measured_by,
    num,
    proxy_cell,
    pts,
    pts_ci,
    speed_ci,
    task_tables,
    with_proxy_columns,
)

# ------------------------------------------------------------------------------------------------ the document


@dataclass(frozen=True)
class NoticeText:
    """A notice as the report shows it: its level and its words (``analysis.notices.Notice.words()``)."""

    level: str  # "warning" (a reader must know this to trust a figure) or "info"
    text: str


@dataclass(frozen=True)
class TaskSection:
    task: str
    description: str
    scorer: str
    n_units: int
    headline: str
    tables: tuple[Table, ...]
    figures: tuple[FigureArt, ...]
    notices: tuple[NoticeText, ...]


@dataclass(frozen=True)
class ConcurrencySection:
    """One task's speed against concurrency: the arm × concurrency table and its figure."""

    task: str
    table: Table
    figure: FigureArt


@dataclass(frozen=True)
class Concurrency:
    """The section "Speed against concurrency": which runs it reads (``intro``) and a part per task."""

    intro: str
    tasks: tuple[ConcurrencySection, ...]


SECTIONS = (("summary", "Summary"), ("results", "Results per task"), ("methods", "Method definitions"),
            ("setup", "Setup"), ("environment", "Environment"), ("figures-how", "How the figures were computed"),
            ("definitions", "Metric definitions"))
CONCURRENCY_SECTION = ("concurrency", "Speed against concurrency")  # after the results, when the run has siblings


@dataclass(frozen=True)
class Report:
    title: str
    run_dir: str
    run_key: str
    generated_at: str
    budget: float
    summary_lines: tuple[str, ...]
    summary_table: Table
    tasks: tuple[TaskSection, ...]
    methods_table: Table
    setup_table: Table
    tasks_table: Table
    environment_table: Table
    sessions_table: Table
    notices: tuple[NoticeText, ...]
    figure_methods: tuple[tuple[str, str], ...]
    definitions: tuple[tuple[str, str], ...]
    profiles_table: Table | None = None  # the cost profiles of the proxy columns (shown under Setup)
    ranking: Ranking = MEASURED  # the speed-up the summary ranks arms by
    concurrency: Concurrency | None = None  # the runs of the store that differ from this one only in concurrency
    sections: tuple[tuple[str, str], ...] = SECTIONS


# ------------------------------------------------------------------------------------------------ the summary


def _speed(cell: CellSummary, ranking: Ranking) -> str:
    """The ranking speed-up of an arm, with the measured one beside it when ranking by a profile."""
    text = speed_ci(ranking.speed(cell))
    if ranking.profile is not None:
        text += f" on {ranking.profile} (measured here {speed_ci(cell.speedup_total)})"
    return text


def _fidelity_headline(summary: TaskSummary, ranking: Ranking) -> str:
    text = (f"{summary.task} (n = {summary.n_units} paired units): capability was not measured for this task; its "
            f"score ({summary.scorer}) is fidelity to AR's output, which any rewording lowers, so rules are not "
            "ranked by it")
    top = fastest(summary, ranking)
    if top is not None:
        text += f"; the fastest, {top.arm}, runs at {_speed(top, ranking)} with fidelity Δ {pts_ci(top.score_delta)} pts"
    return text + "."


def headline(summary: TaskSummary, budget: float, ranking: Ranking = MEASURED) -> str:
    ar = summary.baseline
    if not ranks_by_capability(summary):
        text = _fidelity_headline(summary, ranking)
        ref = lossless_reference(summary, ranking)
        return text + (f" Lossless reference ({ref.arm}): {_speed(ref, ranking)}." if ref is not None else "")
    unit, suffix = ("pass@1", "%") if summary.binary else ("score", " pts")
    ar_score = "-" if ar.score is None else pts(ar.score) + suffix
    graded = "" if summary.grader is None else f", graded by {summary.grader.label}"
    text = f"{summary.task} (n = {summary.n_units} paired units, AR {unit} {ar_score}{graded}): "
    if ar.score is None and summary.n_units:
        why = "no verdict of the grader has a rating" if summary.grader is not None else "no unit has a score"
        return text + f"{why}, so no rule is ranked."
    best = best_within_budget(summary, budget, ranking)
    if best is None:
        text += f"no method is faster than AR while losing at most {budget:g} point(s)"
        top = fastest(summary, ranking)
        if top is not None:
            text += f"; the fastest, {top.arm}, runs at {_speed(top, ranking)} with Δ {pts_ci(top.score_delta)} pts"
        text += "."
    else:
        text += (f"the fastest method within a {budget:g}-point loss budget is {best.arm}: "
                 f"{_speed(best, ranking)} over AR, Δ {pts_ci(best.score_delta)} pts, "
                 f"MAL {fmt(best.mean_acceptance_length)}.")
        if loss_beyond_budget(best, budget):
            text += " Its Δ interval reaches below the budget, so the loss is within budget on average only."
        low = ranking.speed(best).low
        if low is not None and low <= 1.0:
            text += " Its speed-up interval includes 1.0×."
    ref = lossless_reference(summary, ranking)
    if ref is not None:
        text += f" Lossless reference ({ref.arm}): {_speed(ref, ranking)}."
    return text


def ranking_line(ranking: Ranking, profiles: Sequence[Profile]) -> str:
    """Which speed-up the summary ranks by, and why."""
    by_name = {p.name: p for p in profiles}
    if ranking.profile is not None:
        profile = by_name[ranking.profile]
        return (f"Arms are ranked by their proxy speed-up on {profile.name} ({profile.device}), the declared "
                "deployment: what this run's counters and output lengths gain on that device, priced round by round "
                "from its cost profile. The measured speed-up on this machine is shown beside it: it is what this "
                "machine gains, and it can disagree (on a CPU a k-token verify pass costs several 1-token passes, on "
                "a GPU about one).")
    text = ("Arms are ranked by the speed-up measured on this machine: no deployment profile was declared (pass "
            "--profile DEVICE, e.g. h100-sxm, to rank by the proxy speed-up on a deployment's device).")
    if profiles:
        text += f" Proxy speed-ups ({', '.join(p.name for p in profiles)}) are shown beside it."
    return text


def summary_table(summaries: Sequence[TaskSummary], budget: float, ranking: Ranking = MEASURED) -> Table:
    profiles = summaries[0].profiles if summaries else ()
    rows = []
    for summary in summaries:
        ar = summary.baseline
        best = best_within_budget(summary, budget, ranking)
        top = fastest(summary, ranking)
        ref = lossless_reference(summary, ranking)
        chosen = best or ar
        ranked = ranks_by_capability(summary)
        pick = (chosen.arm if best else "ar (none faster within budget)") if ranked else \
            "not ranked (capability not measured)"
        delta = "Δ" if ranked else "fidelity Δ"
        rows.append(Row(summary.task, (
            Cell(summary.task, "task"), num(str(summary.n_units), "n_units", summary.n_units),
            Cell(measured_by(summary), "scorer"), num(pts(ar.score), "score", ar.score),
            Cell(pick, "arm"),
            est(speed_ci(chosen.speedup_total), "speedup_total", chosen.speedup_total) if ranked else
            Cell("-", "speedup_total", numeric=True),
            *(proxy_cell(chosen, p) if ranked else Cell("-", f"proxy.{p}.total", numeric=True) for p in profiles),
            est("-" if best is None else pts_ci(best.score_delta), "score_delta", chosen.score_delta),
            num(fmt(chosen.accuracy_retained, ".1%"), "accuracy_retained", chosen.accuracy_retained) if ranked else
            Cell("-", "accuracy_retained", numeric=True),
            Cell("-" if top is None else f"{top.arm}: {speed_ci(ranking.speed(top))}, {delta} "
                                         f"{pts_ci(top.score_delta)}", "fastest"),
            Cell("-" if ref is None else f"{ref.arm}: {speed_ci(ranking.speed(ref))}", "lossless"),
            Cell(failures_brief(chosen) if ranked else "-", "failures"),
        )))
    columns = with_proxy_columns(("task", "n", "measured by", "AR score", "best within budget", "speed-up [95% CI]",
                                  "Δ vs AR, pts [95% CI]", "acc. retained", "fastest overall", "lossless reference",
                                  "failures of the pick, Δ vs AR"),
                                 "speed-up [95% CI]", profiles)
    basis = ("the measured speed-up (Σ AR time / Σ method time)" if ranking.profile is None else
             f"the proxy speed-up on {ranking.profile} (Σ AR proxy time / Σ method proxy time)")
    return Table("summary-table", f"Best method per task within a {budget:g}-point capability-loss budget, by "
                                  f"{ranking.label}", columns, tuple(rows),
                 f"Best = the highest {basis} among arms whose mean score difference to AR is at least −{budget:g} "
                 "point(s); AR when none of them is faster than AR. Speed-up = measured on this machine; proxy "
                 "NAME = priced on cost profile NAME. Fastest overall and lossless reference by the same speed-up. "
                 "Failures of the pick: its no-answer, cut-at-budget and loop shares minus AR's, in percentage "
                 "points (the task's failure table has their CIs). "
                 "Scores in points (pass rate in %, an LLM grader's rating × 10, agreement × 100). A task scored only "
                 "for fidelity to AR (agreement with AR's output, no grader) is not ranked: its capability was not "
                 "measured.")


def deployment_ranking(profiles: Sequence[Profile], x_axis: str | None = None) -> Ranking:
    """Rank by the declared deployment's proxy speed-up (the x-axis profile, else the first profile that is not this
    machine's); by the measured speed-up when none is declared."""
    names = [p.name for p in profiles]
    if x_axis is not None and x_axis != MACHINE_PROFILE and x_axis in names:
        return Ranking(x_axis)
    declared = [name for name in names if name != MACHINE_PROFILE]
    return Ranking(declared[0]) if declared else MEASURED


def profiles_table(profiles: Sequence[Profile]) -> Table | None:
    """What each cost profile is: device, models and dtypes, how it was made, its assumptions and sources."""
    if not profiles:
        return None
    rows = []
    for p in profiles:
        models = f"target {p.target.model} ({p.target.dtype})" + (
            f"; draft {p.draft.model} ({p.draft.dtype})" if p.draft is not None else "") + "".join(
            f"; head {head.model} ({head.dtype})" for head in p.heads)
        rows.append(Row(p.name, (
            Cell(p.name, "profile"), Cell(p.kind, "kind"), Cell(p.device, "device"), Cell(models, "models"),
            Cell("; ".join(p.assumptions) or "-", "assumptions"),
            Cell("; ".join(f"{k}: {v}" for k, v in p.sources.items()) or "-", "sources"),
        )))
    return Table("profiles-table", "Cost profiles the proxy speed-ups are priced with",
                 ("profile", "kind", "device", "models", "assumptions", "sources"), tuple(rows),
                 "A sample's proxy time = prefill + Σ rounds [target forward of (drafted + 1 + extra) tokens at the "
                 "round's context + the drafter's recorded forwards and n-gram lookups], from the profile's table "
                 "at the batch size the sample was decoded at (a step of B requests at vLLM concurrency B; 1 on "
                 "relaxbench's own loop) (relaxbench.profiles). this-machine = measured at the start of the run's "
                 "latest session.")


# ------------------------------------------------------------------------------------------------ notices


def task_notice_texts(summary: TaskSummary, cells: Sequence[CellRecord]) -> list[NoticeText]:
    return [NoticeText(f.level, f.words()) for f in task_notices(summary, cells)]


def run_notice_texts(run: RunRecord) -> list[NoticeText]:
    return [NoticeText(f.level, f.words()) for f in run_notices(run)]


# ------------------------------------------------------------------------------------------------ definitions


def _drafter_text(drafter: Mapping[str, Any] | None) -> str:
    if drafter is None:
        return "-"
    knobs = drafter.get("knobs") or {}
    return str(drafter.get("kind")) + (f" ({knobs_text(knobs)})" if knobs else "")


def _description(spec: Mapping[str, Any], is_baseline: bool) -> str:
    """The method's description, then what its policy was trained on (a trained judge's head file and data)."""
    text = str(spec.get("description") or ("the target alone, one token per step" if is_baseline else "-"))
    trained = (spec.get("provenance") or {}).get("summary")
    return f"{text}; {trained}" if trained else text


def methods_table(run: RunRecord, summaries: Sequence[TaskSummary]) -> Table:
    """One row per arm (as first defined in the run): what was run, from the stored cell definitions."""
    seen: dict[str, CellRecord] = {}
    for cell in sorted(run.cells, key=lambda c: (c.position, c.task)):
        seen.setdefault(cell.arm, cell)
    rows = []
    for arm, cell in seen.items():
        spec = cell.method_spec
        rows.append(Row(arm, (
            Cell(arm, "arm"), Cell(cell.method, "method"), Cell(cell.policy, "policy"),
            Cell("AR baseline" if cell.is_baseline else ("lossless" if cell.lossless else "relaxed"), "kind"),
            Cell(knobs_text(cell.knobs), "knobs"), Cell(_drafter_text(cell.drafter), "drafter"),
            num(str(cell.k), "k", cell.k),
            Cell(_description(spec, cell.is_baseline), "description"),
            Cell(str(spec.get("source") or "-"), "source"),
        ), emphasis=cell.is_baseline))
    return Table("methods-table", "Arms: rule, knobs, drafter and draft length k",
                 ("arm", "method", "rule", "kind", "knobs", "drafter", "k", "description", "defined in"),
                 tuple(rows), "An arm is one point of a method's knob sweep (its name carries the knob values); "
                              "arms of the same method form one curve in the trade-off plots. The drafter is the one "
                              "actually used (with --draft ngram, prompt lookup replaces a draft model).")


def _sampling_text(sampling: Mapping[str, Any]) -> str:
    temperature = sampling.get("temperature", 0.0)
    if not temperature:
        return "greedy"
    cuts = [f"top-k={sampling.get('top_k')}" if sampling.get("top_k") else "",
            f"top-p={sampling.get('top_p')}" if sampling.get("top_p", 1.0) != 1.0 else ""]
    return ", ".join([f"T={temperature}", *filter(None, cuts)])


def decoding_text(decode: Mapping[str, Any], overridden: bool) -> str:
    """A task's decoding as run: the cell's sampling, the items' own per category where they differ, and whether
    the suite overrode the task's own sampling."""
    text = _sampling_text(decode.get("sampling") or {})
    by_category = decode.get("sampling_by_category") or {}
    if by_category:
        text = (f"the task's own per category: {'; '.join(f'{c} {_sampling_text(v)}' for c, v in by_category.items())}"
                f"; other categories {text}")
    if any(v.get("temperature") for v in [decode.get("sampling") or {}, *by_category.values()]):
        text += f", seed={decode.get('seed')}"
    if overridden:
        text += " (the suite's, over the task's own sampling)"
    budget = decode.get("thinking_budget")
    if budget:
        text += (f"; thinking budget {budget.get('tokens')} tokens (a sample still thinking there gets the closing "
                 "text and its answer is generated after it: Xia et al.'s forcing)")
    return text


def engine_text(suite: Mapping[str, Any]) -> str:
    """The decoding engine (docs/engines.md): relaxbench's loop, one request at a time, or vLLM at a concurrency."""
    engine = suite.get("engine") or "transformers"
    if engine == "transformers":
        return "transformers (relaxbench's loop, one request at a time)"
    concurrency = ", ".join(map(str, suite.get("concurrency") or (1,)))
    return f"{engine} (requests in flight: {concurrency})"


def setup_tables(run: RunRecord, summaries: Sequence[TaskSummary]) -> tuple[Table, Table]:
    latest = run.environment[-1] if run.environment else {}
    suite = run.suite

    def model_text(role: str, name: str | None) -> str:
        described = latest.get(role)
        if isinstance(described, Mapping):
            extra = ", ".join(f"{k}={v}" for k, v in described.items() if k != "name" and not isinstance(v, Mapping))
            return f"{name}" + (f" ({extra})" if extra else "")
        return str(name or "-")

    pairs = [("run", run.run_key), ("created", run.created_at), ("last updated", run.updated_at),
             ("target", model_text("target", run.target)), ("draft", model_text("draft", run.draft)),
             ("methods", ", ".join(map(str, suite.get("methods") or ())) or "-"),
             ("repeats", str(suite.get("repeats", "-"))), ("item limit", str(suite.get("limit") or "all")),
             ("warm-up generations per arm", str(suite.get("warmup", "-"))),
             ("engine", engine_text(suite))]
    setup = Table("setup-table", "Run", ("field", "value"),
                  tuple(Row(k, (Cell(k, "field"), Cell(v, "value"))) for k, v in pairs))
    rows = []
    for summary in summaries:
        cell = next(c for c in run.cells_of(summary.task) if c.is_baseline)
        decode, task = cell.decode, cell.task_spec
        overrides = set(decode.get("overrides_task") or ())
        tokens = str(decode.get("max_new_tokens", "-"))
        if "max_new_tokens" in overrides:
            tokens += f" (the suite's, over the task's own {task.get('max_new_tokens')})"
        rows.append(Row(summary.task, (
            Cell(summary.task, "task"), Cell(str(task.get("description") or "-"), "description"),
            Cell(measured_by(summary), "scorer"), num(str(summary.n_units), "n_units", summary.n_units),
            num(tokens, "max_new_tokens", None), Cell(decoding_text(decode, "sampling" in overrides), "decoding"),
            Cell(", ".join(repr(s) for s in decode.get("stop_strings") or ()) or "-", "stop"),
        )))
    tasks = Table("tasks-table", "Tasks and decoding settings",
                  ("task", "description", "measured by", "paired units", "max new tokens", "decoding", "stop strings"),
                  tuple(rows))
    return setup, tasks


ENVIRONMENT_FIELDS = (
    ("date", "date"), ("device", "device"), ("gpu", "GPU"), ("gpu_driver", "GPU driver"), ("cuda", "CUDA"),
    ("cpu_model", "CPU"), ("cpu_count", "CPUs"), ("executor", "executor"),
    ("threads", "torch threads"), ("load_average", "load average at start (1/5/15 min)"),
    ("others_busy_cpus", "CPUs busy with other processes at start"),
    ("target_dtype", "target dtype"), ("draft_dtype", "draft dtype"), ("python", "Python"), ("torch", "torch"),
    ("transformers", "transformers"), ("relaxbench", "relaxbench"), ("numpy", "numpy"), ("scipy", "scipy"),
    ("datasets", "datasets"), ("platform", "platform"), ("hostname", "host"), ("git_revision", "git revision"),
    ("command", "command"),
)


def _where_text(env: Mapping[str, Any]) -> str:
    """Where a session ran: its host, GPU (with the driver) and executor (a Ray worker's session is one worker)."""
    gpu = f"{env.get('gpu')} (driver {env.get('gpu_driver') or '?'})" if env.get("gpu") else "no GPU"
    return f"{env.get('hostname') or '-'}, {gpu}, {env.get('executor') or 'in-process'}"


def environment_tables(run: RunRecord) -> tuple[Table, Table]:
    latest = run.environment[-1] if run.environment else {}
    rows = []
    for key, label in ENVIRONMENT_FIELDS:
        value = latest.get(key)
        if isinstance(value, (list, tuple)):
            value = " / ".join(map(str, value))
        rows.append(Row(key, (Cell(label, "field"), Cell("-" if value in (None, "") else str(value), key))))
    environment = Table("environment-table", "Environment (latest session)", ("field", "value"), tuple(rows))
    counts = Counter(s.session_id for c in run.cells for s in c.samples)
    session_rows = tuple(Row(str(env.get("session_id")), (
        num(str(env.get("session_id")), "session_id", env.get("session_id")),
        Cell(str(env.get("started_at") or "-"), "started_at"), Cell(str(env.get("finished_at") or "-"), "finished_at"),
        Cell(str(env.get("status")), "status"),
        num(str(counts.get(env.get("session_id"), 0)), "samples", counts.get(env.get("session_id"), 0)),
        Cell(f"{env.get('device')}, {env.get('target_dtype')}/{env.get('draft_dtype')}, {env.get('threads')} threads",
             "setup"),
        Cell(_where_text(env), "where"),
        Cell(str(env.get("git_revision") or "-"), "git_revision"),
    )) for env in run.environment)
    sessions = Table("sessions-table", "Sessions (invocations that worked on this run)",
                     ("session", "started", "finished", "status", "samples stored", "device, dtypes, threads",
                      "host, GPU, executor", "git revision"), session_rows)
    return environment, sessions


# ------------------------------------------------------------------------------------------------ concurrency


def concurrency_section(run: RunRecord, runs: Sequence[RunRecord]) -> Concurrency | None:
    """Speed against concurrency over ``runs`` (``run`` and its siblings, ``analysis.concurrency_runs``); None when
    there are none, so a run at one concurrency has no such section."""
    if not runs:
        return None
    points = concurrency_points(runs)
    listed = "; ".join(f"concurrency {run_concurrency(r)}: run {r.run_id} ({r.run_key})"
                       + (", this report's run" if r.run_id == run.run_id else "") for r in runs)
    intro = (f"{len(runs)} runs of this store differ only in the requests the engine keeps in flight ({listed}). "
             "Per task, each arm's output tokens/s, its time per output token and its speed-up over AR at the same "
             "concurrency, paired per unit.")
    return Concurrency(intro, tuple(ConcurrencySection(task, table, concurrency_figure_art(points, task))
                                    for task, table in zip(tasks_of(points), concurrency_tables(points))))


# ------------------------------------------------------------------------------------------------ the report


def task_section(run: RunRecord, summary: TaskSummary, palette: Mapping[str, str], budget: float,
                 ranking: Ranking = MEASURED, x_axis: Ranking = MEASURED,
                 agreements: Sequence[Agreement] = (), gains: Sequence[DrafterGain] = ()) -> TaskSection:
    cells = run.cells_of(summary.task)
    baseline = next(c for c in cells if c.is_baseline)
    return TaskSection(task=summary.task, description=str(baseline.task_spec.get("description") or ""),
                       scorer=summary.scorer, n_units=summary.n_units, headline=headline(summary, budget, ranking),
                       tables=task_tables(summary, agreements, gains),
                       figures=() if summary.target_alone else tuple(task_figures(summary, palette, x_axis, gains)),
                       notices=tuple(task_notice_texts(summary, cells)))


def build_report(run: RunRecord, run_dir: str, budget: float = DEFAULT_BUDGET, profiles: Sequence[str] = (),
                 x_axis: str | None = None, siblings: Sequence[RunRecord] = (),
                 agree: Sequence[ArmPair] = ()) -> Report:
    """The report of ``run``: proxy speed-ups on ``profiles`` (references: device names, files, this-machine;
    default: those recorded with the run), the trade-off plot's x-axis (``measured`` or a profile), the agreement of
    the pairs of arms in ``agree`` and of those a rule declares and, when ``siblings`` holds ``run`` and the runs
    that differ from it only in concurrency, speed against concurrency."""
    choice = choose_profiles(run, profiles, x_axis)
    summaries = summarize_run(run, choice.profiles)
    ranking = deployment_ranking(choice.profiles, choice.x_axis)
    axis = Ranking(choice.x_axis) if choice.x_axis is not None else MEASURED
    palette = method_palette(["ar", *(c.method for c in sorted(run.cells, key=lambda c: c.position))])
    agreements = run_agreements(run, agree)
    gains = run_drafter_gains(run, summaries, [p for p in choice.profiles if p.name == ranking.profile])
    tasks = tuple(task_section(run, s, palette, budget, ranking, axis, agreements.get(s.task, ()), gains.get(s.task, ()))
                  for s in summaries)
    setup, tasks_table = setup_tables(run, summaries)
    environment, sessions = environment_tables(run)
    title = f"relaxbench: {run.target} with draft {run.draft or '-'}"
    lines = [t.headline for t in tasks] or ["This run has no tasks yet."]
    if tasks:
        lines.insert(0, ranking_line(ranking, choice.profiles))
    concurrency = concurrency_section(run, siblings)
    drawn = {f.kind for t in tasks for f in t.figures}
    methods = [text for kind, text in FIGURE_METHODS.items()
               if (kind != FIGURE_KIND or concurrency is not None) and (kind not in ("categories", "drafters") or kind in drawn)]
    if axis.profile is not None:
        methods.insert(1, (f"Trade-off on {axis.profile}", TRADEOFF_PROXY.format(profile=axis.profile)))
    return Report(
        title=title, run_dir=run_dir, run_key=run.run_key,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), budget=budget,
        summary_lines=tuple(lines), summary_table=summary_table(summaries, budget, ranking), tasks=tasks,
        methods_table=methods_table(run, summaries), setup_table=setup, tasks_table=tasks_table,
        environment_table=environment, sessions_table=sessions, notices=tuple(run_notice_texts(run)),
        figure_methods=tuple(methods), definitions=report_definitions(),
        profiles_table=profiles_table(choice.profiles), ranking=ranking, concurrency=concurrency,
        sections=_sections(concurrency is not None))


def _sections(with_concurrency: bool) -> tuple[tuple[str, str], ...]:
    if not with_concurrency:
        return SECTIONS
    after = [key for key, _ in SECTIONS].index("results") + 1
    return (*SECTIONS[:after], CONCURRENCY_SECTION, *SECTIONS[after:])


def load_report(run_dir: str | Path, budget: float = DEFAULT_BUDGET, run_id: int | None = None,
                profiles: Sequence[str] = (), x_axis: str | None = None, agree: Sequence[ArmPair] = ()) -> Report:
    run = load_run(run_dir, run_id)
    return build_report(run, str(run_dir), budget, profiles, x_axis, concurrency_runs(run_dir, run), agree)
