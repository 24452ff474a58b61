"""The lesson-00 objectives widget: each control redraws the right token table."""

from __future__ import annotations

import pytest
from _widgets import marker_fields, mask_sentence, shown_html, shown_marker

from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.widgets.start import clm_example, mlm_example, nsp_example, objectives_widget

EXAMPLES = [
    ("The dog chased the ball.", "It brought the ball back.", "Rain fell on the quiet town."),
    ("Cats sleep a lot.", "They wake up in the evening.", "The band played a slow song."),
]


@pytest.fixture(scope="module")
def toy_tok():
    return train_tokenizer([s for e in EXAMPLES for s in e] * 2, vocab_size=150, min_frequency=1)


def test_controls_redraw(toy_tok):
    box = objectives_widget(toy_tok, EXAMPLES)
    f = marker_fields(shown_marker(box))
    assert (f["example"], f["objective"], f["seed"]) == ("0", "MLM", "0")
    ids, _, _, labels = mask_sentence(toy_tok, EXAMPLES[0][0], 0)
    assert int(f["targets"]) == int((labels != -100).sum()) and int(f["tokens"]) == len(ids)

    first = box.children[0]
    assert first.description == "example"
    first.value = 1  # one ArrowRight
    f = marker_fields(shown_marker(box))
    assert f["example"] == "1" and int(f["tokens"]) == len(toy_tok(EXAMPLES[1][0])["input_ids"])

    box.controls["objective"].value = "CLM"
    f = marker_fields(shown_marker(box))
    assert f["objective"] == "CLM" and int(f["targets"]) == int(f["tokens"]) - 1
    assert "target of position t" in shown_html(box)

    box.controls["objective"].value = "NSP"
    f = marker_fields(shown_marker(box))
    assert f["targets"] == "1" and "next_sentence_label = 0" in shown_html(box)
    assert int(f["tokens"]) == len(toy_tok(EXAMPLES[1][0], EXAMPLES[1][1])["input_ids"])
    box.controls["seed"].value = 1
    assert "next_sentence_label = 1" in shown_html(box)
    assert int(marker_fields(shown_marker(box))["tokens"]) == len(
        toy_tok(EXAMPLES[1][0], EXAMPLES[1][2])["input_ids"]
    )


def test_tables(toy_tok):
    html, n = clm_example(toy_tok, "The dog chased the ball.")
    assert n == len(toy_tok("The dog chased the ball.")["input_ids"]) - 1 and "-100" in html
    html, n = nsp_example(toy_tok, "Cats sleep a lot.", "They wake up in the evening.", 0)
    assert n == 1 and "token_type_ids" in html and "IsNext" in html
    with pytest.raises(ValueError, match="next_sentence_label"):
        nsp_example(toy_tok, "a", "b", 2)
    html, n = mlm_example(toy_tok, "The dog chased the ball across the park.", mlm_probability=1.0)
    assert n == len(toy_tok("The dog chased the ball across the park.")["input_ids"]) - 2


def test_bad_examples(toy_tok):
    with pytest.raises(ValueError, match="examples"):
        objectives_widget(toy_tok, [])
    with pytest.raises(TypeError, match="examples"):
        objectives_widget(toy_tok, [("a", "b")])


def test_start_quiz():
    from lmlessons.widgets.start import start_quiz

    q = start_quiz()
    assert q.correct_choice(1) == "B" and q.correct_choice(2) == "C"
    assert q.answer("C", question=2).startswith("C: Correct.")
    assert q.answer("A", question=1).startswith("A: Not quite.")
    assert "Quick check: lesson 00" in str(q)


def test_lesson_widget_is_a_vbox_with_typed_handles(toy_tok):
    import ipywidgets as widgets

    from lmlessons.widgets.base import LessonWidget

    box = objectives_widget(toy_tok, EXAMPLES)
    assert isinstance(box, LessonWidget) and isinstance(box, widgets.VBox)
    assert list(box.children) == [*box.controls.values(), box.output]
    before = box.output.outputs
    box.output.outputs = ()
    box.redraw()  # draws again from the controls' values
    assert box.output.outputs == before
