"""Predict, then measure: a learner commits a guess before a lesson's measurement, then compares.

A cell tagged ``predict`` shows the question before the measurement cell::

    guess = Predict("What share of the selected positions are special tokens?",
                    unit="%", low=0, high=100, step=1)

The learner moves the slider (or types into the box, or picks a choice) and presses **Lock my
guess**; the guess cannot change afterwards. The cell after the measurement reveals the answer::

    guess.reveal(100 * share, explanation="...")

which shows the question, then, folded under "Reveal: the measured answer", the measured value
next to the locked guess ("you guessed 10.0%; measured 32.3%: 22.3 percentage points too low").
Without a locked guess it says so and still shows the answer. Tests (and learners without
widgets) commit with ``guess.commit(10)``.

Both pictures read without a kernel: :class:`Predict` is a
:class:`~lmlessons.widgets.base.LessonWidget` whose ``text/html`` shows the question and the
guess (if any), and :class:`Reveal` is plain HTML and text. The reveal's HTML keeps the answer in
a closed ``<details>`` block, so a reader of the executed lesson or of the website meets the
question first and opens the answer with one click (in JupyterLab too). Numbers are printed with
a fixed number of decimals (at most 4), so a reveal's output is the same on every CPU for the same
value.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons.course.palette import INK, MUTED
from lmlessons.exercises import inline
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import OutputRecord, html_output, state_output

__all__ = ["MAX_DECIMALS", "REVEAL_SUMMARY", "Predict", "Reveal"]

#: More decimals would print float noise (the course's output policy allows at most 4).
MAX_DECIMALS = 4
#: A guess this close to the measured value, as a share of the guess's range, is "close".
CLOSE_SHARE = 0.05
_BOX = f"border-left:4px solid #4575b4;padding:4px 10px;margin:4px 0;background:#f4f8fc;color:{INK}"
_NOTE = f"{MUTED}font-size:90%"  # on the page's own background
_BOX_NOTE = "color:#4a4a4a;font-size:90%"  # inside _BOX, whose background is always light
_STYLE = {"description_width": "90px"}
#: The one line a reveal shows before it is opened (the answer is folded below it).
REVEAL_SUMMARY = "Reveal: the measured answer"


def _decimals_of(step: float) -> int:
    """How many decimals ``step`` needs (0.05 -> 2, 1 -> 0), at most :data:`MAX_DECIMALS`."""
    for d in range(MAX_DECIMALS + 1):
        if abs(round(step, d) - step) < 1e-9:
            return d
    return MAX_DECIMALS


def _real(value: object, name: str) -> float:
    """``value`` as a finite float (an int, a float or a one-element tensor), else an error."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{name} must be one number, got a tensor of shape {tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _check_choices(choices: object) -> tuple[str, ...]:
    if isinstance(choices, str) or not isinstance(choices, Sequence) or len(choices) < 2:
        raise ValueError("choices must be a list of at least 2 strings")
    if not all(isinstance(c, str) and c.strip() for c in choices):
        raise TypeError("choices must hold non-empty strings")
    if len(set(choices)) != len(choices):
        raise ValueError("choices must be distinct")
    return tuple(choices)


@dataclass(frozen=True)
class Scale:
    """The numeric range of a guess and how its numbers are printed."""

    low: float
    high: float
    step: float
    unit: str
    decimals: int

    def check(self, value: object) -> float:
        """``value`` as a float in ``[low, high]``, else an error naming ``value``."""
        number = _real(value, "value")
        if not self.low <= number <= self.high:
            raise ValueError(f"value must be in [{self.low:g}, {self.high:g}], got {number:g}")
        return number

    def format(self, value: float) -> str:
        """``value`` with the scale's decimals and unit: ``32.3%``, ``0.14 nats``, ``68``."""
        number = f"{value:.{self.decimals}f}"
        if self.unit in ("", "%"):
            return number + self.unit
        return f"{number} {self.unit}"

    def verdict(self, guess: float, measured: float) -> str:
        """How far the guess is from the measured value, in words (deterministic)."""
        shown = {self.format(guess), self.format(measured)}
        if len(shown) == 1:
            return "spot on."
        off = abs(round(guess, self.decimals) - round(measured, self.decimals))
        amount = f"{off:.{self.decimals}f}" + (" percentage points" if self.unit == "%" else "")
        if self.unit not in ("", "%"):
            amount += f" {self.unit}"
        direction = "too high" if guess > measured else "too low"
        if off <= CLOSE_SHARE * (self.high - self.low):
            return f"close: {amount} {direction}."
        return f"{amount} {direction}."


