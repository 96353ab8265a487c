"""A ``compare`` run as one pipeline of named steps: check → plan → lock → execute → grade → summarise → report.

``relaxbench compare`` parses its command line into a ``RunRequest`` (the suite, how this process runs, what it
writes, the grader) and hands it to ``run``; nothing else is sequenced in the command. Each step takes what the
one before gave and returns what the next needs:

* ``check`` — what the request settles before torch loads: the executor's card (``harness.executor``: the engine
  and what it supports), the files on disk, the engine's own early refusals, the report's and profiles' names.
* ``plan`` — the plan (every arm, task and item: ``harness.plan``), the store's folder, the heads and prompts
  against the target's tokenizer and config where the models load here, the grader's prompts. Still nothing loaded.
* ``lock`` — the store's one writer, held until the report is written.
* ``execute`` — the executor loads the models (before the store is touched), then runs every missing unit; the
  store resumes what is there.
* ``grade`` — the LLM grader over the graded tasks, once the executor has let go of the models.
* ``summarise`` and ``report`` — the tables on stdout and the HTML/PDF report, from the store alone (as
  ``relaxbench summary`` and ``relaxbench report`` give them later).

A suite with several concurrencies is one pipeline per concurrency; an executor that keeps requests in flight then
draws speed against concurrency. ``rescore`` and ``report`` reuse the grade, summarise and report steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaxbench.errors import ConfigError
from relaxbench.harness.executor import ExecutorCard, RunOptions, executor_card
from relaxbench.harness.preflight import check_files_early, check_graphs_early
from relaxbench.harness.suite import SuiteSpec
from relaxbench.ui import Eta, console, progress_bars, stderr_is_terminal

GRADER_HINT = ("(--grader MODEL, or --grader-endpoint URL --grader-model NAME; or later: relaxbench rescore DIR "
               "--grader MODEL)")


@dataclass(frozen=True)
class Runtime:
    """How this process runs the models: recorded in each session's environment, never in the run key."""

    threads: int | None = None
    kv_cache: str = "auto"
    graphs: str = "auto"
    argv: tuple[str, ...] | None = None  # the command line, recorded with every session and the store's lock


@dataclass(frozen=True)
class Outputs:
    """Where the run is stored and what is shown of it afterwards."""

    out: Path | None = None  # the run's folder (default: runs/TARGET_vs_DRAFT)
    report_formats: tuple[str, ...] = ("html", "pdf")  # () writes no report
    report_out: str | None = None
    budget: float | None = None
    x_axis: str | None = None
    wide: bool = False


@dataclass(frozen=True)
class RunRequest:
    """Everything one ``compare`` asks for: what it computes (the suite), how and where it runs, what it writes."""

    suite: SuiteSpec
    runtime: Runtime = field(default_factory=Runtime)
    outputs: Outputs = field(default_factory=Outputs)
    grader: Any | None = None  # an LLM grader (``grading``), built by the command from its flags


@dataclass(frozen=True)
class PlannedRun:
    """A checked request with its plan: what ``lock`` and ``execute`` need, nothing loaded yet."""

    request: RunRequest
    card: ExecutorCard
    executor_options: Any
    plan: Any  # harness.plan.RunPlan
    out_dir: Path
    graded: list[Any]  # grading.step.GradedTask, one per task with a grading protocol
    grader_device: str | None


def run(request: RunRequest) -> list[int]:
    """The whole pipeline, once per concurrency of the suite; the run ids, in order."""
    request, card = check(request)
    run_ids = []
    for concurrency in request.suite.concurrency:
        one = RunRequest(request.suite.model_copy(update={"concurrency": (concurrency,)}), request.runtime,
                         request.outputs, request.grader)
        planned = plan(one, card)
        with lock(planned):
            run_id = execute(planned)
            grade(planned, run_id)
            summarise(planned.out_dir, run_id, wide=request.outputs.wide)
            report(planned.out_dir, run_id, request.outputs)
        run_ids.append(run_id)
    if "concurrency" in card.supports:  # the last run's tables and report show speed against concurrency; figures
        from relaxbench.report.concurrency import save_concurrency_figures

        for path in save_concurrency_figures(planned.out_dir, run_ids[-1]):
            console().print(f"figure: {path}", highlight=False, soft_wrap=True)
    return run_ids


