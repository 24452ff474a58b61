"""Checker for ``bert_pretraining_loss``: ``mlm_weight * MLM + nsp_weight * NSP``, in the runner's
pattern (:mod:`._framework`): cases and known mistakes only.

Cases, in order (the first failure is reported): 1. four sequences at the default weights (the
value, then the gradients for both logits); 2. the same with ``mlm_weight=2``,
``nsp_weight=0.25``; 3. no masked token (the total is the NSP part); 4. 12 seeded batches at the
corners (:func:`_generated`: NSP labels all 0, all 1 or mixed, weights 0 to 3). A wrong value is
compared with what the known mistakes (the catalogue below: how the two parts combine, and the
MLM part's own mistakes, ``mlm_loss``'s) give on the same case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import gen, mlm_labels, random_logits
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner
from lmlessons.exercises._loss_checks import (
    Candidate,
    Diagnose,
    as_loss,
    batches,
    ce_over,
    check_loss,
    describe,
    mlm_outputs,
    named,
    token_fields,
)

BERT_SIGNATURE = (
    "bert_pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, "
    "nsp_weight=1.0) -> loss"
)
WEIGHTS = {"mlm_weight": 2.0, "nsp_weight": 0.25}  # hidden case 2
#: The generated cases: case i has the NSP labels ``_NSP_KINDS[i % 3]`` and the weights
#: ``_WEIGHT_PAIRS[i % 5]``, so every pair of weights meets more than one kind of labels.
_NSP_KINDS = ("zeros", "ones", "random")
_WEIGHT_PAIRS = ((1.0, 1.0), (0.5, 2.0), (0.0, 1.0), (1.0, 0.0), (3.0, 0.1))


# --------------------------------------------------------------------------- known mistakes
# Small wrong implementations, each with its mistake code: the two right parts put together the
# wrong way, or one part computed wrong (a docstring's ``{parts}``: the case's two right parts);
# the MLM part's own mistakes are ``mlm_loss``'s entries of the codes :data:`_MLM_PART`. The
# other mistakes of ``mlm_loss``'s catalogue are evaluated on the MLM part too
# (:func:`._loss_checks.mlm_outputs`, in :func:`_mistakes`).

known = Catalogue("bert_pretraining_loss")
_Part = Callable[[Any, Any], Any]


def _weighted(mlm: Any, nsp: Any, mlm_weight: float, nsp_weight: float) -> Any:
    return mlm_weight * mlm + nsp_weight * nsp


def _nsp(nsp_logits: Any, nsp_labels: Any) -> Any:
    return F.cross_entropy(nsp_logits.float(), nsp_labels)  # (B, 2) vs (B,): mean over sequences


def _entry(
    name: str,
    code: str,
    does: str,
    combine: Callable[[Any, Any, float, float], Any] = _weighted,
    mlm: _Part = ce_over,
    nsp: _Part = _nsp,
) -> None:
    """Catalogue ``name`` (docstring ``does``): ``combine(mlm, nsp, mlm_weight, nsp_weight)`` of
    the MLM part ``mlm(logits, labels)`` and the NSP part ``nsp(nsp_logits, nsp_labels)``."""

    def wrong(logits, nsp_logits, labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
        parts = mlm(logits, labels), nsp(nsp_logits, nsp_labels)
        return combine(*parts, mlm_weight, nsp_weight)

    wrong.__name__, wrong.__doc__ = name, does
    known(code)(wrong)


_entry(
    "averages_the_two",
    "averages_losses",
    "Half the weighted sum {parts}.",
    lambda m, n, a, b: (a * m + b * n) / 2,
)
_entry("mlm_only", "missing_nsp", "The MLM part alone {parts}.", lambda m, n, a, b: a * m)
_entry("nsp_only", "missing_mlm", "The NSP part alone {parts}.", lambda m, n, a, b: b * n)
_entry("ignores_the_weights", "unweighted", "MLM + NSP {parts}.", lambda m, n, a, b: m + n)
_entry(
    "swaps_the_weights",
    "misweighted",
    "Nsp_weight * MLM + mlm_weight * NSP.",
    lambda m, n, a, b: b * m + a * n,
)
_entry("only_nsp_weighted", "misweighted", "MLM + nsp_weight * NSP.", lambda m, n, a, b: m + b * n)
_entry(
    "weight_on_the_total",
    "misweighted",
    "Mlm_weight * (MLM + nsp_weight * NSP).",
    lambda m, n, a, b: a * (m + b * n),
)
_entry(
    "normalised_weights",
    "misweighted",
    "The weighted sum / (sum of weights).",
    lambda m, n, a, b: (a * m + b * n) / (a + b),
)
_entry(
    "is_next_is_one",
    "swapped_nsp_labels",
    "The NSP loss of the swapped labels as the NSP part.",
    nsp=lambda x, y: _nsp(x, 1 - y),  # d2l's convention: is_next -> 1
)
_entry(
    "nsp_summed",
    "sum_not_mean",
    "The NSP sum over the sequences as the NSP part.",
    nsp=lambda x, y: F.cross_entropy(x.float(), y, reduction="sum"),
)
_entry(
    "nsp_over_the_batch",
    "class_dim",
    "The NSP softmax over the sequences as the NSP part.",
    nsp=lambda x, y: -x.float().log_softmax(dim=0).gather(1, y.unsqueeze(1)).mean(),
)

#: The codes of ``mlm_loss``'s entries catalogued as the MLM part of this loss.
_MLM_PART = ("counts_unmasked_positions", "per_row_mean", "skips_target_zero")
for _mlm in Catalogue("mlm_loss").entries:  # check_losses, imported first, catalogued them
    if _mlm.code in _MLM_PART:
        _does = f"{(_mlm.fn.__doc__ or '').strip().rstrip('.')} as the MLM part."
        _entry(f"{_mlm.fn.__name__}_as_mlm_part", _mlm.code, _does, mlm=_mlm.fn)


def _mistakes(case: Case) -> list[Candidate]:
    """The values known mistakes give on ``case``: the catalogue's, then the MLM part's own."""
    mlm_logits, nsp_logits, labels, nsp_labels = (a.detach() for a in case.args)
    a = case.kwargs.get("mlm_weight", 1.0)
    b = case.kwargs.get("nsp_weight", 1.0)
    fields = token_fields(mlm_logits, labels, 0, None)
    nsp = float(F.cross_entropy(nsp_logits.double(), nsp_labels))
    parts = f"(MLM part {fields['mean']:.4f}, NSP part {nsp:.4f})"
    found = known.outputs(case, float, parts=parts, **fields)
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
    """12 cases on the first :data:`._loss_checks.LOSS_BATCHES`, with the NSP labels and weights
    of :data:`_NSP_KINDS` and :data:`_WEIGHT_PAIRS` (every case draws random NSP labels, used
    or not)."""
    g = gen(57)
    out = []
    for i, (logits, labels) in enumerate(batches(53, 12)):
        B = labels.shape[0]
        drawn = torch.randint(2, (B,), generator=g)
        nsp_labels = {"zeros": torch.zeros(B), "ones": torch.ones(B), "random": drawn}
        nsp_logits = (torch.randn(B, 2, generator=g) * 1.5).requires_grad_()
        kwargs = dict(zip(("mlm_weight", "nsp_weight"), _WEIGHT_PAIRS[i % 5]))
        args = (logits, nsp_logits, labels, nsp_labels[_NSP_KINDS[i % 3]].long())
        label = describe(logits, labels, f"generated case {i + 1}", nsp_labels=args[3].tolist())
        out.append(Case(label.replace("(logits", "(mlm_logits"), args, kwargs))
    return out


def check_bert_pretraining_loss(run: Runner) -> None:
    B, T, V = 4, 8, 17
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
