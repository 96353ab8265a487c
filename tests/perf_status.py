"""The "pending re-measurement" status of docs/performance.md's figures, kept by git history rather than by hand.

A section of figures declares, in a comment, the code they measure and the commit whose code they were measured
with (or an upper bound on it)::

    <!-- measured: relaxbench/policies relaxbench/ops; code as of e5ace24 -->
    <!-- status -->
    ...generated line...
    <!-- end of status -->

``status_line`` says whether a commit after that one changed any of those paths: then the figures are **pending
re-measurement** (the line names the paths, not the commits, so it stays true as more commits come). ``make generated`` rewrites every status line;
tests/test_docs_tables.py fails when one is out of date. Without git history (an exported tree, a shallow clone
that lacks the commit) nothing can be told and the check is skipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE = ROOT / "docs" / "performance.md"
MEASURED = re.compile(
    r"<!-- measured: (?P<paths>[^;]+); code as of (?P<commit>[0-9a-f]{7,40}) -->\n"
    r"<!-- status -->\n(?P<status>.*?)<!-- end of status -->\n", re.DOTALL)


class NoHistory(Exception):
    """git, the repository or the commit is not there: the status cannot be told."""


def changes_since(commit: str, paths: list[str]) -> list[str]:
    """The commits after ``commit`` (oldest first, short hashes) that changed any of ``paths``; raises
    ``NoHistory`` when that cannot be told."""
    try:
        known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                               capture_output=True, text=True)
        if known.returncode != 0:
            raise NoHistory(f"commit {commit} is not in this repository's history")
        log = subprocess.run(["git", "-C", str(ROOT), "log", "--reverse", "--format=%h", f"{commit}..HEAD", "--",
                              *paths], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise NoHistory(f"git cannot read the history: {exc}") from exc
    return log.stdout.split()


def status_line(commit: str, paths: list[str]) -> str:
    changed = changes_since(commit, paths)
    if not changed:
        return f"*Measured with the code as it is now ({', '.join(paths)} unchanged since {commit}).*\n"
    return (f"**Pending re-measurement**: the code these figures measure ({', '.join(paths)}) changed after "
            f"{commit}, the code they were taken with.\n")


def render(text: str) -> str:
    """``text`` with every status line as the history says now."""
    def one(match: re.Match[str]) -> str:
        paths = match["paths"].split()
        return (f"<!-- measured: {match['paths']}; code as of {match['commit']} -->\n<!-- status -->\n"
                f"{status_line(match['commit'], paths)}<!-- end of status -->\n")

    return MEASURED.sub(one, text)


def sections(text: str) -> list[tuple[str, str, str]]:
    """(paths, commit, status text) of every declared section."""
    return [(m["paths"], m["commit"], m["status"]) for m in MEASURED.finditer(text)]
