"""Helpers of the tests that pin exact behaviour (the mutation tests): a seeded generator, an
error of exactly one type with exactly one message, and two dicts of equal tensors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch


def gen(seed: int = 0) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def raises_exactly(error: type[Exception], message: str, call: Callable[[], Any]) -> None:
    """``call()`` raises exactly ``error`` (not a subclass) with exactly ``message``."""
    with pytest.raises(error, match=f"^{re.escape(message)}$") as raised:
        call()
    assert type(raised.value) is error


def same_tensors(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """The same keys, each with an equal tensor (a batch, or a model's ``state_dict()``)."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
