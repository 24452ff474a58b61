"""Input validation shared by the core functions.

Every public function checks its arguments here first, so a learner gets a ValueError or
TypeError that names the argument instead of an error from deep inside torch. This module is
also the one home of :data:`IGNORE_INDEX`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, TypeGuard

import torch

IGNORE_INDEX = -100  # transformers' convention for "no loss here" (CrossEntropyLoss.ignore_index)

# What the batch builders and the collator read from a BERT-style tokenizer.
BERT_TOKENIZER_ATTRS = (
    "pad_token_id",
    "cls_token_id",
    "sep_token_id",
    "mask_token_id",
    "all_special_ids",
)


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as a float in [0, 1] or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(value).__name__}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def check_replace_probs(
    mask_replace_prob: object, random_replace_prob: object
) -> tuple[float, float]:
    """BERT's 80/10/10: the shares of the selected positions that become [MASK] and a random id
    (the rest keep their token), each in [0, 1] and together at most 1."""
    p_mask = check_probability("mask_replace_prob", mask_replace_prob)
    p_random = check_probability("random_replace_prob", random_replace_prob)
    if p_mask + p_random > 1.0 + 1e-12:
        raise ValueError(
            f"mask_replace_prob + random_replace_prob must be <= 1 (the rest are kept), "
            f"got {p_mask} + {p_random} = {p_mask + p_random}"
        )
    return p_mask, p_random


def check_real(name: str, value: object, *, positive: bool = False) -> float:
    """A finite real number (not a bool) as a float: ``> 0`` with ``positive``, else ``>= 0``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {number}")
    return number


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` as a Python int (a 0-dim integer tensor is accepted)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(
                f"{name} must be an int, got a {value.dtype} tensor of shape {tuple(value.shape)}"
            )
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_int_tensor(name: str, value: object, *, ndim: int | None = None) -> torch.Tensor:
    """Require an integer (not bool) tensor, optionally of a given number of dimensions."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(value).__name__}")
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer ids (torch.long), got dtype {value.dtype}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    return value


def check_float_tensor(name: str, value: object, *, min_ndim: int = 1) -> torch.Tensor:
    """Require a floating-point tensor (logits, hidden states) with at least ``min_ndim``
    dimensions."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of floats, got {type(value).__name__}")
    if not value.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if value.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {tuple(value.shape)}"
        )
    return value


def check_same_shape(
    name_a: str,
    a: torch.Tensor,
    name_b: str,
    b: torch.Tensor,
    *,
    dims: str,
    ndim: int | None = None,
) -> None:
    """Require ``a`` and ``b`` (checked tensors) to have one shape, ``dims`` (``"(..., V)"``),
    of ``ndim`` dimensions if given."""
    if a.shape != b.shape or (ndim is not None and a.dim() != ndim):
        raise ValueError(
            f"{name_a} and {name_b} must have one shape {dims}, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )


def check_sequences(name: str, value: object, *, single: bool = False) -> torch.Tensor:
    """Token ids of shape ``(T,)`` or ``(B, T)`` with ``T >= 1``, returned as ``(B, T)``.
    ``single=True``: one sequence, ``(T,)`` or ``(1, T)``."""
    ids = check_int_tensor(name, value)
    shape = tuple(ids.shape)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[1] < 1 or (single and ids.shape[0] != 1):
        shapes = "one sequence of shape (T,) or (1, T)" if single else "of shape (T,) or (B, T)"
        raise ValueError(f"{name} must be {shapes} with T >= 1, got {shape}")
    return ids


def check_vocab(
    input_ids: torch.Tensor, *, mask_token_id: object, vocab_size: object
) -> tuple[int, int]:
    """``(mask_token_id, vocab_size)``: ``vocab_size >= 1``, and ``mask_token_id`` and every id
    of ``input_ids`` in ``[0, vocab_size)``."""
    vocab_size = check_int("vocab_size", vocab_size, minimum=1)
    mask_token_id = check_int("mask_token_id", mask_token_id)
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(
            f"mask_token_id must be in [0, vocab_size={vocab_size}), got {mask_token_id}"
        )
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab_size):
        raise ValueError(f"input_ids must be in [0, vocab_size={vocab_size}); found ids outside it")
    return mask_token_id, vocab_size


def check_labels(name: str, labels: object, vocab_size: int) -> torch.Tensor:
    """Labels are integer ids in [0, vocab_size) or -100 (ignored)."""
    labels = check_int_tensor(name, labels)
    if labels.numel():
        valid = (labels == IGNORE_INDEX) | ((labels >= 0) & (labels < vocab_size))
        if not bool(valid.all()):
            bad = labels[~valid][0].item()
            raise ValueError(
                f"{name} must hold ids in [0, {vocab_size}) or {IGNORE_INDEX} (ignored); "
                f"found {bad}"
            )
    return labels


def check_logits_labels(
    logits: object, labels: object, logits_name: str = "logits", labels_name: str = "labels"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float ``(..., V)`` logits and labels of shape ``logits.shape[:-1]`` (one per position), each
    an id in ``[0, V)`` or -100."""
    logits = check_float_tensor(logits_name, logits, min_ndim=2)
    labels = check_labels(labels_name, labels, logits.shape[-1])
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"{labels_name} must have shape {logits_name}.shape[:-1] = {tuple(logits.shape[:-1])} "
            f"(one label per position), got {tuple(labels.shape)}"
        )
    return logits, labels


def check_num_items(num_items_in_batch: object) -> float | None:
    """``num_items_in_batch`` is None or a positive count of target tokens.

    An int, a float or a one-element tensor (transformers' Trainer passes a tensor, a float one
    when it divides the count by parallelism sizes) are accepted; an int stays an int.
    """
    if num_items_in_batch is None:
        return None
    value = num_items_in_batch
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype == torch.bool or value.dtype.is_complex:
            raise TypeError(
                f"num_items_in_batch must be a number or a one-element tensor, got a {value.dtype} "
                f"tensor of shape {tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"num_items_in_batch must be a number, got {type(value).__name__}")
    count = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not count > 0:  # also rejects NaN
        raise ValueError(
            f"num_items_in_batch must be a positive count of target tokens, got {count} "
            "(count the labels != -100 over all micro-batches; for CLM count after the shift)"
        )
    return count


def check_generator(generator: object) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    return generator


def check_model(model: object) -> torch.nn.Module:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module (a transformers model), got {type(model).__name__}"
        )
    return model


def check_tokenizer(tokenizer: Any, attrs: Sequence[str] = BERT_TOKENIZER_ATTRS) -> Any:
    """Require the tokenizer attributes ``attrs`` (ids are read from it, never hard-coded)."""
    for attr in attrs:
        if getattr(tokenizer, attr, None) is None:
            raise ValueError(
                f"tokenizer must define {attr} (a BERT-style tokenizer such as "
                "lmlessons.load_tokenizer())"
            )
    return tokenizer


def _is_list(value: object) -> TypeGuard[Sequence[Any]]:
    """A list-like of items (a str is a sequence of characters, not a list of tokens)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _check_sentence(name: str, sentence: object) -> list[int]:
    if isinstance(sentence, torch.Tensor):
        sentence = sentence.tolist()
    if not _is_list(sentence):
        raise TypeError(
            f"{name} must be a list of token ids (tokenize first), got {type(sentence).__name__}"
        )
    if len(sentence) == 0:
        raise ValueError(f"{name} is an empty sentence")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in sentence):
        raise TypeError(f"{name} must hold int token ids")
    return list(sentence)


def check_token_documents(name: str, documents: object) -> list[list[list[int]]]:
    """Tokenized documents: a non-empty list of documents, each a non-empty list of sentences,
    each a non-empty list of int token ids (a 1-D tensor is accepted). Returns new lists."""
    if not _is_list(documents):
        raise TypeError(
            f"{name} must be a list of documents, each a list of sentences of token ids"
        )
    if len(documents) == 0:
        raise ValueError(f"{name} must not be empty")
    out = []
    for d, doc in enumerate(documents):
        if not _is_list(doc):
            raise TypeError(
                f"{name}[{d}] must be a list of sentences (lists of token ids), "
                f"got {type(doc).__name__}"
            )
        if len(doc) == 0:
            raise ValueError(f"{name}[{d}] is empty: every document needs at least one sentence")
        out.append([_check_sentence(f"{name}[{d}][{s}]", sent) for s, sent in enumerate(doc)])
    return out
