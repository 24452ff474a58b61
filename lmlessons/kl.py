"""KL divergences as the RL and distillation losses use them: estimated from samples, or exact.

From samples. The policy ``q`` generated the tokens ``x``; the KL to a reference ``p`` is never
summed over the vocabulary, it is estimated from the log-probabilities of the sampled tokens,
``log_ratio = log p(x) - log q(x)`` (``r = p(x) / q(x)``). Schulman's three estimators of
``KL(q || p) = E_q[-log r]`` (http://joschu.net/blog/kl-approx.html):

* :func:`k1` ``= -log r``: unbiased, high variance, negative for some samples. TRL's
  ``RLOOTrainer`` puts it into the reward (``per_token_kl = old_per_token_logps -
  ref_per_token_logps``, summed over the completion, times ``beta``);
* :func:`k2` ``= (log r)^2 / 2``: biased, low variance, never negative;
* :func:`k3` ``= (r - 1) - log r``: unbiased (``E_q[r] = 1``), low variance, never negative.
  TRL's ``GRPOTrainer`` adds it to the per-token loss (:func:`lmlessons.grpo.token_losses`).

Exact, over the vocabulary (distillation): :func:`kl_divergence` names the argument order of
``F.kl_div`` once, :func:`forward_kl` and :func:`reverse_kl` say which distribution comes first,
and :func:`generalized_jsd` interpolates between them (TRL's ``GKDTrainer``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmlessons._checks import (
    IGNORE_INDEX,
    check_float_tensor,
    check_logits_labels,
    check_num_items,
    check_probability,
    check_real,
    check_same_shape,
)

__all__ = [
    "k1",
    "k2",
    "k3",
    "kl_divergence",
    "forward_kl",
    "reverse_kl",
    "generalized_jsd",
]

JSD_REDUCTIONS = ("batchmean", "sum", "none")


def k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """``-log r``, Schulman's first estimator of ``KL(q || p)``, for each sample ``x ~ q``.

    ``log_ratio = log p(x) - log q(x)``, any shape; returns its shape. Unbiased but negative
    for every sample where ``p(x) > q(x)``. TRL's ``RLOOTrainer`` KL penalty per token
    (``old_per_token_logps - ref_per_token_logps``: ``q`` the policy that sampled, ``p`` the
    reference; TRL 1.16 ``trainer/rloo_trainer.py:1669``).
    """
    log_ratio = check_float_tensor("log_ratio", log_ratio, min_ndim=0)
    return -log_ratio  # (...)


def k2(log_ratio: torch.Tensor) -> torch.Tensor:
    """``(log r)^2 / 2``, Schulman's second estimator: never negative, low variance, biased
    (its mean is an f-divergence that agrees with ``KL(q || p)`` only to second order as ``p``
    approaches ``q``). ``log_ratio = log p(x) - log q(x)``, any shape; returns its shape."""
    log_ratio = check_float_tensor("log_ratio", log_ratio, min_ndim=0)
    return log_ratio.pow(2) / 2  # (...)


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """``(r - 1) - log r``, Schulman's third estimator: ``k1`` plus ``r - 1``, whose mean under
    ``q`` is 0, so still unbiased; never negative (``log r <= r - 1``), lower variance than ``k1``
    when ``p`` is close to ``q``.

    ``log_ratio = log p(x) - log q(x)``, any shape; returns its shape. TRL's ``GRPOTrainer``
    term ``torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps -
    per_token_logps) - 1`` (TRL 1.16 ``trainer/grpo_trainer.py:3100-3102``): ``q`` the policy,
    ``p`` the reference, so ``log_ratio = ref_logps - logps``.
    """
    log_ratio = check_float_tensor("log_ratio", log_ratio, min_ndim=0)
    return torch.exp(log_ratio) - log_ratio - 1  # (...)


def kl_divergence(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``KL(p || q) = sum_v p(v) (log p(v) - log q(v))`` over the last dimension, from the
    log-probabilities of two distributions of one shape ``(..., V)``; returns ``(...)``.

    ``F.kl_div(input, target)`` computes ``KL(target || input)``: the distribution that comes
    *first* in ``KL(p || q)`` is its *second* argument. Written once here, with keywords.
    """
    log_p = check_float_tensor("log_p", log_p)
    log_q = check_float_tensor("log_q", log_q)
    check_same_shape("log_p", log_p, "log_q", log_q, dims="(..., V)")
    terms = F.kl_div(input=log_q, target=log_p, reduction="none", log_target=True)  # (..., V)
    return terms.sum(dim=-1)  # (...)


