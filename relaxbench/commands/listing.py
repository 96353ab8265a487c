"""``relaxbench list KIND``: registered policies, drafters, models, methods, tasks, scorers, judges, suites."""

from __future__ import annotations

import argparse

LISTERS = ("policies", "drafters", "models", "methods", "tasks", "scorers", "judges", "suites")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list registered policies, drafters, models, methods, tasks, scorers, judges or "
                                    "suites")
    p.add_argument("kind", choices=LISTERS)
    p.set_defaults(handler=run)


def policy_description(cls) -> str:
    """Summary, modes, and what the rule follows: "as reference" (repo@commit), "as paper (no code)", "variant"..."""
    origin, exact = cls.origin, cls.modes.greedy_is_exact and "greedy" in cls.modes
    modes = ", ".join(sorted(cls.modes.supported)) + ("; greedy: exact match" if exact else "")
    return f"{origin.fidelity.value} — {origin.summary} [{modes}]; {origin.reference}"


def rows(kind: str) -> list[tuple[str, str]]:
    """(name, one-line description) for every entry of ``kind``."""
    if kind == "policies":
        from relaxbench.policies import POLICIES

        return [(name, policy_description(cls)) for name, cls in POLICIES.items()]
    if kind == "drafters":
        from relaxbench.decoding.drafters import DRAFTERS

        return [(name, cls.summary) for name, cls in DRAFTERS.items()]
    if kind == "models":
        from relaxbench.models.zoo import MODELS

        return [(name, spec.description) for name, spec in MODELS.items()]
    if kind == "methods":
        from relaxbench.methods import load_method, method_files

        out = []
        for name in method_files():
            spec = load_method(name)
            sweep = f", sweep {dict(spec.sweep)}" if spec.sweep else ""
            out.append((name, f"policy {spec.policy}, drafter {spec.drafter.kind}, k={spec.k or 'default'}"
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
        from relaxbench.scoring import SCORERS

        return [(name, f"{cls.summary} [{cls.measure}{'; graded by a judge after generation' if cls.judged else ''}]")
                for name, cls in SCORERS.items()]
    if kind == "judges":
        from relaxbench.scoring.judges import JUDGES

        return [(name, cls.summary) for name, cls in JUDGES.items()]
    from relaxbench.tasks import load_task, task_files

    out = []
    for name in task_files():
        spec = load_task(name)
        source = spec.source
        where = {"hub": f"hub {source.path}" + (f" ({source.file})" if source.file else "")
                 + (" (gated)" if source.access else ""),
                 "package": f"wheel {source.requirement}", "generated": f"generated ({source.generator})",
                 "file": "--data-file"}[source.kind]
        judge = f"; judge {spec.judge}" if spec.judge else ""
        out.append((name, (f"[{where}; scorer {spec.scorer}{judge}; max_new_tokens {spec.max_new_tokens}] "
                           f"{spec.description}")))
    return out


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from relaxbench.ui import console

    table = Table(title=args.kind)
    table.add_column("name", no_wrap=True)
    table.add_column("description")
    for name, description in rows(args.kind):
        table.add_row(escape(name), escape(description))  # "[wheel ...]" is text, not rich markup
    console().print(table)
    return 0
