"""Fine-tuning on the answer only: which tokens of a conversation are targets, and how they weigh.

Supervised fine-tuning (SFT) trains a causal LM on conversations, but only the answers are what
the model should learn to write: the prompt is given at generation time. So the labels are the
input ids on the answer tokens (the end-of-turn token included, or the model never learns to stop)
and -100 everywhere else. Two ways to say where the answer is, both TRL's ``SFTTrainer``'s:

* :func:`assistant_only_labels`: a conversation rendered by a chat template whose assistant turns
  sit inside ``{% generation %}`` ... ``{% endgeneration %}``; transformers'
  ``apply_chat_template(..., return_assistant_tokens_mask=True)`` returns ``assistant_masks``
  (1 on every assistant token), and TRL's ``assistant_only_loss=True`` keeps those tokens;
* :func:`completion_only_labels`: a prompt and a completion tokenized apart and concatenated;
  TRL's ``completion_only_loss`` keeps the completion (its ``completion_mask``).

Then the normalisation: :func:`per_token_mean_loss` gives every answer token of the step the same
weight (transformers' and TRL's default, with ``num_items_in_batch`` for gradient accumulation,
lesson 07); :func:`per_example_mean_loss` gives every *example* the same weight, so a token of a
short answer weighs more than a token of a long one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmlessons._checks import IGNORE_INDEX, check_int, check_int_tensor
from lmlessons.losses import clm_loss, token_nll

__all__ = [
    "assistant_only_labels",
    "completion_only_labels",
    "per_token_mean_loss",
    "per_example_mean_loss",
]


def _ids(name: str, value: object) -> torch.Tensor:
    """Token ids as a LongTensor: a tensor, or a list of ints (or of lists, one per row), as
    tokenizers return them."""
    if not isinstance(value, torch.Tensor):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(
                f"{name} must be a torch.Tensor or a list of token ids, got {type(value).__name__}"
            )
        try:
            value = torch.tensor(value)  # a float in the list gives a float tensor: rejected below
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must hold int token ids ({err})") from None
        if value.numel() == 0:
            value = value.long()  # an empty list is float32 to torch
    return check_int_tensor(name, value)


def assistant_only_labels(input_ids: object, assistant_masks: object) -> torch.Tensor:
    """Labels that train on the assistant's tokens only: ``input_ids`` where ``assistant_masks``
    is 1, -100 elsewhere.

    Args:
        input_ids: ``(T,)`` or ``(B, T)`` token ids (a tensor or lists, as
            ``apply_chat_template(..., return_dict=True)`` returns them).
        assistant_masks: the same shape, 1 on the tokens the chat template rendered inside
            ``{% generation %}`` (the answers and their end-of-turn token), 0 elsewhere
            (``return_assistant_tokens_mask=True``; bool or 0/1 integers).

    Unshifted, like every ``labels`` in transformers: the model shifts them. The same labels as
    TRL's ``SFTTrainer`` builds with ``assistant_only_loss=True`` (``build_labels``).
    """
    # 1. Both arguments as integer tensors of one shape.
    ids = _ids("input_ids", input_ids)  # (B, T) or (T,)
    if isinstance(assistant_masks, torch.Tensor) and assistant_masks.dtype == torch.bool:
        assistant_masks = assistant_masks.long()
    mask = _ids("assistant_masks", assistant_masks)  # (B, T) or (T,)
    if tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(
            f"assistant_masks must have the shape of input_ids {tuple(ids.shape)}, "
            f"got {tuple(mask.shape)}"
        )
    if mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("assistant_masks must hold only 0 and 1 (1 = an assistant token)")
    # 2. Keep the ids of the assistant's tokens; every other token is no target.
    return ids.masked_fill(mask == 0, IGNORE_INDEX)  # (B, T) or (T,), a new tensor


def completion_only_labels(prompt_ids: object, completion_ids: object) -> dict[str, torch.Tensor]:
    """One training example from a prompt and its completion: the prompt is no target.

    Args:
        prompt_ids: ``(P,)`` token ids of the prompt, as the model sees it before it answers
            (with a chat template: ``add_generation_prompt=True``, so the assistant's header is
            part of the prompt).
        completion_ids: ``(C,)`` token ids of the answer, its end-of-turn token included.

    Returns ``input_ids`` (prompt then completion), ``completion_mask`` (0 on the prompt, 1 on
    the completion) and ``labels`` (-100 on the prompt, the ids on the completion), each
    ``(P + C,)``. TRL's ``SFTTrainer`` builds the same ``completion_mask`` for prompt-completion
    datasets and, with ``completion_only_loss`` (the default for them), the same labels.
    """
    # 1. Two 1-D id sequences; the completion must hold at least one target.
    prompt = _ids("prompt_ids", prompt_ids)  # (P,)
    completion = _ids("completion_ids", completion_ids)  # (C,)
    for name, ids in (("prompt_ids", prompt), ("completion_ids", completion)):
        if ids.dim() != 1:
            raise ValueError(f"{name} must be one sequence of shape (T,), got {tuple(ids.shape)}")
    if completion.numel() == 0:
        raise ValueError("completion_ids is empty: an example without an answer trains nothing")
    # 2. Concatenate; mark which tokens are the completion's.
    input_ids = torch.cat([prompt, completion])  # (P + C,)
    completion_mask = torch.cat([torch.zeros_like(prompt), torch.ones_like(completion)])
    # 3. Labels: the ids on the completion, -100 on the prompt.
    labels = input_ids.masked_fill(completion_mask == 0, IGNORE_INDEX)  # (P + C,)
    return {"input_ids": input_ids, "completion_mask": completion_mask, "labels": labels}


def per_token_mean_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Every target token weighs the same: the sum of the token losses over the step divided by
    the number of target tokens (``num_items_in_batch`` over all micro-batches and ranks, counted
    after the shift; without it, this batch's count).

    The normalisation of transformers' ``ForCausalLMLoss`` and so of TRL's ``SFTTrainer``
    (``loss_type="nll"``): a long answer has more tokens, so it weighs more. This is
    :func:`lmlessons.clm_loss` under the name that says what it weighs (TRL's ``per_token_loss``
    is another thing: the ``(B, C)`` tensor of token losses that GRPO's ``loss_type`` reduces,
    :func:`lmlessons.grpo.aggregate_loss`).
    """
    return clm_loss(logits, labels, num_items_in_batch=num_items_in_batch)