def _log_probs(
    student_logits: object, teacher_logits: object, temperature: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both ``(..., V)`` logits divided by ``temperature`` and log-softmaxed (float32 at least)."""
    student = check_float_tensor("student_logits", student_logits)
    teacher = check_float_tensor("teacher_logits", teacher_logits)
    check_same_shape("student_logits", student, "teacher_logits", teacher, dims="(..., V)")
    t = check_real("temperature", temperature, positive=True)
    dtype = torch.promote_types(student.dtype, torch.float32)
    log_s = F.log_softmax(student.to(dtype) / t, dim=-1)  # (..., V)
    log_t = F.log_softmax(teacher.to(dtype) / t, dim=-1)  # (..., V)
    return log_s, log_t


def forward_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """``KL(teacher || student)`` at every position, ``(..., V)`` -> ``(...)``: the student pays
    wherever the teacher has mass it lacks, so it spreads over every mode (*mode-covering*).
    Minimising it is cross-entropy on the teacher's soft labels (word-level distillation).
    ``F.kl_div(input=student log-probs, target=teacher log-probs)``.
    """
    log_s, log_t = _log_probs(student_logits, teacher_logits, temperature)
    return kl_divergence(log_t, log_s)  # (...)


def reverse_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """``KL(student || teacher)`` at every position, ``(..., V)`` -> ``(...)``: the student pays
    wherever it puts mass the teacher does not, so it settles on one mode (*mode-seeking*). The
    KL the RL losses keep small, there estimated from samples (:func:`k3`).
    ``F.kl_div(input=teacher log-probs, target=student log-probs)``.
    """
    log_s, log_t = _log_probs(student_logits, teacher_logits, temperature)
    return kl_divergence(log_s, log_t)  # (...)


def _jsd_per_position(log_s: torch.Tensor, log_t: torch.Tensor, beta: float) -> torch.Tensor:
    """:func:`generalized_jsd` at every position, ``(..., V)`` -> ``(...)``."""
    if beta == 0.0:
        return kl_divergence(log_t, log_s)  # (...), forward KL
    if beta == 1.0:
        return kl_divergence(log_s, log_t)  # (...), reverse KL
    weights = torch.tensor([1 - beta, beta], dtype=log_s.dtype, device=log_s.device).log()  # (2,)
    stacked = torch.stack([log_s, log_t])  # (2, ..., V)
    log_m = torch.logsumexp(stacked + weights.view(2, *[1] * log_s.dim()), dim=0)  # (..., V)
    return beta * kl_divergence(log_t, log_m) + (1 - beta) * kl_divergence(log_s, log_m)  # (...)


def generalized_jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    *,
    beta: float = 0.5,
    temperature: float = 1.0,
    labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """The generalized Jensen-Shannon divergence of GKD (arXiv 2306.13649, Eq. 1), TRL's
    ``GKDTrainer.generalized_jsd_loss`` (TRL 1.16 ``experimental/gkd/gkd_trainer.py:238-322``).

    With ``m = beta * teacher + (1 - beta) * student`` (mixed in probability space, on logits
    divided by ``temperature``, with no ``temperature ** 2`` factor, as TRL):
    ``beta * KL(teacher || m) + (1 - beta) * KL(student || m)``, except at the two ends, where
    this is 0: ``beta=0`` gives :func:`forward_kl` and ``beta=1`` :func:`reverse_kl`, the limits
    of the divergence divided by ``beta`` and by ``1 - beta`` (its *direction*, not its value).

    Args:
        student_logits, teacher_logits: ``(..., V)``, one shape, already aligned (position t of
            both scores the same next token; TRL's ``compute_loss`` cuts the prompt first).
        labels: ``(...)``, -100 where a position does not count; no shift here.
        reduction: ``"batchmean"`` (TRL's default): the sum over the counted positions divided
            by their number, or, without ``labels``, by ``student_logits.shape[0]`` (``B``:
            the sum over each sequence, not a per-token mean, as ``F.kl_div``'s batchmean);
            ``"sum"``; ``"none"``: the divergence of each position, 0 where ``labels`` is
            -100 (TRL returns the per-vocabulary terms of the counted positions instead).
        num_items_in_batch: if given, the sum divided by it (gradient accumulation), whatever
            ``reduction`` says, as TRL.
    """
    # 1. Validate; the log-probabilities of both at the temperature.
    beta = check_probability("beta", beta)
    if reduction not in JSD_REDUCTIONS:
        raise ValueError(f"reduction must be one of {JSD_REDUCTIONS}, got {reduction!r}")
    n = check_num_items(num_items_in_batch)
    log_s, log_t = _log_probs(student_logits, teacher_logits, temperature)  # (..., V) each
    if labels is not None:
        labels = check_logits_labels(log_s, labels, "student_logits", "labels")[1]  # (...)
    # 2. The divergence of each position: a KL at the ends, the mixture's JSD in between.
    jsd = _jsd_per_position(log_s, log_t, beta)  # (...)
    # 3. Positions without a target do not count; reduce.
    counted = torch.ones_like(jsd, dtype=torch.bool) if labels is None else labels != IGNORE_INDEX
    jsd = jsd.masked_fill(~counted, 0.0)  # (...), 0 where not counted
    if n is not None:
        return jsd.sum() / n
    if reduction == "none":
        return jsd
    if reduction == "sum":
        return jsd.sum()
    if labels is not None:
        return jsd.sum() / max(int(counted.sum()), 1)  # a mean over the counted positions
    return jsd.sum() / (jsd.shape[0] if jsd.dim() else 1)  # a mean over the first dimension
