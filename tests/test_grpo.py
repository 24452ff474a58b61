"""lmlessons.grpo: what its docstrings promise, without TRL (the oracle is test_grpo_trl.py).

The advantages of a group sum to 0; on-policy with ``beta=0`` the ``grpo`` loss is then 0
whatever the rewards, the token-level loss types are not when the reward grows with the length;
the weights of each loss type sum as stated; ``dapo``'s micro-batches add up to the window; the
clip stops the gradient where PPO says; the KL term's gradient.
"""

from __future__ import annotations

import pytest
import torch

from lmlessons.grpo import (
    LOSS_TYPES,
    SCALE_REWARDS,
    aggregate_loss,
    group_advantages,
    rloo_advantages,
    token_losses,
    token_weights,
)

G = 4  # completions per prompt
L = 10  # max_completion_length


def _lengths_mask(lengths: list[int], width: int | None = None) -> torch.Tensor:
    """``(B, C)`` right-padded completion mask of the given lengths."""
    lengths_t = torch.tensor(lengths)  # (B,)
    width = width or max(lengths)
    return (torch.arange(width) < lengths_t.unsqueeze(1)).long()  # (B, C)


def _random_batch(seed: int, prompts: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Lengths 1..L and rewards of any sign, seeded."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, L + 1, (prompts * G,), generator=g)  # (B,)
    rewards = torch.randn(prompts * G, generator=g) * 3  # (B,)
    return _lengths_mask(lengths.tolist()), rewards


def _on_policy_loss(mask, advantages, loss_type, **kwargs):
    logps = -torch.rand(mask.shape, generator=torch.Generator().manual_seed(7))  # (B, C)
    per_token = token_losses(logps, None, advantages)  # (B, C)
    return aggregate_loss(per_token, mask, loss_type=loss_type, max_completion_length=L, **kwargs)


# ------------------------------------------------------------------------------ group_advantages


@pytest.mark.parametrize("scale_rewards", SCALE_REWARDS)
def test_advantages_sum_to_zero_within_each_group(scale_rewards):
    for seed in range(5):
        _, rewards = _random_batch(seed)
        adv = group_advantages(rewards, num_generations=G, scale_rewards=scale_rewards)
        assert adv.shape == rewards.shape
        torch.testing.assert_close(adv.view(-1, G).sum(dim=1), torch.zeros(3), atol=1e-5, rtol=0)


def test_advantage_scaling():
    rewards = torch.tensor(
        [1.0, 2.0, 5.0, 8.0, 101.0, 102.0, 105.0, 108.0]
    )  # (B,), no zero advantage
    none = group_advantages(rewards, num_generations=G, scale_rewards="none")
    group = group_advantages(rewards, num_generations=G, scale_rewards="group")
    batch = group_advantages(rewards, num_generations=G, scale_rewards="batch")
    # "none": the reward minus its group's mean, so the two shifted groups get one advantage.
    torch.testing.assert_close(none[:G], none[G:])
    torch.testing.assert_close(none[:G], rewards[:G] - rewards[:G].mean())
    # "group": unit (Bessel) standard deviation in each group, to the 1e-4 added.
    torch.testing.assert_close(group.view(-1, G).std(dim=1), torch.ones(2), atol=1e-3, rtol=0)
    # "batch": one divisor for all, the spread of all rewards (here mostly between the groups).
    ratio = none / batch  # (B,)
    torch.testing.assert_close(
        ratio, torch.full_like(ratio, float(rewards.std())), rtol=1e-4, atol=0
    )


def test_a_group_without_spread_gets_no_advantage():
    rewards = torch.tensor([3.0, 3.0, 3.0, 3.0, 0.0, 1.0, 0.0, 1.0])  # (B,)
    for scale in SCALE_REWARDS:
        adv = group_advantages(rewards, num_generations=G, scale_rewards=scale)
        assert adv[:G].abs().max() == 0  # nothing to learn from a group whose rewards are equal
        assert adv[G:].abs().min() > 0


# ------------------------------------------------------------- the loss types at ratio 1, beta 0


def test_on_policy_grpo_loss_is_zero_whatever_the_rewards():
    """Every completion weighs 1/B and its tokens share its advantage: the loss is minus the mean
    advantage, 0 (the gradient is not: it is the policy gradient)."""
    for seed in range(10):
        mask, rewards = _random_batch(seed)
        adv = group_advantages(rewards, num_generations=G)
        loss = _on_policy_loss(mask, adv, "grpo")
        assert abs(float(loss)) < 1e-6


@pytest.mark.parametrize("loss_type", ["bnpo", "dapo", "dr_grpo"])
def test_on_policy_token_level_losses_are_negative_when_longer_is_better(loss_type):
    """A reward that grows with the length gives the long completions the positive advantages,
    and they have more tokens: the token-weighted sum of the advantages is positive, the loss
    below 0."""
    tested = 0
    for seed in range(10):
        mask, _ = _random_batch(seed)
        lengths = mask.sum(dim=1).float()  # (B,)
        if bool((lengths.view(-1, G).std(dim=1) == 0).any()):
            continue  # a group of equal lengths carries no length signal
        adv = group_advantages(lengths, num_generations=G)
        assert float(_on_policy_loss(mask, adv, loss_type)) < -1e-3
        assert abs(float(_on_policy_loss(mask, adv, "grpo"))) < 1e-6
        tested += 1
    assert tested >= 5


# -------------------------------------------------------------------------------- token_weights


def test_token_weights_sum_as_stated():
    lengths = [1, 4, 2, 0, 3, 3, 1, 2]  # one completion without a token
    mask = _lengths_mask(lengths)  # (B, C)
    b, n = len(lengths), sum(lengths)
    per_row = {
        t: token_weights(mask, loss_type=t, max_completion_length=L).sum(1) for t in LOSS_TYPES
    }
    expected_grpo = torch.tensor([1 / b if k else 0.0 for k in lengths])  # each completion 1/B
    torch.testing.assert_close(per_row["grpo"], expected_grpo)
    torch.testing.assert_close(per_row["bnpo"].sum(), torch.tensor(1.0))
    torch.testing.assert_close(per_row["dapo"], per_row["bnpo"])  # without num_items_in_batch
    torch.testing.assert_close(per_row["dr_grpo"].sum(), torch.tensor(n / (b * L)))
    window = token_weights(mask, loss_type="dapo", num_items_in_batch=4 * n).sum()
    torch.testing.assert_close(window, torch.tensor(0.25))  # a quarter of the window's tokens


def test_a_token_of_a_short_answer_weighs_more_only_under_grpo():
    mask = _lengths_mask([1, 4, 4, 4])  # (B, C)
    for loss_type in LOSS_TYPES:
        w = token_weights(mask, loss_type=loss_type, max_completion_length=L)  # (B, C)
        short_over_long = float(w[0, 0] / w[1, 0])
        assert short_over_long == pytest.approx(4.0 if loss_type == "grpo" else 1.0)
        assert bool((w[mask == 0] == 0).all())  # padding weighs nothing


def test_dapo_micro_batches_add_up_to_the_window_and_bnpo_ones_do_not():
    g = torch.Generator().manual_seed(3)
    mask = _lengths_mask([1, 2, 1, 3, 9, 8, 10, 7])  # (B, C): a short and a long micro-batch
    losses = torch.randn(mask.shape, generator=g)  # (B, C)
    n = int(mask.sum())
    halves = [(losses[:4], mask[:4]), (losses[4:], mask[4:])]
    window = aggregate_loss(losses, mask, loss_type="dapo")
    summed = sum(aggregate_loss(lo, m, loss_type="dapo", num_items_in_batch=n) for lo, m in halves)
    torch.testing.assert_close(summed, window)
    # bnpo: each micro-batch its own mean, then the mean of the means (TRL divides by the steps).
    bnpo_window = aggregate_loss(losses, mask, loss_type="bnpo")
    bnpo_steps = sum(aggregate_loss(lo, m, loss_type="bnpo") for lo, m in halves) / 2
    assert abs(float(bnpo_steps - bnpo_window)) > 1e-3


def test_dr_grpo_divides_by_a_constant_and_bnpo_by_the_tokens():
    mask = _lengths_mask([2, 3, 5, 1])  # (B, C)
    losses = torch.randn(mask.shape, generator=torch.Generator().manual_seed(4))  # (B, C)
    dr = aggregate_loss(losses, mask, loss_type="dr_grpo", max_completion_length=L)
    bnpo = aggregate_loss(losses, mask, loss_type="bnpo")
    torch.testing.assert_close(dr, bnpo * int(mask.sum()) / (4 * L))


def test_dr_grpo_differs_from_bnpo_by_a_factor_that_follows_the_lengths():
    """dr_grpo / bnpo = N / (B L): not one constant but a factor per batch; over a window of two
    micro-batches (each divided by the accumulation steps, as TRL does) dr_grpo weighs every token
    alike, bnpo weighs a token of the micro-batch with fewer tokens more."""
    short, long = _lengths_mask([1, 2, 1, 2], L), _lengths_mask([8, 9, 10, 7], L)  # (B, L) each
    factors = [
        float(token_weights(m, loss_type="dr_grpo", max_completion_length=L).sum())
        / float(token_weights(m, loss_type="bnpo").sum())
        for m in (short, long)
    ]
    assert factors == [pytest.approx(6 / 40), pytest.approx(34 / 40)]
    for loss_type, alike in (("dr_grpo", True), ("bnpo", False)):
        per_token = [
            float(token_weights(m, loss_type=loss_type, max_completion_length=L).max()) / 2
            for m in (short, long)
        ]
        assert (per_token[0] == pytest.approx(per_token[1])) is alike


# ------------------------------------------------------------------------------ token_losses


def _grad(advantage: float, ratio: float, **kwargs) -> float:
    logps = torch.tensor([[-1.0]], requires_grad=True)  # (1, 1)
    old = logps.detach() - torch.log(torch.tensor(ratio))  # (1, 1): exp(logps - old) = ratio
    loss = token_losses(logps, old, torch.tensor([advantage]), **kwargs).sum()
    return float(torch.autograd.grad(loss, logps)[0])


def test_the_clip_stops_the_gradient_only_where_it_helps():
    """PPO's pessimism: past 1 + epsilon_high a positive advantage no longer pushes, below
    1 - epsilon_low a negative one no longer pulls; on the other side the ratio is not clipped."""
    assert _grad(1.0, 1.5) == 0 and _grad(1.0, 1.5, epsilon_high=0.6) < 0
    assert _grad(-1.0, 0.5) == 0 and _grad(-1.0, 0.5, epsilon_low=0.6) > 0
    assert _grad(1.0, 0.5) == pytest.approx(-0.5)  # d(-ratio * A)/dlogp = -ratio * A
    assert _grad(-1.0, 1.5) == pytest.approx(1.5)
    assert _grad(1.0, 1.0) == pytest.approx(-1.0)  # on-policy: the policy gradient


def test_the_kl_term_on_policy_has_the_reverse_kl_gradient():
    """With the ratio (TRL's default) the gradient of each token's KL term on-policy is
    ``logps - ref_logps``, the score-function gradient of ``KL(policy || reference)``; without it,
    ``1 - exp(ref_logps - logps)``."""
    g = torch.Generator().manual_seed(5)
    logps = (-torch.rand(3, 4, generator=g) * 3).requires_grad_()  # (B, C)
    ref = -torch.rand(3, 4, generator=g) * 3  # (B, C)
    zero = torch.zeros(3)  # (B,): only the KL term
    for correction, expected in [
        (True, logps.detach() - ref),
        (False, 1 - torch.exp(ref - logps.detach())),
    ]:
        loss = token_losses(
            logps, None, zero, ref_logps=ref, beta=1.0, use_bias_correction_kl=correction
        ).sum()
        torch.testing.assert_close(torch.autograd.grad(loss, logps)[0], expected)
    same = token_losses(logps, None, zero, ref_logps=logps.detach(), beta=1.0)  # (B, C)
    assert float(same.detach().abs().max()) == 0  # no KL to a reference equal to the policy


def test_group_mean_advantage_is_rloo_scaled_by_g_minus_1_over_g():
    """GRPO's group mean includes the completion itself: its advantage is exactly (G - 1) / G
    times RLOO's leave-one-out one, and RLOO's baseline is the mean of the other rewards."""
    _, rewards = _random_batch(3)
    rloo = rloo_advantages(rewards, num_generations=G)  # (B,)
    group = group_advantages(rewards, num_generations=G, scale_rewards="none")  # (B,)
    torch.testing.assert_close(group, (G - 1) / G * rloo)
    first = rewards[:G]
    assert float(rloo[0]) == pytest.approx(float(first[0] - first[1:].mean()), abs=1e-6)


def test_dapo_with_no_token_in_the_window_gives_a_zero_loss():
    """Every completion masked (all truncated under mask_truncated_completions=True): the count
    0 is clamped to 1, as TRL does; the loss is 0, not an error or a NaN."""
    mask = torch.zeros(4, 3, dtype=torch.long)  # (B, C)
    per_token = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))  # (B, C)
    for count in (0, 0.0, torch.tensor(0)):
        loss = aggregate_loss(per_token, mask, loss_type="dapo", num_items_in_batch=count)
        assert float(loss) == 0.0 and torch.isfinite(loss)
    weights = token_weights(_lengths_mask([2, 1]), loss_type="dapo", num_items_in_batch=0.5)
    assert float(weights.max()) == 1.0  # any count below 1 is clamped to 1, as TRL's clamp


