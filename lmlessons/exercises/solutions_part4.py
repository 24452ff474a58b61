"""Reference solutions of the Part IV exercises, written to be read (``solution(name)`` shows
them), in the style of :mod:`lmlessons.exercises.solutions`: short, no input validation, one
idea per line, shape comments.

``load_balancing_loss_func`` (lesson 14) is transformers' Mixtral ``load_balancing_loss_func``
written out: ``f`` (each expert's share of the top-k assignments) and ``P`` (its mean router
probability) over the real tokens of *all* layers together, then ``num_experts * sum(f * P)``,
a float32 0-dim tensor. The core's :func:`lmlessons.moe.load_balancing_loss_func` gives the same
numbers (``tests/test_exercises.py``).

``mtp_labels`` (lesson 15) is the core's :func:`lmlessons.mtp.mtp_labels` without its input
validation: each row shifted ``depth`` places on its own, ``ignore_index`` at its end.

``label_smoothed_loss`` (lesson 15) is transformers' ``LabelSmoother`` (the Trainer's
``label_smoothing_factor``), with the log-softmax in float32 and 0 (not NaN) without targets,
as the core's :func:`lmlessons.smoothing.label_smoothed_loss`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX


def load_balancing_loss_func(
    gate_logits: tuple[torch.Tensor, ...],
    num_experts: int,
    top_k: int = 2,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    logits = torch.cat(gate_logits, dim=0)  # (L*N, E): every layer's N tokens, layer after layer
    probs = logits.softmax(dim=-1)  # (L*N, E), in the logits' dtype as transformers
    chosen = probs.topk(top_k, dim=-1).indices  # (L*N, K): each token's top_k experts
    routed = F.one_hot(chosen, num_experts).sum(dim=1).float()  # (L*N, E): 1 per chosen expert
    if attention_mask is None:
        weight = torch.ones(logits.shape[0], device=logits.device)  # (L*N,): every token counts
    else:  # the same (B, T) mask for every layer, flattened like the logits' rows
        weight = attention_mask.reshape(-1).float().repeat(len(gate_logits))  # (L*N,)
    tokens = weight.sum()  # the real tokens of all layers together
    f = (routed * weight[:, None]).sum(dim=0) / tokens  # (E,): sums to top_k
    p = (probs.float() * weight[:, None]).sum(dim=0) / tokens  # (E,): sums to 1
    return num_experts * (f * p).sum()  # top_k when routing is even


def mtp_labels(labels: torch.Tensor, depth: int, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    out = torch.full_like(labels, ignore_index)  # (B, T): no target unless one is written
    length = labels.shape[-1]
    if depth < length:  # depth >= T: no position has a token depth places ahead
        out[..., : length - depth] = labels[..., depth:]  # each row on its own: t gets t + depth
    return out  # a new tensor: labels unchanged


def label_smoothed_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    epsilon: float = 0.1,
    shift: bool = True,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    if shift:  # causal LM: position t is scored on token t + 1
        logits, labels = logits[:, :-1], labels[:, 1:]
    is_target = labels != IGNORE_INDEX  # (B, T')
    logps = logits.float().log_softmax(dim=-1)  # (B, T', V)
    nll = -logps.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T')
    uniform = -logps.mean(dim=-1)  # (B, T'): the cross-entropy against 1/V on every token
    per_token = ((1 - epsilon) * nll + epsilon * uniform) * is_target  # 0 where -100: both terms
    if num_items_in_batch is not None:
        return per_token.sum() / num_items_in_batch  # the step's targets: micro-batches add up
    return per_token.sum() / is_target.sum().clamp(min=1)  # 0, not NaN, without targets