def _check_scale(low: object, high: object, step: object, unit: object, decimals: object) -> Scale:
    lo, hi = _real(low, "low"), _real(high, "high")
    if not lo < hi:
        raise ValueError(f"low must be below high, got low={lo:g}, high={hi:g}")
    st = _real(step, "step") if step is not None else (hi - lo) / 100
    if not 0 < st <= hi - lo:
        raise ValueError(f"step must be in (0, high - low], got {st:g}")
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a string, got {type(unit).__name__}")
    if decimals is None:
        decimals = max(_decimals_of(st), 1 if unit == "%" else 0)
    if isinstance(decimals, bool) or not isinstance(decimals, int):
        raise TypeError(f"decimals must be an int, got {type(decimals).__name__}")
    if not 0 <= decimals <= MAX_DECIMALS:
        raise ValueError(f"decimals must be in 0..{MAX_DECIMALS}, got {decimals}")
    return Scale(lo, hi, st, unit, decimals)


@dataclass(frozen=True)
class Reveal:
    """The measured answer next to the learner's guess: displays as HTML, prints as text."""

    question: str
    measured: str
    guess: str | None
    verdict: str
    explanation: str

    def __str__(self) -> str:
        lines = [f"Predict: {self.question}", REVEAL_SUMMARY, f"Measured: {self.measured}"]
        if self.guess is None:
            lines.append(
                "No guess was locked before the measurement. (Run the predict cell, lock a "
                "guess, then run the cells below it one by one.)"
            )
        else:
            lines.append(f"You guessed {self.guess}; measured {self.measured}: {self.verdict}")
        if self.explanation:
            lines.append(f"Why: {self.explanation}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if self.guess is None:
            compare = (
                f'<div style="{_BOX_NOTE}">No guess was locked before the measurement. (Run the '
                "predict cell, lock a guess, then run the cells below it one by one.)</div>"
            )
        else:
            compare = (
                f"<div>You guessed <b>{html.escape(self.guess)}</b>; measured "
                f"<b>{html.escape(self.measured)}</b>: {html.escape(self.verdict)}</div>"
            )
        why = f"<div>{inline(self.explanation)}</div>" if self.explanation else ""
        return (  # the answer folded: the reader meets the question first
            f'<div class="lmlessons-reveal" style="{_BOX}">'
            f"<div><b>Predict:</b> {inline(self.question)}</div>"
            f'<details><summary style="cursor:pointer">{REVEAL_SUMMARY}</summary>'
            f"<div>Measured: <b>{html.escape(self.measured)}</b></div>{compare}{why}"
            "</details></div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": str(self), "text/html": self._repr_html_()}


def _guess_control(
    scale: Scale | None, choices: tuple[str, ...] | None, value: object, entry: str
) -> widgets.ValueWidget:
    """A slider, a number box or radio buttons (with no choice made yet), described "guess"."""
    if choices is not None:
        return widgets.RadioButtons(
            options=list(choices), value=None, description="guess", style=_STYLE
        )
    assert scale is not None
    start = (scale.low + scale.high) / 2 if value is None else scale.check(value)
    kind = widgets.FloatSlider if entry == "slider" else widgets.BoundedFloatText
    options: dict[str, Any] = {"readout_format": f".{scale.decimals}f"} if entry == "slider" else {}
    return kind(
        value=start,
        min=scale.low,
        max=scale.high,
        step=scale.step,
        description="guess" + (f" ({scale.unit})" if scale.unit else ""),
        style=_STYLE,
        layout=widgets.Layout(width="420px"),
        continuous_update=False,
        **options,
    )


class Predict(LessonWidget):
    """A question, a guess control and a **Lock my guess** button; :meth:`reveal` compares.

    Numeric: ``low``, ``high`` (and ``step``, ``unit``, ``decimals``; ``entry="text"`` for a
    number box instead of the slider). Categorical: ``choices`` (a list of strings). ``.guess``
    is the locked guess (None before); ``.state`` reads ``guess=... locked=True``.
    """

    def __init__(
        self,
        question: str,
        *,
        unit: str = "",
        low: float | None = None,
        high: float | None = None,
        step: float | None = None,
        choices: Sequence[str] | None = None,
        decimals: int | None = None,
        value: float | None = None,
        entry: str = "slider",
    ) -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        if entry not in ("slider", "text"):
            raise ValueError(f'entry must be "slider" or "text", got {entry!r}')
        numeric = low is not None or high is not None
        if (choices is None) == (not numeric) or (numeric and (low is None or high is None)):
            raise ValueError("give either low and high (a number) or choices (a category)")
        self.question = question.strip()
        self.choices = _check_choices(choices) if choices is not None else None
        self.scale = _check_scale(low, high, step, unit, decimals) if numeric else None
        self.guess: float | str | None = None
        self.revealed: Reveal | None = None
        control = _guess_control(self.scale, self.choices, value, entry)
        self.button = widgets.Button(description="Lock my guess", button_style="info")
        self.button.on_click(lambda _button: self._press())
        self._message = ""
        header = widgets.HTML(f"<b>Predict:</b> {inline(self.question)}")
        row = widgets.HBox([control, self.button])
        super().__init__({"guess": control}, self._draw_status, rows=[header, row])
        self.add_class("lmlessons-predict")

    # ------------------------------------------------------------------ the guess
    def _text(self, value: float | str) -> str:
        return self.scale.format(float(value)) if self.scale is not None else str(value)

    def _checked(self, value: object) -> float | str:
        if self.choices is not None:
            if value not in self.choices:
                raise ValueError(f"value must be one of {list(self.choices)}, got {value!r}")
            return str(value)
        assert self.scale is not None
        return self.scale.check(value)

    def commit(self, value: object) -> float | str:
        """Lock ``value`` as the guess (what the button does with the control's value).

        Raises ValueError when a guess is already locked or the answer was revealed."""
        if self.guess is not None:
            raise ValueError(f"value: a guess is already locked ({self._text(self.guess)})")
        if self.revealed is not None:
            raise ValueError("value: the answer was already revealed; guess before measuring")
        guess = self._checked(value)
        control = self.controls["guess"]
        control.value = guess  # the control shows what was locked
        self.guess = guess
        control.disabled = self.button.disabled = True
        self.button.description = "Locked"
        self.redraw()
        return guess

    def _press(self) -> None:
        value = self.controls["guess"].value
        if value is None:
            self._message = "Choose an answer first."
            self.redraw()
            return
        if self.guess is None and self.revealed is None:
            self.commit(value)

    # ------------------------------------------------------------------ the answer
    def reveal(self, measured: object, *, explanation: str = "") -> Reveal:
        """The measured answer next to the locked guess (or a note that there was none).

        ``measured``: a number for a numeric guess (an int, a float or a one-element tensor),
        one of ``choices`` for a categorical one. Its text is deterministic for a given value."""
        if not isinstance(explanation, str):
            raise TypeError(f"explanation must be a string, got {type(explanation).__name__}")
        if self.choices is not None:
            if measured not in self.choices:
                raise ValueError(f"measured must be one of {list(self.choices)}, got {measured!r}")
            answer: float | str = str(measured)
            verdict = (
                ""
                if self.guess is None
                else ("right!" if self.guess == answer else "not this time.")
            )
        else:
            assert self.scale is not None
            answer = _real(measured, "measured")
            verdict = "" if self.guess is None else self.scale.verdict(float(self.guess), answer)
        shown = None if self.guess is None else self._text(self.guess)
        self.revealed = Reveal(self.question, self._text(answer), shown, verdict, explanation)
        self.controls["guess"].disabled = self.button.disabled = True
        self.redraw()
        return self.revealed

    # ------------------------------------------------------------------ display
    def _status(self) -> str:
        if self.guess is not None:
            return f"Your guess: {self._text(self.guess)} (locked)."
        if self.revealed is not None:
            return "No guess was locked before the answer was revealed."
        return self._message or "Make your guess, press Lock my guess, then run the next cells."

    def _draw_status(self) -> tuple[OutputRecord, ...]:
        if self.controls["guess"].value is not None:
            self._message = ""
        guess = "none" if self.guess is None else self._text(self.guess).replace(" ", "_")
        state = (
            f"guess={guess} locked={self.guess is not None} revealed={self.revealed is not None}"
        )
        status = f'<div style="{_NOTE}">{html.escape(self._status())}</div>'
        return state_output(state), html_output(status, self._status())

    def _options(self) -> list[tuple[str, bool]]:
        """What can be guessed, as (text, locked) pairs: the choices, or the numeric range."""
        if self.choices is not None:
            return [(c, c == self.guess) for c in self.choices]
        assert self.scale is not None
        span = f"a number from {self.scale.format(self.scale.low)} to "
        return [(span + self.scale.format(self.scale.high), False)]

    def static_text(self) -> str:
        """The question, what can be guessed and the guess, as text (the bundle's
        ``text/plain``)."""
        marks = {True: "(x) ", False: "( ) "} if self.choices is not None else {False: ""}
        options = "\n".join(f"  {marks[locked]}{text}" for text, locked in self._options())
        return f"Predict: {self.question}\n{options}\n{self._status()}"

    def static_html(self) -> str:
        """The question, what can be guessed and the guess as static HTML (what a viewer
        without a kernel shows; the locked choice is marked)."""
        marks = {True: "&#9673; ", False: "&#9675; "} if self.choices is not None else {False: ""}
        items = "".join(
            f"<li>{marks[locked]}{html.escape(text)}</li>" for text, locked in self._options()
        )
        return (
            f'<div class="lmlessons-static lmlessons-predict" style="{_BOX}">'
            f"<div><b>Predict:</b> {inline(self.question)}</div>"
            f'<ul style="list-style:none;padding-left:8px;margin:2px 0">{items}</ul>'
            f'<div style="{_BOX_NOTE}">{html.escape(self._status())}</div></div>'
        )
