"""Checkers for ``mlm_loss`` and ``clm_loss``, in the runner's pattern (:mod:`._framework`):
cases and known mistakes only; the pipeline both share is :func:`._loss_checks.check_token_loss`.

Cases, in order (the first failure is reported): 1. four sequences of varied length (the value,
then the gradient); 2. nothing to predict (MLM: every label -100; CLM: only position 0 labelled,
then sequences of length 1); 3. case 1 with ``num_items_in_batch``, an int and a tensor; 4. 16
seeded batches at the corners (:data:`._loss_checks.LOSS_BATCHES`), every fourth with
``num_items_in_batch``. A wrong value is compared with what the known mistakes (the catalogue
below) give on the same case; if none matches, the scores at positions that must not count are
changed, to see whether the loss moves.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, mlm_labels, random_logits
from lmlessons.exercises._framework import Case, Catalogue, Runner
from lmlessons.exercises._loss_checks import (
    ce_over,
    check_token_loss,
    empty_ok,
    shift,
    token_loss_mistakes,
)

MLM_SIGNATURE = "mlm_loss(logits, labels, *, num_items_in_batch=None) -> loss"
CLM_SIGNATURE = "clm_loss(logits, labels, *, num_items_in_batch=None) -> loss   # labels unshifted"


# --------------------------------------------------------------------------- known mistakes
# The mistakes of every token loss (:func:`._loss_checks.token_loss_mistakes`), then each
# exercise's own: small wrong implementations, right where their mistake does not show, each the
# cross-entropy of the wrong targets or over the wrong count (:func:`._loss_checks.ce_over`). A
# docstring's ``{positions}`` and ``{shifted}`` are the case's B*T and B*(T - 1).

token_loss_mistakes("mlm_loss", 0)
token_loss_mistakes("clm_loss", 1)
known_mlm = Catalogue("mlm_loss")
known_clm = Catalogue("clm_loss")


@known_mlm("counts_unmasked_positions")
def divides_by_every_position(logits, labels, *, num_items_in_batch=None):
    """The sum over the targets / all {positions} positions."""
    return ce_over(logits, labels, labels.numel(), num_items_in_batch)  # B*T, not the targets


@known_mlm("minus100_not_ignored")
def clamps_ignored_to_zero(logits, labels, *, num_items_in_batch=None):
    """The mean over every position, -100 read as id 0."""
    return ce_over(logits, labels.clamp(min=0), n=num_items_in_batch)


@known_mlm("shifts_labels")
def shifts_like_a_causal_lm(logits, labels, *, num_items_in_batch=None):
    """Position t scored against `labels[:, t + 1]`."""
    return ce_over(logits, shift(labels, 1), n=num_items_in_batch)


@known_clm("not_shifted")
def never_shifts(logits, labels, *, num_items_in_batch=None):
    """Position t scored against `labels[:, t]`."""
    return ce_over(logits, labels, n=num_items_in_batch)


@known_clm("shifted_twice")
def shifts_twice(logits, labels, *, num_items_in_batch=None):
    """Position t scored against `labels[:, t + 2]`."""
    return ce_over(logits, shift(labels, 2), n=num_items_in_batch)  # "shift to be safe" twice


@known_clm("shifted_wrong_way")
def shifts_the_wrong_way(logits, labels, *, num_items_in_batch=None):
    """Position t scored against `labels[:, t - 1]`."""
    return ce_over(logits, shift(labels, -1), n=num_items_in_batch)


@known_clm("counts_padding_positions")
def divides_by_every_shifted_position(logits, labels, *, num_items_in_batch=None):
    """The sum over the targets / all {shifted} shifted positions."""
    batch, length = labels.shape
    return ce_over(logits, shift(labels, 1), batch * (length - 1), num_items_in_batch)


@known_clm("counts_padding_positions")
def divides_by_every_position_unshifted(logits, labels, *, num_items_in_batch=None):
    """The sum over the targets / all {positions} positions."""
    return ce_over(logits, shift(labels, 1), labels.numel(), num_items_in_batch)


@known_clm("minus100_not_ignored")
def clamps_padding_to_zero(logits, labels, *, num_items_in_batch=None):
    """The mean over every shifted position, -100 read as id 0."""
    return ce_over(logits, shift(labels.clamp(min=0), 1), n=num_items_in_batch)


@known_clm("counts_before_shift")
def counts_before_the_shift(logits, labels, *, num_items_in_batch=None):
    """The sum over the targets / the labels that are not -100 before the shift."""
    before = (labels != IGNORE_INDEX).sum()  # one target too many per row
    return ce_over(logits, shift(labels, 1), before, num_items_in_batch)


@known_clm("scores_last_position")
def pads_label_with_zero(logits, labels, *, num_items_in_batch=None):
    """The last position scored against id 0."""
    return ce_over(logits, F.pad(labels, (0, 1), value=0)[..., 1:], n=num_items_in_batch)


@known_clm("shifts_across_rows")
def shifts_the_flattened_batch(logits, labels, *, num_items_in_batch=None):
    """The flattened batch shifted, each row's last position against the next row's first."""
    targets = shift(labels.reshape(1, -1), 1).reshape(labels.shape)  # (B, T)
    return ce_over(logits, targets, n=num_items_in_batch)


def check_mlm_loss(run: Runner) -> None:
    B, T, V = 4, 9, 23
    logits = random_logits(31, (B, T, V)).requires_grad_()  # (B, T, V)
    labels = mlm_labels(32, B, T, V, per_row=[3, 1, 5, 2])  # (B, T), 11 targets
    labels[tuple((labels != IGNORE_INDEX).nonzero()[0])] = 0  # id 0 is a target like any other
    n = int((labels != IGNORE_INDEX).sum())
    what = f"labels with {n} targets, one of id 0, and -100 at the other {B * T - n} positions"
    cases = [
        Case(
            f"hidden case 1 (logits {(B, T, V)}, {what})",
            (logits, labels),
            ok="equals the mean cross-entropy over positions whose label is not -100",
        ),
        Case(
            "hidden case 2 (every label is -100)",
            (logits, torch.full_like(labels, IGNORE_INDEX)),
            ok=empty_ok("nothing is masked"),
        ),
    ]
    check_token_loss(run, cases, shifted=0, seed=33)


def check_clm_loss(run: Runner) -> None:
    B, T, V = 4, 10, 19
    logits = random_logits(41, (B, T, V)).requires_grad_()  # (B, T, V)
    labels = clm_labels(42, V, lengths=[10, 7, 4, 9], length=T, prompt={3: 3})  # (B, T) unshifted
    labels[1, 5] = 0  # id 0 is a target like any other
    n = int((shift(labels, 1) != IGNORE_INDEX).sum())
    only_first = torch.full_like(labels, IGNORE_INDEX)
    only_first[:, 0] = labels[:, 0]  # position 0 is never a target after the shift
    short = (logits[:, :1].detach().requires_grad_(), labels[:, :1].clone())
    what = (
        "unshifted labels = input ids with -100 on right padding and a 3-token prompt; "
        f"{n} next-token targets, one of id 0"
    )
    cases = [
        Case(
            f"hidden case 1 (logits {(B, T, V)}, {what})",
            (logits, labels),
            ok="shifts inside: position t is scored against `labels[:, t + 1]`; -100 (padding) "
            "is ignored",
        ),
        Case(
            "hidden case 2 (only position 0 has a label)",
            (logits, only_first),
            ok=empty_ok("there is nothing to predict"),
        ),
        Case(
            "hidden case 3 (sequences of length 1: no next token)",
            short,
            ok=empty_ok("sequences have length 1"),
        ),
    ]
    check_token_loss(run, cases, shifted=1, seed=43)
