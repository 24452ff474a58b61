"""Checkers for ``mlm_loss`` and ``clm_loss``, in the runner's pattern (:mod:`._framework`):
cases and diagnoses only; the pipeline both share is :func:`._loss_checks.check_token_loss`.

Cases, in order (the first failure is reported): 1. four sequences of varied length (the value,
then the gradient); 2. nothing to predict (MLM: every label -100; CLM: only position 0 labelled,
then sequences of length 1); 3. case 1 with ``num_items_in_batch``, an int and a tensor; 4. 16
seeded batches at the corners (:data:`._loss_checks.LOSS_BATCHES`: one token, one row, length 1, a
vocabulary of 2, rows without a target, everything a target, targets of id 0), every fourth with
``num_items_in_batch``. A wrong value is compared with what known mistakes give on the same case;
if none matches, the scores at positions that must not count are changed, to see whether the
loss moves.
"""

from __future__ import annotations

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, mlm_labels, random_logits
from lmlessons.exercises._framework import Case, Runner
from lmlessons.exercises._loss_checks import (
    Candidate,
    check_token_loss,
    empty_ok,
    mean_ce,
    shift,
    token_ce,
    token_diagnose,
)

MLM_SIGNATURE = "mlm_loss(logits, labels, *, num_items_in_batch=None) -> loss"
CLM_SIGNATURE = "clm_loss(logits, labels, *, num_items_in_batch=None) -> loss   # labels unshifted"


def _mlm_mistakes(logits: torch.Tensor, labels: torch.Tensor) -> list[Candidate]:
    """What dividing by every position, scoring -100 as id 0, or shifting give."""
    total = float(token_ce(logits, labels).sum())
    return [
        (
            "counts_unmasked_positions",
            f"the sum over the targets / all {labels.numel()} positions",
            total / labels.numel(),
        ),
        (
            "minus100_not_ignored",
            "the mean over every position, -100 read as id 0",
            float(token_ce(logits, labels.clamp(min=0)).mean()),
        ),
        (
            "shifts_labels",
            "position t scored against `labels[:, t + 1]`",
            mean_ce(logits, shift(labels, 1)),
        ),
    ]


def _clm_mistakes(logits: torch.Tensor, labels: torch.Tensor) -> list[Candidate]:
    """What pairing position t with the wrong label, or counting padding, give."""
    B, T = labels.shape
    total = float(token_ce(logits, shift(labels, 1)).sum())
    return [
        ("not_shifted", "position t scored against `labels[:, t]`", mean_ce(logits, labels)),
        (
            "shifted_twice",
            "position t scored against `labels[:, t + 2]`",
            mean_ce(logits, shift(labels, 2)),
        ),
        (
            "shifted_wrong_way",
            "position t scored against `labels[:, t - 1]`",
            mean_ce(logits, shift(labels, -1)),
        ),
        (
            "counts_padding_positions",
            f"the sum over the targets / all {B * (T - 1)} shifted positions",
            total / max(B * (T - 1), 1),
        ),
        (
            "counts_padding_positions",
            f"the sum over the targets / all {B * T} positions",
            total / (B * T),
        ),
        (
            "minus100_not_ignored",
            "the mean over every shifted position, -100 read as id 0",
            float(token_ce(logits[:, :-1], labels.clamp(min=0)[:, 1:]).mean()),
        ),
        (
            "counts_before_shift",
            "the sum over the targets / the labels that are not -100 before the shift",
            total / max(int((labels != IGNORE_INDEX).sum()), 1),
        ),
        (
            "scores_last_position",
            "the last position scored against id 0",
            mean_ce(logits, torch.cat([labels[:, 1:], labels[:, :1] * 0], 1)),
        ),
        (
            "shifts_across_rows",
            "the flattened batch shifted, each row's last position against the next row's first",
            mean_ce(logits.reshape(1, B * T, -1), shift(labels.reshape(1, -1), 1)),
        ),
    ]


def check_mlm_loss(run: Runner) -> None:
    V = 23
    B = 4
    T = 9
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
    check_token_loss(run, cases, token_diagnose(run, 0, _mlm_mistakes), shifted=0, seed=33)


def check_clm_loss(run: Runner) -> None:
    V = 19
    B = 4
    T = 10
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
    check_token_loss(run, cases, token_diagnose(run, 1, _clm_mistakes), shifted=1, seed=43)
