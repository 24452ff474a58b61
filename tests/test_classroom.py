"""The nbgrader course that ``make classroom`` builds (tools/classroom.py, docs/teaching.md).

Quick tests: ``assert_check``, the cell metadata of every lesson's source notebook, the points
table of docs/teaching.md. Tests marked ``classroom`` run nbgrader itself (the ``teach`` extra) in a
temp course folder: every release shows what ``student/`` shows, and autograding lesson 01 (the
one lesson autograded end to end; the others are checked by their structure) gives the
instructor full marks, an untouched release 0, a wrong exercise 0 next to a right one, a
learner's endless loop or broken import 0 without stopping the others, and feedback that names
the mistake.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from lmlessons.exercises import assert_check, check
from tools import classroom
from tools.markers import STUB

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# The exercises each lesson grades, in order (the list; 07 also repeats clm_loss).
GRADED = {
    "01_mlm_masking": ["select_whole_words", "mask_tokens"],
    "02_mlm_loss": ["mlm_loss"],
    "03_clm_label_shift": ["clm_loss"],
    "05_nsp_pairs": ["truncate_seq_pair", "make_nsp_pairs"],
    "06_combined_loss": ["bert_pretraining_loss"],
    "07_loss_at_scale": ["clm_loss", "rank_loss", "chunked_cross_entropy"],
    "08_bug_zoo": ["bug_zoo"],
    "09_packing_and_perplexity": ["flatten_documents"],
    "10_answer_only": ["assistant_labels"],
    "11_preference_losses": ["sequence_logprobs"],
    "12_rl_losses": ["group_advantages"],
    "13_rl_accumulation_and_kl": ["grpo_loss"],
    "14_router_losses": ["load_balancing_loss_func"],
    "15_zloss_and_mtp": ["mtp_labels", "label_smoothed_loss"],
}


def own_mlm_loss(logits, labels, *, num_items_in_batch=None):
    """A learner's right answer in their own code: the summed loss over the target count."""
    flat = labels.reshape(-1)
    summed = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), flat, reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else (flat != -100).sum()
    return summed / max(count, 1)


def naive_mlm_loss(logits, labels, *, num_items_in_batch=None):
    """The mean over the targets with F.cross_entropy's own mean: NaN when nothing is masked."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


# mask_tokens without the special tokens mask: [CLS], [SEP] and [PAD] get selected too.
NAIVE_MASK_TOKENS = """def my_mask_tokens(input_ids, *, mask_token_id, vocab_size,
                   special_tokens_mask=None, mlm_probability=0.15, mask_replace_prob=0.8,
                   random_replace_prob=0.1, generator=None):
    selected = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    labels = torch.where(selected, input_ids, -100)
    u = torch.rand(input_ids.shape, generator=generator)
    to_mask = selected & (u < mask_replace_prob)
    to_random = selected & (u >= mask_replace_prob) & (u < mask_replace_prob + random_replace_prob)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked = input_ids.masked_fill(to_mask, mask_token_id)
    return torch.where(to_random, random_ids, masked), labels
"""

# Endless, but asleep: the timeout is what is tested, and a busy loop would take a core from the
# other tests for the whole timeout.
ENDLESS_LOOP = """import time

def my_select_whole_words(special_tokens_mask, is_continuation, *,
                          attention_mask=None, mlm_probability=0.15,
                          max_predictions_per_seq=20, generator=None):
    while True:
        time.sleep(0.05)
