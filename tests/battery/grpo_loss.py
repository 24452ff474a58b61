"""Battery for ``grpo_loss`` (lesson 13): what learners write for the loss of one micro-batch
under each of GRPO's ``loss_type`` values.

The statement a learner sees: ``per_token_loss`` and ``completion_mask`` are ``(B, C)`` (1 on a
completion's tokens, 0 on padding, where the token losses are not 0); ``grpo`` averages each
completion, then the completions; ``bnpo`` divides the sum by the micro-batch's tokens;
``dr_grpo`` by ``B * max_completion_length``; ``dapo`` by ``num_items_in_batch`` clamped to at
least 1, as TRL does (without it, as ``bnpo``). Masks may be float and may have zeros inside a
completion; a counted token's loss may be exactly 0. The result is a 0-dim tensor.
"""

from __future__ import annotations

import torch

from battery._attempt import correct, wrong


def _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch):
    """The three token-level types, right."""
    if loss_type == "dr_grpo":
        return masked.sum() / (mask.shape[0] * max_completion_length)
    if loss_type == "dapo" and num_items_in_batch is not None:  # 0 (all truncated): TRL clamps
        return masked.sum() / torch.as_tensor(num_items_in_batch).clamp(min=1)
    return masked.sum() / mask.sum().clamp(min=1)


def _grpo(masked, mask):
    """``grpo``, right."""
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()


# ---------------------------------------------------------------- wrong attempts


@wrong("completion_mean_for_token_type")
def always_per_completion(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Averages each completion first whatever the type, then divides as the type says."""
    mask = completion_mask.float()
    per_completion = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    if loss_type == "dr_grpo":
        return per_completion.sum() / max_completion_length
    return per_completion.mean()


@wrong("nan_on_empty_completion")
def bnpo_without_clamp(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """bnpo divides by mask.sum() without clamp: 0 / 0 when no completion has a token."""
    mask = completion_mask.float()
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return _grpo(masked, mask)
    if loss_type == "bnpo":
        return masked.sum() / mask.sum()
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("padding_losses_count")
def forgets_the_mask_in_the_sum(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Sums per_token_loss without multiplying by the mask (the mask only counts tokens)."""
    mask = completion_mask.float()
    if loss_type == "grpo":
        return (per_token_loss.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    return _token_level(per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("nan_on_empty_completion")
def grpo_without_clamp(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """grpo divides each completion's sum by its token count, without clamp: 0 / 0 if empty."""
    mask = completion_mask.float()
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1)).mean()
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("requires_num_items")
def dapo_always_divides_by_num_items(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """dapo always divides by num_items_in_batch, even when it is None."""
    mask = completion_mask.float()
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return _grpo(masked, mask)
    if loss_type == "dapo":
        return masked.sum() / num_items_in_batch
    return _token_level(masked, mask, loss_type, max_completion_length, None)


@wrong("not_scalar")
def returns_per_completion(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """grpo returns the per-completion means without the final mean."""
    mask = completion_mask.float()
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return masked.sum(-1) / mask.sum(-1).clamp(min=1)
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("not_a_tensor")
def returns_a_float(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Returns loss.item(), a Python float."""
    mask = completion_mask.float()
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return _grpo(masked, mask).item()
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch).item()


@wrong("modifies_input")
def masks_in_place(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Zeroes the padding's losses in place (per_token_loss *= mask)."""
    mask = completion_mask.float()
    per_token_loss *= mask
    if loss_type == "grpo":
        return _grpo(per_token_loss, mask)
    return _token_level(per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("empty_detached")
def constant_zero_when_empty(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Returns torch.tensor(0.0) when no completion has a token."""
    mask = completion_mask.float()
    if mask.sum() == 0:
        return torch.tensor(0.0)
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return _grpo(masked, mask)
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("detached")
def weights_from_detached_losses(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Computes on per_token_loss.detach() "because the loss is only logged"."""
    mask = completion_mask.float()
    masked = per_token_loss.detach() * mask
    if loss_type == "grpo":
        return _grpo(masked, mask)
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch)


@wrong("zero_count_not_clamped")
def dapo_divides_by_zero(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Divides by num_items_in_batch as given: a window of truncated completions gives 0 / 0."""
    mask = completion_mask.float()
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return _grpo(masked, mask)
    if loss_type == "dapo" and num_items_in_batch is not None:
        return masked.sum() / num_items_in_batch
    return _token_level(masked, mask, loss_type, max_completion_length, num_items_in_batch)


# ---------------------------------------------------------------- correct attempts


@correct
def token_weights_then_sum(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Builds every token's weight for the type, then one weighted sum."""
    mask = completion_mask.float()
    B = mask.shape[0]
    if loss_type == "grpo":
        weights = mask / (mask.sum(-1, keepdim=True).clamp(min=1) * B)
    elif loss_type == "dr_grpo":
        weights = mask / (B * max_completion_length)
    elif loss_type == "dapo" and num_items_in_batch is not None:
        weights = mask / max(float(num_items_in_batch), 1.0)
    else:
        weights = mask / mask.sum().clamp(min=1)
    return (per_token_loss * weights).sum()


@correct
def completion_by_completion(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """A loop over the completions with torch.where for the padding."""
    keep = completion_mask.bool()
    losses = torch.where(keep, per_token_loss, torch.zeros_like(per_token_loss))
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
def trl_branches(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """TRL's four branches written out, the mask as it comes."""
    mask = completion_mask
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo" or (num_items_in_batch is None and loss_type == "dapo"):
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)
    return (per_token_loss * mask).sum() / torch.as_tensor(num_items_in_batch).clamp(min=1.0)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.grpo.aggregate_loss")
def the_course_aggregate_loss(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Calls the course's own aggregate_loss: nothing written."""
    from lmlessons.grpo import aggregate_loss

    return aggregate_loss(
        per_token_loss,
        completion_mask,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
    )


@wrong("delegates_to_course", says="lmlessons.grpo.token_weights")
def the_course_token_weights(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Weights the token losses with the course's token_weights: the division is the course's."""
    from lmlessons.grpo import token_weights

    weights = token_weights(
        completion_mask,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
    )
    return (per_token_loss * weights).sum()


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions_part3 import grpo_loss

    return grpo_loss(
        per_token_loss, completion_mask, loss_type, max_completion_length, num_items_in_batch
    )
