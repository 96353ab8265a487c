"""Reports: HTML and PDF from a stored run, with the trade-off plot and every table, and the same tables in the
terminal.

``tables.py`` is the one table model and builds the per-task tables; ``content.py`` decides what the report says
(reading the run through ``relaxbench.analysis``: summaries, the arm selection, the notices that apply);
``figures.py`` draws; ``html.py``, ``pdf.py`` and ``terminal.py`` render the same tables. ``write_report`` is what
the CLI calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from relaxbench.errors import ConfigError
from relaxbench.paths import check_can_write

FORMATS = ("html", "pdf")
DEFAULT_REPORTS_DIR = Path("reports")


def parse_formats(value: str | Sequence[str]) -> tuple[str, ...]:
    """``html,pdf`` → ("html", "pdf"); an unknown format is a one-line error."""
    from relaxbench.registry import did_you_mean

    names = [v.strip().lower() for v in (value.split(",") if isinstance(value, str) else value) if v.strip()]
    if not names:
        raise ConfigError(f"give at least one report format ({', '.join(FORMATS)})")
    for name in names:
        if name not in FORMATS:
            raise ConfigError(f"unknown report format {name!r}{did_you_mean(name, list(FORMATS))} "
                              f"(formats: {', '.join(FORMATS)})")
    return tuple(dict.fromkeys(names))


def check_budget(budget: float | None) -> None:
    if budget is not None and not budget >= 0:
        raise ConfigError(f"--budget is a capability loss in points and must be >= 0, got {budget}")


def default_report_dir(run_dir: str | Path) -> Path:
    """``reports/<name of the run folder>``: where ``relaxbench report RUN_DIR`` writes without ``--out``."""
    path = Path(run_dir)
    name = path.parent.name if path.suffix == ".sqlite" else path.resolve().name
    return DEFAULT_REPORTS_DIR / name


def output_paths(run_dir: str | Path, formats: Sequence[str], out: str | Path | None,
                 flag: str = "--out") -> dict[str, Path]:
    """Where each format goes: ``OUT/report.<fmt>`` for a folder; ``OUT`` itself when it names one file of the
    single requested format (``--format pdf --out x.pdf``). A path that cannot be written is refused here, in one
    line naming ``flag``, before anything is read or drawn."""
    target = Path(out) if out is not None else default_report_dir(run_dir)
    if target.suffix.lower() in {f".{f}" for f in FORMATS}:
        if len(formats) != 1 or target.suffix.lower() != f".{formats[0]}":
            raise ConfigError(f"--out {target} is a .{target.suffix.lower()[1:]} file: give a folder when writing "
                              f"{', '.join(formats)}")
        check_can_write(target, flag)
        return {formats[0]: target}
    check_can_write(target, flag, folder=True)
    return {fmt: target / f"report.{fmt}" for fmt in formats}


def write_report(run_dir: str | Path, formats: Sequence[str] = FORMATS, out: str | Path | None = None,
                 budget: float | None = None, run_id: int | None = None, profiles: Sequence[str] = (),
                 x_axis: str | None = None, agree: Sequence[tuple[str, str]] = ()) -> dict[str, Path]:
    """Read the run in ``run_dir``, write each format, return {format: path}. ``profiles``: cost profiles to price
    proxy speed-ups with (default: those recorded with the run); ``x_axis``: the trade-off plot's speed-up
    (``measured`` or a profile); ``agree``: pairs of arms whose agreement the report shows, beside those a rule
    declares."""
    from relaxbench.analysis.selection import DEFAULT_BUDGET
    from relaxbench.report.content import load_report

    check_budget(budget)
    paths = output_paths(run_dir, formats, out)
    report = load_report(run_dir, DEFAULT_BUDGET if budget is None else budget, run_id, profiles, x_axis, agree)
    written = {}
    for fmt, path in paths.items():
        if fmt == "html":
            from relaxbench.report.html import write_html

            written[fmt] = write_html(report, path)
        else:
            from relaxbench.report.pdf import write_pdf

            written[fmt] = write_pdf(report, path)
    return written
