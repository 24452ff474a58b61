"""The lesson-00 objectives widget: each control redraws the right token table."""

from __future__ import annotations

import pytest
import torch

from lmlessons import mask_tokens
from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.widgets.start import clm_example, mlm_example, nsp_example, objectives_widget

EXAMPLES = [
    ("The dog chased the ball.", "It brought the ball back.", "Rain fell on the quiet town."),
    ("Cats sleep a lot.", "They wake up in the evening.", "The band played a slow song."),
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([s for e in EXAMPLES for s in e] * 2, vocab_size=150, min_frequency=1)


def _fields(box) -> dict[str, str]:
    line = box.output.outputs[0]["text"].strip()
    assert line.startswith("[widget] ")
    return dict(kv.split("=", 1) for kv in line.removeprefix("[widget] ").split())


def _html(box) -> str:
    return box.output.outputs[1]["data"]["text/html"]


def test_controls_redraw(tok):
    box = objectives_widget(tok, EXAMPLES)
    f = _fields(box)
    assert (f["example"], f["objective"], f["seed"]) == ("0", "MLM", "0")
    ids = torch.tensor(tok(EXAMPLES[0][0])["input_ids"])
    special = torch.isin(ids, torch.tensor(tok.all_special_ids))
    _, labels = mask_tokens(
        ids[None],
        mask_token_id=tok.mask_token_id,
        vocab_size=len(tok),
        special_tokens_mask=special[None],
        generator=torch.Generator().manual_seed(0),
    )
    assert int(f["targets"]) == int((labels != -100).sum()) and int(f["tokens"]) == len(ids)

    first = box.children[0]
    assert first.description == "example"
    first.value = 1  # one ArrowRight
    f = _fields(box)
    assert f["example"] == "1" and int(f["tokens"]) == len(tok(EXAMPLES[1][0])["input_ids"])

    box.controls["objective"].value = "CLM"
    f = _fields(box)
    assert f["objective"] == "CLM" and int(f["targets"]) == int(f["tokens"]) - 1
    assert "target of position t" in _html(box)

    box.controls["objective"].value = "NSP"
    f = _fields(box)
    assert f["targets"] == "1" and "next_sentence_label = 0" in _html(box)
    assert int(f["tokens"]) == len(tok(EXAMPLES[1][0], EXAMPLES[1][1])["input_ids"])
    box.controls["seed"].value = 1
    assert "next_sentence_label = 1" in _html(box)
    assert int(_fields(box)["tokens"]) == len(tok(EXAMPLES[1][0], EXAMPLES[1][2])["input_ids"])


def test_tables(tok):
    html, n = clm_example(tok, "The dog chased the ball.")
    assert n == len(tok("The dog chased the ball.")["input_ids"]) - 1 and "-100" in html
    html, n = nsp_example(tok, "Cats sleep a lot.", "They wake up in the evening.", 0)
    assert n == 1 and "token_type_ids" in html and "IsNext" in html
    with pytest.raises(ValueError, match="next_sentence_label"):
        nsp_example(tok, "a", "b", 2)
    html, n = mlm_example(tok, "The dog chased the ball across the park.", mlm_probability=1.0)
    assert n == len(tok("The dog chased the ball across the park.")["input_ids"]) - 2


def test_bad_examples(tok):
    with pytest.raises(ValueError, match="examples"):
        objectives_widget(tok, [])
    with pytest.raises(TypeError, match="examples"):
        objectives_widget(tok, [("a", "b")])


def test_start_quiz():
    from lmlessons.widgets.start import start_quiz

    q = start_quiz()
    assert q.correct_choice(1) == "B" and q.correct_choice(2) == "C"
    assert q.answer("C", question=2).startswith("C: Correct.")
    assert q.answer("A", question=1).startswith("A: Not quite.")
    assert "Quick check: lesson 00" in str(q)


def test_lesson_widget_is_a_vbox_with_typed_handles(tok):
    import ipywidgets as widgets

    from lmlessons.widgets.base import LessonWidget

    box = objectives_widget(tok, EXAMPLES)
    assert isinstance(box, LessonWidget) and isinstance(box, widgets.VBox)
    assert list(box.children) == [*box.controls.values(), box.output]
    before = box.output.outputs
    box.output.outputs = ()
    box.redraw()  # draws again from the controls' values
    assert box.output.outputs == before
