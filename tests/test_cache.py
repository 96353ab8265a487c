"""The one rollback helper: after a rollback, continuing gives the same logits as a fresh forward."""

from __future__ import annotations

import pytest
import torch

from relaxbench.decoding.cache import CachedLM, cache_length, common_prefix_length, forward, new_cache, rollback


def fresh_logits(model, ids: list[int]) -> torch.Tensor:
    return forward(model, torch.tensor(ids), new_cache(model), n_logits=len(ids)).logits


@pytest.mark.parametrize("keep", [0, 1, 7, 12, 19])
def test_rollback_then_continue_equals_fresh_forward(tiny_target, keep):
    model = tiny_target.model
    first = list(range(10, 30))
    continuation = [200, 201, 202, 203, 204]
    cache = new_cache(model)
    with torch.inference_mode():
        forward(model, torch.tensor(first), cache, n_logits=1)
        rollback(cache, keep)
        assert cache_length(cache) == keep
        logits = forward(model, torch.tensor(continuation), cache, n_logits=len(continuation)).logits
        expected = fresh_logits(model, first[:keep] + continuation)[keep:]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_rollback_on_a_real_model_fp32(smollm):
    model = smollm.model
    ids = smollm.tokenizer("def add(a, b):\n    return a + b\n\nprint(add(2, 3))")["input_ids"]
    cache = new_cache(model)
    with torch.inference_mode():
        forward(model, torch.tensor(ids), cache, n_logits=1)
        rollback(cache, 6)
        logits = forward(model, torch.tensor(ids[6:9]), cache, n_logits=3).logits
        expected = fresh_logits(model, ids[:9])[6:9]
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


def test_rollback_rejects_growing_and_negative(tiny_target):
    cache = new_cache(tiny_target.model)
    with torch.inference_mode():
        forward(tiny_target.model, torch.tensor([1, 2, 3]), cache, n_logits=1)
    with pytest.raises(ValueError):
        rollback(cache, 4)
    with pytest.raises(ValueError):
        rollback(cache, -1)
    rollback(cache, 3)  # a no-op
    assert cache_length(cache) == 3


class RecordingCache:
    """Stands in for a transformers cache to check which ``crop`` convention the helper uses."""

    def __init__(self, length: int) -> None:
        self.length, self.calls = length, []

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, arg: int) -> None:
        self.calls.append(arg)


def test_rollback_crops_the_number_of_tokens_to_remove():
    """transformers 5.x's ``crop`` takes a negative number of tokens to remove; keeping everything crops nothing."""
    cache = RecordingCache(10)
    rollback(cache, 4)
    rollback(cache, 10)
    assert cache.calls == [-6]
    with pytest.raises(ValueError):
        rollback(cache, 11)


def test_cached_lm_keeps_the_longest_valid_prefix(tiny_target):
    lm = CachedLM(tiny_target.model)
    with torch.inference_mode():
        lm.run(torch.tensor([5, 6, 7, 8, 9]), n_logits=1)
        lm.sync_to(torch.tensor([5, 6, 7, 1, 2, 3]))  # diverges at index 3
        assert lm.ids.tolist() == [5, 6, 7] and cache_length(lm.cache) == 3
        lm.sync_to(torch.tensor([5, 6, 7]))  # the last token must stay unfed
        assert lm.ids.tolist() == [5, 6] and cache_length(lm.cache) == 2


def test_common_prefix_length():
    t = torch.tensor
    assert common_prefix_length(t([1, 2, 3]), t([1, 2, 4])) == 2
    assert common_prefix_length(t([1, 2]), t([1, 2, 3])) == 2
    assert common_prefix_length(t([9]), t([1])) == 0
    assert common_prefix_length(t([], dtype=torch.long), t([1])) == 0
