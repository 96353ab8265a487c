"""``relaxbench judge mine`` and ``relaxbench judge train``: label mismatches of a (draft, target) pair on a task
with AutoJudge's search, then fit the heads the ``autojudge`` and ``judge-decoding`` policies read.
docs/trained-judges.md shows the three commands end to end (mine, train, compare on other items)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from relaxbench.commands.args import add_runtime_args, runtime_from_args

DEFAULT_HEADS_DIR = "heads"


def register(sub: argparse._SubParsersAction) -> None:
    j = sub.add_parser("judge", help="trained judges: mine labelled mismatches, train heads (docs/trained-judges.md)")
    jsub = j.add_subparsers(dest="judge_command", required=True, parser_class=type(j))

    m = jsub.add_parser("mine", help="label a pair's mismatches on a task with AutoJudge's search")
    m.add_argument("--target", required=True, help="target model: local dir, .gguf, packaged alias or hub id")
    m.add_argument("--draft", required=True, help="draft model (a model: its hidden states are features)")
    m.add_argument("--task", required=True, help="a task with an automatic scorer: tasks/*.yaml name or YAML path, "
                                                 "or lm_eval:NAME")
    m.add_argument("--data-file", default=None, metavar="PATH", help="a local JSONL file for the task")
    m.add_argument("--items", default=None, metavar="SPEC",
                   help="which items to mine: ranges of positions (20:40, 100:) and/or item ids, comma-separated; "
                        "keep them disjoint from the items you evaluate on (default: all)")
    m.add_argument("--limit", type=int, default=None, help="mine at most the first N selected items")
    m.add_argument("--max-new-tokens", type=int, default=None, help="generation budget (default: the task's)")
    m.add_argument("--store", default="judge-mining.sqlite", help="the mining store (default: %(default)s)")
    m.add_argument("--no-stop-at-settled", dest="stop_at_settled", action="store_false",
                   help="continue generations past a closed code block the scorer extracts (mines trailing prose)")
    m.add_argument("--min-target-prob", type=float, default=0.0, metavar="P",
                   help="label-changing shortcut (AutoJudge's EAGLE variant uses 0.01): a draft token the target "
                        "gives less than P is important without a continuation (default: off)")
    m.add_argument("--rollout-cap", type=float, default=None, metavar="R",
                   help="label-changing (AutoJudge's EAGLE variant uses 1.5): end continuations at R x the "
                        "reference length (default: off)")
    m.add_argument("--max-mismatches", type=int, default=None, metavar="N",
                   help="changes the data set: stop an item's search after N mismatches (default: off)")
    add_runtime_args(m)
    m.set_defaults(handler=run_mine)

    t = jsub.add_parser("train", help="fit the autojudge and judge-decoding heads on a mining store")
    t.add_argument("--store", default="judge-mining.sqlite", help="the mining store (default: %(default)s)")
    t.add_argument("--out", default=DEFAULT_HEADS_DIR, help="folder for HEAD.json files (default: %(default)s)")
    t.add_argument("--heads", default="autojudge,judge-decoding", help="which heads (default: %(default)s)")
    t.add_argument("--folds", type=int, default=5, help="folds of problems for held-out figures (default: 5)")
    t.add_argument("--seed", type=int, default=52, help="problem shuffle seed (default: AutoJudge's 52)")
    t.add_argument("--taus", default="0.02,0.05,0.1,0.2,0.3,0.5", help="tau values to report (default: %(default)s)")
    t.set_defaults(handler=run_train)


# ------------------------------------------------------------------------------------------------------ mine

class RichMiningProgress:
    """Items (with an ETA from the items finished in this session) and the current item's positions, on
    stderr; each finished item is printed with its mismatches and wall seconds."""

    def __init__(self) -> None:
        from relaxbench.ui import progress_bars

        # an item takes minutes: estimate speed over the whole session, not rich's default 30 s window
        self.progress = progress_bars(speed_estimate_period=24 * 3600)
        self.items: Any = None
        self.current: Any = None

    def __enter__(self) -> RichMiningProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def start(self, total: int, done: int) -> None:
        self.items = self.progress.add_task("[bold]items", total=total, completed=done)  # not counted as speed

    def item(self, item_id: str, length: int) -> None:
        self.current = self.progress.add_task(f"{item_id}: positions", total=max(length, 1))

    def update(self, left: int, length: int, handled: int, important: int) -> None:
        self.progress.update(self.current, total=max(length, 1), completed=min(left, length),
                             description=f"mismatches {handled} ({important} important): positions")

    def item_done(self, item_id: str, handled: int, important: int, seconds: float) -> None:
        self.progress.remove_task(self.current)
        self.progress.advance(self.items)
        self.progress.console.print(f"{item_id}: {handled} mismatch{'' if handled == 1 else 'es'}, {important} "
                                    f"important, {seconds:.0f} s", highlight=False, markup=False)


def load_task_source(task: str, target: str, data_file: str | None):
    """The one task source named ``task`` (its items all loaded)."""
    from relaxbench.errors import ConfigError
    from relaxbench.tasks import LoadRequest, load_sources

    loaded = load_sources([task], LoadRequest(target=target, data_files={task: data_file} if data_file else {}))
    sources = loaded[task]
    if len(sources) != 1:
        raise ConfigError(f"task {task!r} stands for {len(sources)} tasks ({', '.join(s.name for s in sources)}); "
                          "mine one at a time")
    return sources[0]


def run_mine(args: argparse.Namespace) -> int:
    from relaxbench.decoders import load_pair
    from relaxbench.errors import ConfigError
    from relaxbench.harness.environment import describe_environment
    from relaxbench.methods import MODEL_FREE_DRAFTS
    from relaxbench.trained_judges.mine import check_minable, mine, mining_config
    from relaxbench.trained_judges.search import MiningOptions
    from relaxbench.trained_judges.select import select_items
    from relaxbench.trained_judges.store import MiningStore
    from relaxbench.ui import console

    if args.draft in MODEL_FREE_DRAFTS:
        raise ConfigError(f"--draft {args.draft}: mining needs a draft model (its hidden states are features)")
    for flag, value in (("--max-new-tokens", args.max_new_tokens), ("--max-mismatches", args.max_mismatches)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if not 0 <= args.min_target_prob < 1:
        raise ConfigError(f"--min-target-prob must be in [0, 1), got {args.min_target_prob}")
    if args.rollout_cap is not None and args.rollout_cap <= 0:
        raise ConfigError(f"--rollout-cap must be > 0, got {args.rollout_cap}")
    source = load_task_source(args.task, args.target, args.data_file)
    items = select_items(source.items, args.items, args.limit)
    check_minable(source, items)
    generation = source.generation()
    options = MiningOptions(max_new_tokens=args.max_new_tokens or generation.max_new_tokens, stop=generation.stop,
                            stop_at_settled=args.stop_at_settled, min_target_prob=args.min_target_prob,
                            rollout_cap=args.rollout_cap, max_mismatches=args.max_mismatches)
    device = runtime_from_args(args)
    store = MiningStore(args.store)  # a compare store or another setup fails here, before the models load
    store.precheck({"target": args.target, "draft": args.draft, "task": source.name, "data": source.fingerprint,
                    "options": options.model_dump(), "device": device})
    target, draft = load_pair(args.target, args.draft, device, args.dtype, args.draft_dtype)
    err = console(stderr=True)
    key, config = mining_config(source, target, draft, options, device)
    status, session = "failed", None
    try:
        store.bind(key, config)
        session = store.start_session(describe_environment(target, draft, device, getattr(args, "argv", None)))
        err.print(f"mining {len(items)} items of {source.name} with {args.draft} -> {args.target} into {store.path}",
                  highlight=False)
        with RichMiningProgress() as progress:
            reports = mine(source, items, target, draft, store, options, session, progress)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if session is not None:
            store.finish_session(session, status)
    print_store_summary(store, reports)
    store.close()
    return 0


def print_store_summary(store, reports) -> None:  # noqa: ANN001
    """Label balance and mining time over the whole store, and this session's items."""
    from relaxbench.ui import console

    rows = store.mismatch_rows()
    items = [row for row in store.item_rows() if row["status"] == "done"]
    important = sum(row["important"] for row in rows)
    seconds = sum(row["seconds"] for row in items)
    out = console()
    out.print(f"store {store.path}: {len(items)} items mined, {len(rows)} mismatches, {important} important "
              f"({important / len(rows):.1%})" if rows else f"store {store.path}: {len(items)} items, no mismatches",
              highlight=False)
    if items:
        out.print(f"mining time: {seconds / len(items):.0f} s per item (mean of {len(items)}), "
                  f"{sum(row['target_tokens'] for row in items) / len(items):.0f} target positions per item; "
                  f"this session mined {len(reports)} items", highlight=False)


