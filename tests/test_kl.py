"""lmlessons.kl: Schulman's estimators measured on known distributions, the argument order of the
exact KL, forward vs reverse KL on a bimodal teacher, and the generalized JSD's ends.

The estimators are measured on ``q = N(0, 1)`` (the sampler) and ``p = N(mu, 1)`` for ``mu`` in
{0.1, 1}, Schulman's two examples: ``log r = log p(x) - log q(x) = mu x - mu^2 / 2`` and
``KL(q || p) = mu^2 / 2``. Seeds: 0 for ``mu=0.1``, 1 for ``mu=1``; ``N_SAMPLES`` samples each;
a mean is "unbiased" within 4 standard errors of it.
"""

from __future__ import annotations

import math

import pytest
import torch

from lmlessons.kl import (
    forward_kl,
    generalized_jsd,
    k1,
    k2,
    k3,
    kl_divergence,
    reverse_kl,
)

N_SAMPLES = 400_000
SEEDS = {0.1: 0, 1.0: 1}  # mu: seed


def _samples(mu: float) -> tuple[torch.Tensor, float]:
    """``log r`` for ``x ~ q = N(0, 1)`` and ``p = N(mu, 1)``, float64, and the true KL."""
    x = torch.randn(
        N_SAMPLES, generator=torch.Generator().manual_seed(SEEDS[mu]), dtype=torch.float64
    )
    return mu * x - mu**2 / 2, mu**2 / 2  # (N,), KL(q || p)


def _mean_and_se(values: torch.Tensor) -> tuple[float, float]:
    return float(values.mean()), float(values.std()) / math.sqrt(values.numel())


@pytest.mark.parametrize("mu", SEEDS)
def test_k1_and_k3_are_unbiased_k2_is_not(mu):
    log_r, kl = _samples(mu)
    for estimator in (k1, k3):
        mean, se = _mean_and_se(estimator(log_r))
        assert abs(mean - kl) < 4 * se, estimator.__name__
    # k2's mean is E[(mu x - mu^2 / 2)^2] / 2 = KL + mu^4 / 8: a bias of mu^2 / 4 of the KL,
    # 0.25% at mu=0.1 (below what these samples resolve), 25% at mu=1.
    mean, se = _mean_and_se(k2(log_r))
    assert abs(mean - (kl + mu**4 / 8)) < 4 * se
    if mu == 1.0:
        assert mean - kl > 10 * se  # biased upwards, far beyond the noise


@pytest.mark.parametrize("mu", SEEDS)
def test_k2_and_k3_are_never_negative_k1_often_is(mu):
    log_r, _ = _samples(mu)
    assert float(k2(log_r).min()) >= 0 and float(k3(log_r).min()) >= 0
    assert float((k1(log_r) < 0).double().mean()) > 0.3  # p(x) > q(x) for a good share of x
    grid = torch.linspace(-30, 30, 601, dtype=torch.float64)  # (601,) log ratios, r up to e^30
    assert float(k3(grid).min()) >= 0


def test_the_variances_are_ordered_as_schulman_states():
    """Close distributions (mu=0.1): k1's standard deviation is about 20 times the KL, k2's and
    k3's about 1.4 times. Farther apart (mu=1): 2, 1.73 and 1.7 times: k1 stays the noisiest."""
    stds = {}
    for mu in SEEDS:
        log_r, kl = _samples(mu)
        stds[mu] = {f.__name__: float(f(log_r).std()) / kl for f in (k1, k2, k3)}
    assert stds[0.1]["k1"] > 10 * stds[0.1]["k3"] and stds[0.1]["k1"] > 10 * stds[0.1]["k2"]
    assert stds[1.0]["k1"] > 1.1 * stds[1.0]["k3"] and stds[1.0]["k1"] > 1.1 * stds[1.0]["k2"]
    for mu, expected_k1 in [(0.1, 20.0), (1.0, 2.0)]:  # std(k1) = mu, the KL mu^2 / 2
        assert stds[mu]["k1"] == pytest.approx(expected_k1, rel=0.01)


# ----------------------------------------------------------------------------- exact divergences


def _log_probs(*shape: int, seed: int) -> torch.Tensor:
    logits = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2
    return torch.log_softmax(logits, dim=-1)


def test_kl_divergence_is_the_sum_over_p():
    log_p, log_q = _log_probs(3, 6, seed=0), _log_probs(3, 6, seed=1)  # (B, V)
    by_hand = (log_p.exp() * (log_p - log_q)).sum(-1)  # (B,): KL(p || q)
    torch.testing.assert_close(kl_divergence(log_p, log_q), by_hand)
    assert not torch.allclose(kl_divergence(log_q, log_p), by_hand)  # not symmetric
    assert float(kl_divergence(log_p, log_p).abs().max()) < 1e-6


def test_forward_and_reverse_kl_put_the_teacher_first_and_second():
    student, teacher = _log_probs(2, 5, seed=2) * 3, _log_probs(2, 5, seed=3)  # (B, V) logits
    log_s, log_t = torch.log_softmax(student, -1), torch.log_softmax(teacher, -1)
    torch.testing.assert_close(forward_kl(student, teacher), kl_divergence(log_t, log_s))
    torch.testing.assert_close(reverse_kl(student, teacher), kl_divergence(log_s, log_t))
    hot = forward_kl(student, teacher, temperature=2.0)  # both divided by 2
    torch.testing.assert_close(hot, forward_kl(student / 2, teacher / 2))


