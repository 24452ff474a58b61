"""Checker for ``bert_pretraining_loss``: ``mlm_weight * MLM + nsp_weight * NSP``, in the runner's
pattern (:mod:`._framework`): cases and diagnoses only.

Cases, in order (the first failure is reported): 1. four sequences at the default weights (the
value, then the gradients for both logits); 2. the same with ``mlm_weight=2``,
``nsp_weight=0.25``; 3. no masked token (the total is the NSP part); 4. 12 seeded batches at the
corners (:data:`GENERATED`: NSP labels all 0, all 1 or mixed, weights 0 to 3). A wrong
value is compared with what the known mistakes (the catalogue below: averaging the two losses,
NSP labels read the wrong way round, weights ignored, swapped or normalised; and the MLM part's
own mistakes, ``mlm_loss``'s) give on the same case.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import gen, mlm_labels, random_logits
from lmlessons.exercises._framework import Case, Mistake, Runner, known_mistakes, known_outputs
from lmlessons.exercises._loss_checks import (
    Candidate,
    Diagnose,
    as_loss,
    batches,
    check_loss,
    describe,
    mean_ce,
    mlm_outputs,
    named,
)

BERT_SIGNATURE = (
    "bert_pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, "
    "nsp_weight=1.0) -> loss"
)
WEIGHTS = {"mlm_weight": 2.0, "nsp_weight": 0.25}  # hidden case 2


@dataclass(frozen=True)
class PretrainingRow:
    """A row of :data:`GENERATED`: the NSP labels (``"zeros"``, ``"ones"`` or ``"random"``) and
    the weights; the MLM part is the row's batch of :data:`._loss_checks.LOSS_BATCHES`."""

    nsp_labels: str
    mlm_weight: float
    nsp_weight: float


#: The NSP labels and the ``(mlm_weight, nsp_weight)`` pairs of the generated cases.
_NSP_KINDS = ("zeros", "ones", "random")
_WEIGHT_PAIRS = ((1.0, 1.0), (0.5, 2.0), (0.0, 1.0), (1.0, 0.0), (3.0, 0.1))

#: The generated cases, in order: case i has the labels ``_NSP_KINDS[i % 3]`` and the weights
#: ``_WEIGHT_PAIRS[i % 5]``, so every pair of weights meets more than one kind of labels.
GENERATED = [PretrainingRow(_NSP_KINDS[i % 3], *_WEIGHT_PAIRS[i % 5]) for i in range(12)]


# --------------------------------------------------------------------------- known mistakes
# How the two parts are put together: small wrong implementations, each with its mistake code, a
# docstring's ``{parts}`` the case's two right parts. The MLM part's own mistakes are those of
# ``mlm_loss``'s catalogue (:func:`._loss_checks.mlm_outputs`), composed in :func:`_mistakes`.

known = known_mistakes("bert_pretraining_loss")


