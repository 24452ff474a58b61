"""Every lesson that shows a quiz has enough questions, each choice with its own explanation,
and no choice that points at another by its letter or place (choices are shown shuffled).

The lessons are read from ``notebooks/``: a code cell calling ``quiz("NN")`` shows lesson NN's
questions, so a lesson added later is covered as soon as it calls its quiz. Lesson 00 shows its
warm-up questions with ``start_quiz()``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _lessons import LESSONS, code_cells

from lmlessons.exercises.quizzes import QUIZZES, START_QUESTIONS, Choice, Question

MIN_QUESTIONS = 4
QUIZ_CALL = re.compile(r"""\bquiz\(\s*["'](\d{2})["']\s*\)""")
# Choices are shown shuffled: no choice may point at another by its letter or its place.
BY_POSITION = re.compile(
    r"\b(?:all|none|both|either) of the (?:above|below|others)\b|\b(?:choice|answer|option) [A-D]\b"
    r"|\b[A-D] and [A-D]\b",
    re.I,
)


def _quiz_calls(path: Path) -> list[str]:
    """The lessons whose quiz the notebook at ``path`` shows (``quiz("NN")`` calls)."""
    return [m for cell in code_cells(path) for m in QUIZ_CALL.findall("".join(cell["source"]))]


SHOWN = sorted({(path.stem, lesson) for path in LESSONS for lesson in _quiz_calls(path)})


def _check_questions(name: str, questions: tuple[Question, ...]) -> None:
    assert len(questions) >= MIN_QUESTIONS, f"{name} has {len(questions)} questions"
    prompts = [q.prompt for q in questions]
    assert len(set(prompts)) == len(prompts), f"{name} asks a question twice"
    seen: set[str] = set()
    for number, q in enumerate(questions, start=1):
        assert q.id.endswith(f".{number}"), f"{name}: question {number} is numbered {q.id}"
        assert len(q.choices) >= 3, f"{q.id} needs at least 3 choices"
        for c in q.choices:
            assert c.text.strip() and c.why.strip(), f"{q.id}: choice {c.text!r} explains nothing"
            assert c.why not in seen, f"{q.id}: choice {c.text!r} reuses another explanation"
            seen.add(c.why)
        texts = [c.text for c in q.choices]
        assert len(set(texts)) == len(texts), f"{q.id} offers a choice twice"
        for c in q.choices:
            found = BY_POSITION.search(c.text + " " + c.why)
            assert not found, f"{q.id}: {found[0]!r} points at a shuffled choice"


def test_the_lessons_show_quizzes():
    assert len(SHOWN) >= 7, SHOWN  # lessons 01-07 each show theirs
    for notebook, lesson in SHOWN:
        assert notebook.startswith(lesson), f"{notebook} shows the quiz of lesson {lesson}"


@pytest.mark.parametrize("notebook,lesson", SHOWN, ids=[n for n, _ in SHOWN])
def test_every_shown_quiz_has_enough_explained_questions(notebook: str, lesson: str):
    assert lesson in QUIZZES, f"{notebook} calls quiz({lesson!r}), which has no questions"
    _check_questions(f"quiz({lesson!r})", QUIZZES[lesson])


def test_lesson_00_warm_up_has_enough_explained_questions():
    from lmlessons.widgets.start import start_quiz

    _check_questions("lesson 00", START_QUESTIONS)
    shown = start_quiz().questions  # what lesson 00 shows: these questions, in this order
    assert shown == START_QUESTIONS[: len(shown)]


def test_the_checks_catch_a_thin_quiz():
    with pytest.raises(AssertionError, match="questions"):
        _check_questions("thin", QUIZZES["03"][:3])
    q = QUIZZES["03"][0]
    same = Question(q.id, q.prompt, (q.choices[0], q.choices[1], q.choices[0]))
    with pytest.raises(AssertionError, match=r"twice|reuses"):
        _check_questions("copied", (same, *QUIZZES["03"][1:]))
    last = q.choices[-1]
    pointing = Choice("All of the above.", last.correct, last.why + " (see answer B)")
    shuffled = Question(q.id, q.prompt, (*q.choices[:-1], pointing), q.order)
    with pytest.raises(AssertionError, match="points at a shuffled choice"):
        _check_questions("positional", (shuffled, *QUIZZES["03"][1:]))


def test_a_question_with_two_correct_choices_is_refused_when_it_is_written():
    """The guarantee every quiz relies on, enforced by quizzes.py itself at import."""
    from lmlessons.exercises.quizzes import _q

    with pytest.raises(ValueError, match="exactly one correct choice"):
        _q("99.1", "?", ("a", True, "x"), ("b", True, "y"), ("c", False, "z"))