"""

BROKEN_IMPORT = "import lmlessons_has_no_such_module\n\n"


def _not_implemented(*args, **kwargs):
    raise NotImplementedError("Your code here")


# ------------------------------------------------------------------------------ assert_check


def test_assert_check_returns_the_passing_result() -> None:
    result = assert_check("mlm_loss", own_mlm_loss)
    assert result.passed and result == check("mlm_loss", own_mlm_loss)


def test_assert_check_raises_with_the_checkers_explanation() -> None:
    expected = check("mlm_loss", naive_mlm_loss)
    assert not expected.passed and expected.mistake
    with pytest.raises(AssertionError) as info:
        assert_check("mlm_loss", naive_mlm_loss)
    text = str(info.value)
    assert expected.title in text and expected.message.strip() in text
    assert f"[mlm_loss: {expected.mistake}]" in text


def test_assert_check_fails_an_exercise_not_attempted() -> None:
    assert check("clm_loss", _not_implemented).status == "not_attempted"
    with pytest.raises(AssertionError, match=r"\[clm_loss: not_attempted\]"):
        assert_check("clm_loss", _not_implemented)


# ------------------------------------------------------------------------- source notebooks


def _nbgrader(cell: nbformat.NotebookNode) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_source_notebook_marks_answers_checks_and_locks_the_rest(lesson: Path) -> None:
    original = nbformat.read(lesson, as_version=4)
    nb = classroom.source_notebook(original, lesson.name)
    kept = [c for c in original.cells if "solution" not in c.metadata.get("tags", [])]
    assert [c.source.split(classroom.HIDDEN_END + "\n")[-1] for c in nb.cells] == [
        c.source for c in kept
    ], "only the solution-tagged cells are left out, only the check cells change"
    graded = [c for c in nb.cells if _nbgrader(c).get("grade")]
    names = [_nbgrader(c)["grade_id"].removeprefix("check-") for c in graded]
    assert names == GRADED.get(lesson.stem, [])
    for cell, name in zip(graded, names):
        meta = _nbgrader(cell)
        assert meta["points"] == classroom.POINTS[name] and meta["locked"]
        hidden, shown = cell.source.split(classroom.HIDDEN_END + "\n")
        assert hidden.startswith(classroom.HIDDEN_BEGIN)
        assert re.fullmatch(rf'check\("{name}", (\w+)\)', shown)
        assert f'assert_check("{name}", {shown.split(", ")[1]}' in hidden
    for cell, before in zip(nb.cells, kept):
        meta = _nbgrader(cell)
        assert not cell.get("outputs")
        if meta.get("solution"):
            assert "# BEGIN SOLUTION" in cell.source and not meta["locked"]
        elif not meta:
            assert STUB in cell.source, "only a practice cell is left unmarked"
        elif not meta["grade"]:  # read-only, with a grade id that survives moving the cell
            assert meta["locked"] and meta["grade_id"] == f"cell-{before.id}"
        assert not meta or meta["schema_version"] == 3
    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[\w-]+", i) for i in ids)


def test_a_marker_nbgrader_would_read_differently_is_refused() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1  # BEGIN SOLUTION")]
    with pytest.raises(classroom.SolutionMarkerError, match="not on a line of its own"):
        classroom.source_notebook(nb, "lesson.ipynb")


def test_an_exercise_without_points_is_refused() -> None:
    nb = nbformat.v4.new_notebook()
    body = "def my_new(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION"
    nb.cells = [nbformat.v4.new_code_cell(body), nbformat.v4.new_code_cell('check("new", my_new)')]
    with pytest.raises(classroom.SolutionMarkerError, match="no points"):
        classroom.source_notebook(nb, "lesson.ipynb")


def test_the_teachers_guide_shows_the_points_table() -> None:
    text = (ROOT / "docs" / "teaching.md").read_text(encoding="utf8")
    rows = re.findall(r"^\| `(\w+)` \| (\d\d) \| (\d+) \|$", text, flags=re.MULTILINE)
    table = {name: int(points) for name, _, points in rows}
    assert table == classroom.POINTS
    lessons = {name: [] for name in classroom.POINTS}
    for lesson, names in GRADED.items():
        for name in names:
            lessons[name].append(lesson[:2])
    assert {name: lesson for name, lesson, _ in rows} == {n: ls[0] for n, ls in lessons.items()}


def test_build_writes_the_course_and_keeps_a_config_the_teacher_took_over(tmp_path) -> None:
    written = classroom.build(ROOT / "notebooks", tmp_path, ["02"])
    config = tmp_path / "nbgrader_config.py"
    assert written == [tmp_path / "source/02_mlm_loss/02_mlm_loss.ipynb", config]
    assert '"# BEGIN SOLUTION"' in config.read_text() or "'# BEGIN SOLUTION'" in config.read_text()
    config.write_text("c = get_config()\n")
    assert classroom.build(ROOT / "notebooks", tmp_path, ["02"]) == written[:1]
    assert config.read_text() == "c = get_config()\n"


# ---------------------------------------------------------------------- nbgrader itself


def _nbgrader_cli(
    classroom_dir: Path, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` run in the course folder, as a teacher types it (in the course's
    environment: nbgrader runs its ``alembic`` from the PATH)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={classroom_dir}"],
        cwd=classroom_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def classroom_dir(tmp_path_factory) -> Path:
    pytest.importorskip("nbgrader", reason="nbgrader is in the teach extra")
    root = tmp_path_factory.mktemp("classroom")
    # 15 s a cell: lesson 01's slowest cell takes about 5 s on a loaded 2-core machine, and the
    # endless loop below runs until this timeout stops it.
    classroom.build(ROOT / "notebooks", root, timeout=15)
    run = _nbgrader_cli(root, "generate_assignment", "*")  # every lesson, in one run
    assert run.returncode == 0, run.stderr[-3000:]
    return root


def _release(classroom_dir: Path, stem: str) -> nbformat.NotebookNode:
    return nbformat.read(classroom_dir / "release" / stem / f"{stem}.ipynb", as_version=4)


@pytest.mark.classroom
@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_release_shows_what_the_student_copy_shows(classroom_dir: Path, lesson: Path) -> None:
    release = _release(classroom_dir, lesson.stem)
    student = nbformat.read(ROOT / "student" / lesson.name, as_version=4)
    assert [(c.cell_type, c.source) for c in release.cells] == [
        (c.cell_type, c.source) for c in student.cells
    ]
    assert not any(c.get("outputs") for c in release.cells)


def _submit(classroom_dir: Path, student: str, nb: nbformat.NotebookNode, stem: str) -> None:
    folder = classroom_dir / "submitted" / student / stem
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{stem}.ipynb")


def _answer(nb: nbformat.NotebookNode, function: str, source: str) -> nbformat.NotebookNode:
    """``nb`` with the learner's answer cell for ``function`` replaced by ``source``."""
    nb = nbformat.from_dict(nb)
    (cell,) = [c for c in nb.cells if _nbgrader(c).get("grade_id") == f"answer-{function}"]
    cell.source = source
    return nb


