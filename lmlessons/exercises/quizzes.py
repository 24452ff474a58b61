"""The lessons' quizzes: multiple choice, an explanation for every choice.

Lesson authors call ``quiz("04")`` (all questions of lesson 04) or ``quiz("04.1")`` (one). The
questions are data, one file per lesson: ``lmlessons/data/content/quizzes/NN.toml`` (``00`` is
lesson 00's warm-up, :data:`START_QUESTIONS`; the others make :data:`QUIZZES`). Each number
stated there is computed in tests/test_exercises.py (``test_quiz_numbers``); each claim about
another system (transformers, Google's BERT, ...) has an entry under "Quizzes" in
docs/claims.md, with a behaviour test in tests/test_claims_quiz.py or a citation.

Choices are written in any order; a question *shows* them in a seeded shuffled order
(:attr:`Question.shown`), derived from its id alone, so the stored outputs never change and the
right answer cannot be guessed from its position. ``tests/test_exercises.py`` checks that over
all questions every position holds the right answer 15-35% of the time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from lmlessons.course.content import load, names

#: Seeds every question's shuffle. 367 spreads the right answers of the lessons' 39 questions
#: over A-D as 10, 11, 9 and 9 times, and never puts more than 2 of one lesson at one letter.
ORDER_SEED = 367


def display_order(id: str, n: int, seed: int = ORDER_SEED) -> tuple[int, ...]:
    """The order in which question ``id`` shows its ``n`` choices (indices into the written
    order). A string seed is hashed with SHA-512 and ``random()`` is stable across Python
    versions, so the order is the same on every machine and every run."""
    rng = random.Random(f"{seed}:{id}")
    keys = [rng.random() for _ in range(n)]
    return tuple(sorted(range(n), key=keys.__getitem__))


@dataclass(frozen=True)
class Choice:
    text: str
    correct: bool
    why: str


@dataclass(frozen=True)
class Question:
    id: str  # "LL.n"
    prompt: str
    choices: tuple[Choice, ...]  # as written
    order: tuple[int, ...] = field(default=())  # the shown order; () keeps the written one

    @property
    def shown(self) -> tuple[Choice, ...]:
        """The choices in the order the learner sees them (letter A first)."""
        return tuple(self.choices[i] for i in self.order) if self.order else self.choices


def _q(id: str, prompt: str, *choices: tuple[str, bool, str], shuffle: bool = True) -> Question:
    written = tuple(Choice(*c) for c in choices)
    order = display_order(id, len(written)) if shuffle else ()
    q = Question(id, prompt, written, order)
    if sum(c.correct for c in q.choices) != 1:  # pragma: no cover - content error
        raise ValueError(f"quiz {id} must have exactly one correct choice")
    return q


def _paragraph(text: str) -> str:
    """A content string as one paragraph: its line breaks (and runs of spaces) become a space."""
    return " ".join(text.split())


def _question(entry: dict[str, Any]) -> Question:
    choices = [(_paragraph(c["text"]), c["correct"], _paragraph(c["why"])) for c in entry["choice"]]
    return _q(
        entry["id"], _paragraph(entry["prompt"]), *choices, shuffle=entry.get("shuffle", True)
    )


def questions(lesson: str) -> tuple[Question, ...]:
    """The questions of ``quizzes/<lesson>.toml``, in their written order."""
    return tuple(_question(entry) for entry in load(f"quizzes/{lesson}")["question"])


#: Every lesson's questions but lesson 00's, by lesson number ("01", ...).
QUIZZES: dict[str, tuple[Question, ...]] = {
    lesson: questions(lesson) for lesson in names("quizzes") if lesson != "00"
}

#: Lesson 00's warm-up questions (shown by ``lmlessons.widgets.start.start_quiz``), in their
#: written order: their right answers are already spread (B, C, A, B).
START_QUESTIONS: tuple[Question, ...] = questions("00")