def _mlm(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The MLM mean over labelled positions, 0 when there is none."""
    flat = labels.reshape(-1)  # (B*T,)
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), flat, reduction="sum")
    return total / max(int((flat != IGNORE_INDEX).sum()), 1)


def _nsp(nsp_logits: torch.Tensor, nsp_labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(nsp_logits.float(), nsp_labels)  # (B, 2) vs (B,): mean over sequences


@known("averages_losses")
def averages_the_two(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """Half the weighted sum {parts}."""
    return (mlm_weight * _mlm(logits, labels) + nsp_weight * _nsp(nsp_logits, nsp_labels)) / 2


@known("missing_nsp")
def mlm_only(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """The MLM part alone {parts}."""
    return mlm_weight * _mlm(logits, labels)


@known("missing_mlm")
def nsp_only(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """The NSP part alone {parts}."""
    return nsp_weight * _nsp(nsp_logits, nsp_labels)


@known("unweighted")
def ignores_the_weights(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """MLM + NSP {parts}."""
    return _mlm(logits, labels) + _nsp(nsp_logits, nsp_labels)


@known("misweighted")
def swaps_the_weights(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """Nsp_weight * MLM + mlm_weight * NSP."""
    return nsp_weight * _mlm(logits, labels) + mlm_weight * _nsp(nsp_logits, nsp_labels)


@known("misweighted")
def only_nsp_weighted(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """MLM + nsp_weight * NSP."""
    return _mlm(logits, labels) + nsp_weight * _nsp(nsp_logits, nsp_labels)


@known("misweighted")
def weight_on_the_total(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """Mlm_weight * (MLM + nsp_weight * NSP)."""
    return mlm_weight * (_mlm(logits, labels) + nsp_weight * _nsp(nsp_logits, nsp_labels))


@known("misweighted")
def normalises_the_weights(
    logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """The weighted sum / (sum of weights)."""
    total = mlm_weight * _mlm(logits, labels) + nsp_weight * _nsp(nsp_logits, nsp_labels)
    return total / (mlm_weight + nsp_weight)


@known("swapped_nsp_labels")
def is_next_is_one(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """The NSP loss of the swapped labels as the NSP part."""
    nsp = F.cross_entropy(nsp_logits.float(), 1 - nsp_labels)  # d2l's convention: is_next -> 1
    return mlm_weight * _mlm(logits, labels) + nsp_weight * nsp


@known("sum_not_mean")
def nsp_summed(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """The NSP sum over the sequences as the NSP part."""
    nsp = F.cross_entropy(nsp_logits.float(), nsp_labels, reduction="sum")
    return mlm_weight * _mlm(logits, labels) + nsp_weight * nsp


@known("class_dim")
def nsp_softmax_over_batch(
    logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """The NSP softmax over the sequences as the NSP part."""
    nsp = -nsp_logits.float().log_softmax(dim=0).gather(1, nsp_labels.unsqueeze(1)).mean()
    return mlm_weight * _mlm(logits, labels) + nsp_weight * nsp


def _mistakes(case: Case) -> list[Candidate]:
    """The values known mistakes give on ``case``: the catalogue's, then the MLM part's own."""
    mlm_logits, nsp_logits, labels, nsp_labels = (a.detach() for a in case.args)
    a = case.kwargs.get("mlm_weight", 1.0)
    b = case.kwargs.get("nsp_weight", 1.0)
    m = mean_ce(mlm_logits, labels)
    nsp = float(F.cross_entropy(nsp_logits.double(), nsp_labels))
    parts = f"(MLM part {m:.4f}, NSP part {nsp:.4f})"
    found = known_outputs("bert_pretraining_loss", case, float, parts=parts)
    if a + b == 2:  # the average: diagnose asks again with other weights
        found = [c for c in found if c[1] != "the weighted sum / (sum of weights)"]
    mlm_part = mlm_outputs(mlm_logits, labels)  # the mistakes of mlm_loss's catalogue
    return found + [(c, f"{what} as the MLM part", a * v + b * nsp) for c, what, v in mlm_part]


def _diagnose(run: Runner) -> Diagnose:
    def diagnose(case: Case, got: float, expected: float) -> Mistake | None:
        found = named(case, got, expected, _mistakes(case))
        if found is not None and found.code == "averages_losses" and not case.kwargs:
            again = Case(f"{case.label} with mlm_weight=2, nsp_weight=0.25", case.args, WEIGHTS)
            now = float(as_loss(again, run.call(again)).detach())
            want = run.expected(again)
            found = named(again, now, float(want.detach()), _mistakes(again))  # or normalised?
        return found

    return diagnose


def _generated() -> list[Case]:
    """The cases of :data:`GENERATED` (every row draws random NSP labels, used or not)."""
    g = gen(57)
    out = []
    for i, (row, (logits, labels)) in enumerate(zip(GENERATED, batches(53, len(GENERATED)))):
        B = labels.shape[0]
        drawn = torch.randint(2, (B,), generator=g)
        nsp_labels = {"zeros": torch.zeros(B), "ones": torch.ones(B), "random": drawn}
        nsp_logits = (torch.randn(B, 2, generator=g) * 1.5).requires_grad_()
        kwargs = {"mlm_weight": row.mlm_weight, "nsp_weight": row.nsp_weight}
        args = (logits, nsp_logits, labels, nsp_labels[row.nsp_labels].long())
        label = describe(logits, labels, f"generated case {i + 1}", nsp_labels=args[3].tolist())
        out.append(Case(label.replace("(logits", "(mlm_logits"), args, kwargs))
    return out


def check_bert_pretraining_loss(run: Runner) -> None:
    V = 17
    B = 4
    T = 8
    mlm_logits = random_logits(51, (B, T, V)).requires_grad_()  # (B, T, V)
    nsp_logits = random_logits(52, (B, 2)).requires_grad_()  # (B, 2)
    labels = mlm_labels(53, B, T, V, per_row=[2, 3, 1, 2])  # (B, T)
    nsp_labels = torch.tensor([0, 1, 1, 0])  # (B,) 0 = IsNext
    args = (mlm_logits, nsp_logits, labels, nsp_labels)
    first = Case(
        f"hidden case 1 (mlm_logits {(B, T, V)} with {int((labels != IGNORE_INDEX).sum())} masked "
        f"targets, nsp_logits {(B, 2)}, nsp_labels {nsp_labels.tolist()}, default weights)",
        args,
        ok=(
            "default weights: MLM mean over masked positions + NSP cross-entropy (0 = IsNext), "
            "as `BertForPreTraining`",
            "returns a 0-dim tensor that backpropagates to the logits with the right gradient",
        ),
    )
    weighted = Case(
        "hidden case 2 (the same with mlm_weight=2.0, nsp_weight=0.25)",
        args,
        WEIGHTS,
        ok="weights: `mlm_weight * MLM + nsp_weight * NSP`",
    )
    for case in (first, weighted):
        check_loss(run, case, diagnose=_diagnose(run))
        run.passed_case(case)
    nothing = (mlm_logits, nsp_logits, torch.full_like(labels, IGNORE_INDEX), nsp_labels)
    empty = Case("hidden case 3 (no masked token: every MLM label is -100)", nothing)
    check_loss(run, empty, empty=True, diagnose=_diagnose(run))
    for case in _generated():
        no_target = not (case.args[2] != IGNORE_INDEX).any()
        check_loss(run, case, empty=bool(no_target), diagnose=_diagnose(run))
    run.ok("no masked token: the total is the NSP part, never NaN")
