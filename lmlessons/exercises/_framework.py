"""The one pattern every exercise checker follows: the runner owns the plumbing.

A checker states only its *cases* (hand-written ones that each test one promise of the task, and
generated ones that reach the corners) and its *diagnoses* (functions that look at what a failing
case observed and name the mistake). Everything else is here:

- calling the learner's function on *copies* of the arguments, and reporting ``modifies_input``
  if the copies changed; a tokenizer is passed itself (a deep copy is slow) and its
  :func:`tokenizer_state` compared before and after the call instead;
- ``NotImplementedError`` (or ``None``) on the first call means "not attempted yet"; any other
  exception is reported with its type, message and the learner's line (no file paths);
- hiding what the function prints and its warnings;
- ``delegates_to_course`` when the function calls the course's own implementation of the
  exercise or a reference solution (:mod:`._delegation`: watched during its calls only, so the
  reference answers the checkers compute are not);
- recording use of the global random generators (``uses_global_rng`` for random exercises);
- the time limit (``too_slow``), measured on the learner's calls only;
- comparing the structure, shape and dtype of a result with the reference's on the same case
  (``wrong_type``, ``wrong_keys``, ``wrong_shape``, ``wrong_dtype``);
- what a case verifies (:attr:`Case.ok`) travels with the case: :meth:`Runner.passed` records it
  under "What was checked" once the checker has held the case's result to its rules;
- the generator contract of random exercises (``not_deterministic``, ``ignores_generator``);
- :func:`on_empty`: whether an exception is the kind an empty selection raises;
- :func:`first_broken`: the first of a result's rules (bool masks of the entries breaking each)
  that it breaks, with the first such entry (random exercises, checked by properties);
- for losses: :func:`close` (float tolerance) and :meth:`Runner.gradients` (``detached``,
  ``wrong_gradient``: the gradients of the learner's result with respect to the arguments of the
  last call, :attr:`Runner.last`, against the reference's on the same case);
- ``run.call(case, via=...)`` calls the learner through a wrapper (threads for simulated ranks,
  a dispatch mode that watches memory), inside the same plumbing;
- the catalogue of known mistakes (:class:`Catalogue` of :class:`Known` entries): small wrong
  implementations, each with its code; :meth:`Catalogue.outputs` runs them on a failing case and
  :func:`which_known` names the one whose result the learner's equals.

Every mistake's title and explanation come from one catalogue, ``data/content/mistakes.toml``;
a :class:`Mistake` adds only what the case observed (``detail``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import io
import json
import math
import os
import random
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmlessons.course.content import load
from lmlessons.exercises._delegation import Delegation

#: Frames in these folders are not the learner's: the whole ``lmlessons`` package (its core
#: validators too, which an editable install keeps outside ``site-packages``) and torch.
NOT_THE_LEARNERS = (
    str(Path(__file__).resolve().parents[1]) + os.sep,
    str(Path(torch.__file__).resolve().parent) + os.sep,
)

#: Seconds the learner's calls of one check may take together. The hidden cases are tiny: a
#: correct function needs well under a second even on a slow laptop.
TIME_LIMIT = 10.0


def catalogue() -> dict[str, dict[str, str]]:
    """Every mistake code with its ``title`` and ``explanation`` (``mistakes.toml``)."""
    return load("mistakes")


class Mistake(Exception):
    """A diagnosed mistake. ``code`` names it in the catalogue (tests and teachers rely on it);
    ``detail`` says what the failing case observed. The title and the explanation come from the
    catalogue, one wording per mistake."""

    def __init__(self, code: str, detail: str) -> None:
        entry = catalogue().get(code)
        if entry is None:  # pragma: no cover - a checker's error, caught by tests/test_mistakes.py
            raise KeyError(f"mistake code {code!r} is not in mistakes.toml")
        super().__init__(code)
        self.code = code
        self.detail = detail
        self.title = entry["title"]
        self.message = f"{detail.strip()}\n\n{entry['explanation'].strip()}".strip()


class NotAttempted(Exception):
    """The learner's function is still the stub."""


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: ``label`` says in words what is passed (messages
    quote it), ``args`` and ``kwargs`` are passed as copies. ``ok``: what a correct result on
    this case verifies, a line or a tuple of lines shown under "What was checked" (empty: nothing
    the earlier cases did not already show)."""

    label: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None  # random exercises: each call gets ``generator`` seeded with it
    ok: str | tuple[str, ...] = ""

    def arguments(self) -> tuple[list[Any], dict[str, Any]]:
        """Fresh copies of the arguments (and a freshly seeded generator) for one call."""
        kwargs = {k: _copy(v) for k, v in self.kwargs.items()}
        if self.seed is not None:
            kwargs["generator"] = torch.Generator().manual_seed(self.seed)
        return [_copy(a) for a in self.args], kwargs


# --------------------------------------------------------------------------- known mistakes


@dataclass(frozen=True)
class Known:
    """A catalogued mistake: a small wrong implementation, with the exercise's signature, as a
    learner writes it, and the code of the mistake it makes. Its docstring's first line says
    what it computes, as a message quotes it ("Divided by the group's variance + 1e-4.")."""

    exercise: str
    code: str
    fn: Callable[..., Any]

    @property
    def what(self) -> str:
        line = (inspect.getdoc(self.fn) or "").split("\n\n")[0].replace("\n", " ").strip()
        word = line.split(" ", 1)[0]
        first = line[:1] if len(word) > 1 and word.isupper() else line[:1].lower()  # not "mLM"
        return (first + line[1:]).rstrip(".")


#: Each exercise's catalogue of known mistakes, in the order they are written (the checkers'
#: modules fill it through a :class:`Catalogue`; ``tests/test_battery.py`` submits every entry).
KNOWN: dict[str, list[Known]] = {}


class Catalogue:
    """One exercise's catalogue of known mistakes, written in its checker's module as
    ``known = Catalogue("mlm_loss")``: ``@known("code")`` above a small wrong implementation adds
    it (:class:`Known`; the function is returned unchanged). Each entry makes one mistake and is
    right elsewhere; on a failing case the checker names the entry whose result the learner's
    equals (:meth:`which`). ``tests/test_battery.py`` submits every
    entry as a learner's attempt and expects its code. Made again with the same name, it reads
    the same entries (they live in :data:`KNOWN`)."""

    def __init__(self, exercise: str) -> None:
        self.exercise = exercise
        self.entries = KNOWN.setdefault(exercise, [])

    def __call__(self, code: str) -> Callable[[Any], Any]:
        def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.entries.append(Known(self.exercise, code, fn))
            return fn

        return mark

    def outputs(
        self,
        case: Case,
        convert: Callable[[Any], Any] = lambda out: out,
        via: Callable[..., Any] | None = None,
        **fields: object,
    ) -> list[tuple[str, str, Any]]:
        """``(code, what, convert(output))`` of every entry on copies of ``case``'s arguments
        (called through ``via``, as :meth:`Runner.call` calls the learner's), ``what`` with the
        case's ``fields`` filled in (a docstring's ``{count}``); an entry that raises, or gives
        nothing ``convert`` takes, is left out."""
        out = []
        for entry in self.entries:
            args, kwargs = case.arguments()
            fn = entry.fn if via is None else functools.partial(via, entry.fn)
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = convert(fn(*args, **kwargs))
            except Exception:  # a mistake that fails on this case is not the one it shows
                continue
            out.append((entry.code, entry.what.format(**fields) if fields else entry.what, result))
        return out

    def which(
        self, case: Case, got: Any, expected: Any, same: Callable[[Any, Any], bool], **outputs: Any
    ) -> tuple[str, str] | None:
        """The ``(code, what)`` of the entry whose output on ``case`` is ``same`` as ``got``
        (:func:`which_known` over :meth:`outputs`, which takes ``outputs``' keywords)."""
        return which_known(self.outputs(case, **outputs), got, expected, same)


def which_known(
    candidates: Iterable[tuple[str, str, Any]],
    got: Any,
    expected: Any,
    same: Callable[[Any, Any], bool],
) -> tuple[str, str] | None:
    """The ``(code, what)`` of the candidate (``(code, what, output)``, e.g. from
    :meth:`Catalogue.outputs`) whose output is ``same`` as ``got`` and not as ``expected``; None if
    none is, or candidates of two codes are (the case cannot tell them apart)."""
    found = [(c, w) for c, w, out in candidates if same(got, out) and not same(out, expected)]
    return found[0] if len({code for code, _ in found}) == 1 else None


# --------------------------------------------------------------------------- exceptions, RNG


def _learner_frame(exc: BaseException) -> str:
    """'in `f`, line 3: `x = y[0]`' for the deepest frame outside torch, ``lmlessons`` and
    the installed libraries."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(NOT_THE_LEARNERS) and "site-packages" not in f.filename
    ]
    if not frames:
        return ""
    f = frames[-1]
    line = (f.line or "").strip()
    where = f"in `{f.name}`, line {f.lineno}"
    return f"{where}: `{line}`" if line else where


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip().replace("`", "'")
    if len(text) > 400:
        text = text[:400] + " ..."
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    where = _learner_frame(exc)
    return head + (f"\n(raised {where})" if where else "")


def _rng_state() -> tuple[Any, ...]:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _rng_used(before: tuple[Any, ...]) -> str | None:
    """Which global generator was drawn from since ``before`` ('torch', 'random', 'numpy')."""
    now = _rng_state()
    if not torch.equal(now[0], before[0]):
        return "torch"
    if now[1] != before[1]:
        return "random"
    if not (now[2][0] == before[2][0] and np.array_equal(now[2][1], before[2][1])):
        return "numpy"
    if now[2][2:] != before[2][2:]:
        return "numpy"
    return None


@contextlib.contextmanager
def isolated(seed: int = 20240) -> Iterator[None]:
    """Seed the global generators and use one torch thread for a check; restore both after.

    One thread: the cases are tiny, and on a busy laptop the thread pool's start-up costs more
    than the arithmetic."""
    saved = _rng_state()
    threads = torch.get_num_threads()
    try:
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        torch.set_num_threads(1)
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- copies, structure


def _copy(value: Any) -> Any:
    """A deep copy; tensors keep ``requires_grad`` (a learner's loss must keep the graph)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, torch.Generator):
        return value  # the learner must draw from the very generator passed
    if is_tokenizer(value):
        return value  # slow to copy: compared by its state before and after the call instead
    return copy.deepcopy(value)


def is_tokenizer(value: Any) -> bool:
    """A transformers tokenizer, or an object standing in for one (delegating to one)."""
    needs = ("special_tokens_map", "init_kwargs", "convert_tokens_to_ids")
    return not isinstance(value, (torch.Tensor, Mapping, list, tuple, str)) and all(
        hasattr(value, name) for name in needs
    )


def tokenizer_state(tokenizer: Any) -> dict[str, Any]:
    """What a learner's function must leave as it was: the special tokens and their ids, the
    chat template, the padding and truncation sides, the vocabulary (added tokens included),
    ``init_kwargs`` and, hashed, the backend's vocabulary and pipeline (its padding and
    truncation settings left out: encoding with ``padding=True`` sets them, harmlessly)."""
    state = {
        "special_tokens_map": dict(tokenizer.special_tokens_map),
        "all_special_ids": list(tokenizer.all_special_ids),
        "chat_template": tokenizer.chat_template,
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        "model_max_length": tokenizer.model_max_length,
        "vocab_size": len(tokenizer.get_vocab()),  # added tokens included
        "added_tokens": {i: repr(t) for i, t in tokenizer.added_tokens_decoder.items()},
        "init_kwargs": repr(sorted(tokenizer.init_kwargs.items())),
    }
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        pipeline = json.loads(backend.to_str())
        pipeline.pop("padding", None)
        pipeline.pop("truncation", None)
        text = json.dumps(pipeline, sort_keys=True)
        state["backend"] = hashlib.sha256(text.encode()).hexdigest()
    return state


def _state(value: Any) -> Any:
    """What must not change during a call: a tokenizer's :func:`tokenizer_state` (the learner
    gets the tokenizer itself), any other argument itself (the learner gets a copy of it)."""
    return tokenizer_state(value) if is_tokenizer(value) else value


def same(a: Any, b: Any) -> bool:
    """Exact equality of nested tensors, lists, tuples, dicts and numbers."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a.detach(), b.detach())
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "a tensor"
    if isinstance(value, Mapping):
        return "a dict"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    return f"a {type(value).__name__}"


def first_difference(got: torch.Tensor, expected: torch.Tensor, atol: float = 0.0) -> str:
    """'7 of 24 entries differ; first at (0, 3): expected 5, got -100'."""
    g = got.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    bad = ~torch.isclose(g, e, rtol=0.0, atol=atol, equal_nan=True)
    where = tuple(int(i) for i in bad.nonzero()[0]) if bad.any() else ()
    at = where[0] if len(where) == 1 else where

    def show(t: torch.Tensor) -> str:
        value = t[where].item()
        return f"{value:.6g}" if got.is_floating_point() else str(value)

    head = f"{int(bad.sum())} of {bad.numel()} entries differ; " if bad.numel() > 1 else ""
    at_text = f"first at {at}: " if where else ""
    return f"{head}{at_text}expected {show(expected)}, got {show(got)}"


# --------------------------------------------------------------------------- the runner


class Runner:
    """Calls one learner function for one check and keeps track of what passed."""

    def __init__(
        self,
        exercise: str,
        fn: Callable[..., Any],
        reference: Callable[..., Any],
        *,
        random: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        delegation: Delegation | None = None,
    ) -> None:
        self.exercise = exercise
        #: The course functions ``fn`` may not call (``delegates_to_course``); None: any.
        self.delegation = delegation
        self.fn = fn
        self.reference = reference
        self.random = random
        self.clock = clock
        self.calls = 0
        self.seconds = 0.0
        self.printed = False
        self.passed: list[str] = []
        self.names = tuple(inspect.signature(reference).parameters)
        self.rng_used: str | None = None
        #: The arguments (copies) the last call passed, e.g. to take gradients with respect to.
        self.last: tuple[list[Any], dict[str, Any]] = ([], {})

    def ok(self, what: str) -> None:
        """Record a promise verified (shown under "What was checked")."""
        self.passed.append(what)

    def passed_case(self, case: Case) -> None:
        """Record what ``case`` verifies (:attr:`Case.ok`), once its result has been checked."""
        lines = (case.ok,) if isinstance(case.ok, str) else case.ok
        for line in lines:
            if line:
                self.ok(line)

    def expected(self, case: Case) -> Any:
        """The reference's result on ``case`` (on copies; a seeded generator is re-seeded)."""
        args, kwargs = case.arguments()
        return self.reference(*args, **kwargs)

    def call(
        self,
        case: Case,
        *,
        explain: Callable[[BaseException], str | None] | None = None,
        via: Callable[..., Any] | None = None,
    ) -> Any:
        """The learner's result on copies of ``case``'s arguments.

        ``explain(exc)`` may name the mistake code behind an exception (e.g. -100 labels used as
        class ids); otherwise an exception is ``raised_exception``. ``via(fn, *args, **kwargs)``,
        if given, calls the learner's ``fn`` in its own way (e.g. once per simulated rank)."""
        first = self.calls == 0
        self.calls += 1
        args, kwargs = case.arguments()
        self.last = (args, kwargs)
        before = _Inputs(case, self.names)
        out = self._guarded(case, first, before, explain, via)
        before.check_unchanged(case, args, kwargs)  # before None: an in-place edit returns None
        if self.rng_used:
            raise Mistake(
                "uses_global_rng",
                f"On {case.label}, your function drew from the global `{self.rng_used}` generator.",
            )
        if out is None:
            if first:
                raise NotAttempted()
            raise Mistake("returned_none", f"On {case.label}, your function returned None.")
        return out

    def _guarded(
        self,
        case: Case,
        first: bool,
        before: _Inputs,
        explain: Any,
        via: Any = None,
    ) -> Any:
        args, kwargs = self.last
        sink = io.StringIO()
        rng_before = _rng_state()
        start = self.clock()
        fn = self.fn if via is None else functools.partial(via, self.fn)
        watch: contextlib.AbstractContextManager[list[str]] = (
            self.delegation.watch() if self.delegation else contextlib.nullcontext([])
        )
        delegated: list[str] = []
        try:
            with (
                watch as delegated,
                contextlib.redirect_stdout(sink),
                contextlib.redirect_stderr(sink),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")
                out = fn(*args, **kwargs)
        except NotImplementedError as exc:
            self._check_own_work(case, delegated)
            if first and before.changed(args, kwargs) is None:
                raise NotAttempted() from None
            raise self._exception_mistake(exc, case, explain) from None
        except Exception as exc:  # the learner's bug, reported, never re-raised
            self._check_own_work(case, delegated)
            before.check_unchanged(case, args, kwargs)
            raise self._exception_mistake(exc, case, explain) from None
        finally:
            self.printed |= bool(sink.getvalue())
            self.seconds += self.clock() - start
        self._check_own_work(case, delegated)
        if self.seconds > TIME_LIMIT:
            raise Mistake("too_slow", f"{self.calls} calls took {self.seconds:.0f} s.")
        self.rng_used = _rng_used(rng_before) if self.random else None
        return out

    def _check_own_work(self, case: Case, delegated: list[str]) -> None:
        """``delegates_to_course`` if the call ran a function the exercise forbids."""
        if not delegated or self.delegation is None:
            return
        name = delegated[0]
        what = (
            "the reference solution of an exercise"
            if self.delegation.is_solution(name)
            else "the course's own implementation of what this exercise asks you to write"
        )
        raise Mistake(
            "delegates_to_course",
            f"On {case.label}, your function calls `{name}`, {what}: it delegates to the "
            f"course's own answer instead of computing the result.\n\nCourse functions this "
            f"exercise lets you use: {self.delegation.blocks_text()}.",
        )

    def _exception_mistake(self, exc: BaseException, case: Case, explain: Any) -> Mistake:
        code = (explain(exc) if explain is not None else None) or "raised_exception"
        return Mistake(code, f"On {case.label}, your function raised\n{describe_exception(exc)}")

    # ------------------------------------------------------------------ comparing with the referenc

    def compare(self, case: Case, got: Any, expected: Any, what: str = "the result") -> None:
        """Raise ``wrong_type``, ``wrong_keys``, ``wrong_shape`` or ``wrong_dtype`` where the
        structure of ``got`` differs from ``expected``'s (values are not compared)."""
        on = f"On {case.label}, {what}"
        if isinstance(expected, torch.Tensor):
            if not isinstance(got, torch.Tensor):
                raise Mistake("wrong_type", f"{on} is {_kind(got)}; expected a tensor.")
            if got.shape != expected.shape:
                raise Mistake(
                    "wrong_shape",
                    f"{on} has shape {tuple(got.shape)}; expected {tuple(expected.shape)}.",
                )
            if got.dtype != expected.dtype and not (
                got.is_floating_point() and expected.is_floating_point()
            ):
                raise Mistake(
                    "wrong_dtype", f"{on} has dtype {got.dtype}; expected {expected.dtype}."
                )
        elif isinstance(expected, Mapping):
            if not isinstance(got, Mapping):
                raise Mistake("wrong_type", f"{on} is {_kind(got)}; expected a dict.")
            if set(got) != set(expected):
                raise Mistake(
                    "wrong_keys", f"{on} has keys {sorted(got)}; expected {sorted(expected)}."
                )
            for key in expected:
                self.compare(case, got[key], expected[key], f"{what}[{key!r}]")
        elif isinstance(expected, (tuple, list)) and _numbers(expected):  # a value: any length
            if not isinstance(got, (tuple, list)) or not _numbers(got):
                raise Mistake("wrong_type", f"{on} is {_kind(got)}; expected a list of numbers.")
        elif isinstance(expected, (tuple, list)):
            if not isinstance(got, (tuple, list)) or len(got) != len(expected):
                n = f" of {len(got)}" if isinstance(got, (tuple, list)) else ""
                raise Mistake(
                    "wrong_type",
                    f"{on} is {_kind(got)}{n}; "
                    f"expected a {type(expected).__name__} of {len(expected)}.",
                )
            for i, (g, e) in enumerate(zip(got, expected)):
                self.compare(case, g, e, f"{what}[{i}]")

    def gradients(self, case: Case, got: torch.Tensor, *, rtol: float = 1e-4) -> None:
        """``detached`` if ``got`` (the learner's result on ``case``, the last call) has no
        graph; ``wrong_gradient`` where its gradient with respect to an argument that requires
        grad (or an item of a tuple or list argument) differs from the reference's on the same
        case. A result of several values (one per row) is weighted 1, 2, ... and summed, so that
        one row's gradient cannot make up for another's."""
        args, _ = self.last
        ref_args, ref_kwargs = case.arguments()
        leaves = _leaves(self.names, ref_args)  # [(name, tensor)]: the reference's copies
        if not got.requires_grad or got.grad_fn is None:  # no graph, or a new leaf
            to = ", ".join(dict.fromkeys(f"`{n.split('[')[0]}`" for n, _ in leaves)) or "the inputs"
            raise Mistake("detached", f"On {case.label}, the result has no graph to {to}.")
        expected = self.reference(*ref_args, **ref_kwargs)
        mine_leaves = [a for _, a in _leaves(self.names, args)]
        mine = torch.autograd.grad(_weighted(got), mine_leaves, allow_unused=True)
        theirs = torch.autograd.grad(_weighted(expected), [a for _, a in leaves], allow_unused=True)
        for (name, a), g, e in zip(leaves, mine, theirs):
            g = torch.zeros_like(a) if g is None else g
            e = torch.zeros_like(a) if e is None else e
            if not torch.allclose(g.double(), e.double(), atol=1e-5, rtol=rtol):
                where = first_difference(g, e, atol=1e-5)
                raise Mistake(
                    "wrong_gradient",
                    f"On {case.label}, the gradient with respect to `{name}`: {where}.",
                )

    # ------------------------------------------------------------------ random exercises

    def generator_contract(
        self, draw: Callable[[int | None], Any], result_same: Callable[[Any, Any], bool] = same
    ) -> None:
        """``draw(seed)`` calls the learner with ``generator`` seeded ``seed`` (None: no
        generator). One seed must give one result, other seeds another, and None must work."""
        first = draw(0)
        if not result_same(first, draw(0)):
            raise Mistake(
                "not_deterministic", "Two calls with `generator` seeded 0 gave different results."
            )
        if all(result_same(first, draw(s)) for s in (1, 2)):
            raise Mistake(
                "ignores_generator", "Generators seeded 0, 1 and 2 all gave the same result."
            )
        before = self.random
        self.random = False  # generator=None falls back to the global generator: allowed
        try:
            draw(None)
        finally:
            self.random = before
        self.ok("uses `generator` for every draw: one seed, one result; `generator=None` works")


class _Inputs:
    """The arguments of one call as they were before it: the case's originals (the learner gets
    copies) and the state of every tokenizer (the learner gets the tokenizer itself)."""

    def __init__(self, case: Case, names: tuple[str, ...]) -> None:
        self.names = names
        self.args = [_state(a) for a in case.args]
        self.kwargs = {
            k: _state(v) for k, v in case.kwargs.items() if not isinstance(v, torch.Generator)
        }

    def changed(self, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        """The name of the first argument that is not as it was (``names``: the reference's
        parameter names), or None."""
        for i, (before, now) in enumerate(zip(self.args, args)):
            if not same(_state(now), before):
                return self.names[i] if i < len(self.names) else f"argument {i + 1}"
        for key, before in self.kwargs.items():
            if not same(_state(kwargs[key]), before):
                return key
        return None

    def check_unchanged(self, case: Case, args: list[Any], kwargs: dict[str, Any]) -> None:
        """``modifies_input`` naming the first argument the call changed."""
        name = self.changed(args, kwargs)
        if name:
            raise Mistake("modifies_input", f"On {case.label}, `{name}` changed during the call.")


def on_empty(exc: BaseException) -> bool:
    """Is ``exc`` what code that assumes a non-empty selection raises on an empty one
    (``torch.stack([])``, ``max`` of nothing, ``randint(0, 0)``, ``words[-1]`` of no words)?"""
    text = str(exc).lower()
    hints = ("empty", "numel() == 0", "from=0 >= to=0", "sum of probabilities <= 0")
    return isinstance(exc, IndexError) or any(h in text for h in hints)


def first_broken(
    case: Case,
    rules: Iterable[tuple[str, torch.Tensor, str]],
    values: Mapping[str, torch.Tensor] | None = None,
) -> None:
    """Raise the first rule a result breaks. ``rules``: ``(code, bool mask of the entries that
    break it, what they show)``, in the order to report; ``values``: tensors to quote at the
    first such entry: 'On <case>, 3 positions are special (first at (0, 4): token 7, label 7)'."""
    for code, wrong, what in rules:
        if bool(wrong.any()):
            first = tuple(int(i) for i in wrong.nonzero()[0])
            at = ", ".join(f"{k} {v[first].item()}" for k, v in (values or {}).items())
            where = f"first at {first if len(first) > 1 else first[0]}" + (f": {at}" if at else "")
            raise Mistake(code, f"On {case.label}, {int(wrong.sum())} positions {what} ({where}).")


def close(got: float, expected: float, rtol: float = 1e-4) -> bool:
    """``got`` is finite and within ``rtol`` of ``expected`` (absolute below 1): float32 losses
    against a reference that sums in another order."""
    return math.isfinite(got) and abs(got - expected) <= rtol * max(1.0, abs(expected))


def _leaf(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _leaves(names: tuple[str, ...], args: Sequence[Any]) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of every argument that requires grad, a tuple's or list's items
    named ``name[i]`` (``names``: the reference's parameter names)."""
    out = []
    for i, arg in enumerate(args):
        name = names[i] if i < len(names) else f"argument {i + 1}"
        items = list(enumerate(arg)) if isinstance(arg, (tuple, list)) else [(None, arg)]
        out += [(name if j is None else f"{name}[{j}]", t) for j, t in items if _leaf(t)]
    return out


def _weighted(values: torch.Tensor) -> torch.Tensor:
    """One number from a result: its entries weighted 1, 2, ... and summed (a loss: itself)."""
    flat = values.double().reshape(-1)  # (N,)
    return (flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum()


def _numbers(seq: Any) -> bool:
    """A list or tuple of plain numbers (token ids): its length is a value, not structure."""
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in seq)
