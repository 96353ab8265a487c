"""Verification policies. Importing this package registers every built-in policy: each module of the package is
imported (a new rule is one new module here, with no list to edit), and plug-ins come through the
``relaxbench.policies`` entry point.

The interface (``base``): ``VerificationPolicy`` with its ``Origin``, ``Modes`` and ``needs`` records, the registry;
what a rule decides (``batch``, ``verdict``): ``Batch``, ``Judgement``, ``Verdict``; whether a rule can run with a
drafter in a mode, and what it requires of the drafter (``compatibility``): ``drafter_duties`` and
``check_compatibility``; the strict baseline (``strict``): ``lossless_judgement`` and ``strict_policy``.
"""

import importlib
import pkgutil

from relaxbench.policies.base import (
    POLICIES,
    Batch,
    Block,
    Fidelity,
    Judgement,
    Modes,
    Need,
    Origin,
    Outcome,
    PolicyEnv,
    Verdict,
    VerificationPolicy,
    make_policy,
    register_policy,
)
from relaxbench.policies.batch import Rows
from relaxbench.policies.compatibility import DrafterDuties, check_compatibility, drafter_duties
from relaxbench.policies.strict import lossless_judgement, lossless_verdict, strict_policy

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")  # each rule module registers its rules

__all__ = ["POLICIES", "Batch", "Block", "DrafterDuties", "Fidelity", "Judgement", "Modes", "Need", "Origin",
           "Outcome", "PolicyEnv", "Rows", "Verdict", "VerificationPolicy", "check_compatibility", "drafter_duties",
           "lossless_judgement", "lossless_verdict", "make_policy", "register_policy",
           "strict_policy"]
