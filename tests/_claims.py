"""The claims ledger (``docs/claims.md``) and the lesson text it must cover.

A ledger entry is a level-3 heading with the claim id, then four bullets::

    ### 07-trainer-bert-ga
    - lesson: 07
    - anchor: `BertForMaskedLM` and `BertForPreTraining` compute a plain mean
    - claim: what the lesson states, in one sentence.
    - evidence: test

``evidence`` is ``test`` (a ``test_claim_<id with _ for ->`` in ``tests/test_claims*.py``),
``test tests/<file>.py::<function> ...`` (one or more existing tests that check the claim, so that
no test is copied to carry a second name), a citation of code
(``cite owner/repo@<40-hex commit> path#L<n>`` or ``#L<n>-L<m>``), or a citation of a paper
(``paper arXiv:<id>, <where in the paper>``). The anchor is a piece of the lesson's text
(whitespace folded) that makes the claim: ``lesson`` is a lesson number (``07``), a quiz
(``quiz 07``) or ``teaching`` (docs/teaching.md).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._lessons import LESSONS, ROOT, cells

LEDGER = ROOT / "docs" / "claims.md"
FIELDS = ("lesson", "anchor", "claim", "evidence")
CITE = re.compile(r"^cite [\w.-]+/[\w.-]+@[0-9a-f]{40} \S+#L\d+(-L\d+)?$")
PAPER = re.compile(r"^paper arXiv:\d{4}\.\d{4,5}, .+$")
TESTS = re.compile(r"^test( tests/[\w/]+\.py::\w+)*$")
# Names of other systems: a paragraph naming one states something about it.
SYSTEMS = re.compile(
    r"transformers|\bTrainer\b|Hugging Face|\btokenizers\b|fairseq|RoBERTa|Google|"
    r"run_pretraining|create_pretraining_data|Liger|Cut Cross-Entropy|\bCCE\b|\bTRL\b|"
    r"\bBert(For\w+|LMHeadModel|Model|TokenizerFast)\b|\bGPT2\w*Model\b|DataCollator\w*|"
    r"For(Causal|Masked)LMLoss|ModernBERT|ELECTRA|SpanBERT|ALBERT|et al\.|Llama|d2l"
)
# Sections that only point to further reading, and the navigation footer.
EXEMPT_CELL = re.compile(r"^\s*(## Going further|---\s*\n\*\*Previous)")


@dataclass(frozen=True)
class Claim:
    id: str
    lesson: str
    anchor: str
    claim: str
    evidence: str

    @property
    def test_name(self) -> str:
        return "test_claim_" + self.id.replace("-", "_").replace(".", "_")

    @property
    def tests(self) -> list[tuple[str, str]]:
        """The (path, function) of each test named by a ``test tests/x.py::name ...`` evidence;
        empty for a bare ``test`` (its ``test_name``) and for a citation."""
        if not TESTS.match(self.evidence):
            return []
        refs = [ref.partition("::") for ref in self.evidence.split()[1:]]
        return [(path, name) for path, _, name in refs]


def fold(text: str) -> str:
    """Whitespace folded to single spaces: anchors match across line breaks."""
    return " ".join(text.split())


def read_ledger(path: Path = LEDGER) -> list[Claim]:
    """Every entry of the ledger, in order; a malformed entry raises ValueError."""
    claims = []
    for block in re.split(r"^### ", path.read_text(encoding="utf-8"), flags=re.M)[1:]:
        head, *lines = block.strip().splitlines()
        fields: dict[str, str] = {}
        for line in lines:
            match = re.match(r"^- (\w+): (.+)$", line)
            if match and match[1] in FIELDS:
                fields[match[1]] = match[2].strip()
        missing = [f for f in FIELDS if f not in fields]
        if missing:
            raise ValueError(f"claim {head.strip()!r} lacks {missing}")
        claims.append(Claim(head.strip(), **fields))
    return claims


def lesson_paragraphs(path: Path) -> list[str]:
    """The markdown paragraphs (and list items) of a lesson, folded, outside exempt cells."""
    paragraphs = []
    for cell in cells(path):
        source = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or EXEMPT_CELL.match(source):
            continue
        for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.) )", source):
            if block.strip():
                paragraphs.append(fold(block))
    return paragraphs


def quiz_questions(number: str) -> tuple[Any, ...]:
    """The quiz questions of lesson ``number``: ``QUIZZES``, or lesson 00's warm-up questions."""
    from lmlessons.exercises.quizzes import QUIZZES, START_QUESTIONS

    return START_QUESTIONS if number == "00" else QUIZZES[number]