def per_example_mean_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_examples_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Every example weighs the same: each row's mean over its own target tokens, then the mean
    over the examples (rows without any target are left out).

    Args:
        logits: ``(B, T, V)``.
        labels: ``(B, T)`` unshifted, -100 where nothing is learned (shifted here).
        num_examples_in_batch: for gradient accumulation or several ranks, the number of examples
            *with a target* in the whole step; the sum of this batch's example means is divided
            by it, so the micro-batch losses add up to the step's per-example mean.

    A token of an answer with ``n`` targets weighs ``1 / (E n)`` (``E`` examples) instead of
    ``1 / N`` (``N`` targets in the step): short answers count more per token than per-token
    normalisation gives them.
    """
    # 1. Validate; (B, T) labels only: a row is an example.
    if isinstance(labels, torch.Tensor) and labels.dim() != 2:
        raise ValueError(f"labels must have shape (B, T), one row per example, got {labels.shape}")
    if num_examples_in_batch is not None:
        num_examples_in_batch = check_int("num_examples_in_batch", num_examples_in_batch, minimum=1)
    # 2. Token losses after the shift: position t is scored against labels[:, t + 1].
    token_losses, has_target = token_nll(logits, labels, shift=True)  # (B, T), (B, T)
    # 3. Each example's mean over its own targets.
    counts = has_target.sum(dim=1)  # (B,)
    has_targets = counts > 0  # (B,)
    means = token_losses.sum(dim=1)[has_targets] / counts[has_targets]  # (E,)
    # 4. The mean over examples (0, still backpropagating, when no example has a target).
    divisor = num_examples_in_batch if num_examples_in_batch is not None else means.numel()
    return means.sum() / max(divisor, 1)