def test_the_sequence_level_ratio_clips_whole_completions():
    """GSPO: every token of a completion gets exp(mean log-ratio of its tokens); on-policy the
    gradient equals the token level's; off-policy the clip keeps or drops a completion whole."""
    mask = _lengths_mask([2, 4])  # (B, C)
    logps = torch.full((2, 4), -1.0, requires_grad=True)  # (B, C)
    adv = torch.tensor([1.0, 1.0])  # (B,)
    grads = {}
    for level in ("token", "sequence"):
        for old in (None, logps.detach() - torch.tensor([[0.5, -0.3, 0.0, 0.0], [0.0] * 4])):
            per_token = token_losses(
                logps, old, adv, importance_sampling_level=level, completion_mask=mask
            )  # (B, C)
            loss = aggregate_loss(per_token, mask, loss_type="grpo")
            grads[level, old is None] = torch.autograd.grad(loss, logps)[0] * mask
    torch.testing.assert_close(grads["token", True], grads["sequence", True])
    # off-policy, completion 0: token ratios e^0.5 (clipped) and e^-0.3 (not); sequence ratio
    # e^0.1 = 1.105 < 1.2, not clipped: both tokens keep a gradient.
    assert float(grads["token", False][0, 0]) == 0 and float(grads["token", False][0, 1]) < 0
    assert bool((grads["sequence", False][0, :2] < 0).all())
    seq_ratio = float(torch.exp(torch.tensor(0.1)))
    expected = -seq_ratio / (2 * 2)  # ratio * 1/n_i (the mean log-ratio) * 1/B (grpo)
    assert float(grads["sequence", False][0, 0]) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------------------------------- errors

