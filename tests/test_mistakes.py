"""The one exercise pattern: one mistake catalogue.

Every code a checker can raise has one entry in ``lmlessons/data/content/mistakes.toml`` (title and
explanation, one wording), and every entry is used.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lmlessons.exercises._framework import Mistake, catalogue

EXERCISES_DIR = Path(__file__).resolve().parents[1] / "lmlessons" / "exercises"
SOURCES = sorted(EXERCISES_DIR.glob("*.py"))


def _strings(node: ast.AST) -> list[str]:
    """The string constants an expression can evaluate to (``"a" if x else "b"`` gives both)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [s for value in node.values for s in _strings(value)]
    return []


def raised_codes(source: str) -> set[str]:
    """The codes of every ``Mistake(code, ...)`` call whose code is a literal in ``source``."""
    codes = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Mistake" and node.args:
            codes.update(_strings(node.args[0]))
    return codes


def test_the_catalogue_holds_a_title_and_an_explanation_per_code():
    entries = catalogue()
    assert len(entries) > 50
    for code, entry in entries.items():
        assert code.isidentifier() and code == code.lower(), code
        assert set(entry) == {"title", "explanation"}, code
        assert entry["title"].strip() and "\n" not in entry["title"], code
        assert len(entry["explanation"].split()) >= 8, code
    titles = [e["title"] for e in entries.values()]
    assert len(set(titles)) == len(titles), "two codes share a title: one wording per mistake"


def test_every_raised_code_is_in_the_catalogue_and_every_entry_is_used():
    text = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    raised = set().union(*(raised_codes(p.read_text(encoding="utf-8")) for p in SOURCES))
    assert raised - set(catalogue()) == set()
    unused = {code for code in catalogue() if f'"{code}"' not in text}
    assert unused == set(), "catalogue entries no checker raises"


def test_raised_codes_sees_literal_and_conditional_codes():
    source = 'Mistake("a_b", x)\nMistake("c" if y else "d", z)\nf(Mistake)\nOther("e", 1)'
    assert raised_codes(source) == {"a_b", "c", "d"}


def test_a_mistake_takes_its_wording_from_the_catalogue():
    m = Mistake("modifies_input", "On case 1, `labels` changed during the call.")
    entry = catalogue()["modifies_input"]
    assert m.title == entry["title"]
    assert m.message.startswith("On case 1") and entry["explanation"].strip() in m.message
    with pytest.raises(KeyError):
        Mistake("no_such_mistake_code", "detail")
