"""MBPP+ (EvalPlus, Liu et al. 2305.01210) in the sandbox, in two settings.

``tests: evalplus`` runs the hub copy's (``evalplus/mbppplus``) ``test`` script after the program: EvalPlus's
inputs and expected outputs with its ``assertion`` helper (exact equality, or ``np.allclose`` with atol 1e-6 for
floats), calling the function by name; ``test_imports`` go first. Pass = the script runs to its end. EvalPlus's own
evaluator differs in ways this does not copy: per-input time limits of max(1 s, 4 × the reference's time) instead
of one limit for the script, and special oracles for a few tasks.

``tests: first-assert`` is FLy's setting (lm-eval's ``mbpp_plus_instruct``, which FLy ran): only the first base
assert (``test_list[0]``, the one shown in the prompt) after the program, with HF ``code_eval``'s 3 s limit and
no ``test_imports``. lm-eval extracts the code with ``(?:\\w+)?`` after the opening fence it puts in front of the
response, which swallows the first word of a response that starts with code ("def f" → " f"); here the code is
the first fenced block of the pre-filled prefix plus the response, so that word is kept.

The ``test`` scripts import numpy; the sandbox's interpreter runs the standard library only when it is not the
harness's own, so where numpy cannot be imported a small stand-in provides the ``allclose``/``isclose`` the
scripts call (same formula, ``|a - b| <= atol + rtol * |b|`` element-wise over nested sequences).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.scoring.code import SandboxArgs, extract_code, run_to_end
from relaxbench.scoring.sandbox import Limits
from relaxbench.validation import Flag

NUMPY_FALLBACK = '''
try:
    import numpy as _numpy
except ImportError:
    import math as _math
    import sys as _sys
    import types as _types

    def _close(a, b, rtol, atol, equal_nan):
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            if not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))) or len(a) != len(b):
                return False
            return all(_close(x, y, rtol, atol, equal_nan) for x, y in zip(a, b))
        if a is None or b is None or isinstance(a, str) or isinstance(b, str):
            return a == b
        if equal_nan and _math.isnan(a) and _math.isnan(b):
            return True
        return abs(a - b) <= atol + rtol * abs(b)

    def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
        return _close(a, b, rtol, atol, equal_nan)

    def _assert_allclose(actual, desired, rtol=1e-07, atol=0, equal_nan=True, err_msg="", verbose=True):
        assert _close(actual, desired, rtol, atol, equal_nan), err_msg or "not close"

    _stand_in = _types.ModuleType("numpy")
    _stand_in.allclose = _stand_in.isclose = _allclose
    _stand_in.testing = _types.SimpleNamespace(assert_allclose=_assert_allclose)
    _sys.modules["numpy"] = _stand_in
'''


# the limits of the setting that is not the score: HF code_eval's default 3 s (as FLy ran it); a whole EvalPlus script
OTHER_LIMITS = {"first-assert": Limits(wall_seconds=3.0, cpu_seconds=3),
                "evalplus": Limits(wall_seconds=20.0, cpu_seconds=20)}


class MbppPlusArgs(SandboxArgs):
    tests: Literal["evalplus", "first-assert"] = "evalplus"  # which setting is the score
    both: Flag = True  # also run the other setting, stored as a detail metric (one generation, both numbers)


@register_scorer
class MbppPlusScorer(Scorer):
    """pass@1 on MBPP+: EvalPlus's test script (default) or only the first base assert (FLy's setting); with
    ``both`` the other setting's pass is stored too (``evalplus_pass``, ``first_assert_pass``)."""

    name = "mbpp-plus"
    summary = "MBPP+ in the sandbox: EvalPlus's test script, or the first base assert only (FLy's setting)"
    Args = MbppPlusArgs
    detail_metrics = ("evalplus_pass", "first_assert_pass")

    @staticmethod
    def program(item: TaskItem, code: str, tests: str, marker: str) -> str:
        if tests == "first-assert":
            body = f"{code}\n{item.fields['first_assert']}\n"
        else:
            imports = "\n".join(item.fields.get("test_imports") or [])
            body = f"{imports}\n{code}\n\n{NUMPY_FALLBACK}\n{item.test}\n"
        return body + f"\nprint({marker!r}, flush=True)\n"

    def run(self, item: TaskItem, code: str, tests: str) -> Score:
        limits = self.args.limits() if tests == self.args.tests else OTHER_LIMITS[tests]
        return run_to_end(lambda marker: self.program(item, code, tests, marker), limits)

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        return bool(details.get("code_chars"))

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        code = extract_code(text)
        score = self.run(item, code, self.args.tests)
        why = ("ran to the end of the tests" if score.passed else
               f"{score.details['status']}: {score.details['error'] or 'stopped before the end of the tests'}")
        details = {**score.details, "tests": self.args.tests, "code_chars": len(code), "why": why}
        other = "first-assert" if self.args.tests == "evalplus" else "evalplus"
        passes = {self.args.tests: score.passed}
        if self.args.both:
            passes[other] = self.run(item, code, other).passed
        details.update({f"{kind.replace('-', '_')}_pass": float(bool(ok)) for kind, ok in passes.items()})
        return Score(score.value, score.passed, details)
