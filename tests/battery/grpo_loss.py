"""Battery for ``grpo_loss`` (lesson 13): what learners write for the loss of one micro-batch
under each of GRPO's ``loss_type`` values.

The statement a learner sees: ``per_token_loss`` and ``completion_mask`` are ``(B, C)`` (1 on a
completion's tokens, 0 on padding, where the token losses are not 0); ``grpo`` averages each
completion, then the completions; ``bnpo`` divides the sum by the micro-batch's tokens;
``dr_grpo`` by ``B * max_completion_length``; ``dapo`` by ``num_items_in_batch`` clamped to at
least 1, as TRL does (without it, as ``bnpo``). Masks may be float and may have zeros inside a
completion; a counted token's loss may be exactly 0. The result is a 0-dim tensor.

The value mistakes are the checker's catalogue (``check_grpo_loss.py``), the structural ones
``_structural.py``'s; here are the mistakes a catalogue by value cannot hold (NaN, exceptions,
wrong shapes, constants), correct attempts and delegations. Each wrong attempt is right except
for its mistake: ``**kw`` are the arguments it passes on to :func:`_right`.
"""

from __future__ import annotations

import torch

from battery._attempt import correct, wrong


def _right(loss, mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    """The four types, right."""
    mask = mask.float()
    masked = loss * mask
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if loss_type == "dr_grpo":
        return masked.sum() / (mask.shape[0] * max_completion_length)
    if loss_type == "dapo" and num_items_in_batch is not None:  # 0 (all truncated): TRL clamps
        return masked.sum() / torch.as_tensor(num_items_in_batch).clamp(min=1)
    return masked.sum() / mask.sum().clamp(min=1)


# ---------------------------------------------------------------- wrong attempts


@wrong("nan_on_empty_completion")
def bnpo_without_clamp(loss, mask, loss_type, **kw):
    """bnpo divides by mask.sum() without clamp: 0 / 0 when no completion has a token."""
    if loss_type == "bnpo":
        return (loss * mask.float()).sum() / mask.float().sum()
    return _right(loss, mask, loss_type, **kw)


@wrong("nan_on_empty_completion")
def grpo_without_clamp(loss, mask, loss_type, **kw):
    """grpo divides each completion's sum by its token count, without clamp: 0 / 0 if empty."""
    if loss_type == "grpo":
        return ((loss * mask.float()).sum(-1) / mask.float().sum(-1)).mean()
    return _right(loss, mask, loss_type, **kw)


@wrong("requires_num_items")
def dapo_always_divides_by_num_items(loss, mask, loss_type, num_items_in_batch=None, **kw):
    """dapo always divides by num_items_in_batch, even when it is None."""
    if loss_type == "dapo":
        return (loss * mask.float()).sum() / num_items_in_batch
    return _right(loss, mask, loss_type, **kw)


@wrong("zero_count_not_clamped")
def dapo_divides_by_zero(loss, mask, loss_type, num_items_in_batch=None, **kw):
    """Divides by num_items_in_batch as given: a window of truncated completions gives 0 / 0."""
    if loss_type == "dapo" and num_items_in_batch is not None:
        return (loss * mask.float()).sum() / num_items_in_batch
    return _right(loss, mask, loss_type, num_items_in_batch=num_items_in_batch, **kw)


@wrong("not_scalar")
def returns_per_completion(loss, mask, loss_type, **kw):
    """grpo returns the per-completion means without the final mean."""
    if loss_type == "grpo":
        return (loss * mask.float()).sum(-1) / mask.float().sum(-1).clamp(min=1)
    return _right(loss, mask, loss_type, **kw)


@wrong("modifies_input")
def masks_in_place(loss, mask, loss_type, **kw):
    """Zeroes the padding's losses in place (per_token_loss *= mask): autograd refuses."""
    loss *= mask.float()
    return _right(loss, mask, loss_type, **kw)


@wrong("empty_detached")
def constant_zero_when_empty(loss, mask, loss_type, **kw):
    """Returns torch.tensor(0.0) when no completion has a token."""
    if mask.sum() == 0:
        return torch.tensor(0.0)
    return _right(loss, mask, loss_type, **kw)


# ---------------------------------------------------------------- correct attempts


@correct
def token_weights_then_sum(
    loss, mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Builds every token's weight for the type, then one weighted sum."""
    mask = mask.float()
    B = mask.shape[0]
    if loss_type == "grpo":
        weights = mask / (mask.sum(-1, keepdim=True).clamp(min=1) * B)
    elif loss_type == "dr_grpo":
        weights = mask / (B * max_completion_length)
    elif loss_type == "dapo" and num_items_in_batch is not None:
        weights = mask / max(float(num_items_in_batch), 1.0)
    else:
        weights = mask / mask.sum().clamp(min=1)
    return (loss * weights).sum()


@correct
def completion_by_completion(
    loss, mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """A loop over the completions with torch.where for the padding."""
    keep = mask.bool()
    losses = torch.where(keep, loss, torch.zeros_like(loss))
    if loss_type == "grpo":
        means = [row.sum() / max(int(k.sum()), 1) for row, k in zip(losses, keep)]
        return torch.stack(means).sum() / len(means)
    if loss_type == "dr_grpo":
        denominator = len(losses) * max_completion_length
    elif loss_type == "dapo" and num_items_in_batch is not None:
        denominator = max(num_items_in_batch, 1)
    else:
        denominator = max(int(keep.sum()), 1)
    return losses.sum() / denominator


@correct
def trl_branches(loss, mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    """TRL's four branches written out, the mask as it comes."""
    if loss_type == "grpo":
        return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo" or (num_items_in_batch is None and loss_type == "dapo"):
        return (loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (loss * mask).sum() / (loss.size(0) * max_completion_length)
    return (loss * mask).sum() / torch.as_tensor(num_items_in_batch).clamp(min=1.0)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.grpo.aggregate_loss")
def the_course_aggregate_loss(per_token_loss, completion_mask, loss_type, **kw):
    """Calls the course's own aggregate_loss: nothing written."""
    from lmlessons.grpo import aggregate_loss

    return aggregate_loss(per_token_loss, completion_mask, loss_type=loss_type, **kw)


@wrong("delegates_to_course", says="lmlessons.grpo.token_weights")
def the_course_token_weights(per_token_loss, completion_mask, loss_type, **kw):
    """Weights the token losses with the course's token_weights: the division is the course's."""
    from lmlessons.grpo import token_weights

    return (per_token_loss * token_weights(completion_mask, loss_type=loss_type, **kw)).sum()
