"""The quiz widget: a question, radio buttons, a Check button and feedback for the chosen answer.

``Quiz.answer(choice, question=1)`` answers programmatically (tests, or a learner without widgets)
and returns exactly the text the widget then shows. Letters always name the choices as shown
(``Question.shown``, a seeded shuffle of the written order), in the widget, its picture, the
text and the feedback. The text/plain form of a quiz is deterministic, so quiz cells need no
nbval tag.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from lmlessons.course.palette import BAD, GOOD, MUTED
from lmlessons.course.widget_versions import live_bundle
from lmlessons.exercises._result import inline
from lmlessons.exercises.quizzes import QUIZZES, Question

LETTERS = "ABCDEFGH"
_CSS = (
    "<style>.lmlessons-quiz .widget-radio-box "
    "label{white-space:normal;height:auto;line-height:1.35;margin-bottom:4px}.lmlessons-quiz "
    ".widget-radio-box{width:100%}</style>"
)


def feedback_text(question: Question, index: int) -> str:
    """The feedback for choosing ``question.shown[index]``, the choice shown at that letter."""
    choice = question.shown[index]
    verdict = "Correct." if choice.correct else "Not quite."
    return f"{LETTERS[index]}: {verdict} {choice.why}"


def _feedback_html(text: str, correct: bool | None) -> str:
    if not text:
        return ""
    # dark text on a light box: AA (4.5:1) in a light and a dark theme alike
    color, background = {
        True: (GOOD, "#eef8ee"),
        False: (BAD, "#fdf0f0"),
        None: ("#4a4a4a", "#f6f6f6"),
    }[correct]
    return (
        f'<div style="color:{color};background:{background};padding:2px 6px;margin:4px 0 8px 0">'
        f"{html.escape(text)}</div>"
    )


def _prompt_html(prompt: str) -> str:
    """`code` and *emphasis* of a prompt as HTML."""
    return inline(prompt)


class Quiz:
    """One lesson's multiple-choice questions (or a single question)."""

    def __init__(self, questions: Sequence[Question], title: str) -> None:
        if not questions:
            raise ValueError("a quiz needs at least one question")
        self.questions = tuple(questions)
        self.title = title
        self.feedback_texts: list[str] = ["" for _ in self.questions]
        self._radios: list[Any] = []
        self._feedback: list[Any] = []
        self._buttons: list[Any] = []
        self._widget: Any = None

    # ------------------------------------------------------------------ programmatic use
    def _index(self, question: int) -> int:
        if not isinstance(question, int) or not 1 <= question <= len(self.questions):
            raise ValueError(
                f"question must be an int in 1..{len(self.questions)}, got {question!r}"
            )
        return question - 1

    def _choice(self, q: Question, choice: int | str) -> int:
        if (
            isinstance(choice, str)
            and len(choice) == 1
            and choice.upper() in LETTERS[: len(q.shown)]
        ):
            return LETTERS.index(choice.upper())
        if isinstance(choice, int) and not isinstance(choice, bool) and 0 <= choice < len(q.shown):
            return choice
        raise ValueError(
            f"choice must be a letter A-{LETTERS[len(q.shown) - 1]} or an index "
            f"0-{len(q.shown) - 1}, got {choice!r}"
        )

    def answer(self, choice: int | str, question: int = 1) -> str:
        """Choose ``choice`` (a letter "A".. as shown, or a 0-based index into the shown
        choices) for question ``question`` (1-based), press Check, and return the feedback
        text the widget shows."""
        qi = self._index(question)
        q = self.questions[qi]
        ci = self._choice(q, choice)
        _ = self.widget  # build the widgets so they show the same state
        self._radios[qi].value = ci
        return self._check(qi)

    def correct_choice(self, question: int = 1) -> str:
        """The letter of the right answer as shown (for teachers and tests)."""
        q = self.questions[self._index(question)]
        return next(LETTERS[i] for i, c in enumerate(q.shown) if c.correct)

    def _check(self, qi: int) -> str:
        q = self.questions[qi]
        index = self._radios[qi].value
        if index is None:
            text, correct = "Choose an answer first.", None
        else:
            text, correct = feedback_text(q, index), q.shown[index].correct
        self.feedback_texts[qi] = text
        self._feedback[qi].value = _feedback_html(text, correct)
        return text

    # ------------------------------------------------------------------ widgets
    @property
    def widget(self) -> Any:
        if self._widget is None:
            boxes = [widgets.HTML(_CSS + f"<b>{html.escape(self.title)}</b>")]
            for qi, q in enumerate(self.questions):
                radio = widgets.RadioButtons(
                    options=[(f"{LETTERS[i]}. {c.text}", i) for i, c in enumerate(q.shown)],
                    value=None,
                    layout=widgets.Layout(width="100%"),
                )
                button = widgets.Button(description="Check", button_style="info")
                feedback = widgets.HTML("")
                button.on_click(lambda _b, qi=qi: self._check(qi))
                radio.observe(lambda _c, qi=qi: self._clear(qi), names="value")
                self._radios.append(radio)
                self._buttons.append(button)
                self._feedback.append(feedback)
                number = f"{qi + 1}. " if len(self.questions) > 1 else ""
                boxes += [
                    widgets.HTML(
                        f"<p style='margin:8px 0 2px 0'>{number}{_prompt_html(q.prompt)}</p>"
                    ),
                    radio,
                    button,
                    feedback,
                ]
            self._widget = widgets.VBox(boxes)
            self._widget.add_class("lmlessons-quiz")
        return self._widget

    def _clear(self, qi: int) -> None:
        self.feedback_texts[qi] = ""
        self._feedback[qi].value = ""

    # ------------------------------------------------------------------ display
    def __str__(self) -> str:
        lines = [self.title]
        for qi, q in enumerate(self.questions):
            number = f"{qi + 1}. " if len(self.questions) > 1 else ""
            lines += ["", f"{number}{q.prompt}"]
            lines += [f"  {LETTERS[i]}. {c.text}" for i, c in enumerate(q.shown)]
        lines += ["", 'Answer in the widget, or with .answer("B", question=1).']
        return "\n".join(lines)

    __repr__ = __str__

    def static_html(self) -> str:
        """What the quiz shows now, as static HTML (deterministic): the questions, the choices
        (the chosen one marked) and any feedback. A viewer without a kernel shows this."""
        _ = self.widget
        parts = [f'<div class="lmlessons-quiz-static"><b>{html.escape(self.title)}</b>']
        for qi, q in enumerate(self.questions):
            number = f"{qi + 1}. " if len(self.questions) > 1 else ""
            chosen = self._radios[qi].value
            items = "".join(
                f"<li>{'&#9673;' if i == chosen else '&#9675;'} "
                f"{LETTERS[i]}. {html.escape(c.text)}</li>"
                for i, c in enumerate(q.shown)
            )
            parts.append(
                f"<p style='margin:8px 0 2px 0'>{number}{_prompt_html(q.prompt)}</p>"
                f"<ul style='list-style:none;padding-left:8px;margin:2px 0'>{items}</ul>"
                f"{self._feedback[qi].value}"
            )
        parts.append(
            f'<p style="{MUTED}font-size:90%">Run the notebook to answer in the widget, or '
            'use <code>.answer("B", question=1)</code>.</p></div>'
        )
        return "".join(parts)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        data = dict(live_bundle(self.widget, include=include, exclude=exclude) or {})
        data["text/plain"] = str(self)  # deterministic, unlike a widget's repr
        data["text/html"] = self.static_html()  # the picture for viewers without a kernel
        return data


def quiz(id: str | int) -> Quiz:
    """The quiz of a lesson: ``quiz("04")`` (all its questions) or ``quiz("04.1")`` (one)."""
    key = str(id).strip()
    lesson, _, number = key.partition(".")
    lesson = lesson.zfill(2)
    if lesson not in QUIZZES:
        raise ValueError(f"no quiz for lesson {id!r}; lessons with quizzes: {', '.join(QUIZZES)}")
    questions = QUIZZES[lesson]
    if number:
        wanted = f"{lesson}.{number}"
        questions = tuple(q for q in questions if q.id == wanted)
        if not questions:
            ids = ", ".join(q.id for q in QUIZZES[lesson])
            raise ValueError(f"no question {wanted!r}; lesson {lesson} has {ids}")
        return Quiz(questions, f"Quiz {wanted}")
    return Quiz(questions, f"Quiz: lesson {lesson}")