def check(request: RunRequest) -> tuple[RunRequest, ExecutorCard]:
    """Everything the request settles before torch loads, each refusal one line: the executor and what it supports,
    the files on disk, the engine's own early checks (names, knobs, budgets, engine arguments), the profiles."""
    suite = request.suite
    card = executor_card(suite, RunOptions(kv_cache=request.runtime.kv_cache, graphs=request.runtime.graphs))
    check_graphs_early(request.runtime.graphs, suite.device, suite.device_map)
    check_files_early(suite.target, suite.draft, suite.data_files, suite.tasks)
    suite = card.check_early(suite)
    check_profile_args(list(suite.profiles), request.outputs.x_axis)
    return RunRequest(suite, request.runtime, request.outputs, request.grader), card


def plan(request: RunRequest, card: ExecutorCard) -> PlannedRun:
    """The plan and what it settles before any weight loads: the executor's options, the device, every arm, task and
    item, the store's folder, the pair's vocabularies, heads and prompts where the models load here, the grader."""
    from relaxbench.grading.step import GradedTask
    from relaxbench.harness.plan import build_plan, default_out_dir
    from relaxbench.harness.store import STORE_NAME, Store
    from relaxbench.models.device import check_device, configure_runtime
    from relaxbench.validation import validate

    suite = request.suite
    executor_options = validate(card.load().Options, suite.executor_options, f"executor {suite.executor!r}", "option")
    check_device(suite.device)
    run_plan = build_plan(suite)  # validates everything and reads the data before any model loads
    card.check_plan(run_plan)  # what the executor's engine cannot run, from its card
    out_dir = request.outputs.out or default_out_dir(suite)
    Store.check_writable(out_dir / STORE_NAME)  # a file, a read-only folder or a damaged store: refused here
    if card.loads_in_driver:  # (elsewhere the workers hold the models and check there)
        check_before_loading(suite, run_plan)
    graded = [GradedTask(job.name, {item.item_id: item for item in job.items}, scorer) for job in run_plan.jobs
              if (scorer := job.source.grader_scorer()) is not None]
    grader_device = None
    if request.grader is not None:
        if not graded:
            raise ConfigError(f"an LLM grader grades tasks with a grading protocol (MT-Bench, the jbb tasks), and "
                              f"none of this run's tasks has one ({', '.join(job.name for job in run_plan.jobs)})")
        grader_device = configure_runtime(suite.device, request.runtime.threads)  # the grader runs in the driver
        check_grading(request.grader, graded, grader_device)
    return PlannedRun(request, card, executor_options, run_plan, out_dir, graded, grader_device)


def check_before_loading(suite: SuiteSpec, run_plan: Any) -> None:
    """The draft's vocabulary against the target's, each arm's draft head against the target, and every first
    prompt against the target's context, from the tokenizers and configs alone: refused before the store is locked
    or any weight loads."""
    from relaxbench.decoders import check_drafter_fits, preview_pair
    from relaxbench.decoding.prompts import context_window
    from relaxbench.harness.runner import fit_prompt
    from relaxbench.tasks.yaml_tasks import YamlTask

    target, _ = preview_pair(suite.target, suite.draft if run_plan.needs_draft_model() else None)
    for arm in run_plan.arms:
        try:
            check_drafter_fits(arm.drafter, target.config)
        except ConfigError as exc:
            raise ConfigError(f"arm {arm.name!r}: {exc}") from None
    if context_window(target) is None:
        return
    for job in run_plan.jobs:  # lm-eval's tasks encode through the loaded target, and keep their prompts' newest tokens
        if isinstance(job.source, YamlTask) and not job.source.likelihood_only:
            for item in job.items:
                fit_prompt(job, target, item, 0, job.source.encode(target, item, 0, [], job.max_new_tokens))


def lock(planned: PlannedRun) -> Any:
    """The store's writer lock (one writer per store), to hold while the run, its grading and its report are done."""
    from relaxbench.harness.store import STORE_NAME
    from relaxbench.sqlite_file import WriterLock

    argv = planned.request.runtime.argv
    return WriterLock(planned.out_dir / STORE_NAME, " ".join(["relaxbench", *(argv or ["compare"])]))


