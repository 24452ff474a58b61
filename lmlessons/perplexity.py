"""Perplexity and its relatives: what one number says about a language model, and what it does not.

* :func:`perplexity`: ``exp`` of the mean loss per *target token* over the whole batch or corpus
  (``exp(GPT2LMHeadModel(...).loss)`` for one batch): a token of a long text weighs as much as one
  of a short text;
* :func:`sequence_perplexities`: one perplexity per sequence; their mean is another, larger number;
* :func:`bits_per_unit`: a summed loss in nats as bits per byte or per character, the unit that
  compares models with different tokenizers;
* :func:`pseudo_perplexity`: a masked LM's score of a text, each token masked in turn (Salazar et
  al. 2020, "Masked Language Model Scoring", arXiv:1910.14659).

Kept apart from :mod:`lmlessons.losses`: those are training objectives; these are the
measurements a trained model is reported with, built on the same per-position losses
(:func:`lmlessons.losses.token_nll`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lmlessons._checks import check_float_tensor, check_int, check_int_tensor, check_model
from lmlessons.losses import token_nll

__all__ = [
    "perplexity",
    "sequence_perplexities",
    "bits_per_unit",
    "pseudo_log_likelihoods",
    "pseudo_perplexity",
]


def _batch_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lmlessons.losses.token_nll` of a batch of sequences, ``(B, T, V)`` logits only."""
    if isinstance(logits, torch.Tensor) and logits.dim() != 3:
        raise ValueError(f"logits must have shape (B, T, V), got {tuple(logits.shape)}")
    return token_nll(logits, labels, shift=True)  # (B, T), (B, T)


def perplexity(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """``exp(sum of token losses / number of target tokens)`` over the whole batch.

    Every target token weighs the same, whatever the length of its sequence: for a corpus, add
    the sums and the counts of all batches first and take ``exp`` once (what
    ``lmlessons.evaluate`` records as ``perplexity``).
    """
    nll, has_target = _batch_nll(logits, labels)  # (B, T), (B, T)
    count = int(has_target.sum())
    if count == 0:
        raise ValueError("labels hold no target token: perplexity is undefined")
    return math.exp(float(nll.sum()) / count)


def sequence_perplexities(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``(B,)``: ``exp`` of each sequence's own mean token loss. Their mean is not
    :func:`perplexity`: short sequences weigh as much as long ones, and ``exp`` of a mean is at
    most the mean of the ``exp`` (Jensen), so hard sequences pull it up."""
    nll, has_target = _batch_nll(logits, labels)  # (B, T), (B, T)
    counts = has_target.sum(-1)  # (B,)
    if bool((counts == 0).any()):
        raise ValueError("labels must give every sequence at least one target token")
    return torch.exp(nll.sum(-1) / counts)  # (B,)


def bits_per_unit(total_nll: float, num_units: int) -> float:
    """A summed loss in nats (natural log) as bits per unit: ``total_nll / (num_units * ln 2)``.

    With ``num_units`` the UTF-8 bytes (or characters) of the text the loss was summed over, two
    models with different tokenizers get numbers that compare: the text is the same, the tokens
    are not. (Bits per token = ``log2(perplexity)``, which depends on the tokenizer.)
    """
    if isinstance(total_nll, bool) or not isinstance(total_nll, (int, float)):
        raise TypeError(f"total_nll must be a number of nats, got {type(total_nll).__name__}")
    if not total_nll >= 0:
        raise ValueError(f"total_nll must be >= 0 (a summed loss in nats), got {total_nll}")
    num_units = check_int("num_units", num_units, minimum=1)
    return float(total_nll) / (num_units * math.log(2))


def _masked_copies(
    ids: torch.Tensor, scored: torch.Tensor, mask_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One copy of ``ids`` ``(T,)`` per scored position, that position replaced by
    ``mask_token_id``: ``(K, T)`` copies and the ``(K,)`` masked positions."""
    positions = scored.nonzero().flatten()  # (K,)
    copies = ids.repeat(len(positions), 1)  # (K, T)
    copies[torch.arange(len(positions)), positions] = mask_token_id
    return copies, positions


@torch.no_grad()
def pseudo_log_likelihoods(
    model: Any, input_ids: torch.Tensor, *, mask_token_id: int, scored: torch.Tensor
) -> torch.Tensor:
    """``(K,)`` log-probabilities (nats) of the scored tokens of one sequence ``(T,)``: each
    masked in its own copy, scored by the masked LM from both sides (Salazar et al. 2020).

    ``scored``: ``(T,)`` bool, the positions to score (not [CLS], [SEP] or padding). ``model``
    returns MLM logits as ``.logits`` (``BertForMaskedLM``) or ``.prediction_logits``
    (``BertForPreTraining``).
    """
    model = check_model(model)
    ids = check_int_tensor("input_ids", input_ids, ndim=1)
    mask_token_id = check_int("mask_token_id", mask_token_id, minimum=0)
    if not isinstance(scored, torch.Tensor) or scored.dtype != torch.bool:
        raise TypeError("scored must be a bool tensor (True where a token is scored)")
    if scored.shape != ids.shape or not bool(scored.any()):
        raise ValueError(f"scored must have shape {tuple(ids.shape)} and at least one True")
    copies, positions = _masked_copies(ids, scored, mask_token_id)  # (K, T), (K,)
    out = model(input_ids=copies)
    logits = getattr(out, "prediction_logits", None)
    logits = out.logits if logits is None else logits  # (K, T, V)
    rows = torch.arange(len(positions))
    log_probs = logits[rows, positions].float().log_softmax(-1)  # (K, V)
    return log_probs[rows, ids[positions]]  # (K,)


def pseudo_perplexity(log_likelihoods: list[torch.Tensor] | torch.Tensor) -> float:
    """``exp(-(sum of pseudo-log-likelihoods) / number of scored tokens)`` over a corpus:
    Salazar et al.'s PPPL from the :func:`pseudo_log_likelihoods` of each sequence."""
    parts = [log_likelihoods] if isinstance(log_likelihoods, torch.Tensor) else log_likelihoods
    if not parts:
        raise ValueError("log_likelihoods must hold at least one sequence's scores")
    values = torch.cat([check_float_tensor("log_likelihoods", p).flatten() for p in parts])
    if values.numel() == 0:
        raise ValueError("log_likelihoods must hold at least one scored token")
    return math.exp(-float(values.sum()) / values.numel())
