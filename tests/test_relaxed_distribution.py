"""Every sampling-mode relaxed rule at its lossless setting passes the foundation's distribution test: the joint
distribution of three generated tokens matches the target's exact one (chi-square), on the same tiny 4-token
pair. A relaxed setting (always-accept) must fail the same check at the same sample size, so a pass means something.

Sample counts are modest (the strict-end tests in test_policies.py also show these settings give verdicts identical
to speculative sampling's, bit for bit, with the same random numbers).
"""

from __future__ import annotations

import pytest

from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import Need
from tests.test_distribution import chi_square_pvalue, empirical_joint, exact_joint, pair  # noqa: F401

N_SAMPLES = 250
SETTINGS = [SamplingParams(1.0), SamplingParams(0.8, top_k=3, top_p=0.9)]
LOSSLESS_AT_STRICT = sorted(name for name, cls in POLICIES.items()
                            if not cls.modes.lossless and Need.DRAFT_PROBS in cls.needs) + ["reflective"]


@pytest.mark.parametrize("index,name", list(enumerate(LOSSLESS_AT_STRICT)), ids=LOSSLESS_AT_STRICT)
@pytest.mark.slow
def test_lossless_setting_follows_the_target_distribution(pair, index, name):  # noqa: F811
    target, draft = pair
    sampling = SETTINGS[index % 2]  # alternate plain and truncated sampling across the rules
    policy = make_policy(name, dict(POLICIES.get(name).modes.strict_knobs))
    expected = exact_joint(target, sampling)
    counts = empirical_joint(target, draft, policy, sampling, n=N_SAMPLES)
    assert counts[expected == 0].sum() == 0
    assert chi_square_pvalue(counts, expected) > 1e-3


def test_a_relaxed_setting_fails_the_same_check(pair):  # noqa: F811
    target, draft = pair
    sampling = SamplingParams(1.0)
    counts = empirical_joint(target, draft, make_policy("ensemble", {"w": 0.0}), sampling, n=N_SAMPLES)
    assert chi_square_pvalue(counts, exact_joint(target, sampling)) < 1e-4
