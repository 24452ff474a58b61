"""Lesson 12's foundations (``lmlessons.course.rl``): the policy gradient of a toy softmax policy,
the score-function estimates and what a baseline does to them, and what AdamW and SGD do with a
loss multiplied by a constant."""

from __future__ import annotations

import pytest
import torch

from lmlessons.course.rl import (
    BASELINES,
    expected_reward_gradient,
    reinforce_estimates,
    scaled_loss_updates,
)

LOGITS = torch.tensor([0.0, 1.0, -1.0, 0.5])  # (A,)
REWARDS = torch.tensor([1.0, 3.0, 0.0, 2.0])  # (A,)
N = 40_000  # samples: standard errors of about 0.005 on each component
G = 4


def _estimates(baseline: str, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return reinforce_estimates(
        LOGITS, REWARDS, num_samples=N, baseline=baseline, num_generations=G, generator=g
    )  # (N, A)


def test_the_exact_gradient_is_autograds():
    logits = LOGITS.double().requires_grad_()  # (A,)
    expected = torch.autograd.grad((logits.softmax(-1) * REWARDS.double()).sum(), logits)[0]
    torch.testing.assert_close(expected_reward_gradient(LOGITS, REWARDS), expected)


@pytest.mark.parametrize("baseline", ["none", "expected", "rloo"])
def test_unbiased_estimates_average_to_the_exact_gradient(baseline):
    est = _estimates(baseline)  # (N, A)
    se = est.std(0) / N**0.5  # (A,)
    gap = (est.mean(0) - expected_reward_gradient(LOGITS, REWARDS)).abs()  # (A,)
    assert bool((gap < 5 * se + 1e-12).all()), (gap, se)


def test_the_group_mean_baseline_shrinks_the_gradient_by_g_minus_1_over_g():
    est = _estimates("group")  # (N, A)
    exact = expected_reward_gradient(LOGITS, REWARDS)  # (A,)
    se = est.std(0) / N**0.5  # (A,)
    assert bool(((est.mean(0) - (G - 1) / G * exact).abs() < 5 * se).all())
    assert bool(((est.mean(0) - exact).abs() > 5 * se).any())  # biased as an estimate of exact


def test_a_baseline_lowers_the_variance():
    var = {b: float(_estimates(b).var(0).sum()) for b in BASELINES}
    assert var["expected"] < var["rloo"] < var["none"]
    assert var["expected"] < var["none"] / 3
    # the group mean is RLOO scaled by (G - 1) / G: its variance by ((G - 1) / G) ** 2
    assert var["group"] == pytest.approx(var["rloo"] * ((G - 1) / G) ** 2, rel=1e-9)


def test_same_generator_same_estimates_and_bad_input():
    torch.testing.assert_close(_estimates("rloo", 3), _estimates("rloo", 3))
    with pytest.raises(ValueError, match=r"^baseline"):
        reinforce_estimates(LOGITS, REWARDS, num_samples=8, baseline="mean")
    with pytest.raises(ValueError, match=r"^num_samples"):
        reinforce_estimates(LOGITS, REWARDS, num_samples=6, baseline="rloo")
    with pytest.raises(ValueError, match=r"^logits"):
        expected_reward_gradient(LOGITS[:2], REWARDS)
    with pytest.raises(ValueError, match=r"^scale"):
        scaled_loss_updates(torch.ones(2, 3), scale=0.0, optimizer="sgd")
    with pytest.raises(ValueError, match=r"^optimizer"):
        scaled_loss_updates(torch.ones(2, 3), scale=1.0, optimizer="adam")


def _gradients(seed: int = 0, size: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 5, generator=g, dtype=torch.float64) * size  # (steps, P)


def test_adamw_divides_a_constant_loss_scale_out_and_sgd_does_not():
    grads = _gradients()
    for scale in (0.5, 0.1, 3.0):
        adam = scaled_loss_updates(grads, scale=scale, optimizer="adamw")
        torch.testing.assert_close(
            adam, scaled_loss_updates(grads, scale=1.0, optimizer="adamw"), rtol=1e-6, atol=0
        )
        sgd = scaled_loss_updates(grads, scale=scale, optimizer="sgd")
        torch.testing.assert_close(
            sgd, scale * scaled_loss_updates(grads, scale=1.0, optimizer="sgd")
        )
        assert not torch.allclose(sgd, scaled_loss_updates(grads, scale=1.0, optimizer="sgd"))


def test_adamw_does_not_divide_out_a_factor_that_changes_between_steps():
    grads = _gradients()
    factors = torch.tensor([1.0, 0.2, 1.0, 0.2, 1.0, 0.2], dtype=torch.float64)[
        :, None
    ]  # (steps, 1)
    varying = scaled_loss_updates(grads * factors, scale=1.0, optimizer="adamw")
    assert not torch.allclose(varying, scaled_loss_updates(grads, scale=1.0, optimizer="adamw"))


def test_adamw_only_up_to_eps():
    """Gradients near AdamW's eps (1e-8): the scale no longer divides out."""
    tiny = _gradients(size=1e-8)
    half = scaled_loss_updates(tiny, scale=0.5, optimizer="adamw")
    full = scaled_loss_updates(tiny, scale=1.0, optimizer="adamw")
    assert not torch.allclose(half, full, rtol=1e-2)


def test_a_model_trained_on_half_the_loss_with_adamw_ends_where_it_would_have():
    """The same claim on a real trajectory: 5 AdamW steps of a linear model on ``loss`` and on
    ``loss / 2`` reach the same weights (to 1e-6); with SGD they do not."""

    def train(scale: float, optimizer: str) -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(16, 3, generator=g), torch.randn(16, generator=g)  # (N, 3), (N,)
        w = torch.zeros(3, requires_grad=True)  # (3,)
        opt = (torch.optim.AdamW if optimizer == "adamw" else torch.optim.SGD)([w], lr=0.1)
        for _ in range(5):
            opt.zero_grad()
            (scale * ((x @ w - y) ** 2).mean()).backward()
            opt.step()
        return w.detach()

    torch.testing.assert_close(train(0.5, "adamw"), train(1.0, "adamw"), rtol=0, atol=1e-6)
    assert (train(0.5, "sgd") - train(1.0, "sgd")).abs().max() > 1e-2
