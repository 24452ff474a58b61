"""Battery for ``mtp_labels`` (lesson 15): what learners write for the labels of a
multi-token-prediction head of depth ``depth``.

The statement a learner sees: ``labels`` ``(B, T)`` arrive unshifted; the result has the labels'
shape, ``out[:, t] = labels[:, t + depth]``, ``ignore_index`` in each row's last ``depth``
positions (every position when ``depth >= T``); ``labels`` is not changed. Depth 1 is
``shift_labels``.

The value mistakes are the checker's catalogue (``check_mtp_labels.py``), the structural ones
``_structural.py``'s; here are the mistakes a catalogue by value cannot hold (errors, shapes, an
edited input), correct attempts in other styles and delegations.
"""

from __future__ import annotations

import torch

import lmlessons
from battery._attempt import correct, wrong

# ---------------------------------------------------------------- wrong attempts


@wrong("modifies_input")
def shifts_in_place(labels, depth, ignore_index=-100):
    """Shifts the labels in place and returns them."""
    T = labels.shape[1]
    labels[:, : max(T - depth, 0)] = labels[:, depth:].clone()
    labels[:, max(T - depth, 0) :] = ignore_index
    return labels


@wrong("depth_past_the_end")
def slices_without_a_check(labels, depth, ignore_index=-100):
    """Copies into out[:, :T - depth] without checking depth < T: a negative end past T."""
    out = torch.full_like(labels, ignore_index)
    out[:, : labels.shape[1] - depth] = labels[:, depth:]
    return out


@wrong("mtp_shift_too_short")
def shift_labels_from_one(labels, depth, ignore_index=-100):
    """Applies shift_labels in a loop over range(1, depth): one shift short."""
    out = labels.clone()
    for _ in range(1, depth):
        out = lmlessons.shift_labels(out, ignore_index)
    return out


# ---------------------------------------------------------------- correct attempts


@correct
def concatenates_a_block(labels, depth, ignore_index=-100):
    """torch.cat of labels[:, depth:] and a block of ignore_index, depth clamped to T."""
    d = min(depth, labels.shape[1])
    return torch.cat([labels[:, d:], labels.new_full((labels.shape[0], d), ignore_index)], 1)


@correct
def shift_labels_depth_times(labels, depth, ignore_index=-100):
    """Applies the course's shift_labels (a building block) depth times."""
    out = labels
    for _ in range(depth):
        out = lmlessons.shift_labels(out, ignore_index)
    return out


@correct
def rolls_then_masks(labels, depth, ignore_index=-100):
    """torch.roll, then ignore_index wherever t + depth is past the end."""
    T = labels.shape[1]
    rolled = torch.roll(labels, -(depth % T), dims=1)
    past = torch.arange(T) + depth >= T
    return torch.where(past, torch.full_like(labels, ignore_index), rolled)


@correct
def row_by_row(labels, depth, ignore_index=-100):
    """A Python loop over the rows and positions."""
    B, T = labels.shape
    out = torch.full_like(labels, ignore_index)
    for b in range(B):
        for t in range(T - depth):
            out[b, t] = labels[b, t + depth]
    return out


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.mtp.mtp_labels")
def the_course_mtp_labels(labels, depth, ignore_index=-100):
    """Calls the course's own mtp_labels: nothing written."""
    from lmlessons.mtp import mtp_labels

    return mtp_labels(labels, depth, ignore_index)
