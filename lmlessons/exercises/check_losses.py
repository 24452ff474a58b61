"""Checkers for the ``mlm_loss`` and ``clm_loss`` exercises.

Each compares the learner's loss with the reference (:data:`REFERENCES`, the course's own). When
a value is off, the checker compares it with the values that known mistakes produce (dividing by
every position, not shifting, shifting twice, ...) and names the one that matches. If none does,
it perturbs the scores at positions that must not count and watches whether the learner's loss
moves. The checks shared by every loss are in :mod:`lmlessons.exercises._loss_checks`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, mlm_labels, random_logits
from lmlessons.exercises._loss_checks import (
    REFERENCES,
    Candidate,
    LossCall,
    check_empty,
    check_num_items,
    check_value_and_grad,
    first_match,
    per_row_mean,
    perturb_ignored,
    shift_targets,
    token_ce,
)
from lmlessons.exercises._runner import Mistake, Runner

__all__ = ["MLM_SIGNATURE", "CLM_SIGNATURE", "REFERENCES", "check_mlm_loss", "check_clm_loss"]

MLM_SIGNATURE = "mlm_loss(logits, labels, *, num_items_in_batch=None) -> loss"
CLM_SIGNATURE = "clm_loss(logits, labels, *, num_items_in_batch=None) -> loss   # labels unshifted"


_Diagnose = Callable[[Runner, LossCall, torch.Tensor, torch.Tensor, str, float], Mistake]


def _check_value(
    run: Runner,
    name: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    case: str,
    diagnose: _Diagnose,
    ok: str,
) -> LossCall:
    """Hidden case 1 of ``name``: the value (``ok`` when right; else ``diagnose(run, call,
    logits, labels, case, got)`` names the mistake), then the gradient. Returns the call for the
    later cases."""
    call = LossCall(run, ["logits", "labels"])
    check_value_and_grad(
        run,
        call,
        [logits, labels],
        case,
        REFERENCES[name],
        lambda got, _: diagnose(run, call, logits, labels, case, got),
        ok,
    )
    return call


# ----------------------------------------------------------------------------------- mlm_loss


def _mlm_mistakes(
    logits: torch.Tensor, labels: torch.Tensor, case: str, got: float, expected: float
) -> list[Candidate]:
    """The values known MLM mistakes give on ``logits``, ``labels``, with their diagnoses."""
    ce = token_ce(logits, labels)
    total, count = float(ce.sum()), int((labels != IGNORE_INDEX).sum())
    raw_nll = -logits.double().gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return [
        (
            "counts_unmasked_positions",
            total / labels.numel(),
            "divides by every position, not by the masked ones",
            f"On {case}, your loss is {got:.4f} = (sum over the {count} targets) / "
            f"{labels.numel()} (all positions). The unmasked positions carry no loss, so they "
            f"must not count in the denominator either: the mean over the {count} targets is "
            f"{expected:.4f}. Counting them multiplies the loss (and its gradient) by the masking "
            "rate: 6.7 times too small at 15%.",
        ),
        (
            "minus100_not_ignored",
            float(token_ce(logits, labels.clamp(min=0)).mean()),
            "positions labelled -100 were counted as targets",
            f"On {case}, your loss is {got:.4f}: it treats the -100 positions as targets of class "
            "0. Only positions with `labels != -100` are predicted; `F.cross_entropy` skips -100 "
            "by itself (`ignore_index=-100`) if you pass the labels unchanged.",
        ),
        (
            "per_row_mean",
            per_row_mean(ce, labels),
            "averages per-sequence means",
            f"On {case}, your loss is {got:.4f}, the mean of per-sequence means. Every target "
            f"token must weigh the same: average over all {count} targets of the batch at once "
            f"({expected:.4f}).",
        ),
        (
            "sum_not_mean",
            total,
            "returns the sum, not the mean",
            f"On {case}, your loss is {got:.4f}, the sum over targets. Return the mean over the "
            f"{count} targets ({expected:.4f}) unless `num_items_in_batch` is given.",
        ),
        (
            "nll_without_log_softmax",
            float(raw_nll[labels != IGNORE_INDEX].mean()),
            "`nll_loss` applied to raw scores",
            f"On {case}, your loss is {got:.4f}: `F.nll_loss` expects log-probabilities. Apply "
            "`log_softmax` first, or use `F.cross_entropy`, which does both.",
        ),
    ]


def _diagnose_mlm(
    run: Runner, call: LossCall, logits: torch.Tensor, labels: torch.Tensor, case: str, got: float
) -> Mistake:
    """The mistake behind a wrong MLM value: a known one, a loss that moves with the scores of
    -100 positions, or else just the wrong value."""
    expected = float(REFERENCES["mlm_loss"](logits, labels))
    first_match(got, expected, _mlm_mistakes(logits, labels, case, got, expected))
    perturb_ignored(
        run,
        call,
        [logits, labels],
        labels != IGNORE_INDEX,
        got,
        case,
        code="uses_unmasked_positions",
        title="the scores at unmasked positions change the loss",
        why="Your loss changes when only the scores at positions labelled -100 change. Those "
        "positions are not predicted; only positions with `labels != -100` may count.",
    )
    count = int((labels != IGNORE_INDEX).sum())
    return Mistake(
        "wrong_value",
        "wrong loss value",
        f"On {case}, your loss is {got:.6f}; expected {expected:.6f}, the mean cross-entropy over "
        f"the {count} positions whose label is not -100.",
    )


def check_mlm_loss(run: Runner) -> None:
    """Hidden case 1 (value, then gradient), 2 (nothing masked), then ``num_items_in_batch``."""
    V, B, T = 23, 4, 9
    logits = random_logits(31, (B, T, V))  # (B, T, V)
    labels = mlm_labels(32, B, T, V, per_row=[3, 1, 5, 2])  # (B, T), 11 targets
    count = int((labels != IGNORE_INDEX).sum())
    case = (
        f"hidden case 1 (logits {tuple(logits.shape)}, labels with {count} targets and -100 at "
        f"the other {B * T - count} positions)"
    )
    call = _check_value(
        run,
        "mlm_loss",
        logits,
        labels,
        case,
        _diagnose_mlm,
        "equals the mean cross-entropy over positions whose label is not -100",
    )
    check_empty(
        run,
        call,
        [logits, torch.full_like(labels, IGNORE_INDEX)],
        "hidden case 2 (every label is -100: nothing was masked)",
        "nan_when_nothing_masked",
        "nothing is masked",
    )
    total = float(token_ce(logits, labels).sum())
    check_num_items(run, call, [logits, labels], case, total, count, 17, REFERENCES["mlm_loss"])


# ----------------------------------------------------------------------------------- clm_loss


def _clm_shift_mistakes(
    logits: torch.Tensor, labels: torch.Tensor, case: str, got: float, expected: float
) -> list[Candidate]:
    """The values of a loss that pairs position t with the wrong label, with their diagnoses."""

    def mean_with_shift(k: int) -> float:
        t = shift_targets(labels, k)
        return float(token_ce(logits, t).sum() / (t != IGNORE_INDEX).sum())

    return [
        (
            "not_shifted",
            mean_with_shift(0),
            "the labels are not shifted",
            f"On {case}, your loss is {got:.4f}: position t is scored against `labels[:, t]`, its "
            "own input token, which a causal model can simply copy. The logits at position t "
            "predict the *next* token: score `logits[:, :-1]` against `labels[:, 1:]` "
            "(transformers' `ForCausalLMLoss` shifts inside, so the caller passes `labels = "
            f"input_ids.clone()`). Expected {expected:.4f}.",
        ),
        (
            "shifted_twice",
            mean_with_shift(2),
            "the labels are shifted twice",
            f"On {case}, your loss is {got:.4f}: position t is scored against the token two steps "
            "ahead. The labels you receive are *unshifted* (`input_ids.clone()` with -100 on "
            "padding); shift once, inside the loss. Pre-shifting the labels *and* shifting in the "
            f"loss trains next-next-token prediction. Expected {expected:.4f}.",
        ),
        (
            "shifted_wrong_way",
            mean_with_shift(-1),
            "the labels are shifted the wrong way",
            f"On {case}, your loss is {got:.4f}: position t is scored against the *previous* "
            f"token. Pair `logits[:, :-1]` with `labels[:, 1:]`. Expected {expected:.4f}.",
        ),
    ]


def _clm_count_mistakes(
    logits: torch.Tensor, labels: torch.Tensor, case: str, got: float, expected: float
) -> list[Candidate]:
    """The values of a loss that counts or averages the right targets wrongly."""
    B, T = labels.shape
    targets = shift_targets(labels, 1)
    ce = token_ce(logits, targets)
    total, count = float(ce.sum()), int((targets != IGNORE_INDEX).sum())
    return [
        (
            "counts_padding_positions",
            total / (B * (T - 1)),
            "divides by every position, padding included",
            f"On {case}, your loss is {got:.4f} = (sum over the {count} targets) / {B * (T - 1)} "
            "(all shifted positions). Positions whose target is -100 (padding, the prompt) must "
            f"not count in the denominator: the mean over the {count} targets is {expected:.4f}.",
        ),
        (
            "counts_padding_positions",
            total / (B * T),
            "divides by every position, padding included",
            f"On {case}, your loss is {got:.4f} = (sum over the {count} targets) / {B * T} (all "
            "positions). Positions without a target (-100 after the shift, and the last position) "
            f"must not count: the mean over the {count} targets is {expected:.4f}.",
        ),
        (
            "not_ignoring_padding",
            float(token_ce(logits[:, :-1], labels.clamp(min=0)[:, 1:]).mean()),
            "padding is not ignored",
            f"On {case}, your loss is {got:.4f}: the -100 positions (padding, prompt) were scored "
            "as class 0. Positions labelled -100 must not count; `F.cross_entropy` skips them "
            f"itself (`ignore_index=-100`). Expected {expected:.4f}.",
        ),
        (
            "per_row_mean",
            per_row_mean(ce, targets),
            "averages per-sequence means",
            f"On {case}, your loss is {got:.4f}, the mean of per-sequence means; every target "
            f"token must weigh the same ({expected:.4f}).",
        ),
        (
            "sum_not_mean",
            total,
            "returns the sum, not the mean",
            f"On {case}, your loss is {got:.4f}, the sum over targets; return the mean "
            f"({expected:.4f}).",
        ),
    ]


def _diagnose_clm(
    run: Runner, call: LossCall, logits: torch.Tensor, labels: torch.Tensor, case: str, got: float
) -> Mistake:
    """The mistake behind a wrong CLM value: a known one, a loss that depends on positions that
    have no next token, or else just the wrong value."""
    expected = float(REFERENCES["clm_loss"](logits, labels))
    mistakes = _clm_shift_mistakes(logits, labels, case, got, expected)
    first_match(got, expected, mistakes + _clm_count_mistakes(logits, labels, case, got, expected))
    # which positions does the learner's loss depend on?
    last_only = torch.ones(labels.shape, dtype=torch.bool)
    last_only[:, -1] = False  # everything but the last column counts as "may count"
    perturb_ignored(
        run,
        call,
        [logits, labels],
        last_only,
        got,
        case,
        code="not_shifted",
        title="the last position is scored, so the labels are not shifted",
        why="your loss changes when only the scores at the *last* position change, but the "
        "last position has no next token to predict. Score `logits[:, :-1]` against "
        "`labels[:, 1:]`.",
    )
    perturb_ignored(
        run,
        call,
        [logits, labels],
        shift_targets(labels, 1) != IGNORE_INDEX,
        got,
        case,
        code="not_ignoring_padding",
        title="padding is not ignored",
        why="your loss changes when only the scores at positions whose next token is "
        "-100 (padding, prompt) change. Those positions must not count; keep -100 in the "
        "targets and let `F.cross_entropy` ignore them.",
    )
    return Mistake(
        "wrong_value",
        "wrong loss value",
        f"On {case}, your loss is {got:.6f}; expected {expected:.6f}, the mean cross-entropy of "
        "`logits[:, :-1]` against `labels[:, 1:]` over targets that are not -100.",
    )


def _clm_empty_cases(
    run: Runner, call: LossCall, logits: torch.Tensor, labels: torch.Tensor
) -> None:
    """Hidden cases 2 and 3: nothing left to predict after the shift."""
    only_first = torch.full_like(labels, IGNORE_INDEX)
    only_first[:, 0] = labels[:, 0]  # position 0 is never a target after the shift
    check_empty(
        run,
        call,
        [logits, only_first],
        "hidden case 2 (only position 0 has a label, so after the shift nothing is left to "
        "predict)",
        "nan_when_no_targets",
        "there is nothing to predict",
    )
    check_empty(
        run,
        call,
        [logits[:, :1].contiguous(), labels[:, :1].contiguous()],
        "hidden case 3 (sequences of length 1: no next token at all)",
        "nan_when_no_targets",
        "sequences have length 1",
    )


def check_clm_loss(run: Runner) -> None:
    """Hidden case 1 (value, then gradient), 2 and 3 (nothing to predict), then
    ``num_items_in_batch``."""
    V, B, T = 19, 4, 10
    logits = random_logits(41, (B, T, V))  # (B, T, V)
    labels = clm_labels(42, V, lengths=[10, 7, 4, 9], length=T, prompt={3: 3})  # (B, T) unshifted
    targets = shift_targets(labels, 1)  # (B, T)
    count = int((targets != IGNORE_INDEX).sum())
    case = (
        f"hidden case 1 (logits {tuple(logits.shape)}, unshifted labels = input ids with -100 on "
        f"right padding and on a 3-token prompt; {count} next-token targets)"
    )
    call = _check_value(
        run,
        "clm_loss",
        logits,
        labels,
        case,
        _diagnose_clm,
        "shifts inside: position t is scored against `labels[:, t + 1]`; -100 (padding) is ignored",
    )
    _clm_empty_cases(run, call, logits, labels)
    total = float(token_ce(logits, targets).sum())
    check_num_items(run, call, [logits, labels], case, total, count, 13, REFERENCES["clm_loss"])
