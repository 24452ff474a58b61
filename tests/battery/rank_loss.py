"""Battery for ``rank_loss`` (lesson 07): one data-parallel rank's causal-LM loss.

The statement a learner sees: shift inside as in ``clm_loss``; the *sum* of this rank's token
losses divided by the number of targets on *all* ranks (``all_reduce`` the count, a tensor);
times ``world_size`` because DDP averages the gradients. Every rank must call ``all_reduce`` the
same number of times, even a rank without any target.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import correct, wrong
from lmlessons import shift_labels

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


@wrong("all_reduce_needs_tensor")
def reduces_a_python_int(logits, labels, *, all_reduce, world_size):
    """Passes a Python int to all_reduce."""
    targets = _targets(labels)
    total = all_reduce(int(_local_count(targets)))  # an int, not a tensor
    return world_size * _local_sum(logits, targets) / max(int(total), 1)


@wrong("mismatched_all_reduce")
def returns_early_when_empty(logits, labels, *, all_reduce, world_size):
    """A rank without targets returns 0 before all_reduce, so the ranks call it a different number
    of times."""
    targets = _targets(labels)
    count = _local_count(targets)
    if int(count) == 0:
        return logits.sum() * 0.0  # "nothing to do here": skips the collective the others wait in
    return world_size * _local_sum(logits, targets) / all_reduce(count)


@wrong("nan_when_no_targets")
def nan_when_every_rank_is_empty(logits, labels, *, all_reduce, world_size):
    """Divides by the all-reduced count without a guard: a NaN loss when no rank has a target (the
    statement does not say 0 here, but says to shift as in clm_loss, which gives 0)."""
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    return world_size * _local_sum(logits, targets) / total  # 0 / 0 when no rank has a target


@wrong("nan_when_no_targets")
def sum_from_the_local_mean(logits, labels, *, all_reduce, world_size):
    """Rebuilds the sum as mean * count: NaN on a rank without targets even when other ranks have
    some."""
    targets = _targets(labels)
    count = _local_count(targets)
    total = all_reduce(count.clone())
    mean = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))  # NaN if 0
    return world_size * mean * count / total.clamp(min=1)  # NaN * 0 on a rank without targets


@wrong("detached")
def reduces_the_loss_too(logits, labels, *, all_reduce, world_size):
    """all-reduces the loss sum as well: every rank returns the whole batch's sum, world_size times
    too large on average."""
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    global_sum = all_reduce(_local_sum(logits, targets))  # every rank's sum, on every rank
    return world_size * global_sum / total.clamp(min=1)


@wrong("modifies_input")
def shifts_labels_in_place(logits, labels, *, all_reduce, world_size):
    """Right value, but shifts the caller's labels in place."""
    labels[:, :-1] = labels[:, 1:].clone()  # the caller's labels are shifted for good
    labels[:, -1] = IGNORE
    total = all_reduce(_local_count(labels))
    return world_size * _local_sum(logits, labels) / total.clamp(min=1)


@wrong("detached")
def detaches_for_logging(logits, labels, *, all_reduce, world_size):
    """Right value, but detached and made a new leaf: backward() runs and no gradient reaches the
    logits."""
    targets = _targets(labels)
    total = all_reduce(_local_count(targets).float())
    loss = world_size * _local_sum(logits, targets) / total.clamp(min=1)
    return loss.detach().requires_grad_()  # a new leaf: backward() runs, the logits get nothing


# ---------------------------------------------------------------- correct attempts


@correct
def mean_count_per_rank(logits, labels, *, all_reduce, world_size):
    """Divides the sum by the ranks' mean count (N / R)."""
    targets = _targets(labels)
    mean_count = all_reduce(_local_count(targets).double()) / world_size
    return _local_sum(logits, targets) / mean_count.clamp(min=1.0 / world_size).float()


@correct
def the_course_clm_loss(logits, labels, *, all_reduce, world_size):
    """The course's clm_loss with the all-reduced count, times R."""
    from lmlessons import clm_loss, shift_labels

    total = all_reduce((shift_labels(labels) != IGNORE).sum())
    return world_size * clm_loss(logits, labels, num_items_in_batch=total.clamp(min=1))


@correct
def selection_and_logsumexp(logits, labels, *, all_reduce, world_size):
    """Boolean selection, logsumexp, a float count."""
    shift_logits, shift_targets = logits[:, :-1], labels[:, 1:]  # (B, T-1, V), (B, T-1)
    keep = shift_targets != IGNORE
    rows = shift_logits[keep]  # (n, V)
    local = torch.logsumexp(rows, -1) - rows.gather(1, shift_targets[keep].unsqueeze(1))[:, 0]
    count = all_reduce(torch.tensor(float(keep.sum())))
    if float(count) == 0:
        return logits.sum() * 0.0
    return local.sum() * world_size / count


# -------------------------------------------------- first drafts and other naive versions


@wrong("divides_by_local_count")
def draft_as_written(logits, labels, *, all_reduce, world_size):
    """A first draft: the plain mean over this rank's targets (no all_reduce, no world_size)."""
    flat_logits = logits[:, :-1].reshape(-1, logits.shape[-1])  # (B*(T-1), V)
    return F.cross_entropy(flat_logits, labels[:, 1:].reshape(-1))


@correct
def float_count(logits, labels, *, all_reduce, world_size):
    """The course's shift_labels, the count all-reduced as a float."""
    targets = shift_labels(labels)  # (B, T)
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    count = all_reduce((targets != IGNORE).sum().float())
    return per_token.sum() * world_size / torch.clamp(count, min=1.0)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(logits, labels, *, all_reduce, world_size):
    """Calls the reference solution (the course's clm_loss is a building block here)."""
    from lmlessons.exercises.solutions import rank_loss

    return rank_loss(logits, labels, all_reduce=all_reduce, world_size=world_size)


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution_by_name(logits, labels, *, all_reduce, world_size):
    """Fetches the reference solution through the exercise table."""
    from lmlessons.exercises import EXERCISES

    fn = EXERCISES["rank_loss"].solution
    return fn(logits, labels, all_reduce=all_reduce, world_size=world_size)
