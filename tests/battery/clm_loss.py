"""Battery for ``clm_loss`` (lessons 03 and 07): what learners write for the causal-LM loss,
beyond the catalogue (``check_losses.py``) and the structural mistakes (``_structural.py``).

The statement a learner sees: ``labels`` arrive *unshifted* (``input_ids.clone()`` with -100
where nothing is learned); shift inside, position t against ``labels[:, t + 1]``, the last
position against nothing; the mean over the targets after the shift (0, not NaN, if there are
none); with ``num_items_in_batch``, the sum over this micro-batch's targets divided by it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForCausalLMLoss

from battery._attempt import correct, wrong
from lmlessons import shift_labels

IGNORE = -100


# ---------------------------------------------------------------- correct attempts


@correct
def slice_logits_and_labels(logits, labels, *, num_items_in_batch=None):
    """logits[:, :-1] against labels[:, 1:], count clamped."""
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])  # (B*(T-1), V)
    shift_targets = labels[:, 1:].reshape(-1)  # (B*(T-1),)
    total = F.cross_entropy(shift_logits, shift_targets, reduction="sum")
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (shift_targets != IGNORE).sum().clamp(min=1)


@correct
def gather_per_row(logits, labels, *, num_items_in_batch=None):
    """A loop over rows, log_softmax and gather."""
    total, count = logits.sum() * 0.0, 0
    for row_logits, row_labels in zip(logits, labels):  # (T, V), (T,)
        keep = row_labels[1:] != IGNORE  # (T-1,)
        log_probs = row_logits[:-1][keep].log_softmax(-1)  # (n, V)
        total = total - log_probs.gather(1, row_labels[1:][keep].unsqueeze(1)).sum()
        count += int(keep.sum())
    return total / (num_items_in_batch if num_items_in_batch is not None else max(count, 1))


@correct
def roll_and_mask(logits, labels, *, num_items_in_batch=None):
    """Roll the labels, mask the last column, logsumexp minus the logit."""
    targets = labels.roll(-1, dims=1).clone()  # (B, T): labels[:, t + 1], wrapped at the end
    targets[:, -1] = IGNORE  # the last position has no next token
    is_target = targets != IGNORE
    lse = torch.logsumexp(logits, dim=-1)  # (B, T)
    picked = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    total = ((lse - picked) * is_target).sum()
    count = is_target.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return total / count


@correct
def transformers_loss(logits, labels, *, num_items_in_batch=None):
    """transformers' ForCausalLMLoss with its NaN replaced by 0."""
    loss = ForCausalLMLoss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)
    return torch.nan_to_num(loss, nan=0.0)  # its mean of zero targets is 0 / 0


@correct
def with_shift_labels(logits, labels, *, num_items_in_batch=None):
    """The transformers way: the course's shift_labels (pad with -100, drop the first column)."""
    targets = shift_labels(labels).reshape(-1)  # (B*T,)
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, reduction="sum")
    count = (targets != IGNORE).sum().clamp(min=1)
    return total / (num_items_in_batch if num_items_in_batch is not None else count)


# ---------------------------------------------------------------- wrong attempts


@wrong("nan_when_no_targets")
def plain_mean(logits, labels, *, num_items_in_batch=None):
    """F.cross_entropy mean: NaN when nothing is left to predict."""
    targets = shift_labels(labels).reshape(-1)  # (B*T,)
    flat = logits.reshape(-1, logits.shape[-1])
    if num_items_in_batch is not None:
        return F.cross_entropy(flat, targets, reduction="sum") / num_items_in_batch
    return F.cross_entropy(flat, targets)  # NaN when nothing is left to predict


@wrong("nan_when_no_targets")
def guards_before_the_shift(logits, labels, *, num_items_in_batch=None):
    """Guards against NaN by looking at the labels before the shift: a batch whose only label is in
    the first column still gives NaN."""
    if num_items_in_batch is None and not bool((labels != IGNORE).any()):
        return logits.sum() * 0.0  # guard looks at the labels, not at the targets after the shift
    return plain_mean(logits, labels, num_items_in_batch=num_items_in_batch)


@wrong("not_scalar")
def per_position_vector(logits, labels, *, num_items_in_batch=None):
    """Sums over rows only and returns a (T,) vector, not a scalar."""
    targets = shift_labels(labels)  # (B, T)
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    is_target = (targets != IGNORE).float()
    denominator = is_target.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return (per_token * is_target).sum(0) / denominator  # (T,): summed over rows only


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.losses.clm_loss")
def the_course_clm_loss(logits, labels, *, num_items_in_batch=None):
    """Calls the course's own clm_loss through the package's re-export: nothing written."""
    import lmlessons

    return lmlessons.clm_loss(logits, labels, num_items_in_batch=num_items_in_batch)


@wrong("delegates_to_course", says="lmlessons.losses.mlm_loss")
def shifts_then_course_mlm_loss(logits, labels, *, num_items_in_batch=None):
    """Shifts, then lets the course's mlm_loss do the cross-entropy and the count."""
    from lmlessons.losses import mlm_loss

    return mlm_loss(logits[:, :-1], labels[:, 1:], num_items_in_batch=num_items_in_batch)