def execute(planned: PlannedRun) -> int:
    """Load the models where the executor runs them (before the store is touched), then generate every missing
    unit into the store; the run id."""
    from relaxbench.harness.executor import ModelSetup, RunContext
    from relaxbench.harness.runner import register_job
    from relaxbench.harness.store import open_store

    suite, runtime, run_plan = planned.request.suite, planned.request.runtime, planned.plan
    err = console(stderr=True)
    setup = ModelSetup(suite.target, suite.draft, run_plan.needs_draft_model(), suite.device, suite.dtype,
                       suite.draft_dtype, suite.device_map, runtime.threads, suite.warmup, runtime.argv,
                       kv_cache=runtime.kv_cache, graphs=runtime.graphs)
    with planned.card.load()(planned.executor_options) as executor:
        executor.start(setup, run_plan)  # loads the models (here or on the workers) before the store is touched
        store = open_store(planned.out_dir)
        try:
            run_id = store.open_run(run_plan.key, suite.target, suite.draft, suite.record())
            err.print(f"run {run_plan.key} in {planned.out_dir / 'results.sqlite'}: {len(run_plan.arms)} arms × "
                      f"{len(run_plan.jobs)} tasks ({executor.name})")
            notes = [*run_plan.notes(), *(ungraded_notes(run_plan.jobs) if planned.request.grader is None else ())]
            for note in notes:
                err.print(note, markup=False, highlight=False)
            with run_progress() as progress:
                cells = {job.name: register_job(store, run_id, job, progress) for job in run_plan.jobs}
                executor.run(RunContext(store, run_id, run_plan, cells), progress)
        finally:
            store.close()
    return run_id


def grade(planned: PlannedRun, run_id: int) -> Any:
    """The LLM grader over the run's graded tasks (generation is over and the executor has let go of the models:
    the grader gets the memory); its tally, or None without a grader."""
    from relaxbench.harness.store import open_store

    if planned.request.grader is None:
        return None
    with open_store(planned.out_dir) as store:
        return grade_and_announce(store, run_id, planned.graded, planned.request.grader, planned.grader_device,
                                  run_progress())


def summarise(out: Path | str, run_id: int | None = None, profiles: Sequence[str] = (), wide: bool = False,
              agree: tuple[tuple[str, str], ...] = ()) -> None:
    """Every task's tables on stdout, as the report shows them (a proxy column per cost profile; the essential
    columns unless ``wide``; the agreement of the pairs of arms in ``agree`` and of those a rule declares)."""
    from relaxbench.report.terminal import print_run

    print_run(out, console(), run_id, tuple(profiles), wide, agree)


def report(out: Path | str, run_id: int | None, outputs: Outputs, profiles: Sequence[str] = (),
           agree: tuple[tuple[str, str], ...] = ()) -> dict[str, Path]:
    """The HTML/PDF report of a stored run, each written file announced on stdout (none for no formats)."""
    from relaxbench.report import write_report

    if not outputs.report_formats:
        return {}
    written = write_report(out, outputs.report_formats, outputs.report_out, outputs.budget, run_id, tuple(profiles),
                           outputs.x_axis, agree)
    for fmt, path in written.items():
        console().print(f"report ({fmt}): {path}", highlight=False, soft_wrap=True)
    return written


def report_formats(formats: str, report_out: str | None, budget: float | None) -> tuple[str, ...]:
    """The report formats a run writes (none for ``none``), with ``--report-out`` and ``--budget``, validated before
    anything runs."""
    from relaxbench.report import check_budget, output_paths, parse_formats

    check_budget(budget)
    if formats.strip().lower() == "none":
        if report_out is not None:
            raise ConfigError(f"--report-out {report_out} with --report-format none: no report is written; drop one "
                              "of them")
        return ()
    parsed = parse_formats(formats)
    if report_out is not None:
        output_paths(report_out, parsed, report_out, "--report-out")
    return tuple(parsed)


def check_profile_args(profiles: Sequence[str], x_axis: str | None) -> None:
    """Every --profile and --x-axis names a profile (one-line errors, before anything runs)."""
    from relaxbench.analysis.proxy import MEASURED_AXIS
    from relaxbench.profiles.resolve import check_profile_ref

    for ref in [*profiles, *([x_axis] if x_axis not in (None, MEASURED_AXIS) else [])]:
        check_profile_ref(ref)


