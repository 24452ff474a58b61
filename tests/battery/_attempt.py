"""The battery's one format: a learner's attempt is a function marked ``@wrong(...)`` or
``@correct``, with a one-line docstring saying what it does (and, if wrong, what the mistake is).

``@wrong("code")`` expects the checker to name that mistake code of
``lmlessons/data/content/mistakes.toml``; ``@wrong(says="...")`` is for an attempt no code fits:
its title and message must carry those words (specific to the attempt, not just "expected").
Both may be given. The decorator returns the function unchanged, so an attempt can be called, and
registers it in ``ATTEMPTS`` under its module's name, which is the exercise's name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
CORRECT = "correct"


@dataclass(frozen=True)
class Attempt:
    """``expect``: a mistake code or ``CORRECT`` (None: only ``says`` is checked);
    ``says``: words the failing message must carry."""

    fn: Callable[..., Any]
    expect: str | None
    says: str | None = None

    @property
    def id(self) -> str:
        return self.fn.__name__

    @property
    def does(self) -> str:
        return inspect.getdoc(self.fn) or ""


ATTEMPTS: dict[str, list[Attempt]] = {}


def _register(attempt: Attempt) -> None:
    exercise = attempt.fn.__module__.rsplit(".", 1)[-1]
    ATTEMPTS.setdefault(exercise, []).append(attempt)


def wrong(code: str | None = None, *, says: str | None = None) -> Callable[[F], F]:
    """Mark a wrong attempt: the checker must name ``code`` and/or its message carry ``says``."""
    if code is None and not says:
        raise ValueError("a wrong attempt names its mistake code or the words its message carries")

    def mark(fn: F) -> F:
        _register(Attempt(fn, code, says))
        return fn

    return mark


def correct(fn: F) -> F:
    """Mark a correct attempt: the checker must accept it."""
    _register(Attempt(fn, CORRECT))
    return fn
