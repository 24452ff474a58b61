"""Checker for ``label_smoothed_loss`` (lesson 15), in the runner's pattern
(:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The reference is :func:`lmlessons.exercises.solutions_part4.label_smoothed_loss`, transformers'
``LabelSmoother`` (0, not NaN, without targets; the core's
:func:`lmlessons.smoothing.label_smoothed_loss`). Cases, in order (the first failure is reported;
each checks the value, then the gradient): 1. three rows with a prompt of -100, right padding and
a target of id 0, the default ``epsilon``; 2. ``epsilon=0.3``; 3. ``shift=False``; 4-5.
``epsilon`` 0 and 1; 6-7. no target (every label -100; only each row's first label); 8-9. case 2
with ``num_items_in_batch`` (an int and a tensor); then the 16 seeded batches of the loss
checkers (:data:`lmlessons.exercises._loss_checks.LOSS_BATCHES`), ``epsilon`` and ``shift``
cycling. A wrong loss is compared with what the known mistakes (the catalogue below) give on the
same case; if none matches, the logits are changed where the label is -100, to see whether the
loss moves.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import gen
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner
from lmlessons.exercises._loss_checks import (
    LOSS_BATCHES,
    batches,
    check_loss,
    describe,
    empty_ok,
    moves,
    named,
    shift,
    with_num_items,
)

SIGNATURE = (
    "label_smoothed_loss(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None) "
    "-> loss   # a 0-dim tensor; labels unshifted when shift=True"
)
N = IGNORE_INDEX
LABELS = [[N, N, 4, 1, 0, 2, N], [N, 3, 5, 2, N, N, N], [N, N, N, 0, 3, 4, 1]]  # (3, 7)


def _case(label: str, logits: torch.Tensor, labels: Any, ok: Any = "", **kwargs: Any) -> Case:
    labels = torch.as_tensor(labels)
    return Case(describe(logits, labels, label, **kwargs), (logits, labels), kwargs, ok=ok)


def _hand_written() -> list[Case]:
    """Cases 1 to 9 (see the module's docstring)."""
    logits = (torch.randn(3, 7, 6, generator=gen(161)) * 2.0).requires_grad_()  # (B, T, V)
    mlm = [[N, 2, N, N, 0, N, 5], [4, N, N, 1, N, N, N], [N, N, 3, N, N, 2, N]]
    first = [[3, N, N, N], [0, N, N, N]]  # only each row's first label: no target after the shift
    cases = [
        _case(
            "hidden case 1",
            logits,
            LABELS,
            (
                "`(1 - epsilon)` x the cross-entropy + `epsilon` x the mean over the "
                "vocabulary of `-log p`, at the targets after the shift, averaged over them",
                "returns a 0-dim tensor that backpropagates to the logits with the right gradient",
            ),
        ),
        _case("hidden case 2", logits, LABELS, "`epsilon` read (0.3 here)", epsilon=0.3),
        _case(
            "hidden case 3",
            logits,
            mlm,
            "`shift=False`: each position scored on its own label (a masked LM's)",
            epsilon=0.2,
            shift=False,
        ),
        _case("hidden case 4", logits, LABELS, "`epsilon=0`: the plain cross-entropy", epsilon=0.0),
        _case(
            "hidden case 5", logits, LABELS, "`epsilon=1`: the smoothing term alone", epsilon=1.0
        ),
        _case(
            "hidden case 6",
            torch.randn(2, 4, 5, generator=gen(162)).requires_grad_(),
            [[N] * 4] * 2,
            empty_ok("every label is -100"),
        ),
        _case(
            "hidden case 7",
            torch.randn(2, 4, 5, generator=gen(163)).requires_grad_(),
            first,
            empty_ok("no label is left after the shift"),
        ),
    ]
    count = int((shift(torch.tensor(LABELS), 1) != N).sum())
    return cases + with_num_items(cases[1], count)


def _generated() -> list[Case]:
    """The 16 batches of :data:`LOSS_BATCHES`, ``epsilon`` cycling through 0.1, 0.05, 0.2 and
    0.5, ``shift`` False on every third, ``num_items_in_batch`` where the row says so."""
    cases = []
    for i, (row, (logits, labels)) in enumerate(zip(LOSS_BATCHES, batches(164, 16))):
        kwargs: dict[str, Any] = {"epsilon": (0.1, 0.05, 0.2, 0.5)[i % 4]}
        if i % 3 == 2:
            kwargs["shift"] = False
        targets = shift(labels, 0 if i % 3 == 2 else 1)
        if row.num_items:
            kwargs["num_items_in_batch"] = int((targets != N).sum()) + i
        cases.append(_case(f"generated case {i + 1}", logits, labels, **kwargs))
    ok = "equal to transformers' `LabelSmoother` on 16 random batches (rows without targets, id 0)"
    cases[-1] = Case(cases[-1].label, cases[-1].args, cases[-1].kwargs, ok=ok)
    return cases


def cases() -> list[Case]:
    """Every case the checker runs, in order."""
    return _hand_written() + _generated()


# --------------------------------------------------------------------------- known mistakes
# ``_smoothed``'s keywords make each entry's mistake.

known = Catalogue("label_smoothed_loss")


def _smoothed(
    logits,
    labels,
    epsilon=0.1,
    do_shift=True,
    n=None,
    *,
    weights=None,
    smooth_all=False,
    others=False,
    total=False,
    divide=True,
):
    """Right unless told: ``weights`` ``(a, b)`` of the two terms (right: ``1 - epsilon`` and
    ``epsilon``), ``smooth_all`` averages the smoothing term over every position, ``others``
    spreads ``epsilon`` over the V - 1 other tokens, ``total`` sums the smoothing term over the
    vocabulary, ``divide=False`` returns the sum."""
    if do_shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    keep = labels != IGNORE_INDEX  # (B, T')
    logps = logits.float().log_softmax(-1)  # (B, T', V)
    V = logps.shape[-1]
    nll = -logps.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T')
    uniform = -logps.sum(-1) if total else -logps.mean(-1)  # (B, T')
    if others:
        uniform = (-logps.sum(-1) - nll) / (V - 1)
    a, b = (1 - epsilon, epsilon) if weights is None else weights
    count = keep.sum().clamp(min=1) if n is None else n
    nll_part = (nll * keep).sum() / (count if divide else 1)
    if smooth_all:
        return a * nll_part + b * uniform.mean()
    return a * nll_part + b * (uniform * keep).sum() / (count if divide else 1)


def _args(kwargs: dict[str, Any]) -> tuple[float, bool, Any]:
    return kwargs.get("epsilon", 0.1), kwargs.get("shift", True), kwargs.get("num_items_in_batch")


@known("smoothing_counts_ignored")
def smooths_every_position(logits, labels, **kw):
    """With the smoothing term averaged over every position, -100 ones included."""
    return _smoothed(logits, labels, *_args(kw), smooth_all=True)


@known("smoothing_excludes_true_token")
def spreads_over_the_others(logits, labels, **kw):
    """With `epsilon` spread over the V - 1 other tokens."""
    return _smoothed(logits, labels, *_args(kw), others=True)


@known("smoothing_sums_vocabulary")
def sums_over_the_vocabulary(logits, labels, **kw):
    """With `-log p` summed over the vocabulary, not averaged."""
    return _smoothed(logits, labels, *_args(kw), total=True)


@known("epsilon_weights_swapped")
def swaps_the_weights(logits, labels, **kw):
    """`epsilon` x the cross-entropy + `(1 - epsilon)` x the smoothing term."""
    epsilon, do_shift, n = _args(kw)
    return _smoothed(logits, labels, epsilon, do_shift, n, weights=(epsilon, 1 - epsilon))


@known("nll_not_scaled")
def keeps_the_full_nll(logits, labels, **kw):
    """The cross-entropy + `epsilon` x the smoothing term (no `1 - epsilon`)."""
    epsilon, do_shift, n = _args(kw)
    return _smoothed(logits, labels, epsilon, do_shift, n, weights=(1.0, epsilon))


@known("not_shifted")
def never_shifts(logits, labels, **kw):
    """Each position scored on its own label although `shift=True`."""
    epsilon, _, n = _args(kw)
    return _smoothed(logits, labels, epsilon, False, n)


@known("shifts_labels")
def always_shifts(logits, labels, **kw):
    """Shifted although `shift=False`."""
    epsilon, _, n = _args(kw)
    return _smoothed(logits, labels, epsilon, True, n)


@known("sum_not_mean")
def returns_the_sum(logits, labels, **kw):
    """The sum over the {count} targets."""
    epsilon, do_shift, n = _args(kw)
    return _smoothed(logits, labels, epsilon, do_shift, n, divide=n is not None)


@known("ignores_num_items_in_batch")
def ignores_num_items(logits, labels, **kw):
    """The mean over this batch's {count} targets."""
    epsilon, do_shift, _ = _args(kw)
    return _smoothed(logits, labels, epsilon, do_shift)


@known("num_items_divides_mean")
def divides_the_mean(logits, labels, **kw):
    """That mean divided by `num_items_in_batch`."""
    epsilon, do_shift, n = _args(kw)
    mean = _smoothed(logits, labels, epsilon, do_shift)
    return mean if n is None else mean / n


def _diagnose(run: Runner) -> Any:
    def diagnose(case: Case, got: float, expected: float) -> Mistake | None:
        targets = shift(case.args[1], 1 if case.kwargs.get("shift", True) else 0)
        count = int((targets != IGNORE_INDEX).sum())
        outputs = known.outputs(case, float, count=count)
        found = named(case, got, expected, outputs)
        if found is not None or case.kwargs.get("num_items_in_batch") is not None:
            return found
        if not math.isfinite(got):
            return None  # NaN: the check names it
        keep = targets != IGNORE_INDEX
        where = "where the label is -100"
        return moves(run, case, keep, where, got, "minus100_not_ignored")

    return diagnose


def check_label_smoothed_loss(run: Runner) -> None:
    diagnose = _diagnose(run)
    for case in cases():
        labels = case.args[1]
        targets = shift(labels, 1 if case.kwargs.get("shift", True) else 0)
        empty = not bool((targets != IGNORE_INDEX).any())
        check_loss(run, case, empty=empty, diagnose=diagnose)
        run.passed_case(case)
    run.ok("with `num_items_in_batch`: both terms summed over the targets / that count")
