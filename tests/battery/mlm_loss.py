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

from battery._attempt import Attempt

EXERCISE = "mlm_loss"
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


def nan_on_empty(logits, labels, *, num_items_in_batch=None):
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if num_items_in_batch is not None:
        return F.cross_entropy(flat_logits, flat_labels, reduction="sum") / num_items_in_batch
    return F.cross_entropy(flat_logits, flat_labels)  # mean over zero targets is 0 / 0


def ignores_num_items(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits, labels)
    return total / max(count, 1)  # num_items_in_batch accepted, never used


def divides_by_every_position(logits, labels, *, num_items_in_batch=None):
    total, _ = _sum_and_count(logits, labels)
    return _finish(total, labels.numel(), num_items_in_batch)  # B*T, not the target count


def clamps_ignored_to_zero(logits, labels, *, num_items_in_batch=None):
    targets = labels.clamp(min=0).reshape(-1)  # "-100 is out of range": every position is a target
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, reduction="sum")
    return _finish(total, labels.numel(), num_items_in_batch)


def mean_per_sequence(logits, labels, *, num_items_in_batch=None):
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")  # (B, T)
    is_target = (labels != IGNORE).float()  # (B, T)
    per_row = (per_token * is_target).sum(1) / is_target.sum(1).clamp(min=1)  # (B,)
    if num_items_in_batch is not None:
        return (per_token * is_target).sum() / num_items_in_batch
    return per_row.mean()


def num_items_divides_the_mean(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits, labels)
    mean = total / max(count, 1)
    return mean if num_items_in_batch is None else mean / num_items_in_batch


def returns_the_sum(logits, labels, *, num_items_in_batch=None):
    total, _ = _sum_and_count(logits, labels)
    return total if num_items_in_batch is None else total / num_items_in_batch


def shifts_like_a_causal_lm(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits[:, :-1], labels[:, 1:])  # position t against token t + 1
    return _finish(total, count, num_items_in_batch)


def nll_on_raw_logits(logits, labels, *, num_items_in_batch=None):
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    total = F.nll_loss(flat_logits, flat_labels, reduction="sum")  # no log_softmax first
    return _finish(total, int((flat_labels != IGNORE).sum()), num_items_in_batch)


def softmax_over_positions(logits, labels, *, num_items_in_batch=None):
    log_probs = logits.log_softmax(dim=1)  # (B, T, V): normalised over T, not over V
    is_target = labels != IGNORE  # (B, T)
    picked = log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    total = -(picked * is_target).sum()
    return _finish(total, int(is_target.sum()), num_items_in_batch)


def goes_through_item(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits, labels)
    return torch.tensor(_finish(total, count, num_items_in_batch).item())  # a number, no graph


def zero_without_graph(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits, labels)
    if count == 0 and num_items_in_batch is None:
        return torch.tensor(0.0)  # not NaN, but backward() fails on it
    return _finish(total, count, num_items_in_batch)


def returns_a_float(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits, labels)
    return float(_finish(total, count, num_items_in_batch))


def writes_into_labels(logits, labels, *, num_items_in_batch=None):
    is_target = labels != IGNORE  # (B, T)
    labels[~is_target] = 0  # in place: "so gather does not fail on -100"
    log_probs = logits.log_softmax(-1)  # (B, T, V)
    picked = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return _finish(-(picked * is_target).sum(), int(is_target.sum()), num_items_in_batch)


def zero_id_is_padding(logits, labels, *, num_items_in_batch=None):
    is_target = labels > 0  # "ids are positive": -100 and also the real token id 0 are skipped
    total = F.cross_entropy(logits[is_target], labels[is_target], reduction="sum")
    return _finish(total, int(is_target.sum()), num_items_in_batch)


def keeps_a_batch_dimension(logits, labels, *, num_items_in_batch=None):
    total, count = _sum_and_count(logits, labels)
    return _finish(total, count, num_items_in_batch).reshape(1)  # (1,), not a scalar


