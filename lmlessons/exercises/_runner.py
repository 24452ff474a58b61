"""Running a learner's function safely inside a check.

A check calls the learner's function many times on hidden cases. The runner
- turns the first ``NotImplementedError`` (or a ``None`` result) into "not attempted yet";
- turns any other exception into a diagnosis that shows its type, its message and the line of the
  learner's code that raised it (no file paths: they differ between machines);
- hides what the function prints (it would flood the notebook) and its warnings;
- records what has been verified so far, for the "what was checked" list.

``isolated_rng`` saves and restores every global random state (torch, Python, NumPy), so a
learner's function that forgets ``generator=`` cannot change the rest of the notebook.
"""

from __future__ import annotations

import contextlib
import io
import random
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

_PACKAGE_DIR = str(Path(__file__).resolve().parent)
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


class Mistake(Exception):
    """A diagnosed mistake: ``code`` is stable (tests use it), ``title`` one line, ``message``
    the why."""

    def __init__(self, code: str, title: str, message: str) -> None:
        super().__init__(code)
        self.code = code
        self.title = title
        self.message = message


class NotAttempted(Exception):
    """The learner's function is still the stub."""


def _learner_frame(exc: BaseException) -> str:
    """'in `f`, line 3: `x = y[0]`' for the deepest frame outside torch and this package."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith((_PACKAGE_DIR, _TORCH_DIR))
        and "site-packages" not in f.filename
    ]
    if not frames:
        return ""
    f = frames[-1]
    where = f"in `{f.name}`, line {f.lineno}"
    line = (f.line or "").strip()
    return f"{where}: `{line}`" if line else where


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip().replace("`", "'")
    if len(text) > 400:
        text = text[:400] + " ..."
    where = _learner_frame(exc)
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return head + (f"\n(raised {where})" if where else "")


def _global_rng_state() -> tuple[Any, ...]:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def global_rng_changed(before: tuple[Any, ...]) -> str | None:
    """Which global generator was used since ``before`` ('torch', 'random', 'numpy') or None."""
    now = _global_rng_state()
    if not torch.equal(now[0], before[0]):
        return "torch"
    if now[1] != before[1]:
        return "random"
    if not (
        now[2][0] == before[2][0]
        and np.array_equal(now[2][1], before[2][1])
        and now[2][2:] == before[2][2:]
    ):
        return "numpy"
    return None


@contextlib.contextmanager
def isolated_rng(seed: int = 20240) -> Iterator[None]:
    """Seed the global generators for the duration of a check and restore them afterwards."""
    saved = _global_rng_state()
    try:
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread during a check: the hidden cases are tiny, and on a busy laptop
    the thread pool's start-up costs 10x more than the arithmetic. Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Runner:
    """Calls one learner function for one check and keeps track of what passed."""

    def __init__(self, exercise: str, fn: Callable[..., Any], signature: str) -> None:
        self.exercise = exercise
        self.fn = fn
        self.signature = signature
        self.calls = 0
        self.printed = False
        self.passed: list[str] = []

    def ok(self, what: str) -> None:
        self.passed.append(what)

    def rng_state(self) -> tuple[Any, ...]:
        return _global_rng_state()

    def call(
        self,
        *args: Any,
        case: str,
        explain: Callable[[BaseException], tuple[str, str] | None] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call the learner's function; ``case`` says in words what was passed (for messages).

        ``explain(exc)`` may return ``(code, extra_text)`` to name a known mistake behind an
        exception (e.g. -100 labels used as class ids).
        """
        first = self.calls == 0
        self.calls += 1
        sink = io.StringIO()
        try:
            with (
                contextlib.redirect_stdout(sink),
                contextlib.redirect_stderr(sink),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")
                out = self.fn(*args, **kwargs)
        except NotImplementedError as exc:
            if first:
                raise NotAttempted() from None
            raise self._exception_mistake(exc, case, explain) from None
        except Exception as exc:  # the learner's bug, reported, never re-raised
            raise self._exception_mistake(exc, case, explain) from None
        finally:
            if sink.getvalue():
                self.printed = True
        if out is None:
            if first:
                raise NotAttempted()
            raise Mistake(
                "returned_none",
                "returned None",
                f"On {case}, your function returned None. Every path through the function must "
                "`return` a result (a missing `return` statement gives None).",
            )
        return out

    def _exception_mistake(
        self,
        exc: BaseException,
        case: str,
        explain: Callable[[BaseException], tuple[str, str] | None] | None,
    ) -> Mistake:
        known = explain(exc) if explain is not None else None
        code, extra = known if known is not None else ("raised_exception", "")
        if known is None and isinstance(exc, TypeError) and "argument" in str(exc):
            extra = f"The exercise keeps the package's signature:\n`{self.signature}`"
        message = f"On {case}, your function raised\n{describe_exception(exc)}"
        if extra:
            message += "\n\n" + extra
        return Mistake(code, f"raised {type(exc).__name__}", message)


def check_seeds(
    run: Runner,
    draw: Callable[[int | None], Any],
    same: Callable[[Any, Any], bool],
    *,
    not_deterministic: tuple[str, str],
    ignores_generator: str,
) -> None:
    """``draw(seed)`` calls the learner's function with ``generator`` seeded ``seed`` (``None``:
    no generator). Two draws with seed 0 must be ``same`` (else ``not_deterministic``, a title
    and an explanation), seeds 1 and 2 must not both repeat seed 0 (else the explanation
    ``ignores_generator``), and ``generator=None`` must work."""
    first = draw(0)
    if not same(first, draw(0)):
        raise Mistake("not_deterministic", *not_deterministic)
    others = [draw(s) for s in (1, 2)]
    if all(same(first, other) for other in others):
        raise Mistake("ignores_generator", "the `generator` argument is ignored", ignores_generator)
    draw(None)  # generator=None must work too (falls back to the global generator)
    run.ok("uses `generator` for every draw: one seed, one result; `generator=None` works")
