"""The output z-loss: a penalty on ``log Z``, the log of the softmax's normaliser, at the counted
positions.

Cross-entropy only sees differences between logits: adding one number to every logit of a
position changes no probability and no loss. So nothing stops ``log Z = logsumexp(logits)`` from
drifting, and large logits lose precision in bfloat16. The z-loss adds
``z_loss_coefficient * log(Z)^2`` per position, which pulls ``log Z`` towards 0 (PaLM,
arXiv:2204.02311, Section 5, coefficient 1e-4; OLMo 2 trains with a z-loss too).

Two reductions, so that a lesson can compare them:

* :func:`z_loss`: the mean over the *counted* positions, those whose target after the causal
  shift is not -100 (the positions ``ForCausalLMLoss`` scores), in float32, and with
  ``num_items_in_batch`` as :func:`lmlessons.clm_loss` takes it;
* :func:`bamba_z_loss`: what transformers' ``BambaForCausalLM`` adds to its loss: the mean over
  *every* position (padding and each row's last position included), logsumexp computed in the
  logits' dtype, no ``num_items_in_batch``.

:func:`logsumexp_error` measures what computing logsumexp in bfloat16 costs.
"""

from __future__ import annotations

import torch

from lmlessons._checks import (
    IGNORE_INDEX,
    check_float_tensor,
    check_logits_labels,
    check_num_items,
    check_real,
)
from lmlessons.losses import reduce_loss
from lmlessons.shifting import shift_labels

__all__ = ["z_loss_terms", "z_loss", "bamba_z_loss", "logsumexp_error"]

#: PaLM's coefficient (arXiv:2204.02311, Section 5): ``1e-4 * log(Z)^2``.
PALM_Z_LOSS_COEFFICIENT = 1e-4


def z_loss_terms(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log_z_squared, counted)``, both of ``labels``' shape: ``logsumexp(logits)^2`` in float32
    where a position is counted, 0 elsewhere, and the counted mask. The per-token kernel of
    :func:`z_loss`, as :func:`lmlessons.losses.token_nll` is the cross-entropy's.

    ``labels`` are unshifted, as for :func:`lmlessons.clm_loss`: position t is counted when
    ``shift_labels(labels)[t] != -100``, so each row's last position and every position followed
    by a -100 get no z-term.
    """
    logits, labels = check_logits_labels(logits, labels)
    counted = shift_labels(labels) != IGNORE_INDEX  # (B, T): True where position t has a target
    log_z = logits.float().logsumexp(dim=-1)  # (B, T), float32 like ForCausalLMLoss's upcast
    terms = torch.where(counted, log_z.square(), torch.zeros_like(log_z))  # (B, T)
    return terms, counted


def z_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    z_loss_coefficient: float = PALM_Z_LOSS_COEFFICIENT,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """``z_loss_coefficient * mean(logsumexp(logits)^2)`` over the counted positions (PaLM's
    z-loss, reduced like the course's losses).

    Args:
        logits: ``(B, T, V)``.
        labels: ``(B, T)``, unshifted, -100 where nothing is learned (as for ``clm_loss``).
        z_loss_coefficient: the weight, ``>= 0`` (transformers' ``BambaConfig`` name).
        num_items_in_batch: the count of targets after the shift over all micro-batches of one
            optimizer step (the same count as ``clm_loss``'s): the sum over micro-batches is then
            the full batch's z-loss. ``None``: the mean over this batch's counted positions (0,
            not NaN, when there are none).
    """
    coefficient = check_real("z_loss_coefficient", z_loss_coefficient)
    n = check_num_items(num_items_in_batch)
    return coefficient * reduce_loss(*z_loss_terms(logits, labels), n)


def bamba_z_loss(
    logits: torch.Tensor, *, z_loss_coefficient: float = PALM_Z_LOSS_COEFFICIENT
) -> torch.Tensor:
    """The z-term ``BambaForCausalLM.forward`` adds to its loss (transformers 5.23,
    ``models/bamba/modeling_bamba.py``):
    ``z_loss_coefficient * logits.logsumexp(-1).to(float32).pow(2).mean()``.

    Three differences from :func:`z_loss`: the mean runs over *every* position, padding, -100
    prompt tokens and each row's last position included, so its denominator is ``B * T`` whatever
    the labels; logsumexp runs in the logits' dtype (bfloat16 in bfloat16 training) and only its
    result is cast to float32 (the dtype of ``ForCausalLMLoss``'s loss); and it has no
    ``num_items_in_batch``: each micro-batch adds its own mean.
    """
    logits = check_float_tensor("logits", logits, min_ndim=2)
    coefficient = check_real("z_loss_coefficient", z_loss_coefficient)
    log_z = logits.logsumexp(dim=-1).to(torch.float32)  # (B, T), computed in logits.dtype
    return coefficient * log_z.pow(2).mean()


def logsumexp_error(logits: torch.Tensor, *, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``lse_low - lse_ref``, shape ``logits.shape[:-1]``, float32: the error of logsumexp computed
    in ``dtype`` (bfloat16 by default), as :func:`bamba_z_loss` does in bfloat16 training.

    Both sides see the same inputs, ``logits`` rounded to ``dtype``: the reference computes in
    float32 on them, so the error is that of the computation and its rounded result, not of
    rounding the logits. Its size grows with ``|log Z|``: bfloat16 keeps 8 significant bits, so a
    result near 10 is a multiple of 1/16.
    """
    logits = check_float_tensor("logits", logits, min_ndim=1)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    rounded = logits.detach().to(dtype)  # (..., V): the inputs both sides see
    low = rounded.logsumexp(dim=-1).to(torch.float32)  # (...,) computed and rounded in dtype
    ref = rounded.to(torch.float32).logsumexp(dim=-1)  # (...,) computed in float32
    return low - ref  # (...,)
