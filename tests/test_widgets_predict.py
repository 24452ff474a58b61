"""The predict-then-reveal widget: a guess is locked before the measurement, the reveal compares,
and both pictures read without a kernel (deterministic text/plain and text/html)."""

from __future__ import annotations

import html
import re

import pytest
import torch
from _widgets import marker_fields, shown_marker

from lmlessons.widgets.predict import MAX_DECIMALS, REVEAL_SUMMARY, Predict, Reveal

VIEW = "application/vnd.jupyter.widget-view+json"
QUESTION = "What share of the selected positions are special tokens with the naive masker?"
TOO_PRECISE = re.compile(r"\d+\.\d{5,}")


def _share() -> Predict:
    return Predict(QUESTION, unit="%", low=0, high=100, step=1)


def _plain(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def test_the_picture_shows_the_question_and_follows_the_state():
    guess = _share()
    bundle = guess._repr_mimebundle_()
    assert bundle[VIEW]["model_id"] == guess.model_id  # JupyterLab still renders the live widget
    assert (
        bundle["text/html"] == guess.static_html() and bundle["text/plain"] == guess.static_text()
    )
    assert QUESTION in bundle["text/plain"] and QUESTION in _plain(bundle["text/html"])
    assert "lmlessons-state" not in bundle["text/html"]  # the state stays hidden
    assert marker_fields(shown_marker(guess)) == {
        "guess": "none",
        "locked": "False",
        "revealed": "False",
    }
    assert "Your guess" not in bundle["text/plain"]  # nothing locked, nothing claimed

    guess.commit(10)
    after = guess._repr_mimebundle_()
    assert marker_fields(shown_marker(guess))["guess"] == "10.0%"
    assert "Your guess: 10.0% (locked)." in after["text/plain"]
    assert "Your guess: 10.0% (locked)." in _plain(after["text/html"])
    assert after["text/html"] != bundle["text/html"]
    # deterministic: the same question and guess give the same picture
    twin = _share()
    twin.commit(10)
    assert twin._repr_mimebundle_()["text/html"] == after["text/html"]


def test_commit_locks_the_guess():
    guess = _share()
    control, button = guess.controls["guess"], guess.button
    assert guess.commit(25) == 25.0 and guess.guess == 25.0
    assert control.value == 25.0 and control.disabled and button.disabled
    control.value = 80  # a moved control does not change the locked guess
    assert guess.guess == 25.0
    assert marker_fields(shown_marker(guess))["locked"] == "True"
    with pytest.raises(ValueError, match="value: a guess is already locked"):
        guess.commit(30)
    button.click()  # a disabled button in the browser; here a no-op
    assert guess.guess == 25.0


def test_the_button_locks_what_the_control_shows():
    guess = _share()
    guess.controls["guess"].value = 40
    assert marker_fields(shown_marker(guess))["locked"] == "False"  # moving is not locking
    guess.button.click()  # what a learner's click does
    assert guess.guess == 40.0 and guess.controls["guess"].disabled

    pick = Predict("Where does the leaky loss end?", choices=["near 0", "near ln V"])
    pick.button.click()
    assert pick.guess is None and "Choose an answer first." in pick.static_text()
    pick.controls["guess"].value = "near 0"
    assert "Choose an answer first." not in pick.static_text()
    pick.button.click()
    assert pick.guess == "near 0" and marker_fields(shown_marker(pick))["guess"] == "near_0"


def test_reveal_with_a_guess_compares():
    guess = _share()
    guess.commit(10)
    shown = guess.reveal(32.3333333, explanation="[PAD] is 1 in 4 positions")
    assert isinstance(shown, Reveal)
    text = str(shown)
    assert "You guessed 10.0%; measured 32.3%: 22.3 percentage points too low." in text
    assert text.splitlines()[0] == f"Predict: {QUESTION}"
    assert "Why: [PAD] is 1 in 4 positions" in text
    page = shown._repr_mimebundle_()["text/html"]
    assert "32.3%" in page and "10.0%" in page and QUESTION in _plain(page)
    assert marker_fields(shown_marker(guess))["revealed"] == "True"
    with pytest.raises(ValueError, match="value"):
        guess.commit(20)

    high = _share()
    high.commit(33)
    assert str(high.reveal(32.33)).count("close: 0.7 percentage points too high.") == 1
    exact = _share()
    exact.commit(32.3)
    assert "spot on." in str(exact.reveal(torch.tensor(0.323) * 100))


def _folded(page: str) -> tuple[str, str]:
    """The part of a reveal's HTML shown before it is opened, and the folded part."""
    match = re.fullmatch(r"(.*)<details><summary[^>]*>(.*?)</summary>(.*)</details></div>", page)
    assert match, "the answer is not folded in one <details> block at the end"
    assert "<details open" not in page and match[2] == REVEAL_SUMMARY
    return match[1] + match[2], match[3]


def test_the_reveal_picture_shows_the_question_first_and_folds_the_answer():
    guess = _share()
    guess.commit(10)
    shown = guess.reveal(32.3333333, explanation="[PAD] is 1 in 4 positions")
    bundle = shown._repr_mimebundle_()
    before, folded = _folded(bundle["text/html"])
    assert QUESTION in _plain(before) and REVEAL_SUMMARY in _plain(before)
    for answer in ("32.3%", "10.0%", "too low", "[PAD] is 1 in 4"):
        assert answer not in before and answer in _plain(folded)
    lines = bundle["text/plain"].splitlines()  # text: the question, the summary, then the answer
    assert lines[:3] == [f"Predict: {QUESTION}", REVEAL_SUMMARY, "Measured: 32.3%"]
    assert "Measured" not in _folded(_share().reveal(5)._repr_html_())[0]  # without a guess too


def test_reveal_without_a_guess_still_shows_the_answer():
    guess = _share()
    shown = guess.reveal(32.3333, explanation="why")
    text = str(shown)
    assert "Measured: 32.3%" in text and "No guess was locked" in text
    assert "You guessed" not in text
    page = shown._repr_html_()
    assert QUESTION in _plain(page) and "32.3%" in page and "No guess was locked" in page
    with pytest.raises(ValueError, match="value: the answer was already revealed"):
        guess.commit(10)
    assert "No guess was locked before the answer was revealed." in guess.static_text()


def test_reveal_text_is_deterministic_and_never_prints_float_noise():
    for decimals in range(MAX_DECIMALS + 1):
        texts = set()
        for _ in range(2):
            guess = Predict("Loss?", low=0, high=10, step=0.5, decimals=decimals)
            guess.commit(2.5)
            shown = guess.reveal(1 / 3, explanation="a third")
            texts.add((str(shown), shown._repr_html_()))
        ((text, page),) = texts
        assert not TOO_PRECISE.search(text) and not TOO_PRECISE.search(page)
        assert f"Measured: {1 / 3:.{decimals}f}" in text
    loss = Predict("Loss?", low=0, high=8, step=0.1, unit="nats")
    loss.commit(5.4)
    assert "5.3 nats too high" in str(loss.reveal(0.14))


def test_categorical_reveal():
    bands = ["below 1", "1 to 4", "above 4"]
    right, wrong, none = (Predict("Band?", choices=bands) for _ in range(3))
    right.commit("below 1")
    wrong.commit("above 4")
    assert "You guessed below 1; measured below 1: right!" in str(right.reveal("below 1"))
    assert "not this time." in str(wrong.reveal("below 1"))
    assert "No guess was locked" in str(none.reveal("1 to 4"))
    with pytest.raises(ValueError, match="measured"):
        Predict("Band?", choices=bands).reveal("far away")


def test_a_text_box_instead_of_the_slider():
    guess = Predict("How many?", low=0, high=50, step=1, entry="text")
    assert type(guess.controls["guess"]).__name__ == "BoundedFloatText"
    guess.commit(7)
    assert "You guessed 7; measured 3: 4 too high." in str(guess.reveal(3))


@pytest.mark.parametrize(
    "kwargs,error,name",
    [
        ({"question": ""}, ValueError, "question"),
        ({"low": 10, "high": 0}, ValueError, "low"),
        ({"low": "a", "high": 1}, TypeError, "low"),
        ({"low": 0, "high": 1, "step": 0}, ValueError, "step"),
        ({"low": 0, "high": 1, "decimals": 5}, ValueError, "decimals"),
        ({"low": 0, "high": 1, "decimals": 1.0}, TypeError, "decimals"),
        ({"low": 0, "high": 1, "unit": 3}, TypeError, "unit"),
        ({"low": 0, "high": 1, "value": 2}, ValueError, "value"),
        ({"low": 0, "high": 1, "entry": "dial"}, ValueError, "entry"),
        ({"low": 0}, ValueError, "low and high"),
        ({}, ValueError, "low and high"),
        ({"low": 0, "high": 1, "choices": ["a", "b"]}, ValueError, "choices"),
        ({"choices": "ab"}, ValueError, "choices"),
        ({"choices": ["a", "a"]}, ValueError, "choices"),
        ({"choices": ["a", ""]}, TypeError, "choices"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, name):
    kwargs = {"question": "Q?", **kwargs}
    with pytest.raises(error, match=name):
        Predict(**kwargs)


def test_bad_guesses_and_measurements_name_the_argument():
    guess = _share()
    with pytest.raises(ValueError, match="value"):
        guess.commit(101)
    with pytest.raises(TypeError, match="value"):
        guess.commit("ten")
    with pytest.raises(TypeError, match="value"):
        guess.commit(True)
    with pytest.raises(ValueError, match="value"):
        guess.commit(float("nan"))
    assert guess.guess is None  # nothing was locked by a bad guess
    with pytest.raises(TypeError, match="measured"):
        guess.reveal("32%")
    with pytest.raises(ValueError, match="measured"):
        guess.reveal(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="measured"):
        guess.reveal(float("inf"))
    with pytest.raises(TypeError, match="explanation"):
        guess.reveal(1.0, explanation=None)
    with pytest.raises(ValueError, match="value"):
        Predict("Band?", choices=["a", "b"]).commit("c")


def test_the_picture_lists_what_can_be_guessed():
    bands = ["below 1: near 0", "above 7: uniform guessing"]
    pick = Predict("Where does the leaky loss end?", choices=bands)
    before = pick._repr_mimebundle_()
    for band in bands:
        assert f"( ) {band}" in before["text/plain"]
        assert f"&#9675; {html.escape(band)}" in before["text/html"]
    pick.commit(bands[1])
    after = pick._repr_mimebundle_()
    assert f"(x) {bands[1]}" in after["text/plain"] and f"( ) {bands[0]}" in after["text/plain"]
    assert f"&#9673; {html.escape(bands[1])}" in after["text/html"]
    assert "a number from 0.0% to 100.0%" in _share().static_text()
    assert "a number from 0 to 50" in Predict("How many?", low=0, high=50, step=1).static_text()