WRONG = [
    Attempt(
        nan_on_empty,
        "plain F.cross_entropy mean: NaN on a batch with no target",
        "nan_when_no_targets",
    ),
    Attempt(
        ignores_num_items,
        "always the mean over its own targets; num_items_in_batch is accepted but never used",
        "ignores_num_items_in_batch",
    ),
    Attempt(
        divides_by_every_position,
        "divides the target sum by B*T, every position, instead of the number of targets",
        "counts_unmasked_positions",
    ),
    Attempt(
        clamps_ignored_to_zero,
        "clamps -100 to 0 so every unselected position is scored against token 0",
        "minus100_not_ignored",
    ),
    Attempt(
        mean_per_sequence,
        "mean of the per-sequence means: a sequence with one target "
        "weighs as much as one with nine",
        "per_row_mean",
    ),
    Attempt(
        num_items_divides_the_mean,
        "with num_items_in_batch divides the *mean* (not the sum) by it",
        "num_items_divides_mean",
    ),
    Attempt(
        returns_the_sum,
        "without num_items_in_batch returns the sum over the targets, not their mean",
        "sum_not_mean",
    ),
    Attempt(
        shifts_like_a_causal_lm,
        "shifts like a causal LM (position t against label t + 1): "
        "MLM scores each position against its own label; a good message names the shift",
        None,
    ),
    Attempt(
        nll_on_raw_logits,
        "F.nll_loss on raw logits, without log_softmax",
        "nll_without_log_softmax",
    ),
    Attempt(
        softmax_over_positions,
        "log_softmax over dim 1 (the positions) instead of the vocabulary",
        "class_dim",
    ),
    Attempt(
        goes_through_item, "rebuilds the loss from .item(): right number, no gradient", "detached"
    ),
    Attempt(
        zero_without_graph,
        "returns torch.tensor(0.0) on a batch with no target: not "
        "NaN, but not connected to the logits, so backward() fails",
        "empty_detached",
    ),
    Attempt(returns_a_float, "returns a Python float instead of a tensor", "not_a_tensor"),
    Attempt(
        writes_into_labels,
        "right value, but overwrites the caller's -100 labels with 0 in place",
        "modifies_input",
    ),
    Attempt(
        zero_id_is_padding,
        "selects targets with labels > 0, dropping every target whose "
        "original token id is 0; a good message names the target id 0",
        None,
    ),
    Attempt(keeps_a_batch_dimension, "returns a (1,) tensor instead of a scalar", "not_scalar"),
]


# ---------------------------------------------------------------- correct attempts


def boolean_selection(logits, labels, *, num_items_in_batch=None):
    is_target = labels != IGNORE  # (B, T)
    total = F.cross_entropy(logits[is_target], labels[is_target], reduction="sum")  # (M, V)
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / is_target.sum().clamp(min=1)


def log_softmax_and_weights(logits, labels, *, num_items_in_batch=None):
    """Google's run_pretraining.py formulation, with the count guarded."""
    weights = (labels != IGNORE).to(logits.dtype)  # (B, T)
    log_probs = logits.log_softmax(-1)  # (B, T, V)
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    total = (weights * nll).sum()
    denominator = weights.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return total / denominator


def loop_over_sequences(logits, labels, *, num_items_in_batch=None):
    total, count = logits.sum() * 0, 0
    for row_logits, row_labels in zip(logits, labels):  # (T, V), (T,)
        for t in range(row_labels.shape[0]):
            if int(row_labels[t]) != IGNORE:
                lse = torch.logsumexp(row_logits[t], dim=0)
                total = total + lse - row_logits[t, row_labels[t]]
                count += 1
    return total / (num_items_in_batch if num_items_in_batch is not None else max(count, 1))


def nan_to_num_of_the_mean(logits, labels, *, num_items_in_batch=None):
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if num_items_in_batch is not None:
        return F.cross_entropy(flat_logits, flat_labels, reduction="sum") / num_items_in_batch
    # ignore_index gives ignored rows no gradient, so 0/0 has zero gradient; replace the NaN value
    return torch.nan_to_num(F.cross_entropy(flat_logits, flat_labels), nan=0.0)


def transformers_loss(logits, labels, *, num_items_in_batch=None):
    if num_items_in_batch is None and not bool((labels != IGNORE).any()):
        return logits.sum() * 0.0  # ForMaskedLMLoss would give NaN here
    return ForMaskedLMLoss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)


CORRECT = [
    Attempt(boolean_selection, "boolean selection of the target rows, count clamped to 1"),
    Attempt(log_softmax_and_weights, "log_softmax, gather and 0/1 weights (Google's form)"),
    Attempt(loop_over_sequences, "Python loops over rows and positions with logsumexp"),
    Attempt(nan_to_num_of_the_mean, "F.cross_entropy mean with its NaN replaced by 0"),
    Attempt(transformers_loss, "transformers' ForMaskedLMLoss with a guard for no target"),
]
