"""Which course functions an exercise's answer may call: the data of ``building_blocks.toml``.

A checked exercise asks the learner to write an idea the course also implements (the package's
``lmlessons.losses.mlm_loss``, the reference solutions of ``lmlessons.exercises.solutions*``). A
function whose body only calls that implementation passes every hidden case without any
understanding, so the runner watches each call of the learner's function
(:meth:`Delegation.watch`, a profile hook: ``sys.setprofile`` and ``threading.setprofile`` for
the simulated ranks' threads) and reports ``delegates_to_course`` when one of the exercise's
*same-idea* functions, or any reference solution, runs inside it. Watching the functions' code
objects, not their names, catches every way to reach them: ``lmlessons.mlm_loss``, ``from
lmlessons.losses import mlm_loss`` in the notebook, an alias, a default argument, a closure, a
``functools.partial``.

A *building block* the task allows (``lmlessons.shift_labels`` for ``clm_loss``) may call a
forbidden function itself: a call made from inside a building block is not the learner's.
The reference answer a checker compares against is computed outside the watched calls.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from types import CodeType, FrameType
from typing import Any

from lmlessons.course.content import load

#: The modules of the reference solutions: every function in them is forbidden to every exercise.
SOLUTION_MODULES = (
    "lmlessons.exercises.solutions",
    "lmlessons.exercises.solutions_part2",
    "lmlessons.exercises.solutions_part3",
    "lmlessons.exercises.solutions_part4",
)


def _resolve(dotted: str) -> Any:
    """The object a dotted name (``lmlessons.losses.mlm_loss``, ``pkg.mod.Class``) names."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ValueError(f"{dotted!r} names no importable object")


def _codes(obj: Any) -> list[CodeType]:
    """The code objects of a function (unwrapped) or of every method of a class."""
    if isinstance(obj, type):
        members = [
            m.__func__ if isinstance(m, (staticmethod, classmethod)) else m
            for m in vars(obj).values()
        ]
        return [c for m in members if inspect.isfunction(m) for c in _codes(m)]
    fn = inspect.unwrap(obj)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, CodeType):
        raise TypeError(f"{obj!r} is neither a Python function nor a class")
    return [code]


@dataclass(frozen=True)
class Delegation:
    """What exercise ``name``'s answer may not call (``forbidden``: code -> dotted name, watched
    by the ids of the code objects, which ``keep`` holds alive) and which course functions it may
    use (``building_blocks``, dotted names, shown to the learner)."""

    name: str
    forbidden: dict[int, str]
    allowed: frozenset[int]
    building_blocks: tuple[str, ...]
    keep: tuple[CodeType, ...] = field(repr=False, default=())

    def blocks_text(self) -> str:
        """'`lmlessons.shift_labels`' or 'none: torch and plain Python' (for messages)."""
        if not self.building_blocks:
            return "none (torch and plain Python only; your own earlier answers are fine)"
        return ", ".join(f"`{b}`" for b in self.building_blocks) + (
            " (and your own earlier answers)"
        )

    def is_solution(self, dotted: str) -> bool:
        return dotted.rsplit(".", 1)[0] in SOLUTION_MODULES

    def _called_from_block(self, frame: FrameType | None) -> bool:
        while frame is not None:
            if id(frame.f_code) in self.allowed:
                return True
            frame = frame.f_back
        return False

    @contextlib.contextmanager
    def watch(self) -> Iterator[list[str]]:
        """Yield a list that receives the dotted name of the first forbidden function called
        (not from inside a building block) while the block runs, in any thread it starts."""
        hits: list[str] = []
        forbidden = self.forbidden

        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call" and not hits:
                name = forbidden.get(id(frame.f_code))
                if name is not None and not self._called_from_block(frame.f_back):
                    hits.append(name)

        before, before_threads = sys.getprofile(), threading.getprofile()
        sys.setprofile(hook)
        threading.setprofile(hook)
        try:
            yield hits
        finally:
            sys.setprofile(before)
            threading.setprofile(before_threads)


def _solution_functions() -> dict[str, Any]:
    found = {}
    for module_name in SOLUTION_MODULES:
        module = importlib.import_module(module_name)
        for attr, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module_name:
                found[f"{module_name}.{attr}"] = value
    return found


@cache
def delegation(name: str) -> Delegation:
    """Exercise ``name``'s :class:`Delegation` from ``building_blocks.toml``."""
    table = load("building_blocks").get(name)
    if table is None:
        raise ValueError(f"exercise {name!r} has no entry in building_blocks.toml")
    forbidden: dict[int, str] = {}
    keep: list[CodeType] = []
    named = {dotted: _resolve(dotted) for dotted in table["same_idea"]}
    for dotted, obj in {**named, **_solution_functions()}.items():
        for code in _codes(obj):
            forbidden[id(code)] = dotted
            keep.append(code)
    allowed = set()
    for dotted in table["building_blocks"]:
        for code in _codes(_resolve(dotted)):
            allowed.add(id(code))
            keep.append(code)
    return Delegation(
        name, forbidden, frozenset(allowed), tuple(table["building_blocks"]), tuple(keep)
    )
