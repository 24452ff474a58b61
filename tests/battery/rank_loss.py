"""Battery for ``rank_loss`` (lesson 07): one data-parallel rank's causal-LM loss,
beyond the catalogue (``check_ranks.py``) and the structural mistakes (``_structural.py``).

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


def _local_sum(logits, targets):
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="sum")  # (B, V, T) vs (B, T)


def _local_count(targets):
    return (targets != IGNORE).sum()  # () a tensor, as all_reduce needs


# ---------------------------------------------------------------- wrong attempts


@wrong("all_reduce_needs_tensor")
def reduces_a_python_int(logits, labels, *, all_reduce, world_size):
    """Passes a Python int to all_reduce."""
    targets = shift_labels(labels)
    total = all_reduce(int(_local_count(targets)))  # an int, not a tensor
    return world_size * _local_sum(logits, targets) / max(int(total), 1)


@wrong("mismatched_all_reduce")
def returns_early_when_empty(logits, labels, *, all_reduce, world_size):
    """A rank without targets returns 0 before all_reduce, so the ranks call it a different number
    of times."""
    targets = shift_labels(labels)
    count = _local_count(targets)
    if int(count) == 0:
        return logits.sum() * 0.0  # "nothing to do here": skips the collective the others wait in
    return world_size * _local_sum(logits, targets) / all_reduce(count)


@wrong("nan_when_no_targets")
def nan_when_every_rank_is_empty(logits, labels, *, all_reduce, world_size):
    """Divides by the all-reduced count without a guard: a NaN loss when no rank has a target (the
    statement does not say 0 here, but says to shift as in clm_loss, which gives 0)."""
    targets = shift_labels(labels)
    total = all_reduce(_local_count(targets))
    return world_size * _local_sum(logits, targets) / total  # 0 / 0 when no rank has a target


@wrong("nan_when_no_targets")
def sum_from_the_local_mean(logits, labels, *, all_reduce, world_size):
    """Rebuilds the sum as mean * count: NaN on a rank without targets even when other ranks have
    some."""
    targets = shift_labels(labels)
    count = _local_count(targets)
    total = all_reduce(count.clone())
    mean = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))  # NaN if 0
    return world_size * mean * count / total.clamp(min=1)  # NaN * 0 on a rank without targets


# ---------------------------------------------------------------- correct attempts


@correct
def mean_count_per_rank(logits, labels, *, all_reduce, world_size):
    """Divides the sum by the ranks' mean count (N / R)."""
    targets = shift_labels(labels)
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


@correct
def float_count(logits, labels, *, all_reduce, world_size):
    """The course's shift_labels, the count all-reduced as a float."""
    targets = shift_labels(labels)  # (B, T)
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    count = all_reduce((targets != IGNORE).sum().float())
    return per_token.sum() * world_size / torch.clamp(count, min=1.0)
