"""The dispatch-mode counter (ops and host synchronisations) and the random batch every rule is counted on."""

from __future__ import annotations

import pytest
import torch

from relaxbench.benchmarks.op_count import count, random_batch
from relaxbench.benchmarks.verify import bench_policies, decision_modes
from relaxbench.policies.base import Need


def test_the_counter_counts_the_ops_of_a_known_function_and_no_sync():
    x = torch.randn(5)
    counts = count(lambda: torch.cumprod((x + 1) * 2, dim=0))
    assert (counts.ops, counts.syncs, counts.sync_names) == (3, 0, ())
    assert counts.op_names["add"] == 1 and counts.op_names["mul"] == 1 and counts.op_names["cumprod"] == 1


def test_views_are_counted_apart_from_the_ops():
    x = torch.randn(4, 3)
    counts = count(lambda: x.view(12).unsqueeze(0).exp())
    assert (counts.ops, counts.views) == (1, 2)


@pytest.mark.parametrize("read, name", [
    (lambda x: x.sum().item(), "Tensor.item"),
    (lambda x: x.tolist(), "Tensor.tolist"),
    (lambda x: bool(x.sum() > 0), "Tensor.__bool__"),
    (lambda x: int(x.argmax()), "Tensor.__int__"),
    (lambda x: float(x.max()), "Tensor.__float__"),
    (lambda x: x.numpy(), "Tensor.numpy"),
    (lambda x: x.nonzero(), "aten.nonzero"),
    (lambda x: torch.where(x > 0), "aten.nonzero"),
    (lambda x: x[x > 0], "aten.index"),
    (lambda x: torch.masked_select(x, x > 0), "aten.masked_select"),
    (lambda x: torch.unique(x), "aten._unique2"),
    (lambda x: x.clamp_max(float(2)).repeat_interleave(3), None),
    (lambda x: x * torch.tensor(0.5), "aten.lift_fresh"),  # host data: a blocking upload on a GPU
])
def test_the_counter_catches_each_host_synchronisation_once(read, name):
    counts = count(lambda: read(torch.randn(6)))
    assert counts.sync_names == (() if name is None else (name,))
    assert counts.syncs == (name is not None)


def test_a_repeat_with_its_output_size_given_is_no_sync():
    repeats = torch.tensor([1, 0, 2])
    counts = count(lambda: torch.arange(3).repeat_interleave(repeats, output_size=3))
    assert counts.syncs == 0 and counts.ops >= 1
    unsized = count(lambda: torch.arange(3).repeat_interleave(repeats))
    assert unsized.sync_names == ("aten.repeat_interleave",)


def test_a_scalar_made_on_the_device_is_no_upload():
    x = torch.randn(6)
    assert count(lambda: torch.minimum(torch.full((), 0.5), x)).syncs == 0


def test_a_masked_write_is_a_sync_and_a_masked_fill_is_not():
    x, y = torch.randn(6), torch.zeros(6)

    def masked_write():
        y[x > 0] = x[:1]

    assert count(masked_write).sync_names == ("aten.index_put_",)
    assert count(lambda: y.masked_fill(x > 0, 1.0)).syncs == 0


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    return bench_policies(None, tmp_path_factory.mktemp("heads"), vocab=50)


def test_a_random_batch_runs_every_registered_rule_in_every_mode(policies):
    seen = 0
    for name, mode in decision_modes(policies):
        policy = policies[name]
        batch = random_batch(policy, 6, 4, 50, sampling=mode == "sampling",
                             generator=torch.Generator().manual_seed(3))
        ks = batch.num_drafts.tolist()
        assert ks[0] == 4 and ks[-1] == 0 and max(ks) <= 4 and batch.any_empty
        assert batch.total_drafts == sum(ks) and batch.target.source.shape == (sum(ks) + 6, 50)
        if Need.HIDDEN_STATES in policy.needs:
            assert "hidden_states" in batch.extras
        if Need.DRAFT_HIDDEN_STATES in policy.needs:
            assert "draft_hidden_states" in batch.extras
        if Need.DRAFT_PROBS in policy.needs:
            assert batch.has_draft_distribution
        if Need.EXTRA_TOKENS in policy.needs:
            assert "extra_logits" in batch.extras
        verdict = policy.decide(batch)
        accepted = verdict.accepted.tolist()
        assert all(0 <= a <= k for a, k in zip(accepted, ks)), (name, mode, accepted, ks)
        assert accepted[-1] == 0 and all(0 <= t < 50 for t in verdict.next_token.tolist())
        seen += 1
    assert seen >= 20  # every rule in each of its modes


def test_a_random_batch_of_full_width_has_no_empty_request_and_refuses_a_mode_the_rule_lacks(policies):
    batch = random_batch(policies["exact"], 3, 4, 50, sampling=False, mixed_k=False)
    assert batch.num_drafts.tolist() == [4, 4, 4] and not batch.any_empty
    with pytest.raises(ValueError, match="does not run in sampling mode"):
        random_batch(policies["exact"], 3, 4, 50, sampling=True)


def test_a_random_batch_gives_the_engine_q_when_asked(policies):
    batch = random_batch(policies["speculative-sampling"], 4, 3, 50, sampling=True, engine_q=True)
    assert batch.draft_probs is not None and batch.draft_logits is None
    assert torch.allclose(batch.draft_probs.source.sum(-1), torch.ones(batch.total_drafts))


def test_a_random_batch_may_mix_greedy_and_sampled_requests_with_their_own_settings(policies):
    from relaxbench.ops.sampling import SamplingParams

    settings = [SamplingParams(), SamplingParams(0.7, top_k=5), SamplingParams(1.3, top_p=0.8), SamplingParams()]
    policy = policies["speculative-sampling"]
    batch = random_batch(policy, 4, 3, 50, sampling=True, settings=settings)
    assert batch.sampling.any_greedy and not batch.sampling.all_greedy and batch.sampling.uniform is None
    assert batch.sampling.top_k.tolist() == [0, 5, 0, 0] and batch.draft_logits is not None
    assert batch.accept_u[0].eq(0).all() and batch.accept_u[1].gt(0).any()  # no draw for a greedy request
    verdict = policy.decide(batch)
    assert all(0 <= a <= k for a, k in zip(verdict.accepted.tolist(), batch.num_drafts.tolist()))
    with pytest.raises(ValueError, match="does not run in sampling mode"):
        random_batch(policies["exact"], 4, 3, 50, sampling=True, settings=settings)
    with pytest.raises(ValueError, match="2 sampling settings for 4 requests"):
        random_batch(policy, 4, 3, 50, sampling=True, settings=settings[:2])
