"""Label shifting for causal (next-token) language modelling.

Position t predicts token t + 1, so the target of position t is ``labels[:, t + 1]`` and the
last position has no target. This is what transformers' ``ForCausalLMLoss`` does inside every
``*ForCausalLM`` / ``*LMHeadModel`` (including ``BertLMHeadModel``): pass
``labels = input_ids.clone()`` (with -100 on padding) and never shift them yourself.
"""

from __future__ import annotations

import torch

from lmlessons._checks import IGNORE_INDEX, check_int, check_int_tensor


def shift_labels(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Return ``out`` with ``out[..., :-1] = labels[..., 1:]`` and the last column ``ignore_index``.

    ``labels``: ``(B, T)`` (or ``(T,)``) integer tensor; not modified. Same as transformers'
    ``nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]`` in ``ForCausalLMLoss``.
    """
    labels = check_int_tensor("labels", labels)
    ignore_index = check_int("ignore_index", ignore_index)
    if labels.dim() == 0:
        raise ValueError("labels must have at least 1 dimension (..., T), got a scalar")
    out = torch.full_like(labels, ignore_index)  # (B, T)
    out[..., :-1] = labels[..., 1:]
    return out


def num_targets(labels: torch.Tensor, *, shift: bool = False) -> torch.Tensor:
    """The number of targets of each row of ``labels`` ``(B, T)`` -> ``(B,)`` int64 (``(T,)`` ->
    ``()``): the labels that are not -100, counted after :func:`shift_labels` when ``shift=True``
    (a causal LM's labels: the first is never a target). ``int(num_targets(...).sum())`` is a
    batch's count, the ``num_items_in_batch`` of transformers' ``Trainer``."""
    labels = check_int_tensor("labels", labels)
    if labels.dim() == 0:
        raise ValueError("labels must have at least 1 dimension (..., T), got a scalar")
    targets = shift_labels(labels) if shift else labels  # (B, T)
    return (targets != IGNORE_INDEX).sum(dim=-1)  # (B,)
