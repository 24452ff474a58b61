"""What the loss checkers share (``mlm_loss``, ``clm_loss``, ``bert_pretraining_loss``,
``chunked_cross_entropy``, ``rank_loss``), on top of the runner (:mod:`._framework`).

:func:`check_loss` checks one case: a 0-dim float tensor (:func:`as_loss`) with the reference's
value (else the exercise's diagnosis, else ``wrong_value``) and gradients; a case with nothing to
predict must give 0 that still backpropagates. :func:`named` names the known mistake whose value
the learner's loss equals; :func:`moves` asks whether the loss depends on scores it must ignore.
:func:`token_loss_mistakes` catalogues the mistakes every token loss can make, written once for
``mlm_loss`` and ``clm_loss``; :func:`mlm_outputs` evaluates ``mlm_loss``'s on the MLM part of
another loss; :func:`ce_over` is the one cross-entropy of every loss catalogue. :func:`batches`
and :func:`with_num_items` make cases; :func:`check_token_loss` is the pipeline of ``mlm_loss``
and ``clm_loss``. The references are the solutions (``solutions.py``), which
``tests/test_exercises.py`` holds against transformers' losses and ``BertForPreTraining``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import DRAWN, gen
from lmlessons.exercises._framework import (
    Case,
    Catalogue,
    Mistake,
    Runner,
    close,
    which_known,
)

#: A known mistake: (code, what its value is, in words, the value it gives on the case).
Candidate = tuple[str, str, float]
Diagnose = Callable[[Case, float, float], Mistake | None]


@dataclass(frozen=True)
class LossBatch:
    """A row of :data:`LOSS_BATCHES`, one seeded batch of :func:`batches`."""

    shape: tuple[int, int, int] | str  # (B, T, V); DRAWN: B in 1..4, T and V in 2..11
    ignored: float  # each label is -100 with this probability
    right_padding: bool  # each row's labels are -100 from a random length on
    empty_first_row: bool  # row 0 has no target (if B > 1); chunked_cross_entropy: chunk 0
    last_is_zero: bool  # the last label is a target of id 0
    num_items: bool  # the checkers pass ``num_items_in_batch`` (more than the batch's targets)


#: The generated batches of the loss checkers, in order: four written ones, which reach one
#: token, one row, length 1 and a vocabulary of 2; then twelve of drawn shapes, whose settings
#: cycle (with periods 4, 3, 3, 2 and 4).
LOSS_BATCHES = [
    # shape, ignored, right_padding, empty_first_row, last_is_zero, num_items
    LossBatch((1, 1, 2), 0.0, False, False, True, False),
    LossBatch((1, 7, 3), 0.25, False, True, False, False),
    LossBatch((4, 1, 5), 0.5, True, False, True, False),
    LossBatch((3, 8, 2), 0.75, False, False, False, True),
    *(
        LossBatch(DRAWN, i % 4 / 4, i % 3 == 1, i % 3 == 0, i % 2 == 0, i % 4 == 3)
        for i in range(12)
    ),
]


def explain_ce(exc: BaseException) -> str | None:
    """The mistake behind an exception of a cross-entropy, if it tells."""
    text = str(exc)
    if "leaf Variable that requires grad" in text or "a view of a leaf Variable" in text:
        return "modifies_input"  # written into the logits in place
    if "Expected target size" in text or "Expected input batch_size" in text:
        return "class_dim"
    if "out of bounds" in text or "-100" in text:
        return "minus100_not_ignored"
    return None


def as_loss(case: Case, out: object) -> torch.Tensor:
    """``out`` if it is a 0-dim float tensor; else the mistake it shows."""
    on = f"On {case.label}, your function returned"
    if isinstance(out, (tuple, list)):
        raise Mistake("returns_tuple", f"{on} a {type(out).__name__} of {len(out)} items.")
    if not isinstance(out, torch.Tensor):
        raise Mistake("not_a_tensor", f"{on} a {type(out).__name__}.")
    if out.dim() != 0:
        raise Mistake("not_scalar", f"{on} a tensor of shape {tuple(out.shape)}.")
    if not out.is_floating_point():
        raise Mistake("wrong_dtype", f"{on} a tensor of dtype {out.dtype}; a loss is a float.")
    return out


def named(
    case: Case, got: float, expected: float, candidates: list[Candidate], subject: str = "the loss"
) -> Mistake | None:
    """The candidate (e.g. a catalogued mistake's value, :meth:`Catalogue.outputs`) whose value
    ``got`` (``subject``) equals, and the right value not; None if none does, or if candidates
    of different codes do (the case cannot tell them apart)."""
    found = which_known(candidates, got, expected, close)
    if found is None:
        return None
    detail = f"On {case.label}, {subject} is {got:.4f}, {found[1]}; expected {expected:.4f}."
    return Mistake(found[0], detail)


def check_loss(
    run: Runner,
    case: Case,
    *,
    empty: bool = False,
    diagnose: Diagnose | None = None,
    explain: Callable[[BaseException], str | None] = explain_ce,
) -> torch.Tensor:
    """The learner's loss on ``case`` (``empty``: nothing to predict) against the reference's:
    the value, then the gradients. Returns the learner's loss."""
    expected = float(run.expected(case).detach())

    def explain_empty(exc: BaseException) -> str | None:
        return explain(exc) or "fails_when_nothing_masked"

    loss = as_loss(case, run.call(case, explain=explain_empty if empty else explain))
    got = float(loss.detach())
    if not close(got, expected):
        found = diagnose(case, got, expected) if diagnose is not None else None
        detail = f"On {case.label}, the loss is {got:.6g}; expected {expected:.6g}."
        code = "nan_when_no_targets" if empty and not math.isfinite(got) else "empty_not_zero"
        raise found or Mistake(code if empty else "wrong_value", detail)
    if empty and loss.grad_fn is None:
        raise Mistake("empty_detached", f"On {case.label}, the loss is a constant {got:g}.")
    run.gradients(case, loss)
    return loss


def moves(
    run: Runner, case: Case, keep: torch.Tensor, where: str, got: float, code: str
) -> Mistake | None:
    """Mistake ``code`` if the learner's loss changes when the scores (``case.args[0]``) change
    only where ``keep`` is False (``where`` names those positions, which have no target)."""
    logits, *rest = case.args
    noise = torch.randn(logits.shape, generator=gen(99)) * 3.0
    changed = torch.where(keep.unsqueeze(-1), logits.detach(), logits.detach() + noise)
    probe = Case(f"{case.label}, scores changed {where}", (changed, *rest), case.kwargs)
    now = float(as_loss(probe, run.call(probe)).detach())
    if close(now, got):
        return None
    return Mistake(
        code,
        f"On {case.label}, the loss is {got:.4f}; with the scores changed only {where} it is "
        f"{now:.4f}; expected no change, as those positions have no target.",
    )


def token_ce(logits: torch.Tensor, targets: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Per-position cross-entropy in float64 (softmax over ``dim``), 0 where the target is -100.
    ``logits`` ``(..., V)``, ``targets`` ``(...)``."""
    logp = logits.detach().double().log_softmax(dim)
    ce = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(targets != IGNORE_INDEX, ce, torch.zeros_like(ce))


def shift(labels: torch.Tensor, k: int) -> torch.Tensor:
    """``out[..., t] = labels[..., t + k]`` (-100 where ``t + k`` is outside)."""
    out = torch.full_like(labels, IGNORE_INDEX)
    T = labels.shape[-1]
    if k >= 0:
        out[..., : max(T - k, 0)] = labels[..., k:]
    else:
        out[..., -k:] = labels[..., : T + k]
    return out


def ce_over(
    logits: torch.Tensor, targets: torch.Tensor, count: Any = None, n: Any = None, loss: Any = None
) -> Any:
    """``loss`` (default: the cross-entropy; ``F.nll_loss`` takes scores as log-probabilities)
    summed over ``targets`` ``(B, T)`` (-100 ignored) of ``logits`` ``(B, T, V)``, divided by
    ``n`` (``num_items_in_batch``) if given, else by ``count`` (None: the targets' count), at
    least 1: a catalogued mistake is this with the wrong targets, count or scores."""
    total = (loss or F.cross_entropy)(logits.float().transpose(1, 2), targets, reduction="sum")
    if n is not None:
        return total / n
    return total / max(int((targets != IGNORE_INDEX).sum() if count is None else count), 1)


def batches(seed: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``n`` batches of :data:`LOSS_BATCHES`, ``(logits (B, T, V), labels (B, T))``,
    drawn from one generator seeded ``seed`` (every row draws a shape, used or not)."""
    g = gen(seed)
    out = []
    for row in LOSS_BATCHES[:n]:
        drawn = (
            torch.randint(1, 5, (1,), generator=g).tolist()
            + torch.randint(2, 12, (2,), generator=g).tolist()
        )
        B, T, V = drawn if isinstance(row.shape, str) else row.shape  # DRAWN: the drawn one
        logits = torch.randn(B, T, V, generator=g) * 1.5  # (B, T, V)
        labels = torch.randint(V, (B, T), generator=g)  # (B, T)
        labels[torch.rand(B, T, generator=g) < row.ignored] = IGNORE_INDEX
        if row.right_padding:
            for b in range(B):
                labels[b, int(torch.randint(1, T + 1, (), generator=g)) :] = IGNORE_INDEX
        if row.last_is_zero:
            labels[-1, -1] = 0
        if B > 1 and row.empty_first_row:
            labels[0] = IGNORE_INDEX  # a row without target
        out.append((logits.requires_grad_(), labels))
    return out


def describe(logits: torch.Tensor, labels: torch.Tensor, label: str, **kwargs: object) -> str:
    """'generated case 3 (logits (2, 5, 7), labels with 4 targets, 1 of them id 0, ...)'."""
    keep = labels != IGNORE_INDEX
    zero = int((keep & (labels == 0)).sum())
    extra = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return (
        f"{label} (logits {tuple(logits.shape)}, labels {labels.tolist()} with "
        f"{int(keep.sum())} positions not -100, {zero} of them id 0{extra})"
    )


def token_fields(logits: torch.Tensor, labels: torch.Tensor, k: int, n: object) -> dict[str, Any]:
    """The numbers the token losses' catalogue quotes, for targets the labels shifted by ``k``:
    ``count`` targets, their ``mean`` loss (float64), ``positions`` B*T, ``shifted`` B*(T - 1),
    ``n`` (``num_items_in_batch``)."""
    B, T = labels.shape
    targets = shift(labels, k)
    count = int((targets != IGNORE_INDEX).sum())
    mean = float(token_ce(logits, targets).sum()) / max(count, 1)
    return {"count": count, "mean": mean, "positions": B * T, "shifted": B * (T - 1), "n": n}


def token_diagnose(run: Runner, shifted: int) -> Diagnose:
    """The diagnosis of a wrong ``(logits, labels)`` loss whose targets are the labels shifted
    by ``shifted``: the catalogued mistake its value equals, then whether the loss moves with
    scores it must ignore."""

    def diagnose(case: Case, got: float, expected: float) -> Mistake | None:
        logits, labels = case.args[0].detach(), case.args[1]
        n = case.kwargs.get("num_items_in_batch")
        fields = token_fields(logits, labels, shifted, None if n is None else int(n))
        found = named(case, got, expected, Catalogue(run.exercise).outputs(case, float, **fields))
        if found is not None or n is not None:
            return found
        last = torch.ones(labels.shape, dtype=torch.bool)
        last[:, -1] = False
        if shifted:
            found = moves(run, case, last, "at the last position", got, "scores_last_position")
        keep = shift(labels, shifted) != IGNORE_INDEX
        return found or moves(
            run, case, keep, "where the target is -100", got, "minus100_not_ignored"
        )

    return diagnose


# --------------------------------------------------------------------------- known mistakes
# The mistakes every token loss can make, each written once for targets that are the labels
# shifted by ``k`` (0: ``mlm_loss``, 1: ``clm_loss``), catalogued for both exercises (and
# evaluated by ``bert_pretraining_loss`` and ``chunked_cross_entropy`` on their MLM part). Each
# is right where its mistake does not show; a docstring's ``{count}`` and ``{n}`` are the case's.


def _scored(logits: torch.Tensor, labels: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """The targets ``(B, T)``, each position's cross-entropy (0 at -100) and the target mask."""
    targets = shift(labels, k)  # (B, T)
    ce = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, T)
    return targets, ce, targets != IGNORE_INDEX


def token_loss_mistakes(exercise: str, k: int) -> None:
    """Catalogue the mistakes of every token loss as ``exercise``'s (targets: labels shifted by
    ``k``); the averaging mistakes are right with ``num_items_in_batch``."""
    known = Catalogue(exercise)

    @known("per_row_mean")
    def mean_per_sequence(logits, labels, *, num_items_in_batch=None):
        """The mean of the per-sequence means."""
        _, ce, keep = _scored(logits, labels, k)
        rows = keep.any(-1)  # (B,)
        if num_items_in_batch is not None or not rows.any():
            return ce_over(logits, shift(labels, k), n=num_items_in_batch)
        return (ce.sum(-1)[rows] / keep.sum(-1)[rows]).mean()

    @known("per_row_mean")
    def row_means_over_every_row(logits, labels, *, num_items_in_batch=None):
        """The mean of the per-sequence means."""
        _, ce, keep = _scored(logits, labels, k)
        if num_items_in_batch is not None:
            return ce.sum() / num_items_in_batch
        return (ce.sum(-1) / keep.sum(-1).clamp(min=1)).mean()

    @known("sum_not_mean")
    def returns_the_sum(logits, labels, *, num_items_in_batch=None):
        """The sum over the {count} targets."""
        return ce_over(logits, shift(labels, k), 1, num_items_in_batch)

    @known("skips_target_zero")
    def zero_id_is_padding(logits, labels, *, num_items_in_batch=None):
        """The mean over the targets that are not id 0."""
        targets = shift(labels, k)  # (B, T)
        targets = targets.masked_fill(targets == 0, IGNORE_INDEX)  # id 0 read as padding
        return ce_over(logits, targets, n=num_items_in_batch)

    @known("nll_without_log_softmax")
    def nll_on_raw_logits(logits, labels, *, num_items_in_batch=None):
        """The mean of the negated raw scores at the targets."""
        return ce_over(logits, shift(labels, k), n=num_items_in_batch, loss=F.nll_loss)

    @known("class_dim")
    def softmax_over_positions(logits, labels, *, num_items_in_batch=None):
        """With the softmax over the positions, not the vocabulary."""
        logp = logits.log_softmax(dim=1)  # (B, T, V): over T
        return ce_over(logp, shift(labels, k), n=num_items_in_batch, loss=F.nll_loss)

    @known("ignores_num_items_in_batch")
    def ignores_num_items(logits, labels, *, num_items_in_batch=None):
        """The mean over this batch's {count} targets."""
        return ce_over(logits, shift(labels, k))

    @known("num_items_divides_mean")
    def num_items_divides_the_mean(logits, labels, *, num_items_in_batch=None):
        """That mean ({mean:.4f}) divided by {n}."""
        mean = ce_over(logits, shift(labels, k))
        return mean if num_items_in_batch is None else mean / num_items_in_batch


def mlm_outputs(
    logits: torch.Tensor, labels: torch.Tensor, codes: set[str] | None = None, n: Any = None
) -> list[Candidate]:
    """The values of ``mlm_loss``'s catalogued mistakes (those of ``codes``; None: all) on
    ``(logits, labels)``, with ``num_items_in_batch=n``: what the MLM part of another exercise's
    loss is when it makes them."""
    probe = Case("", (logits, labels), {} if n is None else {"num_items_in_batch": n})
    found = Catalogue("mlm_loss").outputs(probe, float, **token_fields(logits, labels, 0, n))
    return [c for c in found if codes is None or c[0] in codes]


def empty_ok(what: str) -> str:
    """The line a case with nothing to predict verifies: ``what`` says when."""
    return f"0 (not NaN), still backpropagating, when {what}"


NUM_ITEMS_OK = (
    "with `num_items_in_batch`: sum over targets / count, so micro-batch losses add up to the "
    "full-batch loss"
)


def check_token_loss(run: Runner, cases: list[Case], *, shifted: int, seed: int) -> None:
    """``mlm_loss``, ``clm_loss`` (targets: the labels shifted by ``shifted``): case 1 (value,
    then gradient), the cases with nothing to predict, case 1 with ``num_items_in_batch``, then
    the 16 :data:`LOSS_BATCHES` (seeded ``seed``); a wrong value is diagnosed by
    :func:`token_diagnose`."""
    diagnose = token_diagnose(run, shifted)
    first, *empty = cases
    check_loss(run, first, diagnose=diagnose)
    run.passed_case(first)
    run.ok("returns a 0-dim tensor that backpropagates to the logits with the right gradient")
    for case in empty:
        check_loss(run, case, empty=True)
        run.passed_case(case)
    for case in with_num_items(first, int((shift(first.args[1], shifted) != IGNORE_INDEX).sum())):
        check_loss(run, case, diagnose=diagnose)
    for i, (row, (logits, labels)) in enumerate(zip(LOSS_BATCHES, batches(seed, 16))):
        count = int((shift(labels, shifted) != IGNORE_INDEX).sum())
        kwargs = {"num_items_in_batch": count + i} if row.num_items else {}
        label = describe(logits, labels, f"generated case {i + 1}", **kwargs)
        check_loss(run, Case(label, (logits, labels), kwargs), empty=not count, diagnose=diagnose)
    run.ok(NUM_ITEMS_OK)


def with_num_items(case: Case, count: int) -> list[Case]:
    """``case`` with ``num_items_in_batch = count + 13`` (a step's count: more than this batch's
    ``count`` targets), an int and a 0-dim tensor (what the Trainer passes)."""
    n = count + 13
    return [
        Case(
            f"{case.label} with `num_items_in_batch={text}`",
            case.args,
            {**case.kwargs, "num_items_in_batch": v},
        )
        for v, text in ((n, str(n)), (torch.tensor(n), f"torch.tensor({n})"))
    ]
