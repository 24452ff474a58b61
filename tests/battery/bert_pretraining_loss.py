"""Battery for ``bert_pretraining_loss`` (lesson 06): BERT's combined MLM + NSP loss, beyond
the catalogue (``check_pretraining.py``) and the structural mistakes (``_structural.py``).

The statement a learner sees: the MLM mean over labelled positions (0, not NaN, when nothing is
masked), plus the NSP mean over sequences (label 0 = IsNext), each times its weight; compared
with ``lmlessons.bert_pretraining_loss``, which equals ``BertForPreTraining``'s loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import correct, wrong

IGNORE = -100


def _mlm(mlm_logits, mlm_labels):
    """The MLM mean over labelled positions, 0 when there is none."""
    total = F.cross_entropy(mlm_logits.transpose(1, 2), mlm_labels, reduction="sum")  # (B, V, T)
    return total / (mlm_labels != IGNORE).sum().clamp(min=1)


def _nsp(nsp_logits, nsp_labels):
    return F.cross_entropy(nsp_logits, nsp_labels)  # (B, 2) vs (B,): mean over sequences


# ---------------------------------------------------------------- wrong attempts


@wrong("nan_when_no_targets")
def nan_when_nothing_masked(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """MLM term as a plain F.cross_entropy mean: NaN when nothing is masked, and the sum is NaN."""
    mlm = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]), mlm_labels.reshape(-1))
    return mlm_weight * mlm + nsp_weight * _nsp(nsp_logits, nsp_labels)  # NaN + NSP = NaN


@wrong(says="nsp_labels [0, 1, 1, 0], default weights), the loss is 4.7896; expected 4.82675")
def nsp_binary_on_one_logit(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """NSP as a binary cross-entropy on the NotNext logit alone."""
    nsp = F.binary_cross_entropy_with_logits(nsp_logits[:, 1], nsp_labels.float())  # no IsNext
    return mlm_weight * _mlm(mlm_logits, mlm_labels) + nsp_weight * nsp


# ---------------------------------------------------------------- correct attempts


@correct
def two_cross_entropy_modules(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """BertForPreTraining's CrossEntropyLoss() pair, NaN -> 0."""
    ce = torch.nn.CrossEntropyLoss()
    mlm = ce(mlm_logits.view(-1, mlm_logits.shape[-1]), mlm_labels.view(-1))
    mlm = torch.where(torch.isnan(mlm), torch.zeros_like(mlm), mlm)
    return mlm_weight * mlm + nsp_weight * ce(nsp_logits.view(-1, 2), nsp_labels.view(-1))


@correct
def by_hand(mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0):
    """log_softmax and gather for both terms, weights clamped."""
    weights = (mlm_labels != IGNORE).to(mlm_logits.dtype)  # (B, T)
    log_probs = mlm_logits.log_softmax(-1)  # (B, T, V)
    nll = -log_probs.gather(-1, mlm_labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    mlm = (weights * nll).sum() / weights.sum().clamp(min=1.0)
    nsp_log_probs = nsp_logits.log_softmax(-1)  # (B, 2)
    nsp = -nsp_log_probs[torch.arange(nsp_labels.shape[0]), nsp_labels].mean()
    return mlm_weight * mlm + nsp_weight * nsp


@correct
def the_course_losses(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """The course's mlm_loss and nsp_loss, weighted."""
    from lmlessons import mlm_loss, nsp_loss

    return mlm_weight * mlm_loss(mlm_logits, mlm_labels) + nsp_weight * nsp_loss(
        nsp_logits, nsp_labels
    )


@correct
def nsp_as_logit_difference(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """NSP as a sigmoid of the logit difference."""
    is_target = mlm_labels != IGNORE
    mlm = F.cross_entropy(mlm_logits[is_target], mlm_labels[is_target], reduction="sum")
    mlm = mlm / is_target.sum().clamp(min=1)
    # two-class softmax = a sigmoid of the logit difference (NotNext minus IsNext)
    nsp = F.binary_cross_entropy_with_logits(
        nsp_logits[:, 1] - nsp_logits[:, 0], nsp_labels.to(nsp_logits.dtype)
    )
    return mlm_weight * mlm + nsp_weight * nsp


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.losses.bert_pretraining_loss")
def the_course_bert_pretraining_loss(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """Calls the course's own bert_pretraining_loss: nothing written."""
    from lmlessons import bert_pretraining_loss

    return bert_pretraining_loss(
        mlm_logits, nsp_logits, mlm_labels, nsp_labels, mlm_weight=mlm_weight, nsp_weight=nsp_weight
    )


@wrong("delegates_to_course", says="reference solution")
def the_reference_mlm_loss(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """Weights the reference solution of mlm_loss (not a building block) and its own NSP term."""
    from lmlessons.exercises.solutions import mlm_loss

    nsp = F.cross_entropy(nsp_logits.float(), nsp_labels)
    return mlm_weight * mlm_loss(mlm_logits, mlm_labels) + nsp_weight * nsp
