"""tools.budgets: the load-time budgets hold, and a short live run reports its numbers."""

from __future__ import annotations

import json
import math

import pytest

import tools.budgets as budgets
from lmlessons import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.mark.slow
def test_only_loads(tmp_path, capsys) -> None:
    out = tmp_path / "budgets.json"
    assert budgets.main(["--only-loads", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "load_corpus('course')" in printed and "load_tokenizer()" in printed
    loads = json.loads(out.read_text())["loads"]
    # the seconds measured, each a positive number (how many depends on the machine: not asserted)
    timed = ("load_corpus_course_s", "load_tokenizer_s", "cold_import_and_load_corpus_s")
    assert all(isinstance(loads[k], float) and loads[k] > 0 for k in timed), loads
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budgets.json"]


def test_one_short_run() -> None:
    run = budgets._run("leaky", 0.3, 0, live=False)
    assert run["steps"] >= 1 and run["ln_vocab"] == pytest.approx(math.log(len(load_tokenizer())))
    with pytest.raises(ValueError, match="kind must be one of"):
        budgets._run("mlm-50%", 0.3, 0, live=False)


def test_report_lines(capsys) -> None:
    run = dict(steps=10, seconds=1.0, first_loss=7.8, final_loss=3.9, ln_vocab=7.8)
    assert budgets._report_run("mlm", {**run, "drop_below_ln_vocab": 0.5}, 0.3)
    assert not budgets._report_run("mlm", {**run, "drop_below_ln_vocab": 0.2}, 0.3)
    assert budgets._report_run("mlm-15%", {**run, "drop_below_ln_vocab": 0.2}, None)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("PASS") and lines[1].endswith("FAIL") and "target" not in lines[2]
