"""Battery for ``sequence_logprobs`` (lesson 11): what learners write for the log-probability of
each sequence's completion under a causal LM.

The statement a learner sees: ``labels`` arrive *unshifted* (the input ids, -100 on the prompt
and the padding); position t scores ``labels[:, t + 1]``; the result is ``(B,)`` float32 (float16
logits are upcast), per row the sum of ``log p(label)`` over the targets, or with ``average=True``
their mean (a row without a target has none: NaN, or a ``ValueError``).
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
    logits, targets = _shifted(logits, labels)
    logps = torch.log(F.softmax(logits, dim=-1))
    return _finish(_gather(logps, targets), targets != IGNORE, average)


@wrong("not_per_sequence")
def sums_the_whole_batch(logits, labels, average=False):
    """Sums over the batch too: one number for all the sequences."""
    logits, targets = _shifted(logits, labels)
    mask = targets != IGNORE
    picked = _gather(logits.log_softmax(-1), targets) * mask
    return picked.sum() / mask.sum() if average else picked.sum()


@wrong("modifies_input")
def fills_labels_in_place(logits, labels, average=False):
    """Writes the dummy id 0 into the caller's labels (TRL clones them first)."""
    mask = labels[:, 1:] != IGNORE
    labels[labels == IGNORE] = 0  # in place: the caller's labels change
    logps = logits[:, :-1].log_softmax(-1)
    return _finish(_gather(logps, labels[:, 1:]), mask, average)


@wrong("nan_when_no_targets")
def mean_times_count(logits, labels, average=False):
    """Per row, minus F.cross_entropy's mean (NaN without targets), times the count for the sum."""
    out = []
    for row_logits, row_labels in zip(logits, labels):
        mean = -F.cross_entropy(row_logits[:-1], row_labels[1:])  # NaN when all -100
        out.append(mean if average else mean * (row_labels[1:] != IGNORE).sum())
    return torch.stack(out)


@wrong("detached")
def detaches_the_logits(logits, labels, average=False):
    """Works on logits.detach() "to save memory": nothing backpropagates."""
    logits, targets = _shifted(logits.detach(), labels)
    return _finish(_gather(logits.log_softmax(-1), targets), targets != IGNORE, average)


@wrong("returns_tuple")
def returns_counts_too(logits, labels, average=False):
    """Returns the log-probabilities and the number of targets of each row."""
    logits, targets = _shifted(logits, labels)
    mask = targets != IGNORE
    return _finish(_gather(logits.log_softmax(-1), targets), mask, average), mask.sum(-1)


@wrong("wrong_type", says="a list of")
def returns_a_list(logits, labels, average=False):
    """Returns a Python list with one 0-dim tensor per row."""
    logits, targets = _shifted(logits.float(), labels)
    return list(_finish(_gather(logits.log_softmax(-1), targets), targets != IGNORE, average))


@wrong("not_upcast", says="float16")
def stays_in_half_precision(logits, labels, average=False):
    """Takes the softmax in the logits' dtype: float16 logits give float16 log-probabilities."""
    logits, targets = _shifted(logits, labels)
    return _finish(_gather(logits.log_softmax(-1), targets), targets != IGNORE, average)


@wrong("not_upcast")
def upcasts_the_result(logits, labels, average=False):
    """Computes in the logits' dtype and converts the result to float32 at the end."""
    logits, targets = _shifted(logits, labels)
    return _finish(_gather(logits.log_softmax(-1), targets), targets != IGNORE, average).float()


@wrong("average_of_no_targets")
def average_of_nothing_is_zero(logits, labels, average=False):
    """Clamps the count to 1 with average=True: a row without targets gets a mean of 0."""
    logits, targets = _shifted(logits.float(), labels)
    mask = targets != IGNORE
    total = (_gather(logits.log_softmax(-1), targets) * mask).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


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


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(logits, labels, average=False):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises import solutions_part3

    return solutions_part3.sequence_logprobs(logits, labels, average)
