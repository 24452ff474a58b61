"""Battery for ``mlm_loss`` (lessons 00 and 02): what learners write for the masked-LM loss.

The statement a learner sees (lesson 02, section 9): ``logits`` ``(B, T, V)``, ``labels``
``(B, T)`` with -100 at positions that are not targets; return the mean cross-entropy over the
target positions; with ``num_items_in_batch``, the *sum* divided by it; a batch with no target
gives 0, not NaN (and, section 3, still backpropagates).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForMaskedLMLoss

from battery._attempt import correct, wrong

IGNORE = -100


def _sum_and_count(logits, labels):
    """The summed cross-entropy over the targets and their count, the right way."""
    flat_logits = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    flat_labels = labels.reshape(-1)  # (B*T,)
    total = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE, reduction="sum")
    return total, int((flat_labels != IGNORE).sum())


def _finish(total, count, num_items_in_batch):
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / max(count, 1)


# ---------------------------------------------------------------- wrong attempts


@wrong("nan_when_no_targets")
def nan_on_empty(logits, labels, *, num_items_in_batch=None):
    """Plain F.cross_entropy mean: NaN on a batch with no target."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if num_items_in_batch is not None:
        return F.cross_entropy(flat_logits, flat_labels, reduction="sum") / num_items_in_batch
    return F.cross_entropy(flat_logits, flat_labels)  # mean over zero targets is 0 / 0


@wrong("ignores_num_items_in_batch")
def ignores_num_items(logits, labels, *, num_items_in_batch=None):
    """Always the mean over its own targets; num_items_in_batch is accepted but never used."""
    total, count = _sum_and_count(logits, labels)
    return total / max(count, 1)  # num_items_in_batch accepted, never used


@wrong("counts_unmasked_positions")
def divides_by_every_position(logits, labels, *, num_items_in_batch=None):
    """Divides the target sum by B*T, every position, instead of the number of targets."""
    total, _ = _sum_and_count(logits, labels)
    return _finish(total, labels.numel(), num_items_in_batch)  # B*T, not the target count


@wrong("minus100_not_ignored")
def clamps_ignored_to_zero(logits, labels, *, num_items_in_batch=None):
    """Clamps -100 to 0 so every unselected position is scored against token 0."""
    targets = labels.clamp(min=0).reshape(-1)  # "-100 is out of range": every position is a target
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, reduction="sum")
    return _finish(total, labels.numel(), num_items_in_batch)


@wrong("per_row_mean")
def mean_per_sequence(logits, labels, *, num_items_in_batch=None):
    """Mean of the per-sequence means: a sequence with one target weighs as much as one with
    nine."""
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")  # (B, T)
    is_target = (labels != IGNORE).float()  # (B, T)
    per_row = (per_token * is_target).sum(1) / is_target.sum(1).clamp(min=1)  # (B,)
    if num_items_in_batch is not None:
        return (per_token * is_target).sum() / num_items_in_batch
    return per_row.mean()


@wrong("num_items_divides_mean")
def num_items_divides_the_mean(logits, labels, *, num_items_in_batch=None):
    """With num_items_in_batch divides the *mean* (not the sum) by it."""
    total, count = _sum_and_count(logits, labels)
    mean = total / max(count, 1)
    return mean if num_items_in_batch is None else mean / num_items_in_batch


@wrong("sum_not_mean")
def returns_the_sum(logits, labels, *, num_items_in_batch=None):
    """Without num_items_in_batch returns the sum over the targets, not their mean."""
    total, _ = _sum_and_count(logits, labels)
    return total if num_items_in_batch is None else total / num_items_in_batch


@wrong("shifts_labels")
def shifts_like_a_causal_lm(logits, labels, *, num_items_in_batch=None):
    """Shifts like a causal LM (position t against label t + 1): MLM scores each position against
    its own label."""
    total, count = _sum_and_count(logits[:, :-1], labels[:, 1:])  # position t against token t + 1
    return _finish(total, count, num_items_in_batch)


@wrong("nll_without_log_softmax")
def nll_on_raw_logits(logits, labels, *, num_items_in_batch=None):
    """F.nll_loss on raw logits, without log_softmax."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    total = F.nll_loss(flat_logits, flat_labels, reduction="sum")  # no log_softmax first
    return _finish(total, int((flat_labels != IGNORE).sum()), num_items_in_batch)


@wrong("class_dim")
def softmax_over_positions(logits, labels, *, num_items_in_batch=None):
    """log_softmax over dim 1 (the positions) instead of the vocabulary."""
    log_probs = logits.log_softmax(dim=1)  # (B, T, V): normalised over T, not over V
    is_target = labels != IGNORE  # (B, T)
    picked = log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    total = -(picked * is_target).sum()
    return _finish(total, int(is_target.sum()), num_items_in_batch)


@wrong("detached")
def goes_through_item(logits, labels, *, num_items_in_batch=None):
    """Rebuilds the loss from .item(): right number, no gradient."""
    total, count = _sum_and_count(logits, labels)
    return torch.tensor(_finish(total, count, num_items_in_batch).item())  # a number, no graph


@wrong("empty_detached")
def zero_without_graph(logits, labels, *, num_items_in_batch=None):
    """Returns torch.tensor(0.0) on a batch with no target: not NaN, but not connected to the
    logits, so backward() fails."""
    total, count = _sum_and_count(logits, labels)
    if count == 0 and num_items_in_batch is None:
        return torch.tensor(0.0)  # not NaN, but backward() fails on it
    return _finish(total, count, num_items_in_batch)


@wrong("not_a_tensor")
def returns_a_float(logits, labels, *, num_items_in_batch=None):
    """Returns a Python float instead of a tensor."""
    total, count = _sum_and_count(logits, labels)
    return float(_finish(total, count, num_items_in_batch))


@wrong("modifies_input")
def writes_into_labels(logits, labels, *, num_items_in_batch=None):
    """Right value, but overwrites the caller's -100 labels with 0 in place."""
    is_target = labels != IGNORE  # (B, T)
    labels[~is_target] = 0  # in place: "so gather does not fail on -100"
    log_probs = logits.log_softmax(-1)  # (B, T, V)
    picked = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return _finish(-(picked * is_target).sum(), int(is_target.sum()), num_items_in_batch)


