"""GRPO's loss, as TRL's ``GRPOTrainer`` computes it, in three steps.

For every prompt the policy samples a *group* of ``num_generations`` completions; a reward
function scores each one.

1. :func:`group_advantages`: each completion's advantage is its reward minus its group's mean
   (the group is the baseline: no value network), divided by a standard deviation.
2. :func:`token_losses`: PPO's clipped surrogate, token by token, every token of a completion
   with its completion's advantage, plus ``beta`` times the :func:`lmlessons.kl.k3` estimate of
   the KL to a reference model.
3. :func:`aggregate_loss`: the weighted sum of the token losses. Only the weights differ between
   the ``loss_type``\\ s (:func:`token_weights`): ``grpo`` gives every *completion* one share, so
   a token of a short completion weighs more than one of a long one; ``bnpo``, ``dr_grpo`` and
   ``dapo`` give every *token* one share, and differ in what they divide by.

TRL 1.16 accepts eight ``loss_type``\\ s (:data:`TRL_LOSS_TYPES`); this module writes out the four
that share PPO's clipped surrogate and differ only in the weights (:data:`LOSS_TYPES`). The ratio
is a token's (``importance_sampling_level="token"``, TRL's default) or, GSPO's choice, the
geometric mean of its completion's token ratios (``"sequence"``). :func:`rloo_advantages` is the
leave-one-out baseline that GRPO's group mean approximates.

Tensors as TRL names them: ``completion_mask`` ``(B, C)``, 1 on the completion's tokens (the
end-of-sequence token included), 0 on padding; per-token log-probabilities ``(B, C)`` of the
completion tokens; ``B`` completions, ``B / num_generations`` prompts, the completions of a prompt
in consecutive rows (TRL's ``RepeatSampler`` order). File and line numbers below refer to TRL
1.16.0.
"""

from __future__ import annotations

import torch

from lmlessons._checks import (
    check_float_tensor,
    check_int,
    check_num_items,
    check_real,
    check_same_shape,
)
from lmlessons.kl import k3

__all__ = [
    "LOSS_TYPES",
    "TRL_LOSS_TYPES",
    "SCALE_REWARDS",
    "IMPORTANCE_SAMPLING_LEVELS",
    "group_advantages",
    "rloo_advantages",
    "token_losses",
    "token_weights",
    "aggregate_loss",
]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")  # TRL 1.16's default is "dapo"
#: Every ``GRPOConfig.loss_type`` TRL 1.16 accepts (``grpo_trainer.py:3109-3183``): the four above,
#: and ``cispo`` (clipped, detached ratio times the log-prob), ``sapo`` (a soft sigmoid gate for
#: the clip), ``luspo`` (per-completion sums), ``vespo`` (sequence-level gamma weights).
TRL_LOSS_TYPES = (*LOSS_TYPES, "cispo", "sapo", "luspo", "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")  # TRL 1.16's default is "token"
SCALE_REWARDS = ("group", "batch", "none")  # TRL 1.16's default is "group"
STD_EPSILON = 1e-4  # added to the standard deviation before dividing (grpo_trainer.py:2787)


def _check_like(name: str, value: object, shape: torch.Size) -> torch.Tensor:
    """A float tensor of the given shape (the shape of ``logps``)."""
    tensor = check_float_tensor(name, value)
    if tensor.shape != shape:
        raise ValueError(
            f"{name} must have the shape of logps {tuple(shape)}, got {tuple(tensor.shape)}"
        )
    return tensor


def _check_mask(completion_mask: object) -> torch.Tensor:
    """A ``(B, C)`` tensor of 0 and 1 (bool, integer or float), returned as float32."""
    if not isinstance(completion_mask, torch.Tensor):
        got = type(completion_mask).__name__
        raise TypeError(f"completion_mask must be a torch.Tensor of 0 and 1, got {got}")
    if completion_mask.dim() != 2:
        raise ValueError(
            f"completion_mask must have shape (B, C), got {tuple(completion_mask.shape)}"
        )
    if completion_mask.numel() and not bool(
        ((completion_mask == 0) | (completion_mask == 1)).all()
    ):
        raise ValueError("completion_mask must hold only 0 and 1 (1 = a completion token)")
    return completion_mask.float()  # (B, C)


