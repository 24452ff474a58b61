"""Battery for ``group_advantages`` (lesson 12): what learners write for GRPO's advantages.

The statement a learner sees: ``rewards`` is ``(B,)``, the ``num_generations`` completions of
each prompt in consecutive places; each reward minus the mean of its group; ``scale_rewards``
``"group"`` (the default) divides by the group's standard deviation (Bessel's, n - 1) + 1e-4,
``"batch"`` by the standard deviation of all B rewards + 1e-4 (the baseline is still the group's
mean), ``"none"`` by nothing. A group whose rewards are all equal gets 0; the result is ``(B,)``
in the rewards' dtype.

The value mistakes are the checker's catalogue (``check_group_advantages.py``), the structural
ones ``_structural.py``'s; here are a converted dtype, a wrong shape, correct attempts and
delegations.
"""

from __future__ import annotations

import torch

from battery._attempt import correct, wrong


def _table(rewards, g, scale_rewards, centred=None):
    """The advantages, right, as the (B / G, G) table; ``centred``: each reward minus its
    group's mean, (B,), where the attempt computes it its own way."""
    grouped = rewards.view(-1, g)  # (B / G, G)
    if centred is None:
        centred = grouped - grouped.mean(dim=1, keepdim=True)
    centred = centred.view(-1, g)
    if scale_rewards == "group":
        return centred / (grouped.std(dim=1, keepdim=True) + 1e-4)
    if scale_rewards == "batch":
        return centred / (rewards.std() + 1e-4)
    return centred


# ---------------------------------------------------------------- wrong attempts


@wrong("changes_dtype")
def converts_to_float(rewards, *, num_generations, scale_rewards="group"):
    """Starts with rewards.float() "to be safe": float64 rewards come back float32."""
    return _table(rewards.float(), num_generations, scale_rewards).view(-1)


@wrong("wrong_shape")
def returns_the_groups(rewards, *, num_generations, scale_rewards="group"):
    """Returns the (B / G, G) table, not flattened back to (B,)."""
    return _table(rewards, num_generations, scale_rewards)


# ---------------------------------------------------------------- correct attempts


@correct
def std_mean_at_once(rewards, *, num_generations, scale_rewards="group"):
    """torch.std_mean along the rows, then a branch per scaling."""
    grouped = rewards.reshape(-1, num_generations)
    std, mean = torch.std_mean(grouped, dim=1, keepdim=True)
    centred = grouped - mean
    if scale_rewards == "group":
        centred = centred / (std + 1e-4)
    elif scale_rewards == "batch":
        centred = centred / (rewards.std() + 1e-4)
    return centred.flatten()


@correct
def trl_repeat_interleave(rewards, *, num_generations, scale_rewards="group"):
    """TRL's way: (B / G,) statistics repeated with repeat_interleave, then one division."""
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations, dim=0)
    if scale_rewards == "batch":
        std = rewards.std().expand_as(rewards)
    else:
        std = grouped.std(dim=1).repeat_interleave(num_generations, dim=0)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return advantages


@correct
def group_by_group(rewards, *, num_generations, scale_rewards="group"):
    """A loop over the groups with tensor slices, joined with torch.cat."""
    pieces = []
    for group in rewards.split(num_generations):
        centred = group - group.mean()
        if scale_rewards == "group":
            centred = centred / (group.std() + 1e-4)
        elif scale_rewards == "batch":
            centred = centred / (rewards.std() + 1e-4)
        pieces.append(centred)
    return torch.cat(pieces)


@correct
def variance_by_hand_over_n_minus_1(rewards, *, num_generations, scale_rewards="group"):
    """Bessel's correction written out: squared deviations summed, over G - 1."""
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.sum(dim=1, keepdim=True) / num_generations
    std = ((centred**2).sum(dim=1, keepdim=True) / (num_generations - 1)).sqrt()
    if scale_rewards == "group":
        centred = centred / (std + 1e-4)
    elif scale_rewards == "batch":
        centred = centred / (rewards.std() + 1e-4)
    return centred.reshape(-1)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.grpo.group_advantages")
def the_course_group_advantages(rewards, *, num_generations, scale_rewards="group"):
    """Calls the course's own group_advantages: nothing written."""
    from lmlessons.grpo import group_advantages

    return group_advantages(rewards, num_generations=num_generations, scale_rewards=scale_rewards)


@wrong("delegates_to_course", says="lmlessons.grpo.rloo_advantages")
def scaled_rloo(rewards, *, num_generations, scale_rewards="group"):
    """The course's RLOO advantages times (G - 1) / G, which the lesson says equal the
    group's mean subtracted."""
    from lmlessons.grpo import rloo_advantages

    g = num_generations
    centred = rloo_advantages(rewards, num_generations=g) * (g - 1) / g  # (B,)
    return _table(rewards, g, scale_rewards, centred).view(-1)