def test_forward_kl_covers_the_modes_reverse_kl_seeks_one():
    """A bimodal teacher (modes at -3 and 3) on a grid; the student is one Gaussian bump, its
    centre and width searched on a grid. Forward KL puts it between the modes and wide; reverse
    KL on one mode, as narrow as it."""
    x = torch.linspace(-7, 7, 141)  # (X,)
    teacher = torch.logsumexp(torch.stack([-((x - 3) ** 2), -((x + 3) ** 2)]) / (2 * 0.7**2), 0)
    mus = torch.linspace(-4, 4, 81)  # (M,)
    sigmas = torch.linspace(0.3, 5.0, 48)  # (S,)
    student = -((x - mus[:, None, None]) ** 2) / (2 * sigmas[None, :, None] ** 2)  # (M, S, X)
    teacher = teacher.expand_as(student)  # (M, S, X)
    found = {}
    for name, divergence in [("forward", forward_kl), ("reverse", reverse_kl)]:
        m, s = divmod(int(divergence(student, teacher).argmin()), len(sigmas))
        found[name] = (float(mus[m]), float(sigmas[s]))
    (mu_f, sigma_f), (mu_r, sigma_r) = found["forward"], found["reverse"]
    assert abs(mu_f) < 0.3 and sigma_f > 2.5  # wide enough for both modes (3.5 on this grid)
    assert abs(abs(mu_r) - 3) < 0.3 and sigma_r < 1.0  # one mode, its width 0.7 (the KL is log 2)


# ------------------------------------------------------------------------------ generalized_jsd


def _pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 6, generator=g) * 2, torch.randn(2, 3, 6, generator=g) * 2


def test_generalized_jsd_ends_are_the_two_kls_and_its_limits_their_directions():
    student, teacher = _pair(0)
    fwd = forward_kl(student, teacher).sum() / 2  # batchmean without labels: over B = 2
    rev = reverse_kl(student, teacher).sum() / 2
    torch.testing.assert_close(generalized_jsd(student, teacher, beta=0.0), fwd)
    torch.testing.assert_close(generalized_jsd(student, teacher, beta=1.0), rev)
    # Close to the ends the divergence is small; divided by beta (1 - beta) it tends to the KL.
    eps = 1e-4
    near_0 = generalized_jsd(student.double(), teacher.double(), beta=eps) / eps
    near_1 = generalized_jsd(student.double(), teacher.double(), beta=1 - eps) / eps
    assert float(near_0) == pytest.approx(float(fwd), rel=1e-2)
    assert float(near_1) == pytest.approx(float(rev), rel=1e-2)


def test_generalized_jsd_is_symmetric_under_swapping_and_bounded():
    student, teacher = _pair(1)
    for beta in (0.1, 0.5, 0.8):
        swapped = generalized_jsd(teacher, student, beta=1 - beta, reduction="none")
        torch.testing.assert_close(
            generalized_jsd(student, teacher, beta=beta, reduction="none"), swapped
        )
    jsd = generalized_jsd(student, teacher, beta=0.5, reduction="none")  # (B, T)
    assert float(jsd.min()) > 0 and float(jsd.max()) <= math.log(2)


def test_generalized_jsd_labels_and_reductions():
    student, teacher = _pair(2)
    labels = torch.tensor([[-100, 1, 2], [3, -100, -100]])  # (B, T): 3 counted positions
    per_position = generalized_jsd(student, teacher, labels=labels, reduction="none")  # (B, T)
    assert bool((per_position[labels == -100] == 0).all())
    assert bool((per_position[labels != -100] > 0).all())
    total = generalized_jsd(student, teacher, labels=labels, reduction="sum")
    torch.testing.assert_close(total, per_position.sum())
    torch.testing.assert_close(generalized_jsd(student, teacher, labels=labels), total / 3)
    window = generalized_jsd(student, teacher, labels=labels, num_items_in_batch=12)
    torch.testing.assert_close(window, total / 12)
    unlabelled = generalized_jsd(student, teacher, reduction="none").sum()
    torch.testing.assert_close(generalized_jsd(student, teacher), unlabelled / 2)  # over B


# ---------------------------------------------------------------------------------------- errors

S, T = _pair(3)

BAD = [
    ("log_ratio", lambda: k1(torch.tensor([1, 2]))),
    ("log_ratio", lambda: k3([0.5])),
    ("log_p and log_q", lambda: kl_divergence(torch.zeros(2, 3), torch.zeros(2, 4))),
    ("student_logits and teacher_logits", lambda: forward_kl(S, T[..., :4])),
    ("temperature", lambda: reverse_kl(S, T, temperature=0.0)),
    ("temperature", lambda: forward_kl(S, T, temperature="1")),
    ("beta", lambda: generalized_jsd(S, T, beta=1.5)),
    ("reduction", lambda: generalized_jsd(S, T, reduction="mean")),
    ("labels", lambda: generalized_jsd(S, T, labels=torch.zeros(2, 2, dtype=torch.long))),
    ("labels", lambda: generalized_jsd(S, T, labels=torch.full((2, 3), 6))),
    ("num_items_in_batch", lambda: generalized_jsd(S, T, num_items_in_batch=0)),
]


@pytest.mark.parametrize(("name", "call"), BAD, ids=[f"{i}-{n}" for i, (n, _) in enumerate(BAD)])
def test_bad_input_names_the_argument(name, call):
    with pytest.raises((ValueError, TypeError), match=f"^{name}"):
        call()


def test_the_shape_messages_name_both_arguments_and_both_shapes():
    with pytest.raises(ValueError) as raised:
        kl_divergence(torch.zeros(2, 3), torch.zeros(2, 4))
    assert (
        str(raised.value) == "log_p and log_q must have one shape (..., V), got (2, 3) and (2, 4)"
    )
    with pytest.raises(ValueError) as raised:
        forward_kl(S, T[..., :4])
    expected = f"must have one shape (..., V), got {tuple(S.shape)} and {tuple(T[..., :4].shape)}"
    assert str(raised.value) == f"student_logits and teacher_logits {expected}"
