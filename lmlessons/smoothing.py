"""Label smoothing: the target of each counted position is ``1 - epsilon`` on the true token
plus ``epsilon`` spread evenly over the whole vocabulary (the true token included).

Its cross-entropy splits into two per-token terms, both taken at the same counted positions:
``(1 - epsilon) * nll + epsilon * mean_v(-log p_v)``. The second, the smoothing term, pulls every
logit towards the others; it never counts a position whose label is -100.

This is a loss of its own, not a term added beside the LM loss (like :mod:`lmlessons.zloss`), so
it has its own module; it reduces :func:`lmlessons.losses.token_nll` as the LM losses do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmlessons._checks import check_logits_labels, check_num_items, check_probability
from lmlessons.losses import reduce_loss, token_nll

__all__ = ["smoothing_terms", "label_smoothed_loss"]


def smoothing_terms(logits: torch.Tensor, has_target: torch.Tensor) -> torch.Tensor:
    """``mean_v(-log p_v)`` at each position that has a target, 0 elsewhere, of ``has_target``'s
    shape: the cross-entropy against the uniform distribution over the ``V`` classes, in float32.
    ``has_target`` is :func:`lmlessons.losses.token_nll`'s second output."""
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    uniform = -log_probs.mean(dim=-1)  # (B, T)
    return torch.where(has_target, uniform, torch.zeros_like(uniform))  # (B, T)


def label_smoothed_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    epsilon: float = 0.1,
    shift: bool = True,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """``(1 - epsilon) * NLL + epsilon * smoothing``, each a mean over the positions with a target.

    Equals transformers' ``LabelSmoother(epsilon)(model_output, labels, shift_labels=shift,
    num_items_in_batch=...)`` (``trainer_pt_utils.py``), which ``Trainer`` calls with
    ``shift_labels=True`` for a causal LM when ``label_smoothing_factor > 0``, and
    ``F.cross_entropy(..., label_smoothing=epsilon)``.

    Args:
        logits: ``(B, T, V)``.
        labels: ``(B, T)``, -100 where nothing is learned. ``shift=True`` (causal LM): unshifted,
            position t is scored on ``labels[:, t + 1]``; ``shift=False``: on its own label.
        epsilon: the share of the target spread over the vocabulary, in [0, 1].
        num_items_in_batch: the count of targets over all micro-batches of one step; both terms
            are then sums over it, so micro-batch losses add up to the full batch's.

    Two differences from ``LabelSmoother``: with no target at all the loss is 0, not NaN (0 / 0);
    and the log-softmax is taken in float32 (``LabelSmoother`` takes it in the logits' dtype and
    sums only the smoothing term in float32).
    """
    epsilon = check_probability("epsilon", epsilon)
    n = check_num_items(num_items_in_batch)
    logits, labels = check_logits_labels(logits, labels)
    nll, has_target = token_nll(logits, labels, shift=shift)  # (B, T) each
    terms = (1.0 - epsilon) * nll + epsilon * smoothing_terms(logits, has_target)  # (B, T)
    return reduce_loss(terms, has_target, n)
