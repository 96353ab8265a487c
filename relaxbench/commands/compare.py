"""``relaxbench compare``: run a (target, draft) pair × methods × tasks (+ the AR baseline per task), store every
sample in ``DIR/results.sqlite`` (resuming what is there), with ``--grader``/``--grader-endpoint`` grade the answers of
tasks that have a grading protocol (MT-Bench) afterwards, print a table per task and write the HTML/PDF report.

Also ``relaxbench summary DIR``: the same tables from a stored run, without running anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from relaxbench.commands.args import add_graphs_args, add_runtime_args, add_wide_arg, check_files_early, check_graphs_early
from relaxbench.commands.grading import (
    add_grader_args,
    check_grading,
    grade_and_announce,
    grader_from_args,
    ungraded_notes,
)
from relaxbench.commands.report import (
    add_agree_arg,
    add_profile_arg,
    add_report_args,
    check_agree,
    check_has_samples,
    check_profile_args,
    engine_arms_known,
)
from relaxbench.errors import ConfigError
from relaxbench.validation import parse_assignments


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("compare", help="benchmark methods against the AR baseline on tasks; store and tabulate")
    c.add_argument("--suite", default=None, help="a suite YAML with any of the fields below (flags win), or the "
                                                 "name of a shipped one in suites/ (default, full)")
    c.add_argument("--target", default=None, help="target model: local dir, .gguf, packaged alias or hub id")
    c.add_argument("--draft", default=None, help="draft model name, or 'ngram' for prompt lookup")
    c.add_argument("--methods", default=None, help="comma-separated methods (methods/*.yaml names, YAML paths, "
                                                   "or policy names); each sweep point is its own arm")
    c.add_argument("--tasks", default=None, help="comma-separated tasks (tasks/*.yaml names or YAML paths, or "
                                                 "lm_eval:NAME for an lm-evaluation-harness task)")
    c.add_argument("--limit", type=int, default=None, help="first N items of each task (default: all)")
    c.add_argument("--task-limit", action="append", metavar="TASK=N", default=[],
                   help="first N items of TASK, over --limit (repeatable)")
    c.add_argument("--max-new-tokens", type=int, default=None, help="override every task's max_new_tokens")
    c.add_argument("--repeats", type=int, default=None,
                   help="R samples per item and turn, arms interleaved (default 1): independent samples under "
                        "sampling (scored as avg@R), the same output re-timed under greedy decoding")
    c.add_argument("--task-repeats", action="append", metavar="TASK=R", default=[],
                   help="R repeats for TASK, over --repeats (repeatable)")
    c.add_argument("--chat-template-arg", action="append", metavar="KEY=VALUE", default=[],
                   help="an argument of the target's chat template for every task, over the tasks' own "
                        "(e.g. enable_thinking=false; repeatable)")
    c.add_argument("--out", default=None, help="output folder holding results.sqlite (default runs/TARGET_vs_DRAFT)")
    c.add_argument("--data-file", action="append", metavar="TASK=PATH", default=[],
                   help="a local JSONL file for TASK (repeatable)")
    c.add_argument("-k", "--k", type=int, default=None, help="draft tokens per round (default: each method's, else 5)")
    c.add_argument("--temperature", type=float, default=None, help="0 = greedy (default)")
    c.add_argument("--top-k", type=int, default=None)
    c.add_argument("--top-p", type=float, default=None)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--thinking-budget", type=int, default=None, metavar="N",
                   help="Xia et al.'s thinking-budget forcing: at N new tokens a sample still thinking gets their "
                        "closing text and </think> appended, then its answer is generated (0: off; on in the "
                        "xia-paper suites)")
    c.add_argument("--override-task-sampling", action="store_true", default=None,
                   help="decode every task with the run's sampling (greedy unless --temperature), over a task's own "
                        "(MT-Bench's temperature per category, an lm-eval task's generation kwargs)")
    c.add_argument("--warmup", type=int, default=None, help="untimed warm-up generations per arm (default 1)")
    c.add_argument("--executor", default=None, help="where jobs run: in-process (default) or ray (docs/cluster.md; "
                                                    "needs relaxbench[ray])")
    c.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="ray: join this cluster (HOST:PORT, or 'auto' for the one `ray start` made on this machine); "
                        "default: start a local cluster and shut it down afterwards")
    c.add_argument("--workers", type=int, default=None,
                   help="ray: workers (each loads the pair once; default: as many as the cluster's resources fit)")
    c.add_argument("--gpus-per-worker", type=float, default=None,
                   help="ray: GPUs each worker declares (default 1 on CUDA; with --device-map auto the target "
                        "spreads over them)")
    c.add_argument("--cpus-per-worker", type=float, default=None,
                   help="ray: CPUs each worker declares, and its torch threads on CPU (default: 1 on CUDA; on CPU "
                        "--threads, else this machine's CPU count)")
    c.add_argument("--device-map", default=None, metavar="STRATEGY",
                   help="spread the target over the GPUs a worker has (auto, balanced, balanced_low_0, sequential: "
                        "accelerate's placement); the draft stays on the first")
    c.add_argument("--num-fewshot", type=int, default=None,
                   help="lm_eval:NAME tasks: few-shot examples (lm-eval's rules: a task that sets 0 keeps 0)")
    c.add_argument("--include-path", action="append", metavar="DIR", default=None,
                   help="lm_eval:NAME tasks: a folder of lm-eval task YAMLs, searched first (repeatable)")
    c.add_argument("--apply-chat-template", action="store_true", default=None,
                   help="lm_eval:NAME tasks: render prompts with the target's chat template, few-shot examples as "
                        "turns (as lm-eval's --apply_chat_template)")
    c.add_argument("--engine", default=None, choices=("transformers", "vllm"),
                   help="decoding engine: relaxbench's own loop (transformers, default) or vLLM (docs/engines.md; "
                        "`make install` sets it up)")
    c.add_argument("--concurrency", default=None, metavar="N[,M,...]",
                   help="vllm: requests in flight (vLLM's max_num_seqs), one run per value (default 1)")
    c.add_argument("--engine-arg", action="append", metavar="KEY=VALUE", default=None,
                   help="vllm: an argument of vLLM's engine (tensor_parallel_size=2, gpu_memory_utilization=0.9, "
                        "max_model_len=8192, quantization=fp8, enforce_eager=false), checked against the installed "
                        "vLLM before anything starts (repeatable; docs/engines.md)")
    add_report_args(c, prefix="report-")
    add_profile_arg(c, recorded=True)
    add_runtime_args(c)
    add_graphs_args(c)
    add_grader_args(c)
    add_wide_arg(c)
    c.set_defaults(handler=run)

    s = sub.add_parser("summary", help="print the tables of a stored compare run")
    s.add_argument("out", help="the run's output folder (or its results.sqlite)")
    s.add_argument("--run-id", type=int, default=None, help="which run in the store (default: the latest)")
    add_profile_arg(s)
    add_agree_arg(s)
    add_wide_arg(s)
    s.set_defaults(handler=run_summary)


def suite_from_args(args: argparse.Namespace):
    """A SuiteSpec from --suite (if any) with the command-line flags over it."""
    from relaxbench.harness.suite import SuiteSpec, split_names, suite_file_fields, suite_path
    from relaxbench.validation import load_yaml, validate

    fields: dict[str, Any] = {}
    where = "command line"
    if args.suite:
        path = suite_path(args.suite)
        where = str(path)
        fields = suite_file_fields(load_yaml(path), where)
    flags = {"target": args.target, "draft": args.draft, "methods": args.methods, "tasks": args.tasks,
             "limit": args.limit, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "k": args.k,
             "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
             "override_task_sampling": args.override_task_sampling, "thinking_budget": args.thinking_budget,
             "warmup": args.warmup, "num_fewshot": args.num_fewshot, "apply_chat_template": args.apply_chat_template,
             "include_paths": tuple(args.include_path) if args.include_path else None, "executor": args.executor,
             "device_map": args.device_map, "profiles": tuple(args.profiles) if getattr(args, "profiles", None) else None,
             "engine": getattr(args, "engine", None), "concurrency": getattr(args, "concurrency", None)}
    given = {key: value for key, value in flags.items() if value is not None}
    validate(SuiteSpec, {"target": "-", "methods": ["-"], "tasks": ["-"], **given}, "compare", "flag")  # as typed
    fields.update(given)
    executor_flags = {"address": args.ray_address, "workers": args.workers, "gpus_per_worker": args.gpus_per_worker,
                      "cpus_per_worker": args.cpus_per_worker}
    options = fields.get("executor_options")
    options = dict(options) if isinstance(options, dict) else {}
    options.update({key: value for key, value in executor_flags.items() if value is not None})
    fields["executor_options"] = options
    for key in ("device", "dtype", "draft_dtype"):
        if getattr(args, key) != "auto" or key not in fields:
            fields[key] = getattr(args, key)
    for required in ("target", "methods", "tasks"):
        if not fields.get(required):
            raise ConfigError(f"compare needs --{required} (or a --suite file that sets it)")
    if args.suite and args.tasks:  # --tasks picks some of the suite's tasks: its per-task settings of the others go
        chosen = set(split_names(args.tasks, "task"))
        for key in ("limits", "task_repeats"):
            fields[key] = {task: n for task, n in (fields.get(key) or {}).items() if task in chosen}
    data_files = dict(fields.get("data_files") or {})
    data_files.update({k: str(v) for k, v in parse_assignments(args.data_file, "--data-file").items()})
    fields["data_files"] = data_files
    limits = dict(fields.get("limits") or {})
    for task, n in parse_assignments(args.task_limit, "--task-limit").items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"--task-limit {task}={n}: N must be a positive integer")
        limits[task] = n
    fields["limits"] = limits
    task_repeats = dict(fields.get("task_repeats") or {})
    for task, n in parse_assignments(args.task_repeats, "--task-repeats").items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"--task-repeats {task}={n}: R must be a positive integer")
        task_repeats[task] = n
    fields["task_repeats"] = task_repeats
    engine_args = dict(fields.get("engine_args") or {})
    engine_args.update(parse_assignments(getattr(args, "engine_arg", None), "--engine-arg"))
    fields["engine_args"] = engine_args
    chat_args = dict(fields.get("chat_template_args") or {})
    chat_args.update(parse_assignments(args.chat_template_arg, "--chat-template-arg"))
    fields["chat_template_args"] = chat_args
    fields["methods"] = split_names(fields["methods"], "method")
    fields["tasks"] = split_names(fields["tasks"], "task")
    return validate(SuiteSpec, fields, where)


class RichProgress:
    """Bars per cell and overall, with ETA, on stderr."""

    def __init__(self) -> None:
        from relaxbench.ui import progress_bars

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
        from relaxbench.ui import Eta, console

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
    from relaxbench.ui import stderr_is_terminal

    return RichProgress() if stderr_is_terminal() else LogProgress()


def run(args: argparse.Namespace) -> int:
    suite = suite_from_args(args)
    check_graphs_early(args.graphs, suite.device, suite.engine, suite.device_map)
    if suite.engine == "transformers" and suite.concurrency != (1,):
        raise ConfigError("--concurrency applies to --engine vllm (the transformers engine runs one request at a "
                          "time)")
    if suite.engine_args and suite.engine != "vllm":
        raise ConfigError(f"--engine-arg {next(iter(suite.engine_args))}=... applies to --engine vllm (vLLM's engine "
                          "arguments); the transformers engine takes --device, --dtype and --device-map")
    check_files_early(suite.target, suite.draft, suite.data_files, suite.tasks)  # before torch, as the names below
    if suite.engine == "transformers":  # (the vLLM engine registers its own arm, native, when it is imported)
        from relaxbench.methods import check_methods

        check_methods(suite.methods, suite.draft)  # names and knobs, before torch loads; the plan checks it all
    if suite.engine == "transformers" and suite.max_new_tokens is not None:
        check_budget_from_files(suite.target, suite.max_new_tokens)  # a budget over the context: before torch too
    if suite.engine == "vllm":
        from relaxbench.integrations.vllm_client import check_engine_args, vllm_python

        vllm_python()  # a missing vLLM environment is one line, before anything else
        if suite.engine_args:  # names and values as the installed vLLM types them, before anything starts
            suite = suite.model_copy(update={"engine_args": check_engine_args(suite.engine_args)})
    run_ids = [run_suite(args, suite.model_copy(update={"concurrency": (n,)})) for n in suite.concurrency]
    if suite.engine == "vllm":  # the last run's tables and report show speed against concurrency; its figures too
        from relaxbench.report.concurrency import save_concurrency_figures
        from relaxbench.ui import console

        for path in save_concurrency_figures(Path(args.out) if args.out else default_out(suite), run_ids[-1]):
            console().print(f"figure: {path}", highlight=False, soft_wrap=True)
    return 0


def check_budget_from_files(target: str, max_new_tokens: int) -> None:
    """--max-new-tokens over the context the target's files on disk state (``models.preview.files_on_disk``), before
    torch is imported; a budget that fits is checked with every prompt before loading (``check_before_loading``)."""
    from relaxbench.decoding.prompts import check_positions
    from relaxbench.models.preview import files_on_disk

    facts = files_on_disk(target)
    if facts is not None:
        check_positions(facts.context, "--max-new-tokens", 1, max_new_tokens, 0, at_least=True)


def default_out(suite: Any) -> Path:
    from relaxbench.harness.plan import default_out_dir

    return default_out_dir(suite)


def run_suite(args: argparse.Namespace, suite: Any) -> int:
    """Run one suite (one concurrency): check, lock the store, then run, grade, tabulate and report it; its run id."""
    from relaxbench.harness.executor import EXECUTORS
    from relaxbench.grading.step import GradedTask
    from relaxbench.harness.plan import build_plan, default_out_dir
    from relaxbench.harness.store import STORE_NAME, Store
    from relaxbench.models.device import check_device, configure_runtime
    from relaxbench.sqlite_file import WriterLock
    from relaxbench.validation import validate

    report_formats = report_formats_of(args)  # checked before anything runs
    check_profile_args(list(suite.profiles), args.x_axis)
    if suite.engine == "vllm":
        from relaxbench.integrations.vllm_executor import VllmExecutor

        executor_type: Any = VllmExecutor
        if suite.executor != "in-process":
            raise ConfigError(f"--engine vllm runs in its own vLLM worker; leave out --executor {suite.executor}")
    else:
        executor_type = EXECUTORS.get(suite.executor)  # a missing optional dependency fails here, in one line
    options = validate(executor_type.Options, suite.executor_options, f"executor {suite.executor!r}", "option")
    grader = grader_from_args(args)
    check_device(suite.device)
    plan = build_plan(suite)  # validates everything and reads the data before any model loads
    out_dir = Path(args.out) if args.out else default_out_dir(suite)
    Store.check_writable(out_dir / STORE_NAME)  # a file, a read-only folder or a damaged store: refused here
    if suite.engine == "transformers" and suite.executor == "in-process":  # (a cluster's workers hold the models)
        check_before_loading(suite, plan)
    graded = [GradedTask(job.name, {item.item_id: item for item in job.items}, scorer) for job in plan.jobs
              if (scorer := job.source.grader_scorer()) is not None]
    grader_device = None
    if grader is not None:
        if not graded:
            raise ConfigError(f"an LLM grader grades tasks with a grading protocol (MT-Bench, the jbb tasks), and "
                              f"none of this run's tasks has one ({', '.join(job.name for job in plan.jobs)})")
        grader_device = configure_runtime(suite.device, args.threads)  # the grader runs here, in the driver
        check_grading(grader, graded, grader_device)
    lock = WriterLock(out_dir / STORE_NAME, " ".join(["relaxbench", *(getattr(args, "argv", None) or ["compare"])]))
    with lock:  # one writer per store, held until the run, its grading and its report are done
        return run_locked(args, suite, plan, out_dir, report_formats, executor_type, options, grader, graded,
                          grader_device)


def check_before_loading(suite: Any, plan: Any) -> None:
    """The draft's vocabulary against the target's, each arm's draft head against the target, and every first
    prompt against the target's context, from the tokenizers and configs alone: refused before the store is locked
    or any weight loads."""
    from relaxbench.arms import check_drafter_fits, preview_pair
    from relaxbench.decoding.prompts import context_window
    from relaxbench.harness.runner import fit_prompt
    from relaxbench.tasks.yaml_tasks import YamlTask

    target, _ = preview_pair(suite.target, suite.draft if plan.needs_draft_model() else None)
    for arm in plan.arms:
        try:
            check_drafter_fits(arm.drafter, target.config)
        except ConfigError as exc:
            raise ConfigError(f"arm {arm.name!r}: {exc}") from None
    if context_window(target) is None:
        return
    for job in plan.jobs:  # lm-eval's tasks encode through the loaded target, and keep their prompts' newest tokens
        if isinstance(job.source, YamlTask) and not job.source.likelihood_only:
            for item in job.items:
                fit_prompt(job, target, item, 0, job.source.encode(target, item, 0, [], job.max_new_tokens))


def run_locked(args: argparse.Namespace, suite: Any, plan: Any, out_dir: Path, report_formats: tuple[str, ...],
               executor_type: Any, options: Any, grader: Any, graded: list[Any], grader_device: str | None) -> int:
    """The run itself, once the store's writer lock is held: load, generate, grade, tabulate, report; its run id."""
    from relaxbench.harness.executor import ModelSetup, RunContext
    from relaxbench.harness.runner import register_job
    from relaxbench.harness.store import open_store
    from relaxbench.ui import console

    err = console(stderr=True)
    setup = ModelSetup(suite.target, suite.draft, plan.needs_draft_model(), suite.device, suite.dtype,
                       suite.draft_dtype, suite.device_map, args.threads, suite.warmup,
                       tuple(args.argv) if getattr(args, "argv", None) is not None else None,
                       kv_cache=args.kv_cache, graphs=args.graphs)
    with executor_type(options) as executor:
        executor.start(setup, plan)  # loads the models (here or on the workers) before the store is touched
        store = open_store(out_dir)
        try:
            run_id = store.open_run(plan.key, suite.target, suite.draft, suite.record())
            err.print(f"run {plan.key} in {out_dir / 'results.sqlite'}: {len(plan.arms)} arms × {len(plan.jobs)} "
                      f"tasks ({executor.name})")
            for note in plan.notes():
                err.print(note, markup=False, highlight=False)
            for note in ungraded_notes(plan.jobs) if grader is None else ():
                err.print(note, markup=False, highlight=False)
            with run_progress() as progress:
                cells = {job.name: register_job(store, run_id, job, progress) for job in plan.jobs}
                executor.run(RunContext(store, run_id, plan, cells), progress)
        finally:
            store.close()
    if grader is not None:  # generation is over and the executor has let go of the models: the grader gets the memory
        with open_store(out_dir) as store:
            grade_and_announce(store, run_id, graded, grader, grader_device, run_progress())
    print_tables(out_dir, run_id, wide=args.wide)
    if report_formats:
        from relaxbench.commands.report import write_and_announce

        write_and_announce(out_dir, ",".join(report_formats), args.report_out, args.budget, run_id,
                           x_axis=args.x_axis)
    return run_id


