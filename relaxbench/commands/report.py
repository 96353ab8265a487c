"""``relaxbench report RUN_DIR``: the HTML and PDF reports of a stored run (``compare`` writes them too)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from relaxbench import pipeline


def add_report_args(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The report options, shared with ``compare`` (there prefixed ``--report-``)."""
    p.add_argument(f"--{prefix}format" if prefix else "--format", dest="report_format", default="html,pdf",
                   help="comma-separated: html, pdf (default: both)" + ("; 'none' writes no report" if prefix else ""))
    p.add_argument(f"--{prefix}out" if prefix else "--out", dest="report_out", default=None, metavar="PATH",
                   help="a folder for report.html/report.pdf, or a .html/.pdf file for one format "
                        "(default: reports/<run folder name>)")
    p.add_argument("--budget", type=float, default=None, metavar="POINTS",  # checked by report.check_budget
                   help="capability-loss budget for the summary's best method, in score points (default 1)")
    p.add_argument("--x-axis", dest="x_axis", default=None, metavar="measured|PROFILE",
                   help="the trade-off plot's x-axis: the measured speed-up (default) or a cost profile's proxy "
                        "speed-up (a device name, a profile file, this-machine); the measured one is still drawn")


def add_profile_arg(p: argparse.ArgumentParser, recorded: bool = False) -> None:
    """``--profile NAME|FILE`` (repeatable), shared by ``report``, ``summary`` and ``compare``."""
    p.add_argument("--profile", dest="profiles", action="append", default=[], metavar="NAME|FILE",
                   help="price proxy speed-ups on a cost profile: a device (relaxbench profile --list), a profile "
                        "file (relaxbench profile ... --out FILE) or this-machine; repeatable"
                        + ("; recorded with the run, so summary and report use it too" if recorded else
                           " (default: those recorded with the run; this-machine is always shown when stored)"))


def add_agree_arg(p: argparse.ArgumentParser) -> None:
    """``--agree A:B`` (repeatable), shared by ``report`` and ``summary``."""
    p.add_argument("--agree", action="append", default=[], metavar="A:B",
                   help="also show how closely arm A agrees with arm B on the same samples (identical outputs, "
                        "tokens to the first divergence, rounds alike, MAL of each); repeatable. Pairs whose rule "
                        "declares a counterpart (fly-native and fly-vllm) are shown without it")


@contextlib.contextmanager
def engine_arms_known() -> Iterator[None]:
    """The vLLM engine's own arms (``native``, ``fly-native``) registered while a command reads a stored run, so a
    vLLM run's ``fly-native`` is known by its rule, whose counterpart the agreement table pairs it with; afterwards
    the registry is as it was (they are no rules of the transformers engine: an in-process caller must not see
    them)."""
    from relaxbench.integrations.vllm_rules import FLY_NATIVE, NATIVE
    from relaxbench.policies import POLICIES

    missing = [name for name in (NATIVE, FLY_NATIVE) if name not in POLICIES]
    from relaxbench.integrations.vllm_native import register_native  # after the check: a first import registers

    register_native()
    try:
        yield
    finally:
        for name in missing:
            POLICIES.remove(name)


def check_agree(run_dir: str, run_id: int | None, values: list[str]) -> tuple[tuple[str, str], ...]:
    """Every ``--agree A:B`` as a pair of the stored run's arms: a malformed value, an unknown arm or one arm twice
    is one line naming the run's arms, before the run is read."""
    if not values:
        return ()
    from relaxbench.analysis.agreement import parse_pairs
    from relaxbench.analysis.records import open_read_only

    with open_read_only(run_dir) as store:
        where = "(SELECT run_id FROM runs ORDER BY updated_at DESC, run_id DESC LIMIT 1)" if run_id is None else "?"
        arms = [r["arm"] for r in store.rows(f"SELECT arm, MIN(position) AS at FROM cells WHERE run_id={where} "
                                             "GROUP BY arm ORDER BY at, arm", () if run_id is None else (run_id,))]
    return parse_pairs(values, arms)


def check_has_samples(run_dir: str, run_id: int | None) -> None:
    """A stored run without a single sample (stopped before its first one) is said in one line: its tables would
    be empty and its report would compare nothing."""
    from relaxbench.analysis.records import open_read_only
    from relaxbench.errors import DataError

    with open_read_only(run_dir) as store:
        if run_id is None:
            runs = store.rows("SELECT run_id, run_key FROM runs ORDER BY updated_at DESC, run_id DESC LIMIT 1")
        else:
            runs = store.rows("SELECT run_id, run_key FROM runs WHERE run_id=?", (run_id,))
        if not runs:
            raise DataError(f"{store.path}: no run{'' if run_id is None else f' with id {run_id}'} stored")
        count = store.rows("SELECT COUNT(*) AS n FROM samples JOIN cells USING (cell_id) WHERE cells.run_id=?",
                           (runs[0]["run_id"],))[0]["n"]
        if not count:
            raise DataError(f"{store.path}: run {runs[0]['run_id']} ({runs[0]['run_key']}) has no samples yet (it "
                            "stopped before its first one): nothing to show; rerun compare with the same --out to "
                            "resume it")


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("report", help="write the HTML/PDF report of a stored run")
    r.add_argument("run_dir", metavar="RUN_DIR", help="the run's output folder (or its results.sqlite)")
    add_report_args(r)
    add_profile_arg(r)
    add_agree_arg(r)
    r.add_argument("--run-id", type=int, default=None, help="which run in the store (default: the latest)")
    r.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from relaxbench.report import parse_formats

    pipeline.check_profile_args(args.profiles, args.x_axis)
    check_has_samples(args.run_dir, args.run_id)
    agree = check_agree(args.run_dir, args.run_id, args.agree)
    outputs = pipeline.Outputs(report_formats=tuple(parse_formats(args.report_format)), report_out=args.report_out,
                              budget=args.budget, x_axis=args.x_axis)
    with engine_arms_known():
        pipeline.report(args.run_dir, args.run_id, outputs, args.profiles, agree)
    return 0
