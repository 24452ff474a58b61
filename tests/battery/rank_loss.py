"""Battery for ``rank_loss`` (lesson 07): one data-parallel rank's causal-LM loss.

The statement a learner sees: shift inside as in ``clm_loss``; the *sum* of this rank's token
losses divided by the number of targets on *all* ranks (``all_reduce`` the count, a tensor);
times ``world_size`` because DDP averages the gradients. Every rank must call ``all_reduce`` the
same number of times, even a rank without any target.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import Attempt

EXERCISE = "rank_loss"
IGNORE = -100


def _targets(labels):
    return F.pad(labels, (0, 1), value=IGNORE)[..., 1:]  # (B, T): labels[:, t + 1], last -100


def _local_sum(logits, targets):
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
    )


def _local_count(targets):
    return (targets != IGNORE).sum()  # () a tensor, as all_reduce needs


# ---------------------------------------------------------------- wrong attempts


def own_count(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    return world_size * _local_sum(logits, targets) / _local_count(targets).clamp(min=1)


def forgets_world_size(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    return _local_sum(logits, targets) / total.clamp(min=1)  # DDP's average is not undone


def reduces_a_python_int(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce(int(_local_count(targets)))  # an int, not a tensor
    return world_size * _local_sum(logits, targets) / max(int(total), 1)


def returns_early_when_empty(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    count = _local_count(targets)
    if int(count) == 0:
        return logits.sum() * 0.0  # "nothing to do here": skips the collective the others wait in
    return world_size * _local_sum(logits, targets) / all_reduce(count)


def counts_before_the_shift(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce((labels != IGNORE).sum())  # one target too many per row
    return world_size * _local_sum(logits, targets) / total.clamp(min=1)


def never_shifts(logits, labels, *, all_reduce, world_size):
    total = all_reduce(_local_count(labels))
    return world_size * _local_sum(logits, labels) / total.clamp(min=1)


def nan_when_every_rank_is_empty(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    return world_size * _local_sum(logits, targets) / total  # 0 / 0 when no rank has a target


def sum_from_the_local_mean(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    count = _local_count(targets)
    total = all_reduce(count.clone())
    mean = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))  # NaN if 0
    return world_size * mean * count / total.clamp(min=1)  # NaN * 0 on a rank without targets


def reduces_the_loss_too(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    global_sum = all_reduce(_local_sum(logits, targets))  # every rank's sum, on every rank
    return world_size * global_sum / total.clamp(min=1)


def divides_by_world_size(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    return _local_sum(logits, targets) / (total.clamp(min=1) * world_size)  # / R instead of * R


def counts_every_position(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    batch, length = labels.shape
    total = all_reduce(torch.tensor(batch * (length - 1)))  # padding and prompt counted
    return world_size * _local_sum(logits, targets) / total


def shifts_labels_in_place(logits, labels, *, all_reduce, world_size):
    labels[:, :-1] = labels[:, 1:].clone()  # the caller's labels are shifted for good
    labels[:, -1] = IGNORE
    total = all_reduce(_local_count(labels))
    return world_size * _local_sum(logits, labels) / total.clamp(min=1)


def averages_the_rank_means(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    count = _local_count(targets)
    mean = _local_sum(logits, targets) / count.clamp(min=1)
    all_reduce(count)  # called, as required, but the result is not used
    return mean  # (world_size * mean) / world_size: the mean of the ranks' means


def detaches_for_logging(logits, labels, *, all_reduce, world_size):
    targets = _targets(labels)
    total = all_reduce(_local_count(targets).float())
    loss = world_size * _local_sum(logits, targets) / total.clamp(min=1)
    return loss.detach().requires_grad_()  # a new leaf: backward() runs, the logits get nothing


WRONG = [
    Attempt(
        own_count,
        "divides by the rank's own target count, never calls all_reduce",
        "divides_by_local_count",
    ),
    Attempt(
        forgets_world_size,
        "all-reduces the count but does not multiply by world_size",
        "missing_world_size",
    ),
    Attempt(reduces_a_python_int, "passes a Python int to all_reduce", "all_reduce_needs_tensor"),
    Attempt(
        returns_early_when_empty,
        "a rank without targets returns 0 before all_reduce, so "
        "the ranks call it a different number of times",
        "mismatched_all_reduce",
    ),
    Attempt(
        counts_before_the_shift,
        "all-reduces the count of labels before the shift",
        "counts_before_shift",
    ),
    Attempt(never_shifts, "no shift: position t scored against its own token", "not_shifted"),
    Attempt(
        nan_when_every_rank_is_empty,
        "divides by the all-reduced count without a guard: a NaN loss when no rank has a target "
        "(the statement does not say 0 here, but says to shift as in clm_loss, which gives 0)",
        "nan_when_no_targets",
    ),
    Attempt(
        sum_from_the_local_mean,
        "rebuilds the sum as mean * count: NaN on a rank without "
        "targets even when other ranks have some",
        "nan_when_no_targets",
    ),
    Attempt(
        reduces_the_loss_too,
        "all-reduces the loss sum as well: every rank returns the "
        "whole batch's sum, world_size times too large on average",
        "detached",
    ),
    Attempt(
        divides_by_world_size, "divides by world_size instead of multiplying", "missing_world_size"
    ),
    Attempt(
        counts_every_position,
        "all-reduces B*(T-1), counting padding and prompt positions",
        "counts_padding_positions",
    ),
    Attempt(
        shifts_labels_in_place,
        "right value, but shifts the caller's labels in place",
        "modifies_input",
    ),
    Attempt(
        averages_the_rank_means,
        "calls all_reduce but returns the rank's own mean: the ranks' average is the mean of means",
        "divides_by_local_count",
    ),
    Attempt(
        detaches_for_logging,
        "right value, but detached and made a new leaf: backward() "
        "runs and no gradient reaches the logits",
        "detached",
    ),
]


# ---------------------------------------------------------------- correct attempts


def mean_count_per_rank(logits, labels, *, all_reduce, world_size):
    """sum / (N / R) = R * sum / N: divide by the ranks' average count."""
    targets = _targets(labels)
    mean_count = all_reduce(_local_count(targets).double()) / world_size
    return _local_sum(logits, targets) / mean_count.clamp(min=1.0 / world_size).float()


def the_course_clm_loss(logits, labels, *, all_reduce, world_size):
    from lmlessons import clm_loss, shift_labels

    total = all_reduce((shift_labels(labels) != IGNORE).sum())
    return world_size * clm_loss(logits, labels, num_items_in_batch=total.clamp(min=1))


def selection_and_logsumexp(logits, labels, *, all_reduce, world_size):
    shift_logits, shift_targets = logits[:, :-1], labels[:, 1:]  # (B, T-1, V), (B, T-1)
    keep = shift_targets != IGNORE
    rows = shift_logits[keep]  # (n, V)
    local = torch.logsumexp(rows, -1) - rows.gather(1, shift_targets[keep].unsqueeze(1))[:, 0]
    count = all_reduce(torch.tensor(float(keep.sum())))
    if float(count) == 0:
        return logits.sum() * 0.0
    return local.sum() * world_size / count


CORRECT = [
    Attempt(mean_count_per_rank, "divides the sum by the ranks' mean count (N / R)"),
    Attempt(the_course_clm_loss, "the course's clm_loss with the all-reduced count, times R"),
    Attempt(selection_and_logsumexp, "boolean selection, logsumexp, a float count"),
]