def ungraded_notes(jobs: Sequence[Any]) -> list[str]:
    """What a run says once when tasks with a grading protocol run without a grader: which are scored for fidelity
    to AR only (MT-Bench), and which by their own scorer's classifier (refusal: the pattern list)."""
    fidelity: list[str] = []
    by_own: dict[str, list[str]] = {}
    for job in jobs:
        if job.source.grader_scorer() is None:
            continue
        scorer = job.source.scorer()
        if scorer.measure == "fidelity":
            fidelity.append(job.name)
        else:
            by_own.setdefault(scorer.name, []).append(job.name)
    notes = []
    if fidelity:
        notes.append(f"{', '.join(fidelity)}: scored for fidelity to AR only (agreement with AR's output), not "
                     f"capability, since no grader was given {GRADER_HINT}")
    for scorer, names in by_own.items():
        notes.append(f"{', '.join(names)}: scored by {scorer}'s own classifier, not by an LLM grader, since no grader "
                     f"was given {GRADER_HINT}")
    return notes


def check_grading(grader: Any, tasks: Sequence[Any], device: str) -> None:
    """Before any generation: every grader prompt and reference answer the tasks need exists (fetched now), and the
    grader can work (its model resolves; its endpoint answers and the API key variable is set)."""
    for task in tasks:
        task.check()
    grader.check(device)


def grade_and_announce(store: Any, run_id: int, tasks: Sequence[Any], grader: Any, device: str | None,
                       progress: Any) -> Any:
    """Run the grading pass and say on stderr what it did and how long it took; its tally."""
    from relaxbench.grading.step import grade_tasks

    start = time.perf_counter()
    with progress:
        tally = grade_tasks(store, run_id, tasks, grader, device, progress)
    wall = time.perf_counter() - start
    text = (f"grader {grader.label()}: {tally.asked} verdicts asked, {tally.cached} found in the store, "
            f"{tally.unparseable} without a rating, {tally.failed} failed; {wall:.1f} s "
            f"(grader calls {tally.seconds:.1f} s)")
    if tally.skipped:
        text += f"; {tally.skipped} samples outside the tasks' grading protocols (not graded)"
    if tally.failed:
        text += f"; failures: {'; '.join(tally.errors)} (relaxbench rescore asks again)"
    console(stderr=True).print(text, markup=False, highlight=False)
    return tally


class RichProgress:
    """Bars per cell and overall, with ETA, on stderr."""

    def __init__(self) -> None:
        self.progress = progress_bars(transient=False)
        self.overall = self.progress.add_task("[bold]all cells", total=0)
        self.bars: dict[tuple[str, str], Any] = {}

    def __enter__(self) -> RichProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def cell(self, task: str, arm: str, total: int, done: int) -> None:
        self.bars[(task, arm)] = self.progress.add_task(f"{task} / {arm}", total=total, completed=done)
        overall = self.progress.tasks[self.overall]
        self.progress.update(self.overall, total=(overall.total or 0) + total, completed=overall.completed + done)

    def advance(self, task: str, arm: str) -> None:
        self.progress.advance(self.bars[(task, arm)])
        self.progress.advance(self.overall)

    def note(self, message: str) -> None:
        self.progress.console.print(message)


class LogProgress:
    """For a log (stderr not a terminal, where bars cannot redraw): a line per finished sample with its cell's
    count, the run's count, the elapsed time and the run's ETA."""

    def __init__(self) -> None:
        self.console = console(stderr=True)
        self.run = Eta()
        self.cells: dict[tuple[str, str], list[int]] = {}

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def cell(self, task: str, arm: str, total: int, done: int) -> None:
        self.cells[(task, arm)] = [done, total]
        self.run.add(total, done)

    def advance(self, task: str, arm: str) -> None:
        counts = self.cells[(task, arm)]
        counts[0] += 1
        self.run.step()
        self.note(f"{task} / {arm}: {counts[0]}/{counts[1]}; all cells {self.run.done}/{self.run.total}, "
                  f"{self.run.text()}")

    def note(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)


def run_progress() -> RichProgress | LogProgress:
    """The progress of a run: bars in a terminal, a line per finished sample in a log."""
    return RichProgress() if stderr_is_terminal() else LogProgress()
