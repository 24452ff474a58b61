"""Battery for ``mlm_loss`` (lessons 00 and 02): what learners write for the masked-LM loss,
beyond the catalogue (``check_losses.py``) and the structural mistakes (``_structural.py``).

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
    # ignore_index gives ignored rows no gradient, so 0/0 has zero gradient; replace the NaN value
    return torch.nan_to_num(nan_on_empty(logits, labels, num_items_in_batch=num_items_in_batch))


@correct
def transformers_loss(logits, labels, *, num_items_in_batch=None):
    """transformers' ForMaskedLMLoss with a guard for no target."""
    if num_items_in_batch is None and not bool((labels != IGNORE).any()):
        return logits.sum() * 0.0  # ForMaskedLMLoss would give NaN here
    return ForMaskedLMLoss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)


# ---------------------------------------------------------------- wrong attempts


@wrong("nan_when_no_targets")
def nan_on_empty(logits, labels, *, num_items_in_batch=None):
    """Plain F.cross_entropy mean: NaN on a batch with no target."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if num_items_in_batch is not None:
        return F.cross_entropy(flat_logits, flat_labels, reduction="sum") / num_items_in_batch
    return F.cross_entropy(flat_logits, flat_labels)  # mean over zero targets is 0 / 0


@wrong("empty_detached")
def zero_without_graph(logits, labels, *, num_items_in_batch=None):
    """Returns torch.tensor(0.0) on a batch with no target: not NaN, but not connected to the
    logits, so backward() fails."""
    if num_items_in_batch is None and not bool((labels != IGNORE).any()):
        return torch.tensor(0.0)  # not NaN, but backward() fails on it
    return boolean_selection(logits, labels, num_items_in_batch=num_items_in_batch)


@wrong("not_scalar")
def keeps_a_batch_dimension(logits, labels, *, num_items_in_batch=None):
    """Returns a (1,) tensor instead of a scalar."""
    return boolean_selection(logits, labels, num_items_in_batch=num_items_in_batch).reshape(1)


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
