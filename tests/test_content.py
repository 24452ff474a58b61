"""The course prose kept as data (lmlessons/data/content): every file against its schema, and the
lessons' What-if answer cells against their data (tools/content.py).

The validators return a list of problems, one line each, so that a test on a broken file can show
that each of them is caught.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import nbformat
import pytest

import tools.content as content
from lmlessons.bugzoo.cases import RELATIONS
from lmlessons.course.content import CONTENT, load, names
from lmlessons.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[1]
FILES_DIR = Path(str(resources.files("lmlessons").joinpath(CONTENT)))
FILES = sorted(FILES_DIR.rglob("*.toml"))
LEVELS = ("1", "2", "3")
CHOICE_KEYS = {"text": str, "correct": bool, "why": str}


def text_problems(text: str) -> list[str]:
    """Layout rules for every content file: valid TOML, no tab, no trailing whitespace."""
    problems = []
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"not valid TOML: {exc}")
    for number, line in enumerate(text.split("\n"), start=1):
        if "\t" in line:
            problems.append(f"line {number}: a tab character")
        if line != line.rstrip():
            problems.append(f"line {number}: trailing whitespace")
    if not text.endswith("\n"):
        problems.append("no final newline")
    return problems


def _prose(where: str, value: object) -> list[str]:
    if not isinstance(value, str) or not value.strip():
        return [f"{where}: must be a non-empty string, got {value!r}"]
    return []


def hint_problems(data: dict[str, Any]) -> list[str]:
    """hints.toml: one table per exercise, with the levels "1", "2" and "3" as prose."""
    problems = []
    for name, table in data.items():
        if not isinstance(table, dict) or tuple(table) != LEVELS:
            keys = list(table) if isinstance(table, dict) else table
            problems.append(f"[{name}]: needs exactly the levels 1, 2, 3 in order, got {keys!r}")
            continue
        problems += [p for level in LEVELS for p in _prose(f"[{name}] {level}", table[level])]
    return problems


def _choice_problems(where: str, choice: object) -> list[str]:
    if not isinstance(choice, dict) or set(choice) != set(CHOICE_KEYS):
        return [f"{where}: a choice needs exactly the keys text, correct, why"]
    problems = [p for key in ("text", "why") for p in _prose(f"{where} {key}", choice[key])]
    if not isinstance(choice["correct"], bool):
        problems.append(f"{where} correct: must be true or false")
    return problems


def _question_problems(where: str, question: object) -> list[str]:
    if not isinstance(question, dict) or not {"id", "prompt", "choice"} <= set(question):
        return [f"{where}: a question needs the keys id, prompt, choice"]
    unknown = set(question) - {"id", "prompt", "choice", "shuffle"}
    if unknown:
        return [f"{where}: unknown keys {sorted(unknown)}"]
    problems = _prose(f"{where} prompt", question["prompt"])
    if not isinstance(question.get("shuffle", True), bool):
        problems.append(f"{where} shuffle: must be true or false")
    choices = question["choice"]
    if not isinstance(choices, list) or len(choices) < 3:
        return [*problems, f"{where}: needs at least 3 choices"]
    for number, choice in enumerate(choices, start=1):
        problems += _choice_problems(f"{where} choice {number}", choice)
    if sum(isinstance(c, dict) and c.get("correct") is True for c in choices) != 1:
        problems.append(f"{where}: needs exactly one correct choice")
    return problems


def quiz_problems(lesson: str, data: dict[str, Any]) -> list[str]:
    """quizzes/LL.toml: ``[[question]]`` tables numbered LL.1, LL.2, ... in order."""
    questions = data.get("question")
    if set(data) != {"question"} or not isinstance(questions, list) or not questions:
        return ["needs [[question]] tables and nothing else"]
    problems = []
    for number, question in enumerate(questions, start=1):
        wanted = f"{lesson}.{number}"
        if isinstance(question, dict) and question.get("id") != wanted:
            problems.append(f"question {number}: id {question.get('id')!r}, not {wanted!r}")
        problems += _question_problems(f"question {wanted}", question)
    return problems


def whatif_problems(lesson: str, data: dict[str, Any]) -> list[str]:
    """whatif/LL.toml: model answers keyed by ids LL.n."""
    problems = []
    for wid, answer in data.items():
        if not re.fullmatch(rf"{lesson}\.[1-9]\d*", wid):
            problems.append(f"id {wid!r} is not {lesson}.n")
        problems += _prose(wid, answer)
    return problems


CASE_KEYS = {"run", "reference", "diagnosis", "lesson", "title", "claims", "evidence", "why"}
CLAIM_KEYS = {"metric": str, "relation": str, "margin": (int, float), "against": str}


def _claim_problems(where: str, claims: object, relations: tuple[str, ...]) -> list[str]:
    if not isinstance(claims, list) or not claims:
        return [f"{where}: needs a non-empty list of claims"]
    problems = []
    for number, claim in enumerate(claims, start=1):
        here = f"{where} claim {number}"
        if not isinstance(claim, dict) or not {"metric", "relation"} <= set(claim) <= set(
            CLAIM_KEYS
        ):
            problems.append(f"{here}: needs metric and relation, at most margin and against")
            continue
        wrong = [k for k, v in claim.items() if not isinstance(v, CLAIM_KEYS[k])]
        problems += [f"{here} {key}: wrong type" for key in wrong]
        if claim["relation"] not in relations:
            problems.append(f"{here}: relation {claim['relation']!r} not one of {relations}")
    return problems


def _case_problems(
    where: str, case: object, diagnoses: set[str], relations: tuple[str, ...]
) -> list[str]:
    if not isinstance(case, dict) or set(case) != CASE_KEYS:
        return [f"{where}: needs exactly the keys {sorted(CASE_KEYS)}"]
    problems = [
        p
        for key in ("run", "reference", "title", "evidence", "why")
        for p in _prose(f"{where} {key}", case[key])
    ]
    if case["diagnosis"] not in diagnoses:
        problems.append(f"{where}: diagnosis {case['diagnosis']!r} is not a [diagnoses] table")
    if not isinstance(case["lesson"], str) or not re.fullmatch(r"(\d\d)?", case["lesson"]):
        problems.append(f'{where} lesson: two digits or "", got {case["lesson"]!r}')
    return problems + _claim_problems(where, case["claims"], relations)


def _instrument_problems(where: str, instrument: object, families: set[str]) -> list[str]:
    if not isinstance(instrument, dict) or not {"label", "metrics"} <= set(instrument):
        return [f"{where}: needs label and metrics"]
    problems = _prose(f"{where} label", instrument["label"])
    if set(instrument) - {"label", "metrics", "floor"}:
        problems.append(
            f"{where}: unknown keys {sorted(set(instrument) - {'label', 'metrics', 'floor'})}"
        )
    if not isinstance(instrument.get("floor", 0.0), (int, float)):
        problems.append(f"{where} floor: must be a number")
    metrics = instrument["metrics"]
    if not isinstance(metrics, dict) or not metrics or not set(metrics) <= families:
        problems.append(f"{where} metrics: a table from model families ([settings]) to metrics")
    elif not all(isinstance(m, str) and m for m in metrics.values()):
        problems.append(f"{where} metrics: each a metric name")
    return problems


def bugzoo_problems(data: dict[str, Any], relations: tuple[str, ...]) -> list[str]:
    """bugzoo.toml: [settings] (prose by model family), [instruments.<id>] (label, metrics by
    family, floor), [diagnoses.<id>] (label, would_show), [cases.<letter>] (the runs, the
    diagnosis, the lesson, the prose and the claims)."""
    if set(data) != {"settings", "instruments", "diagnoses", "cases"}:
        return ["needs exactly the tables settings, instruments, diagnoses, cases"]
    problems = [p for family, text in data["settings"].items() for p in _prose(family, text)]
    for iid, instrument in data["instruments"].items():
        problems += _instrument_problems(f"[instruments.{iid}]", instrument, set(data["settings"]))
    for did, diagnosis in data["diagnoses"].items():
        if not isinstance(diagnosis, dict) or set(diagnosis) != {"label", "would_show"}:
            problems.append(f"[diagnoses.{did}]: needs exactly the keys label, would_show")
            continue
        problems += [p for k in ("label", "would_show") for p in _prose(did, diagnosis[k])]
    for cid, case in data["cases"].items():
        if not re.fullmatch("[A-Z]", cid):
            problems.append(f"[cases.{cid}]: a case id is one capital letter")
        problems += _case_problems(f"[cases.{cid}]", case, set(data["diagnoses"]), relations)
    return problems


# --------------------------------------------------------------------------- the files


def test_the_content_files_are_there():
    assert {p.relative_to(FILES_DIR).as_posix() for p in FILES} >= {
        "hints.toml",
        "bugzoo.toml",
        *(f"quizzes/{n}.toml" for n in ("00", "01", "08")),
        *(f"whatif/{n}.toml" for n in ("01", "08")),
    }


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FILES_DIR).as_posix())
def test_every_content_file_is_tidy_toml(path: Path):
    assert text_problems(path.read_text(encoding="utf-8")) == []


def test_hints_follow_their_schema_and_cover_every_exercise():
    hints = load("hints")
    assert hint_problems(hints) == []
    coded = {name for name, e in EXERCISES.items() if not e.answers}  # the bug zoo has none
    assert coded - set(hints) == set(), "exercises without hints"
    assert set(hints) - set(EXERCISES) == set(), "hints of no exercise"


@pytest.mark.parametrize("lesson", names("quizzes"))
def test_quizzes_follow_their_schema(lesson: str):
    assert quiz_problems(lesson, load(f"quizzes/{lesson}")) == []


@pytest.mark.parametrize("lesson", names("whatif"))
def test_whatif_answers_follow_their_schema(lesson: str):
    assert whatif_problems(lesson, load(f"whatif/{lesson}")) == []


def test_the_bug_zoo_follows_its_schema():
    assert bugzoo_problems(load("bugzoo"), RELATIONS) == []


def test_every_whatif_answer_is_in_exactly_one_lesson_cell_and_equal_to_it():
    """Each id used by exactly one cell of its lesson, every answer cell keyed, no stale text:
    what ``python -m tools.content --check`` reports."""
    assert content.problems(ROOT / "notebooks") == []
    assert content.main(["--check"]) == 0
    keyed = [
        content.whatif_id(cell)
        for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
    ]
    ids = [wid for wid in keyed if wid is not None]
    assert len(ids) == len(set(ids)) == sum(len(load(f"whatif/{n}")) for n in names("whatif"))


def test_a_quiz_string_is_one_paragraph_whatever_its_wrapping():
    from lmlessons.exercises.quizzes import QUIZZES, START_QUESTIONS

    entry = load("quizzes/01")["question"][0]
    assert "\n" in entry["prompt"].strip()  # wrapped in the file, and shown as one line:
    assert QUIZZES["01"][0].prompt == " ".join(entry["prompt"].split())
    for question in (q for qs in (*QUIZZES.values(), START_QUESTIONS) for q in qs):
        texts = [question.prompt, *(s for c in question.choices for s in (c.text, c.why))]
        assert all(t == " ".join(t.split()) for t in texts), question.id


# --------------------------------------------------------------------------- the checks can fail

GOOD_QUESTION = """
[[question]]
id = "09.1"
prompt = '''
Which?
'''
[[question.choice]]
text = "a"
correct = true
why = "x"
[[question.choice]]
text = "b"
correct = false
why = "y"
[[question.choice]]
text = "c"
correct = false
why = "z"
"""


BUGZOO = """
[settings]
"BERT MLM" = "A BERT MLM run."
[instruments.train_loss]
label = "train loss"
floor = 0.5
metrics = { "BERT MLM" = "final_train_loss" }
[diagnoses.no_bug]
label = "no bug"
would_show = "nothing"
[cases.A]
run = "x"
reference = "y"
diagnosis = "no_bug"
lesson = ""
title = "t"
claims = [{ metric = "m", relation = "close", margin = 0.1 }]
evidence = "e {c[m]}"
why = "w"
"""


def _quiz(text: str) -> list[str]:
    return quiz_problems("09", tomllib.loads(text))


def test_the_validators_catch_broken_files():
    assert text_problems(GOOD_QUESTION) == [] and _quiz(GOOD_QUESTION) == []
    assert text_problems("a = '''\nunclosed\n") != []  # not TOML
    assert text_problems("a = 1 \n") == ["line 1: trailing whitespace"]
    assert text_problems("a = '\tb'\n") == ["line 1: a tab character"]
    with pytest.raises(tomllib.TOMLDecodeError):  # an id written twice never loads
        tomllib.loads('"09.1" = "a"\n"09.1" = "b"\n')
    assert _quiz(GOOD_QUESTION.replace('"09.1"', '"08.1"')) != []  # another lesson's id
    assert "needs exactly one correct choice" in _quiz(GOOD_QUESTION.replace("false", "true", 1))[0]
    assert _quiz(GOOD_QUESTION.replace("true", '"yes"')) != []  # a string, not a boolean
    assert _quiz(GOOD_QUESTION.replace('why = "z"', "")) != []  # a choice without its why
    assert _quiz(GOOD_QUESTION.replace("Which?", " ")) != []  # an empty prompt
    assert "unknown keys" in _quiz(GOOD_QUESTION.replace("prompt =", "promt = 1\nprompt ="))[0]
    assert hint_problems({"mlm_loss": {"1": "a", "2": "b"}}) != []
    assert hint_problems({"mlm_loss": {"1": "a", "3": "c", "2": "b"}}) != []  # out of order
    assert hint_problems({"mlm_loss": dict.fromkeys(LEVELS, "a")}) == []
    assert whatif_problems("09", {"08.1": "an answer"}) != []
    assert whatif_problems("09", {"09.1": ""}) != []
    assert whatif_problems("09", {"09.1": "an answer"}) == []


def test_the_bug_zoo_validator_catches_a_broken_case():
    good = tomllib.loads(BUGZOO)
    assert bugzoo_problems(good, RELATIONS) == []
    assert bugzoo_problems({**good, "case": {}}, RELATIONS) != []
    for change, problem in (
        ({"diagnosis": "typo"}, "is not a [diagnoses] table"),
        ({"lesson": "8"}, "two digits"),
        ({"why": " "}, "non-empty string"),
        ({"claims": []}, "non-empty list"),
        ({"claims": [{"metric": "x", "relation": "bigger"}]}, "not one of"),
        ({"claims": [{"metric": "x", "relation": "lower", "margin": "0.1"}]}, "margin: wrong"),
        ({"claims": [{"metric": "x"}]}, "needs metric and relation"),
        ({"bug": "mask"}, "needs exactly the keys"),
    ):
        broken = {**good, "cases": {"A": {**good["cases"]["A"], **change}}}
        assert any(problem in p for p in bugzoo_problems(broken, RELATIONS)), change
    renamed = {**good, "cases": {"a": good["cases"]["A"]}}
    assert "one capital letter" in bugzoo_problems(renamed, RELATIONS)[0]
    for change, problem in (
        ({"metrics": {"GPT-3": "final_train_loss"}}, "a table from model families"),
        ({"metrics": {"BERT MLM": ""}}, "each a metric name"),
        ({"floor": "0.5"}, "must be a number"),
        ({"label": ""}, "non-empty string"),
        ({"unit": "nats"}, "unknown keys"),
    ):
        instrument = {**good["instruments"]["train_loss"], **change}
        broken = {**good, "instruments": {"train_loss": instrument}}
        assert any(problem in p for p in bugzoo_problems(broken, RELATIONS)), change


def test_the_tool_finds_and_fixes_an_answer_cell(tmp_path: Path):
    notebooks, copies = tmp_path / "notebooks", tmp_path / "student"
    shutil.copytree(ROOT / "notebooks", notebooks)
    path = notebooks / "02_mlm_loss.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if content.whatif_id(c) == "02.1")
    cell.source = cell.source.replace("None of the 324", "All of the 324")
    unkeyed = next(c for c in nb.cells if content.whatif_id(c) == "02.2")
    unkeyed.metadata.pop("lmlessons")
    nbformat.write(nb, path)
    found = content.lesson_problems(path)
    assert any("'02.1' differs from its data" in p for p in found), found
    assert any("without its metadata key" in p for p in found), found
    assert any("'02.2' is used by 0 cells" in p for p in found), found
    assert content.main(["--check", "--notebooks", str(notebooks)]) == 1
    unkeyed.metadata["lmlessons"] = {"whatif": "02.2"}  # --write fills keyed cells only
    nbformat.write(nb, path)
    assert content.main(["--write", "--notebooks", str(notebooks), "--student", str(copies)]) == 0
    assert content.main(["--check", "--notebooks", str(notebooks)]) == 0
    assert [p.name for p in copies.iterdir()] == [path.name]  # only the lesson it changed
    copy = nbformat.read(copies / path.name, as_version=4)
    assert content.answer_cell(load("whatif/02")["02.1"]) in [c.source for c in copy.cells]