MASK = _lengths_mask([1, 2, 3, 1])
LP = torch.zeros(4, 3)
ADV = torch.zeros(4)

BAD = [
    ("rewards", lambda: group_advantages(torch.zeros(6), num_generations=4)),
    ("rewards", lambda: group_advantages(torch.tensor([1.0, float("nan")]), num_generations=2)),
    ("rewards", lambda: group_advantages([1.0, 2.0], num_generations=2)),
    ("num_generations", lambda: group_advantages(torch.zeros(4), num_generations=1)),
    ("scale_rewards", lambda: group_advantages(ADV, num_generations=2, scale_rewards="std")),
    ("logps", lambda: token_losses(torch.zeros(4), None, ADV)),
    ("old_logps", lambda: token_losses(LP, torch.zeros(4, 2), ADV)),
    ("advantages", lambda: token_losses(LP, None, torch.zeros(3))),
    ("epsilon_low", lambda: token_losses(LP, None, ADV, epsilon_low=-0.1)),
    ("epsilon_high", lambda: token_losses(LP, None, ADV, epsilon_high="0.2")),
    ("beta", lambda: token_losses(LP, None, ADV, beta=float("nan"))),
    ("ref_logps", lambda: token_losses(LP, None, ADV, beta=0.1)),
    ("ref_logps", lambda: token_losses(LP, None, ADV, beta=0.1, ref_logps=torch.zeros(4))),
    ("loss_type", lambda: token_weights(MASK, loss_type="ppo")),
    ("max_completion_length", lambda: token_weights(MASK, loss_type="dr_grpo")),
    (
        "max_completion_length",
        lambda: token_weights(MASK, loss_type="dr_grpo", max_completion_length=2),
    ),
    ("num_items_in_batch", lambda: token_weights(MASK, loss_type="dapo", num_items_in_batch=-1)),
    ("rewards", lambda: rloo_advantages(torch.zeros(6), num_generations=4)),
    (
        "importance_sampling_level",
        lambda: token_losses(LP, None, ADV, importance_sampling_level="seq"),
    ),
    (
        "completion_mask",
        lambda: token_losses(LP, None, ADV, importance_sampling_level="sequence"),
    ),
    ("completion_mask", lambda: token_weights(MASK * 2, loss_type="bnpo")),
    ("completion_mask", lambda: token_weights(MASK[0], loss_type="bnpo")),
    ("completion_mask", lambda: token_weights(MASK.tolist(), loss_type="bnpo")),
    ("per_token_loss", lambda: aggregate_loss(LP[:, :2], MASK, loss_type="bnpo")),
    ("per_token_loss", lambda: aggregate_loss(MASK, MASK, loss_type="bnpo")),
]


@pytest.mark.parametrize(("name", "call"), BAD, ids=[f"{i}-{n}" for i, (n, _) in enumerate(BAD)])
def test_bad_input_names_the_argument(name, call):
    with pytest.raises((ValueError, TypeError), match=f"^{name}"):
        call()
