"""Battery for ``sequence_logprobs`` (lesson 11): what learners write for the log-probability of
each sequence's completion under a causal LM.

The statement a learner sees: ``labels`` arrive *unshifted* (the input ids, -100 on the prompt
and the padding); position t scores ``labels[:, t + 1]``; the result is ``(B,)`` float32 (float16
logits are upcast), per row the sum of ``log p(label)`` over the targets, or with ``average=True``
their mean (a row without a target has none: NaN, or a ``ValueError``).

The value mistakes are the checker's catalogue (``check_sequence_logprobs.py``), the structural
ones ``_structural.py``'s; here are the mistakes a catalogue by value cannot hold (exceptions,
NaN and -inf, dtypes, shapes), correct attempts and delegations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import correct, wrong

IGNORE = -100


def _shifted(logits, labels):
    """``(logits[:, :-1], labels[:, 1:])``: position t against token t + 1."""
    return logits[:, :-1], labels[:, 1:]


def _gather(logps, targets):
    """Each position's entry of ``logps`` at its target (-100 read as id 0)."""
    return logps.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def _picked(logits, labels, log_softmax=lambda x: x.log_softmax(-1)):
    """Each position's log-probability of its target, in the logits' dtype, and whether it
    has one (``log_softmax``: how the attempt takes them), both ``(B, T - 1)``."""
    logits, targets = _shifted(logits, labels)
    return _gather(log_softmax(logits), targets), targets != IGNORE


def _finish(picked, mask, average):
    """The sum over ``mask`` per row, or its mean."""
    total = (picked * mask).sum(-1)
    return total / mask.sum(-1) if average else total


# ---------------------------------------------------------------- wrong attempts


@wrong("minus100_not_ignored")
def gathers_at_minus100(logits, labels, average=False):
    """Gathers the labels as they are: -100 is used as an index."""
    logits, targets = _shifted(logits, labels)
    picked = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return _finish(picked, targets != IGNORE, average)


@wrong("log_of_softmax")
def log_of_the_softmax(logits, labels, average=False):
    """torch.log(softmax(...)): -inf once a label's probability underflows in float32."""
    return _finish(*_picked(logits, labels, lambda x: torch.log(F.softmax(x, dim=-1))), average)


@wrong("not_per_sequence")
def sums_the_whole_batch(logits, labels, average=False):
    """Sums over the batch too: one number for all the sequences."""
    picked, mask = _picked(logits, labels)
    total = (picked * mask).sum()
    return total / mask.sum() if average else total


@wrong("nan_when_no_targets")
def mean_times_count(logits, labels, average=False):
    """Per row, minus F.cross_entropy's mean (NaN without targets), times the count for the sum."""
    out = []
    for row_logits, row_labels in zip(logits, labels):
        mean = -F.cross_entropy(row_logits[:-1], row_labels[1:])  # NaN when all -100
        out.append(mean if average else mean * (row_labels[1:] != IGNORE).sum())
    return torch.stack(out)


@wrong("returns_tuple")
def returns_counts_too(logits, labels, average=False):
    """Returns the log-probabilities and the number of targets of each row."""
    picked, mask = _picked(logits, labels)
    return _finish(picked, mask, average), mask.sum(-1)


@wrong("not_upcast", says="float16")
def stays_in_half_precision(logits, labels, average=False):
    """Takes the softmax in the logits' dtype: float16 logits give float16 log-probabilities."""
    return _finish(*_picked(logits, labels), average)


@wrong("not_upcast")
def upcasts_the_result(logits, labels, average=False):
    """Computes in the logits' dtype and converts the result to float32 at the end."""
    return _finish(*_picked(logits, labels), average).float()


@wrong("average_of_no_targets")
def average_of_nothing_is_zero(logits, labels, average=False):
    """Clamps the count to 1 with average=True: a row without targets gets a mean of 0."""
    picked, mask = _picked(logits.float(), labels)
    total = (picked * mask).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


@wrong("wrong_gradient")
def detached_normaliser(logits, labels, average=False):
    """The label's logit minus a detached logsumexp: the right values, but the gradient misses
    the softmax's share (the normaliser is not a constant of the logits)."""
    logits, targets = _shifted(logits.float(), labels)
    chosen = _gather(logits, targets)  # (B, T - 1)
    return _finish(chosen - logits.logsumexp(-1).detach(), targets != IGNORE, average)


# ---------------------------------------------------------------- correct attempts


@correct
def negated_cross_entropy(logits, labels, average=False):
    """Minus F.cross_entropy per position (it ignores -100), summed per row."""
    logits, targets = _shifted(logits.float(), labels)  # float32 even for float16 logits
    logps = -F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T-1)
    count = (targets != IGNORE).sum(-1)
    return logps.sum(-1) / count if average else logps.sum(-1)


@correct
def selective_log_softmax(logits, labels, average=False):
    """TRL's way: the label's logit minus logsumexp, a cloned label tensor with -100 set to 0."""
    targets = labels[:, 1:].clone()
    mask = targets != IGNORE
    targets[~mask] = 0
    logits = logits[:, :-1].float()
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logps = (chosen - torch.logsumexp(logits, dim=-1)) * mask
    return logps.sum(-1) / mask.sum(-1) if average else logps.sum(-1)


@correct
def row_by_row(logits, labels, average=False):
    """A loop over the rows: the target positions of each row, then their log-probabilities."""
    out = []
    for row_logits, row_labels in zip(logits, labels):
        positions = (row_labels[1:] != IGNORE).nonzero().squeeze(-1)  # t with a target t + 1
        logps = row_logits[positions].float().log_softmax(-1)  # (n, V)
        picked = logps[torch.arange(len(positions)), row_labels[positions + 1]]
        out.append(picked.mean() if average else picked.sum())
    return torch.stack(out)


@correct
def raises_without_a_mean(logits, labels, average=False):
    """Raises ValueError for average=True on a row without targets, as the course's function."""
    logits, targets = _shifted(logits.float(), labels)
    mask = targets != IGNORE
    if average and bool((mask.sum(-1) == 0).any()):
        raise ValueError("labels: a row without any target has no average")
    return _finish(_gather(logits.log_softmax(-1), targets), mask, average)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.preference.sequence_logprobs")
def the_course_sequence_logprobs(logits, labels, average=False):
    """Calls the course's own sequence_logprobs: nothing written."""
    from lmlessons.preference import sequence_logprobs

    return sequence_logprobs(logits, labels, average=average)


@correct
def minus_the_course_kernel(logits, labels, average=False):
    """Minus the course's per-token loss (a building block the task allows), reduced per row."""
    from lmlessons.losses import token_nll

    nll, has_target = token_nll(logits, labels)
    total = -nll.sum(-1)
    return total / has_target.sum(-1) if average else total