def report_formats_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The report formats ``compare`` writes at the end (none for ``--report-format none``), validated early."""
    from relaxbench.report import check_budget, output_paths, parse_formats

    check_budget(args.budget)
    if args.report_format.strip().lower() == "none":
        if args.report_out is not None:
            raise ConfigError(f"--report-out {args.report_out} with --report-format none: no report is written; "
                              "drop one of them")
        return ()
    formats = parse_formats(args.report_format)
    if args.report_out is not None:
        output_paths(args.report_out, formats, args.report_out, "--report-out")
    return formats


def print_tables(out: Path | str, run_id: int | None = None, profiles: list[str] | tuple[str, ...] = (),
                 wide: bool = False, agree: tuple[tuple[str, str], ...] = ()) -> None:
    """Every task's tables, as the report shows them (a proxy column per cost profile; the essential columns unless
    ``wide``; the agreement of the pairs of arms in ``agree`` and of those a rule declares)."""
    from relaxbench.report.terminal import print_run
    from relaxbench.ui import console

    print_run(out, console(), run_id, profiles, wide, agree)


def run_summary(args: argparse.Namespace) -> int:
    check_profile_args(args.profiles, None)
    check_has_samples(args.out, args.run_id)
    agree = check_agree(args.out, args.run_id, args.agree)
    with engine_arms_known():
        print_tables(args.out, args.run_id, args.profiles, args.wide, agree)
    return 0
