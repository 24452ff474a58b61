"""Does a model look ahead? Measure it instead of trusting a flag.

A causal language model may use tokens ``<= t`` to score the token at ``t + 1``. Three ways to
check that, each a measurement on a real model rather than a reading of its config:

* :func:`attention_map`: the attention probabilities themselves; in a causal model the upper
  triangle is exactly 0 (transformers adds a large negative number there before the softmax,
  ``masking_utils.create_causal_mask``);
* :func:`logit_change`: replace one token and see which positions' logits move; in a causal
  model no position *before* the replaced one changes;
* :func:`prefix_loss`: the next-token loss when every prediction is made from the prefix alone,
  as at generation time. A causal model gets exactly its training loss; a model that peeked at
  the answer during training (``BertLMHeadModel`` with ``is_decoder=False``) does not.

:func:`causal_mask` is the pattern ``is_decoder=True`` (BERT) and every GPT-style model use.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import (
    IGNORE_INDEX,
    check_int,
    check_int_tensor,
    check_model,
    check_sequences,
)

__all__ = ["causal_mask", "attention_map", "logit_change", "prefix_loss"]


def causal_mask(seq_len: int) -> torch.Tensor:
    """``(T, T)`` bool: ``mask[i, j]`` is True when position ``i`` may attend to position ``j``
    (``j <= i``), the lower triangle with the diagonal (``torch.tril``)."""
    seq_len = check_int("seq_len", seq_len, minimum=1)
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()  # (T, T)


def _logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    kwargs: dict[str, Any] = {"input_ids": input_ids}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    return model(**kwargs).logits  # (B, T, V)


@torch.no_grad()
def attention_map(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    layer: int | None = 0,
) -> torch.Tensor:
    """The attention probabilities of one sequence, ``(T, T)``, averaged over heads.

    Row ``i`` is what position ``i`` attends to (it sums to 1). ``layer=None`` averages over all
    layers too. Needs ``attn_implementation="eager"`` (fused kernels do not return the
    probabilities); the tiny models of :mod:`lmlessons.course.models` use it.
    """
    model = check_model(model)
    ids = check_sequences("input_ids", input_ids, single=True)  # (1, T)
    impl = getattr(getattr(model, "config", None), "_attn_implementation", "eager")
    if impl != "eager":
        raise ValueError(
            "model must use attn_implementation='eager' to return attention probabilities, "
            f"got {impl!r}"
        )
    was_training = model.training
    model.eval()
    kwargs: dict[str, Any] = {"input_ids": ids, "output_attentions": True}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask.reshape(1, -1)
    out = model(**kwargs)
    model.train(was_training)
    attentions = out.attentions  # L x (1, H, T, T)
    if not attentions:
        raise ValueError(
            "the model returned no attentions (does it support output_attentions=True?)"
        )
    if layer is None:
        stacked = torch.stack([a[0] for a in attentions])  # (L, H, T, T)
        return stacked.mean(dim=(0, 1))  # (T, T)
    layer = check_int("layer", layer)
    if not -len(attentions) <= layer < len(attentions):
        raise ValueError(
            f"layer must be in [0, {len(attentions)}) for this {len(attentions)}-layer model, "
            f"got {layer}"
        )
    return attentions[layer][0].mean(dim=0)  # (T, T)


@torch.no_grad()
def logit_change(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    position: int,
    replacement_id: int,
    *,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Replace the token at ``position`` by ``replacement_id``; return, for every position, the
    largest absolute change of its logits, ``(T,)``.

    In a causal model the entries before ``position`` are 0 (the future cannot reach the
    past); in a bidirectional one every entry moves. Runs the model in eval mode (no dropout).
    """
    model = check_model(model)
    ids = check_sequences("input_ids", input_ids, single=True)  # (1, T)
    seq_len = ids.shape[1]
    position = check_int("position", position)
    if not 0 <= position < seq_len:
        raise ValueError(
            f"position must be in [0, {seq_len}) for a sequence of {seq_len} tokens, got {position}"
        )
    replacement_id = check_int("replacement_id", replacement_id, minimum=0)
    if replacement_id == int(ids[0, position]):
        raise ValueError(
            f"replacement_id must differ from the token at position {position} ({replacement_id})"
        )
    if attention_mask is not None:
        attention_mask = attention_mask.reshape(1, -1)
    was_training = model.training
    model.eval()
    changed = ids.clone()
    changed[0, position] = replacement_id
    before = _logits(model, ids, attention_mask)[0]  # (T, V)
    after = _logits(model, changed, attention_mask)[0]  # (T, V)
    model.train(was_training)
    return (after - before).abs().amax(dim=-1)  # (T,)


@torch.no_grad()
def prefix_loss(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Next-token cross-entropy where each prediction sees only its prefix, as at generation.

    For every ``t`` the model runs on ``input_ids[:, :t + 1]`` and its *last* logits score
    ``labels[:, t + 1]``. ``labels`` are unshifted, like :func:`lmlessons.clm_loss` (default:
    ``input_ids`` with -100 where ``attention_mask`` is 0). Returns the mean over target tokens,
    a 0-dim tensor. For a causal model this equals the ordinary one-pass loss (to float
    precision); the gap measures how much a model relies on seeing the future. Costs ``T - 1``
    forward passes.
    """
    model = check_model(model)
    ids = check_sequences("input_ids", input_ids)  # (B, T)
    if attention_mask is not None:
        attention_mask = check_int_tensor("attention_mask", attention_mask).reshape(ids.shape)
    if labels is None:
        labels = (
            ids.clone()
            if attention_mask is None
            else ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        )
    else:
        labels = check_int_tensor("labels", labels)
        if labels.dim() == 1:
            labels = labels.unsqueeze(0)
        if tuple(labels.shape) != tuple(ids.shape):
            raise ValueError(
                f"labels must have the shape of input_ids {tuple(ids.shape)}, "
                f"got {tuple(labels.shape)}"
            )
    seq_len = ids.shape[1]
    if seq_len < 2 or not bool((labels[:, 1:] != IGNORE_INDEX).any()):
        raise ValueError(
            "prefix_loss needs at least one target: labels[:, 1:] are all -100 (or T < 2)"
        )
    was_training = model.training
    model.eval()
    total, count = torch.zeros(()), 0
    for t in range(seq_len - 1):
        target = labels[:, t + 1]  # (B,)
        keep = target != IGNORE_INDEX
        if not bool(keep.any()):
            continue
        mask = None if attention_mask is None else attention_mask[:, : t + 1]
        # (B, V): the last position sees tokens 0..t only
        last = _logits(model, ids[:, : t + 1], mask)[:, -1].float()
        total = total + F.cross_entropy(last[keep], target[keep], reduction="sum")
        count += int(keep.sum())
    model.train(was_training)
    return total / count