# ------------------------------------------------------------------------------------------------------ train

def run_train(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.errors import ConfigError
    from relaxbench.trained_judges.store import MiningStore
    from relaxbench.trained_judges.train import head_of, train_heads
    from relaxbench.ui import console

    if args.folds < 2:
        raise ConfigError(f"--folds must be >= 2, got {args.folds}")
    try:
        taus = tuple(float(t) for t in args.taus.split(",") if t.strip())
    except ValueError:
        raise ConfigError(f"--taus {args.taus!r}: give comma-separated numbers") from None
    kinds = tuple(k.strip() for k in args.heads.split(",") if k.strip())
    if not Path(args.store).is_file():
        raise ConfigError(f"--store {args.store}: no such mining store (run `relaxbench judge mine` first)")
    with MiningStore(args.store) as store:
        data = store.data()
    fits = train_heads(data, kinds, args.folds, taus, args.seed)
    out = console()
    n, important = len(data.important), int(data.important.sum())
    out.print(f"{args.store}: {n} mismatches from {len(data.items)} problems of {data.config['task']['name']}, "
              f"{important} important ({important / n:.1%}); held-out figures from {min(args.folds, len(data.items))}"
              f" folds of problems", highlight=False)
    for fit in fits:
        head = head_of(fit, data, str(args.store), args.folds, args.seed)
        path = head.save(Path(args.out) / f"{fit.kind}.json")
        auc = "-" if fit.roc_auc is None else f"{fit.roc_auc:.3f}"
        table = Table(title=f"{fit.kind}: C={fit.C:.3g}, held-out ROC-AUC {auc} -> {path}")
        for column in ("tau", "accepted mismatches", "precision (important)", "recall (important)",
                       "important accepted"):
            table.add_column(column, justify="right")
        for row in fit.by_tau:
            table.add_row(f"{row.tau:g}", f"{row.accepted:.1%}", _pct(row.precision), _pct(row.recall),
                          str(row.important_accepted))
        out.print(table)
    return 0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