def group_advantages(
    rewards: torch.Tensor, *, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    """Each completion's reward minus the mean reward of its group, ``(B,)`` -> ``(B,)``.

    Args:
        rewards: ``(B,)`` finite rewards, ``num_generations`` consecutive ones per prompt.
        num_generations: the group size ``G >= 2`` (TRL requires 2 or more,
            ``grpo_config.py:1137``).
        scale_rewards: ``"group"`` (TRL's default): divided by the group's standard deviation
            plus 1e-4, so every group has unit spread; ``"batch"``: by the standard deviation of
            all ``B`` rewards plus 1e-4 (the mean stays the group's); ``"none"``: not divided
            (Dr. GRPO: dividing favours the groups whose rewards barely differ). Standard
            deviations with Bessel's correction (TRL's ``nanstd``, ``trainer/utils.py:1021``).

    TRL 1.16 ``GRPOTrainer._generate_and_score_completions`` with one reward function
    (``trainer/grpo_trainer.py:2761-2788``). Within a group the advantages sum to 0 (to
    rounding) whatever the scaling.
    """
    # 1. Validate; the rewards as (prompts, G).
    rewards = check_float_tensor("rewards", rewards)
    g = check_int("num_generations", num_generations, minimum=2)
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    if rewards.dim() != 1 or rewards.numel() % g:
        raise ValueError(
            f"rewards must have shape (B,) with B a multiple of num_generations={g}, "
            f"got {tuple(rewards.shape)}"
        )
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (TRL zeroes the advantage of a NaN reward)")
    grouped = rewards.view(-1, g)  # (B / G, G)
    # 2. The baseline: the group's mean.
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)  # (B,)
    # 3. The scale: the group's or the batch's standard deviation.
    if scale_rewards == "group":
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1)  # (B,)
        return advantages / (std + STD_EPSILON)  # (B,)
    if scale_rewards == "batch":
        return advantages / (rewards.std() + STD_EPSILON)  # (B,)
    return advantages  # (B,)


def rloo_advantages(rewards: torch.Tensor, *, num_generations: int) -> torch.Tensor:
    """Each completion's reward minus the mean reward of the *other* completions of its group
    (RLOO's leave-one-out baseline, Ahmadian et al. 2024), ``(B,)`` -> ``(B,)``.

    The baseline does not depend on the completion it is subtracted from, so the policy-gradient
    estimate stays unbiased; GRPO's group mean includes the completion itself, and
    ``group_advantages(r, scale_rewards="none") == (G - 1) / G * rloo_advantages(r)`` exactly."""
    rewards = check_float_tensor("rewards", rewards)
    g = check_int("num_generations", num_generations, minimum=2)
    if rewards.dim() != 1 or rewards.numel() % g:
        raise ValueError(
            f"rewards must have shape (B,) with B a multiple of num_generations={g}, "
            f"got {tuple(rewards.shape)}"
        )
    grouped = rewards.view(-1, g)  # (B / G, G)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (g - 1)  # (B / G, G)
    return (grouped - others).view(-1)  # (B,)