def quiz_lessons() -> list[str]:
    """Every lesson number with quiz questions ("00" for the warm-up of lesson 00)."""
    from lmlessons.exercises.quizzes import QUIZZES

    return ["00", *QUIZZES]


def question_text(question: Any) -> str:
    """A quiz question as one folded text: its prompt, then each choice and its explanation."""
    return fold(" ".join([question.prompt, *(c.text + " " + c.why for c in question.choices)]))


@functools.cache
def lesson_text(lesson: str) -> str:
    """The folded text an anchor of ``lesson`` ("07", "quiz 07", or "teaching" for the teachers'
    guide, docs/teaching.md) must occur in."""
    if lesson == "teaching":
        return fold((ROOT / "docs" / "teaching.md").read_text(encoding="utf-8"))
    if lesson.startswith("quiz "):
        return " ".join(question_text(q) for q in quiz_questions(lesson.split()[1]))
    (path,) = [p for p in LESSONS if p.name.startswith(lesson + "_")]
    return fold(" ".join("".join(c["source"]) for c in cells(path)))


def uncovered(path: Path, claims: list[Claim]) -> list[str]:
    """Paragraphs of the lesson at ``path`` that name another system and hold no anchor."""
    number = path.name[:2]
    anchors = [fold(c.anchor) for c in claims if c.lesson == number]
    return [
        p for p in lesson_paragraphs(path) if SYSTEMS.search(p) and not any(a in p for a in anchors)
    ]


def uncovered_quiz(number: str, claims: list[Claim]) -> list[str]:
    """Questions of lesson ``number``'s quiz (prompt, choices and explanations) that name another
    system and hold no anchor of a ``quiz NN`` entry, as "id: text"."""
    anchors = [fold(c.anchor) for c in claims if c.lesson == f"quiz {number}"]
    texts = [(q.id, question_text(q)) for q in quiz_questions(number)]
    return [
        f"{qid}: {text}"
        for qid, text in texts
        if SYSTEMS.search(text) and not any(a in text for a in anchors)
    ]


def _is_skip_mark(node: ast.expr) -> bool:
    """``pytest.mark.skip`` (called or not), or ``pytest.mark.skipif(True, ...)``."""
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call else node
    if not (isinstance(target, ast.Attribute) and target.attr in ("skip", "skipif")):
        return False
    if target.attr == "skip":
        return True
    first = call.args[0] if call and call.args else None
    return isinstance(first, ast.Constant) and bool(first.value)


def _skips_at_once(body: list[ast.stmt]) -> bool:
    """The function's first statement is ``pytest.skip(...)``."""
    first = body[0] if body else None
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Call)
        and isinstance(first.value.func, ast.Attribute)
        and first.value.func.attr == "skip"
    )


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def named_test_problem(path: str, name: str, root: Path = ROOT) -> str | None:
    """Why ``path::name`` cannot be a claim's evidence (it is missing, or always skipped), else
    None. The module is parsed, not imported."""
    if not (root / path).is_file():
        return f"no file {path}"
    tree = _parsed(root / path)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if name not in functions:
        return f"no function {name} in {path}"
    module_marks = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
    ]
    marks = [*functions[name].decorator_list]
    for value in module_marks:
        marks += value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    if any(_is_skip_mark(m) for m in marks) or _skips_at_once(functions[name].body):
        return f"{path}::{name} is always skipped"
    return None
