"""Battery for ``group_advantages`` (lesson 12): what learners write for GRPO's advantages.

The statement a learner sees: ``rewards`` is ``(B,)``, the ``num_generations`` completions of
each prompt in consecutive places; each reward minus the mean of its group; ``scale_rewards``
``"group"`` (the default) divides by the group's standard deviation (Bessel's, n - 1) + 1e-4,
``"batch"`` by the standard deviation of all B rewards + 1e-4 (the baseline is still the group's
mean), ``"none"`` by nothing. A group whose rewards are all equal gets 0; the result is ``(B,)``
in the rewards' dtype.
"""

from __future__ import annotations

import math

import torch

from battery._attempt import correct, wrong


def _scaled(advantages, std_group, rewards, scale_rewards):
    """The three scalings, right, from the right advantages and group std (both (B,))."""
    if scale_rewards == "group":
        return advantages / (std_group + 1e-4)
    if scale_rewards == "batch":
        return advantages / (rewards.std() + 1e-4)
    return advantages


def _parts(rewards, num_generations):
    """(B / G, G) groups, the (B,) advantages and the (B,) group std, right."""
    grouped = rewards.view(-1, num_generations)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1)
    return grouped, advantages, std


# ---------------------------------------------------------------- wrong attempts


@wrong("population_std")
def std_by_hand_over_n(rewards, *, num_generations, scale_rewards="group"):
    """The standard deviation written out as the root of the mean squared deviation."""
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    std = (centred**2).mean(dim=1, keepdim=True).sqrt()
    if scale_rewards == "group":
        return (centred / (std + 1e-4)).view(-1)
    if scale_rewards == "batch":
        return centred.view(-1) / (rewards.std() + 1e-4)
    return centred.view(-1)


@wrong("no_std_epsilon")
def ppo_epsilon(rewards, *, num_generations, scale_rewards="group"):
    """The epsilon of PPO's advantage normalisation, 1e-8, instead of TRL's 1e-4."""
    _, advantages, std = _parts(rewards, num_generations)
    if scale_rewards == "group":
        return advantages / (std + 1e-8)
    if scale_rewards == "batch":
        return advantages / (rewards.std() + 1e-8)
    return advantages


@wrong("ignores_scale_rewards")
def always_the_group_std(rewards, *, num_generations, scale_rewards="group"):
    """Never reads scale_rewards: every call divides by the group's std."""
    _, advantages, std = _parts(rewards, num_generations)
    return advantages / (std + 1e-4)


@wrong("changes_dtype")
def converts_to_float(rewards, *, num_generations, scale_rewards="group"):
    """Starts with rewards.float() "to be safe": float64 rewards come back float32."""
    rewards = rewards.float()
    _, advantages, std = _parts(rewards, num_generations)
    return _scaled(advantages, std, rewards, scale_rewards)


@wrong("changes_dtype")
def python_loop_into_a_list(rewards, *, num_generations, scale_rewards="group"):
    """Loops in Python and builds the result with torch.tensor(list): float32."""
    values = rewards.tolist()
    batch_std = _statistics(values)[1]
    out = []
    for start in range(0, len(values), num_generations):
        group = values[start : start + num_generations]
        mean, std = _statistics(group)
        for r in group:
            if scale_rewards == "group":
                out.append((r - mean) / (std + 1e-4))
            elif scale_rewards == "batch":
                out.append((r - mean) / (batch_std + 1e-4))
            else:
                out.append(r - mean)
    return torch.tensor(out)


def _statistics(values):
    """The mean and Bessel's standard deviation of a list of floats."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


@wrong("modifies_input")
def centres_in_place(rewards, *, num_generations, scale_rewards="group"):
    """grouped -= mean on a view of rewards: the caller's rewards change."""
    grouped = rewards.view(-1, num_generations)
    std = grouped.std(dim=1, keepdim=True)
    batch_std = rewards.std()
    grouped -= grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        return (grouped / (std + 1e-4)).view(-1)
    if scale_rewards == "batch":
        return rewards / (batch_std + 1e-4)
    return rewards


@wrong("wrong_shape")
def returns_the_groups(rewards, *, num_generations, scale_rewards="group"):
    """Returns the (B / G, G) table, not flattened back to (B,)."""
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        return centred / (grouped.std(dim=1, keepdim=True) + 1e-4)
    if scale_rewards == "batch":
        return centred / (rewards.std() + 1e-4)
    return centred


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
    advantages = rloo_advantages(rewards, num_generations=g) * (g - 1) / g
    std = rewards.view(-1, g).std(dim=1, keepdim=True).expand(-1, g).reshape(-1)
    return _scaled(advantages, std, rewards, scale_rewards)


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(rewards, *, num_generations, scale_rewards="group"):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises import solutions_part3

    return solutions_part3.group_advantages(
        rewards, num_generations=num_generations, scale_rewards=scale_rewards
    )
