"""``relaxbench list KIND``: registered rules, drafters, models, methods, tasks, scorers, graders, suites, the
metric definitions, and the package's modules. ``--markdown`` prints a Markdown table instead: the rule table of
docs/policies.md, the metric table of docs/metrics.md and the module table of docs/design.md are this command's
output (a test checks the committed copies are current; ``make generated`` rewrites them)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaxbench.commands.args import show_choices

if TYPE_CHECKING:
    from relaxbench.catalog import PolicyFacts


def listed(policies: Any) -> list[tuple[str, type]]:
    """The rules ``relaxbench list rules`` shows (``catalog.listed``; read lazily, as every listing is)."""
    from relaxbench.catalog import listed

    return listed(policies)

LISTERS = ("rules", "drafters", "models", "methods", "tasks", "scorers", "graders", "suites", "metrics", "modules")
ALIASES = {"judges": "graders", "policies": "rules"}  # earlier names of a kind, still accepted (not shown)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list registered rules, drafters, models, methods, tasks, scorers, graders, "
                                    "suites, the metric definitions, or the package's modules")
    show_choices(p.add_argument("kind", choices=(*LISTERS, *ALIASES)), ALIASES)
    p.add_argument("--markdown", action="store_true",
                   help="print a Markdown table (the tables of docs/policies.md, docs/metrics.md and docs/design.md)")
    p.set_defaults(handler=run)


def policy_description(facts: PolicyFacts) -> str:
    """Summary, modes, and what the rule follows: "as reference" (repo@commit), "as paper (no code)", "variant"..."""
    exact = facts.greedy_is_exact and "greedy" in facts.modes
    modes = ", ".join(sorted(facts.modes)) + ("; greedy: exact match" if exact else "")
    also = f"; also named {', '.join(facts.aliases)}" if facts.aliases else ""
    return f"{facts.fidelity} — {facts.summary} [{modes}]; {facts.reference}{also}"


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _knob_default(facts: PolicyFacts, value: Any) -> str:
    from relaxbench.catalog import REQUIRED

    if value is REQUIRED:
        return "required"
    if isinstance(value, str) and (len(value) > 16 or "\n" in value):
        return f"a text (`{facts.module.replace('.', '/')}.py`)"
    return _value(value)


def _cell(text: str) -> str:
    """Markdown table cell text: pipes escaped, no line breaks."""
    return " ".join(text.replace("|", "\\|").split())


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def policy_row(facts: PolicyFacts) -> list[str]:
    knobs = ", ".join(f"`{k}` {_knob_default(facts, v)}" for k, v in facts.knobs.items()) or "—"
    if facts.strict_knobs:
        strict = ", ".join(f"{k} = {_value(v)}" for k, v in facts.strict_knobs.items())
    else:
        strict = "lossless" if facts.lossless else "—"
    if "greedy" not in facts.modes:
        greedy = "refused"
    else:
        greedy = "exact match" if facts.greedy_is_exact else "yes"
    if "sampling" not in facts.modes:
        sampling = "refused"
    else:
        sampling = "yes (lossy at every setting)" if "sampling" in facts.lossy_modes else "yes"
    name = f"`{facts.name}`" + "".join(f" (alias `{alias}`)" for alias in facts.aliases)
    return [name, facts.summary, f"{facts.fidelity}: {facts.reference}", knobs, strict, greedy,
            sampling]


def markdown(kind: str) -> str:
    """The Markdown table ``relaxbench list KIND --markdown`` prints."""
    kind = ALIASES.get(kind, kind)
    if kind == "rules":
        from relaxbench.catalog import listed_policies

        header = ("rule", "formula", "follows", "knobs (default)", "strict at", "greedy", "sampling")
        return markdown_table(header, [policy_row(facts) for facts in listed_policies()])
    if kind == "metrics":
        return markdown_table(("metric", "definition", "unit", "better", "shown in (column; * = at 120 columns)"),
                              metric_schema_rows())
    if kind == "modules":
        return markdown_table(("module", "what it is"), [(f"`{name}`", text) for name, text in module_rows()])
    return markdown_table(("name", "description"), [(f"`{name}`", text) for name, text in rows(kind)])


def metric_rows() -> list[tuple[str, str]]:
    from relaxbench.analysis.schema import definitions

    return list(definitions())


def metric_schema_rows() -> list[list[str]]:
    """One row per defined metric of the schema: its definition, unit, direction and the columns that show it."""
    from relaxbench.analysis.schema import TABLE_TITLES, columns_of, metrics

    out = []
    for metric in metrics():
        if not metric.definition:
            continue
        shown = "; ".join(f"{TABLE_TITLES[m.table]}: {m.column}{' *' if m.narrow else ''}"
                          for m in columns_of(metric.name)) or ("`relaxbench bench`" if metric.benchmark else "-")
        out.append([metric.name, metric.definition, metric.unit or "-", metric.better or "-", shown])
    return out


ABBREVIATIONS = ("e.g", "i.e", "vs", "etc", "cf", "al")  # a full stop after these ends no sentence
LAYOUT_SKIPPED = ("__main__.py",)  # ``python -m relaxbench``: the console script's entry, nothing of its own


def first_sentence(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph (its summary), on one line."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    for stop in re.finditer(r"[.!?](?=\s|$)", paragraph):
        if not paragraph[:stop.start()].endswith(ABBREVIATIONS):
            return paragraph[:stop.end()]
    return paragraph


def module_rows(root: Path | None = None) -> list[tuple[str, str]]:
    """(path from relaxbench/, its docstring's first sentence) for every module and package of the package at
    ``root`` (default: this one), read from the source without importing anything (so integrations that need another
    environment are listed too); a package is its folder, its ``__init__`` docstring."""
    import ast

    import relaxbench

    root = root or Path(relaxbench.__file__).resolve().parent
    out = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).parts):
        if path.name in LAYOUT_SKIPPED or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(root.parent)
        name = f"{relative.parent}/" if path.name == "__init__.py" else str(relative)
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        out.append((name.replace("\\", "/"), first_sentence(docstring) or "(no docstring)"))
    return out


def rows(kind: str) -> list[tuple[str, str]]:
    """(name, one-line description) for every entry of ``kind``."""
    kind = ALIASES.get(kind, kind)
    if kind == "rules":
        from relaxbench.catalog import listed_policies

        return [(facts.name, policy_description(facts)) for facts in listed_policies()]
    if kind == "drafters":
        from relaxbench.catalog import drafter_rows

        return drafter_rows()
    if kind == "models":
        from relaxbench.models.zoo import MODELS

        return [(name, spec.description) for name, spec in MODELS.items()]
    if kind == "methods":
        from relaxbench.methods import load_method, method_files

        out = []
        for name in method_files():
            spec = load_method(name)
            sweep = f", sweep {dict(spec.sweep)}" if spec.sweep else ""
            out.append((name, f"rule {spec.policy}, drafter {spec.drafter.kind}, k={spec.k or 'default'}"
                              f"{sweep}. {spec.description}".strip()))
        return out
    if kind == "suites":
        from relaxbench.harness.suite import shipped_suites, suite_file_fields
        from relaxbench.validation import load_yaml

        out = []
        for path in shipped_suites().values():
            suite = suite_file_fields(load_yaml(path), str(path))
            limits, repeats = suite.get("limits") or {}, suite.get("task_repeats") or {}
            tasks = ", ".join(f"{t} ({limits.get(t, suite.get('limit') or 'all')}"
                              f"{' x' + str(repeats.get(t, suite.get('repeats') or 1)) if repeats else ''})"
                              for t in suite.get("tasks", ()))
            temperature = suite.get("temperature") or 0.0
            decoding = ("greedy" if not temperature else
                        f"T {temperature:g}, top-p {suite.get('top_p', 1.0):g}, top-k {suite.get('top_k', 0)}")
            out.append((path.stem, f"{suite.get('draft')} -> {suite.get('target')}; methods "
                                   f"{', '.join(suite.get('methods', ()))}; tasks {tasks}; max_new_tokens "
                                   f"{suite.get('max_new_tokens') or 'per task'}; {decoding}"))
        return out
    if kind == "scorers":
        import relaxbench.grading  # noqa: F401  (registers the grading protocols)
        from relaxbench.scoring import SCORERS

        after = "; graded by an LLM grader after generation"
        return [(name, f"{cls.summary} [{cls.measure}{after if cls.graded else ''}]") for name, cls in SCORERS.items()]
    if kind == "graders":
        from relaxbench.grading.graders import GRADERS

        return [(name, cls.summary) for name, cls in GRADERS.items()]
    if kind == "metrics":
        return metric_rows()
    if kind == "modules":
        return module_rows()
    from relaxbench.tasks import load_task, task_files

    out = []
    for name in task_files():
        spec = load_task(name)
        source = spec.source
        where = {"hub": f"hub {source.path}" + (f" ({source.file})" if source.file else "")
                 + (" (gated)" if source.access else ""),
                 "package": f"wheel {source.requirement}", "generated": f"generated ({source.generator})",
                 "file": "--data-file", "url": f"url {source.url.split('://', 1)[-1].split('/', 1)[0]}"}[source.kind]
        grader = f"; grader {spec.grader}" if spec.grader else ""
        out.append((name, (f"[{where}; scorer {spec.scorer}{grader}; max_new_tokens {spec.max_new_tokens}] "
                           f"{spec.description}")))
    return out


def run(args: argparse.Namespace) -> int:
    kind = ALIASES.get(args.kind, args.kind)
    if args.markdown:
        print(markdown(kind), end="")
        return 0
    from rich.markup import escape
    from rich.table import Table

    from relaxbench.ui import console

    table = Table(title=kind)
    table.add_column("name", no_wrap=True)
    table.add_column("description")
    for name, description in rows(kind):
        table.add_row(escape(name), escape(description))  # "[wheel ...]" is text, not rich markup
    console().print(table)
    return 0
