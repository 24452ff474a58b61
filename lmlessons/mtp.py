"""Multi-token prediction (MTP): depth ``d`` predicts the token ``d`` places ahead.

The next-token loss shifts the labels by 1 (:func:`lmlessons.shift_labels`); an MTP head of
depth ``d`` is scored against the labels shifted by ``d``. Each row loses its last ``d``
targets, so every depth has its own target count and its own denominator:

* :func:`mtp_labels`: the labels shifted by ``depth`` inside each row, -100 at the row's end;
* :func:`mtp_num_items`: the target count of each depth (``num_items_in_batch`` per depth);
* :func:`mtp_losses`: each depth's loss, each equal to transformers'
  ``ForCausalLMLoss(logits, None, vocab_size, shift_labels=mtp_labels(labels, d))``;
* :func:`mtp_loss`: their mean over depths, or DeepSeek-V3's weighting with ``mtp_weight``.

transformers 5.23 uses MTP layers (its ``MtpModel``) to draft tokens in ``generate`` only: given
``labels``, ``MtpModel`` raises a TypeError, so it has no working MTP training loss; hence the
oracle above, one ``ForCausalLMLoss`` per depth.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmlessons._checks import (
    IGNORE_INDEX,
    check_int,
    check_int_tensor,
    check_logits_labels,
    check_num_items,
    check_real,
)
from lmlessons.losses import reduce_loss, token_nll
from lmlessons.shifting import num_targets

__all__ = ["mtp_labels", "mtp_num_items", "mtp_losses", "mtp_loss"]


def mtp_labels(labels: torch.Tensor, depth: int, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """``out`` with ``out[..., t] = labels[..., t + depth]`` and the last ``depth`` columns
    ``ignore_index``: the target of position t for the head that predicts ``depth`` tokens ahead.

    ``labels``: ``(B, T)`` (or ``(T,)``), unshifted, not modified. Each row is shifted on its
    own: no target crosses from one row into the previous. ``depth=1`` is
    :func:`lmlessons.shift_labels`; ``depth >= T`` leaves no target at all.
    """
    labels = check_int_tensor("labels", labels)
    depth = check_int("depth", depth, minimum=1)
    ignore_index = check_int("ignore_index", ignore_index)
    if labels.dim() == 0:
        raise ValueError("labels must have at least 1 dimension (..., T), got a scalar")
    out = torch.full_like(labels, ignore_index)  # (B, T)
    length = labels.shape[-1]
    if depth < length:
        out[..., : length - depth] = labels[..., depth:]  # (B, T - depth)
    return out


def mtp_num_items(labels: torch.Tensor, num_depths: int) -> torch.Tensor:
    """The target count of each depth 1..``num_depths``, ``(num_depths,)`` int64: the labels
    that are not -100 in ``mtp_labels(labels, d)``. Depth 1's is ``clm_loss``'s count; each depth
    loses the first ``d`` labels of every row, so the counts never grow with depth. Summed over
    the micro-batches of a step, they are :func:`mtp_loss`'s ``num_items_in_batch``."""
    labels = check_int_tensor("labels", labels)
    num_depths = check_int("num_depths", num_depths, minimum=1)
    counts = [int(num_targets(mtp_labels(labels, d)).sum()) for d in range(1, num_depths + 1)]
    return torch.tensor(counts, dtype=torch.long)  # (num_depths,)


def _check_per_depth(
    logits_per_depth: object, num_items_in_batch: object
) -> tuple[list[torch.Tensor], list[float | None]]:
    """The logits of each depth (a non-empty list of tensors) and one count or None per depth.
    A private validator: ``_checks`` has none for a list of tensors or a count per depth."""
    if isinstance(logits_per_depth, torch.Tensor) or not isinstance(logits_per_depth, Sequence):
        raise TypeError(
            "logits_per_depth must be a list of (B, T, V) tensors, one per depth, got "
            f"{type(logits_per_depth).__name__}"
        )
    if len(logits_per_depth) == 0:
        raise ValueError("logits_per_depth must hold at least one depth, got an empty list")
    depths = len(logits_per_depth)
    if num_items_in_batch is None:
        return list(logits_per_depth), [None] * depths
    counts = num_items_in_batch
    if isinstance(counts, torch.Tensor) and counts.dim() == 1:
        counts = list(counts)  # one one-element tensor per depth
    if not isinstance(counts, Sequence) or len(counts) != depths:
        raise ValueError(
            f"num_items_in_batch must hold one count per depth ({depths}), e.g. "
            f"mtp_num_items(labels, {depths}) summed over micro-batches; got {counts!r}"
        )
    return list(logits_per_depth), [check_num_items(c) for c in counts]


def mtp_losses(
    logits_per_depth: Sequence[torch.Tensor],
    labels: torch.Tensor,
    *,
    num_items_in_batch: Sequence[float] | torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss of each depth, ``(D,)`` float32, ``D = len(logits_per_depth)``.

    ``logits_per_depth[d - 1]``: ``(B, T, V)``, position t scoring the token ``d`` ahead
    (``logits_per_depth[0]`` is the ordinary next-token head). ``labels``: ``(B, T)``, unshifted.
    Depth d's loss is the mean cross-entropy against ``mtp_labels(labels, d)`` over its own
    targets (0 with none), or their sum over ``num_items_in_batch[d - 1]``: transformers'
    ``ForCausalLMLoss(logits, None, vocab_size, num_items_in_batch=n_d, shift_labels=...)``.
    """
    logits_list, counts = _check_per_depth(logits_per_depth, num_items_in_batch)
    losses = []
    for d, (logits, count) in enumerate(zip(logits_list, counts, strict=True), start=1):
        logits, labels = check_logits_labels(logits, labels, f"logits_per_depth[{d - 1}]")
        targets = mtp_labels(labels, d)  # (B, T): targets[:, t] = labels[:, t + d]
        losses.append(reduce_loss(*token_nll(logits, targets, shift=False), count))  # ()
    return torch.stack(losses)  # (D,)


def mtp_loss(
    logits_per_depth: Sequence[torch.Tensor],
    labels: torch.Tensor,
    *,
    num_items_in_batch: Sequence[float] | torch.Tensor | None = None,
    mtp_weight: float | None = None,
) -> torch.Tensor:
    """The MTP training loss from :func:`mtp_losses`' per-depth losses ``L_1 .. L_D``.

    ``mtp_weight=None``: their plain mean, ``(L_1 + ... + L_D) / D``. A number ``lambda``:
    DeepSeek-V3's weighting (arXiv:2412.19437, Section 2.2, "MTP Training Objective"), the main
    loss plus ``lambda`` times the mean of the MTP depths, ``L_1 + lambda * mean(L_2 .. L_D)``
    (the paper: 0.3, then 0.1; one MTP depth). One difference is kept on purpose: each depth
    here divides by its own target count (``ForCausalLMLoss``'s denominator), where the
    paper's formula divides every depth's sum by the sequence length T.
    """
    losses = mtp_losses(logits_per_depth, labels, num_items_in_batch=num_items_in_batch)  # (D,)
    if mtp_weight is None:
        return losses.mean()
    weight = check_real("mtp_weight", mtp_weight)
    if losses.numel() < 2:
        raise ValueError("mtp_weight needs at least 2 depths (the main head and one MTP head)")
    return losses[0] + weight * losses[1:].mean()
