"""Reference solutions of the Part III exercises, written to be read (``solution(name)`` shows
them), in the style of :mod:`lmlessons.exercises.solutions`: short, no input validation, one
idea per line, shape comments.

``sequence_logprobs`` (lesson 11) is TRL's ``CPOTrainer.get_batch_logps`` written out (the sum is
what ``DPOTrainer`` computes for the policy and the reference): the label shift, -100 read as a
dummy id for the gather and then masked out, the sum (or the mean) over each row's targets. A row
without any target sums to 0. The core's :func:`lmlessons.preference.sequence_logprobs` gives
the same numbers on the checker's cases (``tests/test_exercises.py``).

``grpo_loss`` (lesson 13) is the aggregation of TRL's ``GRPOTrainer._compute_loss`` for its four
``loss_type`` values, one micro-batch: the core's :func:`lmlessons.grpo.aggregate_loss` with the
exercise's signature (``loss_type`` positional).

``group_advantages`` (lesson 12) is GRPO's group-normalised advantage as TRL's
``GRPOTrainer._generate_and_score_completions`` computes it with one reward function: the
group's mean subtracted, then (``scale_rewards``) divided by the group's or the whole batch's
standard deviation (Bessel's, as TRL's ``nanstd``) plus 1e-4, or not divided. The core's
:func:`lmlessons.grpo.group_advantages` without its input validation.

(Transformers writes -100 for "no target"; the package's one spelling of that number is
``IGNORE_INDEX``.)
"""

from __future__ import annotations

import torch

from lmlessons._checks import IGNORE_INDEX


def sequence_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, average: bool = False
) -> torch.Tensor:
    targets = labels[:, 1:]  # (B, T-1): position t predicts token t + 1
    is_target = targets != IGNORE_INDEX  # (B, T-1): -100 on the prompt and the padding
    logps = logits[:, :-1].float().log_softmax(dim=-1)  # (B, T-1, V)
    # -100 is not an id: gather at 0 there, then multiply by 0 (a new tensor: labels stay as given)
    picked = logps.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    total = (picked * is_target).sum(dim=-1)  # (B,): 0 for a row without a target
    if average:
        return total / is_target.sum(dim=-1)  # (B,): the mean over the row's own targets
    return total


def grpo_loss(
    per_token_loss: torch.Tensor,
    completion_mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    mask = completion_mask.float()  # (B, C): 1 on a completion's tokens, 0 on padding
    masked = per_token_loss * mask  # (B, C): the padding's losses never count
    if loss_type == "grpo":  # every completion weighs the same: its own mean, then the mean
        per_completion = masked.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)  # (B,) 0 if empty
        return per_completion.mean()  # an empty completion still counts in B
    if loss_type == "dr_grpo":  # every token weighs the same, a constant denominator
        assert max_completion_length is not None, "dr_grpo divides by max_completion_length"
        return masked.sum() / (per_token_loss.shape[0] * max_completion_length)
    if loss_type == "dapo" and num_items_in_batch is not None:  # the window's token count
        # at least 1, as TRL clamps it: a window whose completions were all truncated gives 0
        return masked.sum() / torch.as_tensor(num_items_in_batch).clamp(min=1)
    return masked.sum() / mask.sum().clamp(min=1.0)  # bnpo (and dapo alone): this batch's tokens


def group_advantages(
    rewards: torch.Tensor, *, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    grouped = rewards.view(-1, num_generations)  # (B / G, G): a prompt's completions in a row
    mean = grouped.mean(dim=1, keepdim=True)  # (B / G, 1): each group's baseline
    advantages = (grouped - mean).view(-1)  # (B,): above or below its own group
    if scale_rewards == "group":  # every group gets unit spread
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1)  # (B,), n - 1
        return advantages / (std + 1e-4)  # a group of equal rewards: 0 / 1e-4 = 0, not NaN
    if scale_rewards == "batch":  # one spread for the batch; the baseline stays the group's
        return advantages / (rewards.std() + 1e-4)  # (B,)
    return advantages  # "none" (Dr. GRPO): not divided
