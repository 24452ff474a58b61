"""Input validation shared by the core functions.

Every public function checks its arguments here first, so a learner gets a ValueError or
TypeError that names the argument instead of an error from deep inside torch.
"""

from __future__ import annotations

import numbers

import torch

IGNORE_INDEX = -100  # transformers' convention for "no loss here" (CrossEntropyLoss.ignore_index)


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as a float in [0, 1] or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(value).__name__}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


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
    """Require a floating-point tensor (logits) with at least ``min_ndim`` dimensions."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of floats, got {type(value).__name__}")
    if not value.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor (logits), got dtype {value.dtype}")
    if value.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {tuple(value.shape)}"
        )
    return value


def check_labels(name: str, labels: object, vocab_size: int) -> torch.Tensor:
    """Labels are integer ids in [0, vocab_size) or -100 (ignored)."""
    labels = check_int_tensor(name, labels)
    if labels.numel():
        valid = (labels == IGNORE_INDEX) | ((labels >= 0) & (labels < vocab_size))
        if not bool(valid.all()):
            bad = labels[~valid][0].item()
            raise ValueError(
                f"{name} must hold ids in [0, {vocab_size}) or {IGNORE_INDEX} (ignored); found {bad}"
            )
    return labels


def check_num_items(num_items_in_batch: object) -> float | int | None:
    """``num_items_in_batch`` is None or a positive count of target tokens.

    An int, a float or a one-element tensor (transformers' Trainer passes a tensor, a float one
    when it divides the count by parallelism sizes) are accepted.
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
    if not value > 0:
        raise ValueError(
            f"num_items_in_batch must be a positive count of target tokens, got {value} "
            "(count the labels != -100 over all micro-batches; for CLM count after the shift)"
        )
    return value


def check_generator(generator: object) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    return generator
