"""Checker for the ``bert_pretraining_loss`` exercise: ``mlm_weight * MLM + nsp_weight * NSP``.

Hidden case 1 (default weights: value, then gradient), 2 (``mlm_weight=2``,
``nsp_weight=0.25``), 3 (nothing masked). A wrong value is compared with what known mistakes
give (averaging the two losses, NSP labels read the wrong way round, weights ignored, swapped or
normalised, ...). The checks shared by every loss are in :mod:`lmlessons.exercises._loss_checks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import mlm_labels, random_logits
from lmlessons.exercises._loss_checks import (
    REFERENCES,
    Candidate,
    LossCall,
    check_value_and_grad,
    close,
    explain_empty,
    first_match,
    token_ce,
)
from lmlessons.exercises._runner import Mistake, Runner

__all__ = ["BERT_SIGNATURE", "check_bert_pretraining_loss"]

BERT_SIGNATURE = (
    "bert_pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, "
    "nsp_weight=1.0) -> loss"
)


# ------------------------------------------------------------------------ bert_pretraining_loss


@dataclass(frozen=True)
class _BertParts:
    """The two terms of hidden case 1, computed independently in float64."""

    mlm: float  # mean over the masked positions
    nsp: float
    nsp_swapped: float  # NSP with the labels read the wrong way round
    mlm_all: float  # the MLM sum over every position
    count: int
    numel: int

    @classmethod
    def of(
        cls,
        mlm_logits: torch.Tensor,
        nsp_logits: torch.Tensor,
        mlm_lab: torch.Tensor,
        nsp_lab: torch.Tensor,
    ) -> _BertParts:
        ce = token_ce(mlm_logits, mlm_lab)
        count = int((mlm_lab != IGNORE_INDEX).sum())
        return cls(
            mlm=float(ce.sum()) / count,
            nsp=float(F.cross_entropy(nsp_logits.double(), nsp_lab)),
            nsp_swapped=float(F.cross_entropy(nsp_logits.double(), 1 - nsp_lab)),
            mlm_all=float(ce.sum()) / mlm_lab.numel(),
            count=count,
            numel=mlm_lab.numel(),
        )

    def text(self) -> str:
        return f"MLM part {self.mlm:.4f}, NSP part {self.nsp:.4f}"


def _bert_mistakes(t: _BertParts, case: str, got: float, expected: float) -> list[Candidate]:
    """The values known mistakes give at the default weights, with their diagnoses."""
    parts = t.text()
    return [
        (
            "averages_losses",
            (t.mlm + t.nsp) / 2,
            "averages the two losses instead of adding them",
            f"On {case}, your loss is {got:.4f} = (MLM + NSP) / 2 ({parts}). BERT adds them: "
            f"`mlm_weight * MLM + nsp_weight * NSP` = {expected:.4f} (Google's run_pretraining.py, "
            "transformers' `BertForPreTraining`).",
        ),
        (
            "swapped_nsp_labels",
            t.mlm + t.nsp_swapped,
            "the NSP labels are read the wrong way round",
            f"On {case}, your NSP part is {t.nsp_swapped:.4f}, the loss for *swapped* labels. In "
            "BERT and transformers, `next_sentence_label` 0 means IsNext (B follows A) and 1 "
            "NotNext; use the labels as given, with class 0 = IsNext (d2l.ai uses the opposite "
            "convention).",
        ),
        (
            "mlm_counts_unmasked_positions",
            t.mlm_all + t.nsp,
            "the MLM part divides by every position",
            f"On {case}, your MLM part is {t.mlm_all:.4f} = sum over the {t.count} targets / "
            f"{t.numel} positions. Average over the masked positions only ({parts}).",
        ),
        (
            "missing_nsp",
            t.mlm,
            "the NSP loss is missing",
            f"On {case}, your loss equals the MLM part alone ({parts}). Add the NSP loss: "
            "cross-entropy of `nsp_logits` (B, 2) against `nsp_labels`.",
        ),
        (
            "missing_mlm",
            t.nsp,
            "the MLM loss is missing",
            f"On {case}, your loss equals the NSP part alone ({parts}). Add the MLM loss.",
        ),
    ]


_W_MLM, _W_NSP = 2.0, 0.25  # the weights of hidden case 2


def _weighted_mistakes(t: _BertParts, case_w: str, got: float, formula: str) -> list[Candidate]:
    """The values known mistakes give with ``mlm_weight=2``, ``nsp_weight=0.25``."""
    a, b = _W_MLM, _W_NSP
    return [
        (
            "unweighted",
            t.mlm + t.nsp,
            "the weights are ignored",
            f"On {case_w}, your loss is {got:.4f} = MLM + NSP, as if both weights were 1. Multiply "
            f"each part by its weight: {formula}.",
        ),
        (
            "misweighted",
            b * t.mlm + a * t.nsp,
            "the weights are swapped",
            f"On {case_w}, your loss is {got:.4f} = nsp_weight * MLM + mlm_weight * NSP. Expected "
            f"{formula}.",
        ),
        (
            "misweighted",
            (a * t.mlm + b * t.nsp) / (a + b),
            "the weighted sum is normalised by the weights",
            _normalised_why(t, case_w, formula),
        ),
        (
            "misweighted",
            a * t.mlm + t.nsp,
            "`nsp_weight` is ignored",
            f"On {case_w}, your loss is {got:.4f} = mlm_weight * MLM + NSP. Expected {formula}.",
        ),
        (
            "misweighted",
            t.mlm + b * t.nsp,
            "`mlm_weight` is ignored",
            f"On {case_w}, your loss is {got:.4f} = MLM + nsp_weight * NSP. Expected {formula}.",
        ),
        (
            "averages_losses",
            (a * t.mlm + b * t.nsp) / 2,
            "averages the two weighted losses instead of adding them",
            f"On {case_w}, your loss is {got:.4f}, half the weighted sum. Expected {formula}.",
        ),
    ]


def _normalised_why(t: _BertParts, case_w: str, formula: str) -> str:
    normalised = (_W_MLM * t.mlm + _W_NSP * t.nsp) / (_W_MLM + _W_NSP)
    return (
        f"On {case_w}, your loss is {normalised:.4f}, the weighted sum divided by mlm_weight + "
        "nsp_weight (at the default weights that halves the sum). BERT's loss is the plain "
        f"weighted sum: {formula}."
    )


class _BertCase:
    """Hidden cases 1 to 3 of ``bert_pretraining_loss``: one batch, default and other weights."""

    def __init__(self, run: Runner) -> None:
        V, B, T = 17, 4, 8
        mlm_logits = random_logits(51, (B, T, V))  # (B, T, V)
        nsp_logits = random_logits(52, (B, 2))  # (B, 2)
        mlm_lab = mlm_labels(53, B, T, V, per_row=[2, 3, 1, 2])  # (B, T)
        nsp_lab = torch.tensor([0, 1, 1, 0])  # (B,) 0 = IsNext
        self.args = [mlm_logits, nsp_logits, mlm_lab, nsp_lab]
        self.parts = _BertParts.of(*self.args)
        self.call = LossCall(run, ["mlm_logits", "nsp_logits", "mlm_labels", "nsp_labels"])
        self.case = (
            f"hidden case 1 (mlm_logits {tuple(mlm_logits.shape)} with {self.parts.count} masked "
            f"targets, nsp_logits {tuple(nsp_logits.shape)}, nsp_labels {nsp_lab.tolist()}, "
            "default weights)"
        )
        self.case_w = (
            f"hidden case 2 (the same inputs with mlm_weight={_W_MLM}, nsp_weight={_W_NSP})"
        )
        expected_w = float(
            REFERENCES["bert_pretraining_loss"](*self.args, mlm_weight=_W_MLM, nsp_weight=_W_NSP)
        )
        self.expected_w = expected_w
        self.formula = (
            f"{_W_MLM} * {self.parts.mlm:.4f} + {_W_NSP} * {self.parts.nsp:.4f} = {expected_w:.4f}"
        )

    def weighted(self) -> float:
        loss, _ = self.call(self.args, self.case_w, mlm_weight=_W_MLM, nsp_weight=_W_NSP)
        return float(loss.detach())


def _diagnose_bert(c: _BertCase, got: float, expected: float) -> Mistake:
    t = c.parts
    if close(got, (t.mlm + t.nsp) / 2):  # an average, or a sum normalised by the weights?
        normalised = (_W_MLM * t.mlm + _W_NSP * t.nsp) / (_W_MLM + _W_NSP)
        if close(c.weighted(), normalised):
            return Mistake(
                "misweighted",
                "the weighted sum is normalised by the weights",
                _normalised_why(t, c.case_w, c.formula),
            )
    first_match(got, expected, _bert_mistakes(t, c.case, got, expected))
    return Mistake(
        "wrong_value",
        "wrong loss value",
        f"On {c.case}, your loss is {got:.6f}; expected MLM + NSP = {expected:.6f} ({t.text()}).",
    )


def _bert_weights_case(run: Runner, c: _BertCase) -> None:
    """Hidden case 2: ``mlm_weight * MLM + nsp_weight * NSP``."""
    got = c.weighted()
    if not close(got, c.expected_w):
        first_match(got, c.expected_w, _weighted_mistakes(c.parts, c.case_w, got, c.formula))
        raise Mistake(
            "misweighted",
            "wrong value with non-default weights",
            f"On {c.case_w}, your loss is {got:.6f}; expected mlm_weight * MLM + nsp_weight * NSP "
            f"= {c.formula}.",
        )
    run.ok("weights: `mlm_weight * MLM + nsp_weight * NSP`")


def _bert_empty_case(run: Runner, c: _BertCase) -> None:
    """Hidden case 3: no masked token: the total is the NSP part, never NaN."""
    mlm_logits, nsp_logits, mlm_lab, nsp_lab = c.args
    empty = torch.full_like(mlm_lab, IGNORE_INDEX)
    case_e = "hidden case 3 (no masked token in the batch: every MLM label is -100)"
    loss, _ = c.call([mlm_logits, nsp_logits, empty, nsp_lab], case_e, explain=explain_empty)
    got, nsp = float(loss.detach()), c.parts.nsp
    if not math.isfinite(got):
        raise Mistake(
            "nan_when_nothing_masked",
            "NaN when nothing is masked",
            f"On {case_e}, your loss is {got}. The MLM part must be 0 when there is no masked "
            "token (a mean over zero targets is 0 / 0 = NaN with `reduction='mean'`), so the "
            f"total is just the NSP part ({nsp:.4f}). One NaN loss destroys the weights at the "
            "next step.",
        )
    if not close(got, nsp):
        raise Mistake(
            "empty_not_zero",
            "the MLM part is not 0 when nothing is masked",
            f"On {case_e}, your loss is {got:.4f}; with no masked token it must equal the NSP "
            f"part, {nsp:.4f}.",
        )
    run.ok("no masked token: the total is the NSP part, never NaN")


def check_bert_pretraining_loss(run: Runner) -> None:
    """Hidden case 1 (default weights: value, then gradient), 2 (other weights), 3 (nothing
    masked)."""
    c = _BertCase(run)
    check_value_and_grad(
        run,
        c.call,
        c.args,
        c.case,
        REFERENCES["bert_pretraining_loss"],
        lambda got, exp: _diagnose_bert(c, got, exp),
        "default weights: MLM mean over masked positions + NSP cross-entropy (0 = IsNext), as "
        "`BertForPreTraining`",
    )
    _bert_weights_case(run, c)
    _bert_empty_case(run, c)
