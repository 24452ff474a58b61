"""Linear layer + cross-entropy without the (N, V) logits: sparse rows, then row chunks.

The output layer of a language model turns N hidden states of size H into N x V logits. With
V = 32,000 and N = 8,192 rows that is 1 GiB in float32 before the softmax, its gradient and its
saved copies are counted. Two well-known fixes are combined here:

1. Sparse prediction. Rows whose label is -100 contribute nothing to the loss, so they are
   dropped *before* the matmul. Google's original BERT does this in ``run_pretraining.py``
   (``gather_indexes`` picks the masked positions before the output transform and the tied
   embedding matmul) and ModernBERT does it with ``sparse_prediction=True``. For MLM with 15%
   masking that removes 85% of the head's work.
2. Chunked cross-entropy with the gradient computed in the forward pass. The remaining rows are
   processed ``chunk_size`` rows at a time: logits of one chunk, their softmax, and at once the
   chunk's contribution to the gradients of the hidden states, the weight and the bias. Only the
   gradients (the size of the inputs) are kept for the backward pass, never the logits. This is
   the idea of Liger Kernel's fused linear cross-entropy (``LigerFusedLinearCrossEntropyLoss``),
   written in plain PyTorch for the CPU. Apple's Cut Cross-Entropy (Wijmans et al., 2024, "Cut
   Your Losses in Large-Vocabulary Language Models") reaches the same memory another way: its
   forward computes the log-sum-exp block by block, and its backward recomputes each block's
   logits (skipping blocks whose gradient is negligible).

The result equals ``F.cross_entropy(hidden @ weight.T + bias, labels, ignore_index=-100)`` in value
and in the gradients for ``hidden_states``, ``weight`` and ``bias`` (tested to 1e-4 relative in
tests/test_linear_ce.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from lmlessons._checks import (
    IGNORE_INDEX,
    check_float_tensor,
    check_int,
    check_labels,
    check_num_items,
)

__all__ = ["linear_cross_entropy", "DEFAULT_CHUNK_SIZE"]
# Rows per chunk. 1024 rows x 32,000 classes x 4 bytes = 125 MiB for the chunk's logits; smaller
# chunks save memory, larger ones amortise the matmul. Measured with `python -m tools.bench`.
DEFAULT_CHUNK_SIZE = 1024


class _LinearCrossEntropy(torch.autograd.Function):
    """Sum of the cross-entropy over selected rows, divided by ``divisor``; gradients in forward."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,  # (N, H), all rows
        weight: torch.Tensor,  # (V, H)
        bias: torch.Tensor | None,  # (V,)
        rows: torch.Tensor,  # (M,) indices of the rows whose label is not -100
        targets: torch.Tensor,  # (M,) their labels, in [0, V)
        chunk_size: int,
        divisor: float,
        need_grads: bool,
    ) -> torch.Tensor:
        needs = [need_grads and bool(n) for n in ctx.needs_input_grad[:3]]
        grad_hidden = torch.zeros_like(hidden) if needs[0] else None  # (N, H); dropped rows stay 0
        grad_weight = torch.zeros_like(weight) if needs[1] else None  # (V, H)
        grad_bias = None if bias is None or not needs[2] else torch.zeros_like(bias)  # (V,)
        acc_dtype = torch.promote_types(hidden.dtype, torch.float32)  # fp16/bf16 -> fp32
        loss_sum = torch.zeros((), dtype=acc_dtype, device=hidden.device)
        weight_t = weight.t()  # (H, V), a view: addmm/mm pick the transposed BLAS call
        inv_divisor = 1.0 / divisor
        # One (chunk_size, V) buffer reused by every chunk: the only tensor as large as the logits.
        buffer = torch.empty(
            min(chunk_size, rows.numel()), weight.shape[0], dtype=acc_dtype, device=hidden.device
        )

        for start in range(0, rows.numel(), chunk_size):
            idx = rows[start : start + chunk_size]  # (C,)
            y = targets[start : start + chunk_size]  # (C,)
            h = hidden.index_select(0, idx)  # (C, H), the sparse gather
            logits = buffer[: idx.numel()]  # (C, V), contiguous rows of the buffer
            if hidden.dtype == acc_dtype:
                if bias is None:
                    torch.mm(h, weight_t, out=logits)
                else:
                    torch.addmm(bias, h, weight_t, out=logits)
            else:  # fp16/bf16: multiply in low precision, upcast like transformers' ForCausalLMLoss
                logits.copy_(h @ weight_t if bias is None else torch.addmm(bias, h, weight_t))
            # Log-softmax in place (one row-wise kernel): the chunk needs one (C, V) buffer only.
            torch.log_softmax(logits, dim=1, out=logits)  # (C, V) log-probabilities
            loss_sum -= logits.gather(1, y.unsqueeze(1)).sum()  # sum of -log p(target)
            if grad_hidden is None and grad_weight is None and grad_bias is None:
                continue
            # d(sum of CE)/d logits = softmax - one_hot(y), written over the log-probabilities.
            grad_logits = logits.exp_()  # (C, V)
            grad_logits[torch.arange(y.numel(), device=y.device), y] -= 1.0
            grad_logits = grad_logits.to(weight.dtype)  # no copy for fp32
            if grad_hidden is not None:  # (C, V) @ (V, H), scaled by 1/divisor, into C rows
                grad_hidden.index_copy_(0, idx, torch.mm(grad_logits, weight).mul_(inv_divisor))
            if grad_weight is not None:  # (V, C) @ (C, H), accumulated over chunks
                grad_weight.addmm_(grad_logits.t(), h, alpha=inv_divisor)
            if grad_bias is not None:
                grad_bias.add_(grad_logits.sum(dim=0).to(grad_bias.dtype), alpha=inv_divisor)

        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return loss_sum / divisor  # float32 for fp16/bf16 inputs: transformers upcasts the logits

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        out = [
            None if g is None else g * grad_output.to(g.dtype)
            for g in (grad_hidden, grad_weight, grad_bias)
        ]
        return out[0], out[1], out[2], None, None, None, None, None


