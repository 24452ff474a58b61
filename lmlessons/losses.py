"""The training losses: MLM, CLM, NSP and BERT's combined pretraining loss.

All four reduce the terms of one kernel, :func:`token_nll` (the loss of every position).

They mirror transformers' ``loss/loss_utils.py`` (``fixed_cross_entropy``, ``ForMaskedLMLoss``,
``ForCausalLMLoss``) and ``BertForPreTraining`` and are tested to equal them to 1e-5, with two
deliberate differences, both documented where they happen:

* a batch with no target token gives a loss of exactly 0 that still backpropagates (zero
  gradients), where ``F.cross_entropy(..., reduction="mean")`` gives NaN (0 / 0);
* ``num_items_in_batch`` is validated (a count of 0 is an error, not a division by zero).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmlessons._checks import (
    IGNORE_INDEX,
    check_float_tensor,
    check_labels,
    check_logits_labels,
    check_num_items,
)
from lmlessons.shifting import shift_labels


def token_nll(
    logits: torch.Tensor, labels: torch.Tensor, *, shift: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nll, has_target)``, both of ``labels``' shape: the loss in nats of every position (0
    where there is no target) and whether it has a target. The one per-token kernel: the losses
    below, :mod:`lmlessons.perplexity` and ``answer_only.per_example_mean_loss`` reduce it.

    1. ``shift=True`` (causal LM): ``labels`` are unshifted and position t is scored against
       ``labels[..., t + 1]`` (:func:`lmlessons.shift_labels`, as in ``ForCausalLMLoss``);
       ``shift=False`` (MLM, NSP): position t predicts its own label.
    2. Cross-entropy per position on float32 logits (upcast like ``ForCausalLMLoss``), -100
       ignored: ``F.cross_entropy(..., reduction="none")``, the terms ``fixed_cross_entropy``
       sums. With no target at all the zeros still backpropagate (zero gradients).
    """
    logits, labels = check_logits_labels(logits, labels)
    targets = shift_labels(labels) if shift else labels  # (B, T): targets[:, t] = labels[:, t + 1]
    vocab_size = logits.shape[-1]
    nll = F.cross_entropy(
        logits.float().reshape(-1, vocab_size),  # (B*T, V)
        targets.reshape(-1),  # (B*T,)
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(targets.shape)  # (B, T), 0 where ignored
    return nll, targets != IGNORE_INDEX


def reduce_loss(
    nll: torch.Tensor, has_target: torch.Tensor, num_items_in_batch: float | None
) -> torch.Tensor:
    """The loss of a batch from :func:`token_nll`'s terms (transformers' ``fixed_cross_entropy``).

    ``num_items_in_batch=None``: the mean over target positions (0, not NaN, when there are
    none). Otherwise the *sum* divided by ``num_items_in_batch``: summing these over micro-batches
    with one shared count gives the full-batch mean (the October 2024 gradient-accumulation fix).
    """
    total = nll.sum()  # (), 0.0 and still connected to the logits when nothing is a target
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / max(int(has_target.sum()), 1)


def _check_nsp(
    logits: object, labels: object, logits_name: str = "logits", labels_name: str = "labels"
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = check_float_tensor(logits_name, logits, min_ndim=2)
    if logits.dim() != 2 or logits.shape[-1] != 2:
        raise ValueError(
            f"{logits_name} must have shape (B, 2) for (IsNext, NotNext), got {tuple(logits.shape)}"
        )
    labels = check_labels(labels_name, labels, 2)
    if tuple(labels.shape) != (logits.shape[0],):
        raise ValueError(
            f"{labels_name} must have shape ({logits.shape[0]},), got {tuple(labels.shape)}"
        )
    if bool((labels == IGNORE_INDEX).any()):
        raise ValueError(
            f"{labels_name} must be 0 (IsNext) or 1 (NotNext); {IGNORE_INDEX} is not allowed here"
        )
    return logits, labels


def mlm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Masked-LM loss: cross-entropy over positions whose label is not -100.

    Args:
        logits: ``(B, T, V)`` scores from the MLM head.
        labels: ``(B, T)`` original ids at selected positions, -100 elsewhere (from
            :func:`lmlessons.mask_tokens`). No shift: position t predicts its own token.
        num_items_in_batch: total count of labelled positions over all micro-batches of one
            optimizer step (an int, a float or a one-element tensor, as transformers' Trainer
            passes it); when given, returns sum / count.

    Equals ``BertForMaskedLM(...).loss`` (transformers ``ForMaskedLMLoss``).
    """
    n = check_num_items(num_items_in_batch)
    return reduce_loss(*token_nll(logits, labels, shift=False), n)


def clm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal-LM (next-token) loss. ``labels`` are *unshifted*: shifting happens here.

    Args:
        logits: ``(B, T, V)``; position t scores the token at t + 1.
        labels: ``(B, T)``, ``input_ids.clone()`` with -100 where nothing is learned (padding).
            Do not shift them yourself: pre-shifted labels train next-*next*-token prediction.
        num_items_in_batch: total count of targets *after the shift* over all micro-batches.

    Equals transformers' ``ForCausalLMLoss`` and so the loss of ``GPT2LMHeadModel`` and
    ``BertLMHeadModel(is_decoder=True)``.
    """
    n = check_num_items(num_items_in_batch)
    return reduce_loss(*token_nll(logits, labels, shift=True), n)


def nsp_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-sentence-prediction loss: mean cross-entropy over ``(B, 2)`` logits.

    ``labels`` ``(B,)``: 0 = IsNext (B really follows A), 1 = NotNext (B comes from another
    document). This is BERT's and transformers' ``next_sentence_label`` convention; d2l.ai uses
    the opposite (``is_next=True`` -> 1), so mixing code from the two silently flips the task.
    """
    logits, labels = _check_nsp(logits, labels)
    return reduce_loss(*token_nll(logits, labels, shift=False), None)


def bert_pretraining_loss(
    mlm_logits: torch.Tensor,
    nsp_logits: torch.Tensor,
    mlm_labels: torch.Tensor,
    nsp_labels: torch.Tensor,
    *,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
) -> torch.Tensor:
    """BERT's pretraining loss: ``mlm_weight * MLM + nsp_weight * NSP``.

    The two terms are means over different units: MLM over masked tokens, NSP over sequences.
    At the default weights this equals ``BertForPreTraining(...).loss`` (and Google's
    ``run_pretraining.py``: ``total_loss = masked_lm_loss + next_sentence_loss``).
    """
    for name, w in (("mlm_weight", mlm_weight), ("nsp_weight", nsp_weight)):
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(w).__name__}")
        if not w >= 0:
            raise ValueError(f"{name} must be >= 0, got {w}")
    mlm_logits, mlm_labels = check_logits_labels(mlm_logits, mlm_labels, "mlm_logits", "mlm_labels")
    nsp_logits, nsp_labels = _check_nsp(nsp_logits, nsp_labels, "nsp_logits", "nsp_labels")
    if mlm_logits.dim() == 3 and mlm_logits.shape[0] != nsp_logits.shape[0]:
        raise ValueError(
            f"mlm_logits (B, T, V) and nsp_logits (B, 2) must share B, got {mlm_logits.shape[0]} "
            f"and {nsp_logits.shape[0]}"
        )
    mlm = reduce_loss(*token_nll(mlm_logits, mlm_labels, shift=False), None)
    nsp = reduce_loss(*token_nll(nsp_logits, nsp_labels, shift=False), None)
    return mlm_weight * mlm + nsp_weight * nsp