@wrong("skips_target_zero")
def zero_id_is_padding(logits, labels, *, num_items_in_batch=None):
    """Selects targets with labels > 0, dropping every target whose original token id is 0."""
    is_target = labels > 0  # "ids are positive": -100 and also the real token id 0 are skipped
    total = F.cross_entropy(logits[is_target], labels[is_target], reduction="sum")
    return _finish(total, int(is_target.sum()), num_items_in_batch)


@wrong("not_scalar")
def keeps_a_batch_dimension(logits, labels, *, num_items_in_batch=None):
    """Returns a (1,) tensor instead of a scalar."""
    total, count = _sum_and_count(logits, labels)
    return _finish(total, count, num_items_in_batch).reshape(1)  # (1,), not a scalar


# ---------------------------------------------------------------- correct attempts


@correct
def boolean_selection(logits, labels, *, num_items_in_batch=None):
    """Boolean selection of the target rows, count clamped to 1."""
    is_target = labels != IGNORE  # (B, T)
    total = F.cross_entropy(logits[is_target], labels[is_target], reduction="sum")  # (M, V)
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / is_target.sum().clamp(min=1)


@correct
def log_softmax_and_weights(logits, labels, *, num_items_in_batch=None):
    """log_softmax, gather and 0/1 weights (Google's form)."""
    weights = (labels != IGNORE).to(logits.dtype)  # (B, T)
    log_probs = logits.log_softmax(-1)  # (B, T, V)
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    total = (weights * nll).sum()
    denominator = weights.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return total / denominator


@correct
def loop_over_sequences(logits, labels, *, num_items_in_batch=None):
    """Python loops over rows and positions with logsumexp."""
    total, count = logits.sum() * 0, 0
    for row_logits, row_labels in zip(logits, labels):  # (T, V), (T,)
        for t in range(row_labels.shape[0]):
            if int(row_labels[t]) != IGNORE:
                lse = torch.logsumexp(row_logits[t], dim=0)
                total = total + lse - row_logits[t, row_labels[t]]
                count += 1
    return total / (num_items_in_batch if num_items_in_batch is not None else max(count, 1))


@correct
def nan_to_num_of_the_mean(logits, labels, *, num_items_in_batch=None):
    """F.cross_entropy mean with its NaN replaced by 0."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if num_items_in_batch is not None:
        return F.cross_entropy(flat_logits, flat_labels, reduction="sum") / num_items_in_batch
    # ignore_index gives ignored rows no gradient, so 0/0 has zero gradient; replace the NaN value
    return torch.nan_to_num(F.cross_entropy(flat_logits, flat_labels), nan=0.0)


@correct
def transformers_loss(logits, labels, *, num_items_in_batch=None):
    """transformers' ForMaskedLMLoss with a guard for no target."""
    if num_items_in_batch is None and not bool((labels != IGNORE).any()):
        return logits.sum() * 0.0  # ForMaskedLMLoss would give NaN here
    return ForMaskedLMLoss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)


# -------------------------------------------------- first drafts and other naive versions


@wrong("returns_tuple")
def draft_as_written(logits, labels, *, num_items_in_batch=None):
    """A first draft: selects the masked rows, mean cross-entropy, returns (loss, info)."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    keep = flat_labels != IGNORE
    loss = F.cross_entropy(flat_logits[keep], flat_labels[keep])
    return loss, {"loss": loss.item(), "num_masked": int(keep.sum())}


@wrong("minus100_not_ignored")
def gathers_at_minus_100(logits, labels, *, num_items_in_batch=None):
    """log_softmax and gather at every label, -100 included (an index from the end), then mean."""
    log_probs = logits.log_softmax(-1)  # (B, T, V)
    return -log_probs.gather(-1, labels.unsqueeze(-1)).mean()


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.losses.mlm_loss")
def the_course_mlm_loss(logits, labels, *, num_items_in_batch=None):
    """Calls the course's own mlm_loss, imported under another name: nothing written."""
    from lmlessons.losses import mlm_loss as course_loss

    return course_loss(logits, labels, num_items_in_batch=num_items_in_batch)


@wrong("delegates_to_course", says="lmlessons.losses.token_nll")
def the_course_token_nll(logits, labels, *, num_items_in_batch=None):
    """The course's per-token kernel, reduced by hand: the cross-entropy is still the course's."""
    from lmlessons.losses import token_nll

    nll, has_target = token_nll(logits, labels, shift=False)
    count = has_target.sum() if num_items_in_batch is None else num_items_in_batch
    return nll.sum() / max(count, 1)


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(logits, labels, *, num_items_in_batch=None):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises import solutions

    return solutions.mlm_loss(logits, labels, num_items_in_batch=num_items_in_batch)
