"""Battery for ``label_smoothed_loss`` (lesson 15): what learners write for the label-smoothed
cross-entropy, transformers' ``LabelSmoother``.

The statement a learner sees: ``(1 - epsilon) * nll + epsilon * mean_v(-log p_v)`` at the
positions whose label is not -100 (after the shift when ``shift=True``), averaged over them or
summed over ``num_items_in_batch``; 0, still backpropagating, without targets.

The value mistakes are the checker's catalogue (``check_label_smoothing.py``), the structural
ones ``_structural.py``'s; here are the mistakes a catalogue by value cannot hold (NaN, shapes,
constants, scores that must not count), other ways to a catalogued mistake, correct attempts in
other styles and delegations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import lmlessons
from battery._attempt import correct, wrong


def _pairs(logits, labels, shift):
    """``(N, V)`` scores and ``(N,)`` targets, shifted or not."""
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    return logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1)


# ---------------------------------------------------------------- wrong attempts


@wrong("nan_when_no_targets")
def torch_mean_reduction(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None):
    """F.cross_entropy(label_smoothing=epsilon) with its mean reduction: 0 / 0 without targets."""
    x, y = _pairs(logits, labels, shift)
    if num_items_in_batch is not None:
        return F.cross_entropy(x, y, label_smoothing=epsilon, reduction="sum") / num_items_in_batch
    return F.cross_entropy(x, y, label_smoothing=epsilon)


@wrong("empty_detached")
def constant_zero_when_empty(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None):
    """Returns torch.tensor(0.0) when there is no target."""
    x, y = _pairs(logits, labels, shift)
    n = num_items_in_batch if num_items_in_batch is not None else (y != -100).sum()
    if n == 0:
        return torch.tensor(0.0)
    return F.cross_entropy(x, y, label_smoothing=epsilon, reduction="sum") / n


@wrong("not_scalar")
def per_token_losses(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None):
    """Returns the per-token losses (reduction='none') without reducing them."""
    x, y = _pairs(logits, labels, shift)
    return F.cross_entropy(x, y, label_smoothing=epsilon, reduction="none")


@wrong("minus100_not_ignored")
def clamps_minus_100(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None):
    """Reads -100 as id 0 and averages over the targets: the prompt and padding count."""
    x, y = _pairs(logits, labels, shift)
    n = num_items_in_batch if num_items_in_batch is not None else (y != -100).sum().clamp(min=1)
    return F.cross_entropy(x, y.clamp(min=0), label_smoothing=epsilon, reduction="sum") / n


@wrong("smoothing_excludes_true_token")
def target_distribution_over_others(
    logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None
):
    """Builds the target distribution: 1 - epsilon on the label, epsilon / (V - 1) elsewhere."""
    x, y = _pairs(logits, labels, shift)
    keep = y != -100
    q = torch.full_like(x, epsilon / (x.shape[-1] - 1))
    q = q.scatter(-1, y.clamp(min=0)[:, None], 1 - epsilon)
    per_token = -(q * x.log_softmax(-1)).sum(-1) * keep
    n = num_items_in_batch if num_items_in_batch is not None else keep.sum().clamp(min=1)
    return per_token.sum() / n


# ---------------------------------------------------------------- correct attempts


@correct
def torch_label_smoothing_summed(
    logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None
):
    """F.cross_entropy(label_smoothing=epsilon, reduction='sum') over the count."""
    x, y = _pairs(logits, labels, shift)
    n = num_items_in_batch if num_items_in_batch is not None else (y != -100).sum().clamp(min=1)
    return F.cross_entropy(x, y, label_smoothing=epsilon, reduction="sum") / n


@correct
def smoothed_target_distribution(
    logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None
):
    """The soft target (1 - epsilon) * one_hot + epsilon / V, its cross-entropy at the targets."""
    x, y = _pairs(logits, labels, shift)
    keep = y != -100
    q = (1 - epsilon) * F.one_hot(y.clamp(min=0), x.shape[-1]) + epsilon / x.shape[-1]
    per_token = torch.where(keep, -(q * x.log_softmax(-1)).sum(-1), 0.0)
    n = num_items_in_batch if num_items_in_batch is not None else max(int(keep.sum()), 1)
    return per_token.sum() / n


@correct
def with_the_course_token_nll(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None):
    """The course's token_nll (a building block) for the NLL, its own smoothing term."""
    nll, has_target = lmlessons.losses.token_nll(logits, labels, shift=shift)
    logps = (logits[:, :-1] if shift else logits).float().log_softmax(-1)
    smooth = torch.zeros_like(nll)
    smooth[:, : logps.shape[1]] = -logps.mean(-1)
    per_token = ((1 - epsilon) * nll + epsilon * smooth) * has_target
    n = num_items_in_batch if num_items_in_batch is not None else has_target.sum().clamp(min=1)
    return per_token.sum() / n


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.smoothing.label_smoothed_loss")
def the_course_loss(logits, labels, **kwargs):
    """Calls the course's own label_smoothed_loss: nothing written."""
    from lmlessons.smoothing import label_smoothed_loss

    return label_smoothed_loss(logits, labels, **kwargs)


@wrong("delegates_to_course", says="lmlessons.losses.clm_loss")
def the_course_clm_loss_for_the_nll(
    logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None
):
    """Takes the NLL part from the course's clm_loss, adds its own smoothing term."""
    nll = lmlessons.clm_loss(logits, labels, num_items_in_batch=num_items_in_batch)
    x, y = _pairs(logits, labels, shift)
    keep = y != -100
    n = num_items_in_batch if num_items_in_batch is not None else keep.sum().clamp(min=1)
    return (1 - epsilon) * nll + epsilon * (-x.log_softmax(-1).mean(-1) * keep).sum() / n