def _log_ratio(
    logps: torch.Tensor, old: torch.Tensor, level: str, completion_mask: object
) -> torch.Tensor:
    """``logps - old`` per token ``(B, C)``, or its mean over each completion's tokens ``(B, 1)``
    (GSPO, ``grpo_trainer.py:3084-3088``)."""
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {level!r}"
        )
    log_ratio = logps - old  # (B, C)
    if level == "token":
        return log_ratio
    if completion_mask is None:
        raise ValueError("completion_mask is required for importance_sampling_level='sequence'")
    mask = _check_mask(completion_mask)  # (B, C)
    if mask.shape != logps.shape:
        raise ValueError(
            f"completion_mask must have the shape of logps {tuple(logps.shape)}, "
            f"got {tuple(mask.shape)}"
        )
    mask = mask.to(logps.dtype)
    return (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


def _check_policy(
    logps: object, old_logps: object, advantages: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``logps`` ``(B, C)``, ``old_logps`` of its shape (``logps.detach()`` when None) and the
    advantages as ``(B, 1)`` (given ``(B,)``) or ``(B, C)``."""
    logps = check_float_tensor("logps", logps, min_ndim=2)  # (B, C)
    if logps.dim() != 2:
        raise ValueError(f"logps must have shape (B, C), got {tuple(logps.shape)}")
    old = logps.detach() if old_logps is None else _check_like("old_logps", old_logps, logps.shape)
    advantages = check_float_tensor("advantages", advantages)
    if tuple(advantages.shape) not in ((logps.shape[0],), tuple(logps.shape)):
        raise ValueError(
            f"advantages must have shape (B,) = ({logps.shape[0]},) or (B, C) = "
            f"{tuple(logps.shape)}, got {tuple(advantages.shape)}"
        )
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, C)
    return logps, old, adv


def token_losses(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    use_bias_correction_kl: bool = True,
    importance_sampling_level: str = "token",
    completion_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss of every completion token, ``(B, C)``, padding included (aggregate with a mask).

    Args:
        logps: ``(B, C)`` log-probabilities of the completion tokens under the policy being
            trained (the gradient flows through these).
        old_logps: ``(B, C)`` the same under the policy that generated them, or ``None`` when
            that is the current policy (one update per generation, TRL's default): then
            ``logps.detach()``, the ratio is exactly 1 but its gradient is not 0.
        advantages: ``(B,)`` (:func:`group_advantages`), or ``(B, C)`` per token.
        epsilon_low, epsilon_high: the ratio is clipped to ``[1 - epsilon_low, 1 + epsilon_high]``
            (DAPO's "clip-higher" raises ``epsilon_high``, e.g. to 0.28).
        ref_logps, beta: with ``beta > 0``, ``beta`` times :func:`lmlessons.kl.k3` with
            ``log_ratio = ref_logps - logps`` (an estimate of ``KL(policy || reference)``) is added.
        use_bias_correction_kl: multiply that KL term by the ratio (TRL 1.16's default,
            ``grpo_config.py:972``): its gradient becomes the unbiased reverse-KL gradient, even
            on-policy where the ratio's value is 1.
        importance_sampling_level: ``"token"`` (TRL's default): each token's own ratio;
            ``"sequence"`` (GSPO, Zheng et al. 2025): every token of a completion gets the
            completion's ratio, ``exp`` of the mean of its tokens' log-ratios, so the clip keeps
            or drops a whole completion. Needs ``completion_mask`` ``(B, C)``.

    TRL 1.16 ``GRPOTrainer._compute_loss`` for ``loss_type`` grpo, bnpo, dr_grpo and dapo, with
    no ``delta`` (two-sided clipping, left out):
    ``trainer/grpo_trainer.py:3066`` (``old_logps=None``), ``3083-3095`` (ratio), ``3098-3105``
    (KL), ``3113-3120`` (clipped surrogate), ``3149-3150`` (plus ``beta`` times KL).
    """
    # 1. Validate: every tensor (B, C) but the advantages, (B, 1) or (B, C) from here on.
    logps, old, adv = _check_policy(logps, old_logps, advantages)
    eps_low = check_real("epsilon_low", epsilon_low)
    eps_high = check_real("epsilon_high", epsilon_high)
    beta = check_real("beta", beta)
    # 2. The probability ratio of each token (or of its completion), and its clipped copy.
    log_ratio = _log_ratio(logps, old, importance_sampling_level, completion_mask)  # (B, C|1)
    ratio = torch.exp(log_ratio)  # (B, C) or (B, 1)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)  # (B, C) or (B, 1)
    # 3. The pessimistic surrogate: the smaller of the two objectives, negated.
    loss = -torch.min(ratio * adv, clipped * adv).expand_as(logps)  # (B, C)
    if beta == 0.0:
        return loss
    # 4. The KL penalty to the reference model, estimated from the sampled tokens.
    if ref_logps is None:
        raise ValueError("ref_logps is required when beta > 0 (the reference model's logps)")
    ref = _check_like("ref_logps", ref_logps, logps.shape)  # (B, C)
    kl = k3(ref - logps)  # (B, C)
    if use_bias_correction_kl:
        kl = kl * ratio  # (B, C)
    return loss + beta * kl  # (B, C)


def _window_count(num_items_in_batch: object) -> float | None:
    """``num_items_in_batch`` checked, 0 allowed, then at least 1 (TRL's ``clamp(min=1.0)``)."""
    value = num_items_in_batch
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex:
        value = value.item() if value.dtype != torch.bool else value
    if not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0:
        return 1.0
    n = check_num_items(num_items_in_batch)
    return None if n is None else max(n, 1)


def token_weights(
    completion_mask: torch.Tensor,
    *,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """The weight of every token in the loss, ``(B, C)`` float32, 0 on padding:
    ``aggregate_loss(l, m, ...) == (l * token_weights(m, ...)).sum()`` for any token losses ``l``.

    With ``n_i`` the tokens of completion ``i``, ``N`` those of the micro-batch:

    * ``"grpo"``: ``1 / (B n_i)``: each completion's mean, then the mean over the ``B``
      completions. Each completion weighs ``1 / B`` whatever its length; a completion without a
      token weighs nothing but still counts in ``B``. Total: the share of non-empty completions.
    * ``"bnpo"``: ``1 / N``, the mean over the micro-batch's tokens. Total 1.
    * ``"dr_grpo"``: ``1 / (B * max_completion_length)``, a constant. Total ``N / (B L)``, at
      most 1.
    * ``"dapo"``: ``1 / num_items_in_batch``, the tokens of the whole accumulation window on all
      processes (without it: ``N``, as ``bnpo``). The totals of a window's micro-batches add up
      to 1. A count of 0 (every completion of the window masked, as
      ``mask_truncated_completions=True`` does when all are truncated) is clamped to 1, as TRL
      does (``grpo_trainer.py:3170``): every weight is 0 and so is the loss.

    ``max_completion_length`` is used by ``"dr_grpo"`` only and ``num_items_in_batch`` by
    ``"dapo"`` only (as in TRL, whose inputs always carry both); given to the others they are
    checked and ignored.
    """
    # 1. Validate the mask, the loss type and the counts.
    mask = _check_mask(completion_mask)  # (B, C)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    n = _window_count(num_items_in_batch)
    if max_completion_length is not None:
        max_completion_length = check_int("max_completion_length", max_completion_length)
        if max_completion_length < max(mask.shape[1], 1):
            raise ValueError(
                f"max_completion_length must be >= the completion width C = {mask.shape[1]}, "
                f"got {max_completion_length}"
            )
    # 2. One division per loss type.
    batch_size = mask.shape[0]
    if loss_type == "grpo":
        lengths = mask.sum(dim=1, keepdim=True).clamp(min=1.0)  # (B, 1)
        return mask / (lengths * batch_size)  # (B, C)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("max_completion_length is required for loss_type='dr_grpo'")
        return mask / (batch_size * max_completion_length)  # (B, C)
    if loss_type == "dapo" and n is not None:
        return mask / n  # (B, C)
    return mask / mask.sum().clamp(min=1.0)  # (B, C): bnpo, or dapo on its own batch


def aggregate_loss(
    per_token_loss: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss of a micro-batch: the token losses ``(B, C)`` weighted by :func:`token_weights`
    and summed, a scalar.

    TRL 1.16 ``GRPOTrainer._compute_loss``, ``trainer/grpo_trainer.py:3153-3174``:
    ``grpo`` ``((l * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()``; ``bnpo``
    ``(l * m).sum() / m.sum().clamp(min=1)``; ``dr_grpo`` ``(l * m).sum() / (B *
    max_completion_length)``; ``dapo`` ``(l * m).sum() / num_items_in_batch``.

    Gradient accumulation: TRL divides the ``grpo``, ``bnpo`` and ``dr_grpo`` losses of each
    micro-batch by the number of accumulation steps (means of means); ``dapo``'s
    ``num_items_in_batch`` already counts the whole window, so the micro-batch losses just add
    up. TRL also divides that count by the number of processes, because DDP averages the
    gradients over processes; here, as in :func:`lmlessons.clm_loss`, the sum over all
    micro-batches and processes of these losses is the window's loss.
    """
    per_token_loss = check_float_tensor("per_token_loss", per_token_loss)
    if isinstance(completion_mask, torch.Tensor):
        check_same_shape(
            "per_token_loss", per_token_loss, "completion_mask", completion_mask, dims="(B, C)"
        )
    weights = token_weights(
        completion_mask,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
    )  # (B, C)
    return (per_token_loss * weights.to(per_token_loss.dtype)).sum()