def _check_inputs(
    hidden_states: object, weight: object, labels: object, bias: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(hidden_states, weight, labels, bias)``: shapes (B, T, H) or (N, H), (V, H), (B, T) or
    (N,), (V,) or None; one floating dtype and one device; labels in [0, V) or -100."""
    hidden_states = check_float_tensor("hidden_states", hidden_states, min_ndim=2)
    if hidden_states.dim() > 3:
        raise ValueError(
            f"hidden_states must have shape (B, T, H) or (N, H), got {tuple(hidden_states.shape)}"
        )
    weight = check_float_tensor("weight", weight, min_ndim=2)
    if weight.dim() != 2 or weight.shape[1] != hidden_states.shape[-1] or weight.shape[0] == 0:
        raise ValueError(
            f"weight must have shape (V, H) with V >= 1 and H = {hidden_states.shape[-1]} "
            f"(the last dimension of hidden_states), got {tuple(weight.shape)}"
        )
    vocab_size = weight.shape[0]
    labels = check_labels("labels", labels, vocab_size)
    if tuple(labels.shape) != tuple(hidden_states.shape[:-1]):
        raise ValueError(
            f"labels must have shape {tuple(hidden_states.shape[:-1])} to match hidden_states "
            f"{tuple(hidden_states.shape)}, got {tuple(labels.shape)}"
        )
    if bias is not None:
        bias = check_float_tensor("bias", bias)
        if tuple(bias.shape) != (vocab_size,):
            raise ValueError(f"bias must have shape ({vocab_size},), got {tuple(bias.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.dtype != hidden_states.dtype:
            raise TypeError(
                f"{name} dtype {t.dtype} must equal hidden_states dtype {hidden_states.dtype}"
            )
    for name, t in (("weight", weight), ("labels", labels), ("bias", bias)):
        if t is not None and t.device != hidden_states.device:
            raise ValueError(
                f"{name} is on {t.device} but hidden_states is on {hidden_states.device}"
            )
    return hidden_states, weight, labels, bias


def linear_cross_entropy(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy of ``hidden_states @ weight.T + bias`` against ``labels``, logits never stored.

    Same value and gradients as
    ``F.cross_entropy(F.linear(hidden_states, weight, bias).flatten(0, -2), labels.flatten(),
    ignore_index=-100)``, but rows labelled -100 are dropped before the matmul
    (BERT ``run_pretraining.py`` ``gather_indexes``; ModernBERT ``sparse_prediction``) and the rest
    is processed ``chunk_size`` rows at a time with the gradient computed chunk by chunk in the
    forward pass (Liger Kernel's fused linear cross-entropy). Peak memory is
    one (chunk_size, V) buffer plus gradients the size of the inputs, instead of several (N, V).

    Args:
        hidden_states: (B, T, H) or (N, H) floating tensor, the input of the output layer.
        weight: (V, H) output-layer weight (``nn.Linear(H, V).weight``, or a tied embedding).
        labels: (B, T) or (N,) integer class ids in [0, V), -100 where no loss is taken.
            MLM: the labels as they come from the masking. CLM: ``shift_labels(labels)`` first,
            so that position t is scored against token t + 1 (as transformers' ForCausalLMLoss).
        bias: optional (V,) output-layer bias.
        chunk_size: rows per chunk (>= 1). Smaller saves memory, larger is faster per row.
        num_items_in_batch: if given, return sum / num_items_in_batch (transformers' convention
            for gradient accumulation and data parallelism: the number of labelled tokens of the
            whole optimisation step). An int, a float or a one-element tensor, as for
            :func:`lmlessons.mlm_loss`. If None, the mean over the labelled rows.

    Returns:
        A scalar tensor (float32 for fp16/bf16 inputs, like transformers' upcast logits). If every
        label is -100 the loss is 0 (not NaN) and all gradients are 0.
    """
    hidden_states, weight, labels, bias = _check_inputs(hidden_states, weight, labels, bias)
    chunk_size = check_int("chunk_size", chunk_size, minimum=1)
    n_items = check_num_items(num_items_in_batch)

    hidden = hidden_states.reshape(-1, weight.shape[1])  # (N, H); autograd maps the gradient back
    flat_labels = labels.reshape(-1).long()  # (N,)
    rows = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)  # (M,) the labelled rows
    targets = flat_labels.index_select(0, rows)  # (M,)
    # all rows ignored: the sum is 0, and 0 / 1 gives 0 rather than NaN
    divisor = float(max(targets.numel(), 1) if n_items is None else n_items)

    need_grads = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, weight, bias)
    )
    return _LinearCrossEntropy.apply(
        hidden, weight, bias, rows, targets, chunk_size, divisor, need_grads
    )
