"""Helpers of the tests that pin exact behaviour (the mutation tests): a seeded generator, and an
error of exactly one type with exactly one message."""

from __future__ import annotations

import re
from collections.abc import Callable
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
