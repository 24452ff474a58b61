"""One attempt of the exercise battery: a learner's function and what it does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Attempt:
    """``fn``: the learner's function; ``does``: one sentence saying what it does (wrong);
    ``expect``: the mistake code a checker should name, or None when no code fits."""

    fn: Callable[..., Any]
    does: str
    expect: str | None = None