def _answer_of(nb: nbformat.NotebookNode, function: str) -> str:
    (cell,) = [c for c in nb.cells if _nbgrader(c).get("grade_id") == f"answer-{function}"]
    return cell.source


# lesson: {student: their submission, made from the source (the instructor's) and the release}
SUBMISSIONS = {
    "01_mlm_masking": {
        "instructor": lambda src, rel: src,
        "untouched": lambda src, rel: rel,
        "one_wrong": lambda src, rel: _answer(
            _answer(rel, "my_mask_tokens", NAIVE_MASK_TOKENS),
            "my_select_whole_words",
            _answer_of(src, "my_select_whole_words"),
        ),
        "hostile": lambda src, rel: _answer(
            _answer(rel, "my_select_whole_words", ENDLESS_LOOP),
            "my_mask_tokens",
            BROKEN_IMPORT + _answer_of(src, "my_mask_tokens"),
        ),
    },
}


@pytest.fixture(scope="module")
def graded(classroom_dir: Path) -> dict:
    """Autograde every submission of SUBMISSIONS; the seconds each lesson's run took."""
    seconds = {}
    for stem, students in SUBMISSIONS.items():
        source = nbformat.read(classroom_dir / "source" / stem / f"{stem}.ipynb", as_version=4)
        for student, make in students.items():
            _submit(classroom_dir, student, make(source, _release(classroom_dir, stem)), stem)
        start = time.perf_counter()
        run = _nbgrader_cli(classroom_dir, "autograde", stem)
        seconds[stem] = time.perf_counter() - start
        assert run.returncode == 0, run.stderr[-3000:]
        run = _nbgrader_cli(classroom_dir, "generate_feedback", stem)
        assert run.returncode == 0, run.stderr[-3000:]
    print(f"autograding took {seconds}")
    return seconds


def _scores(classroom_dir: Path, stem: str, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{classroom_dir / 'gradebook.db'}") as gb:
        submission = gb.find_submission_notebook(stem, stem, student)
        return {g.name.removeprefix("check-"): g.score for g in submission.grades}


def _feedback(classroom_dir: Path, stem: str, student: str) -> str:
    return (classroom_dir / "feedback" / student / stem / f"{stem}.html").read_text(encoding="utf8")


@pytest.mark.classroom
@pytest.mark.slow
def test_the_instructor_notebook_gets_full_marks(classroom_dir, graded) -> None:
    stem = "01_mlm_masking"
    full = {name: classroom.POINTS[name] for name in GRADED[stem]}
    assert _scores(classroom_dir, stem, "instructor") == full


@pytest.mark.classroom
@pytest.mark.slow
def test_an_untouched_release_gets_zero_without_crashing(classroom_dir, graded) -> None:
    assert _scores(classroom_dir, "01_mlm_masking", "untouched") == {
        "select_whole_words": 0,
        "mask_tokens": 0,
    }
    feedback = _feedback(classroom_dir, "01_mlm_masking", "untouched")
    assert "not_attempted" in feedback and "not attempted yet" in feedback


@pytest.mark.classroom
@pytest.mark.slow
def test_a_wrong_exercise_gets_zero_and_its_feedback_names_the_mistake(
    classroom_dir, graded
) -> None:
    assert _scores(classroom_dir, "01_mlm_masking", "one_wrong") == {
        "select_whole_words": classroom.POINTS["select_whole_words"],
        "mask_tokens": 0,
    }
    namespace: dict = {"torch": torch}
    exec(NAIVE_MASK_TOKENS, namespace)
    expected = check("mask_tokens", namespace["my_mask_tokens"])
    assert not expected.passed
    feedback = html.unescape(_feedback(classroom_dir, "01_mlm_masking", "one_wrong"))
    assert expected.title in feedback and f"[mask_tokens: {expected.mistake}]" in feedback


@pytest.mark.classroom
@pytest.mark.slow
def test_an_endless_loop_or_a_broken_import_gets_zero_and_stops_nothing(
    classroom_dir, graded
) -> None:
    assert _scores(classroom_dir, "01_mlm_masking", "hostile") == {
        "select_whole_words": 0,
        "mask_tokens": 0,
    }
    feedback = html.unescape(_feedback(classroom_dir, "01_mlm_masking", "hostile"))
    assert "ModuleNotFoundError" in feedback
    assert "KeyboardInterrupt" in feedback or "CellTimeoutError" in feedback
    # graded in the same run as the other submissions, which it did not stop
    assert _scores(classroom_dir, "01_mlm_masking", "instructor")["mask_tokens"] > 0


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_classroom_builds_into_the_ignored_build_folder() -> None:
    out = subprocess.run(
        ["make", "-n", "classroom"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "tools.classroom" in out and "_build/classroom" in out
