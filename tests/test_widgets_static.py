"""The kernel-free picture of a widget: its display bundle carries, beside ipywidgets' live view,
a ``text/html`` of exactly what it shows now (controls' values and current output), which follows
the widget when a control moves. The state is hidden: no ``[widget]`` line a learner sees."""

from __future__ import annotations

import html

import ipywidgets as widgets
from _widgets import shown_html, shown_marker

from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.widgets.base import LessonWidget, control_text, float_slider
from lmlessons.widgets.display import html_output, outputs_html, png_output, state_output, stream
from lmlessons.widgets.start import objectives_widget

VIEW = "application/vnd.jupyter.widget-view+json"
EXAMPLES = [
    ("The dog chased the ball.", "It brought the ball back.", "Rain fell on the quiet town."),
    ("Cats sleep a lot.", "They wake up in the evening.", "The band played a slow song."),
]


def _square_widget() -> LessonWidget:
    slider = float_slider("p", 0.15, 1.0, step=0.05)
    choice = widgets.Dropdown(options=[("first", 0), ("second", 1)], value=0, description="pick")

    def draw():
        p, c = slider.value, choice.value
        return (
            state_output(f"p={p:.2f} pick={c} square={p * p:.4f}"),
            html_output(f"<b>square {p * p:.4f} &amp; pick {c}</b>"),
        )

    return LessonWidget({"p": slider, "pick": choice}, draw)


def test_bundle_keeps_the_live_view_and_adds_the_current_picture():
    box = _square_widget()
    bundle = box._repr_mimebundle_()
    assert bundle[VIEW]["model_id"] == box.model_id  # JupyterLab still renders the live widget
    assert "LessonWidget(" not in bundle["text/plain"]
    assert bundle["text/plain"] == "p=0.15  pick=first"
    page = bundle["text/html"]
    assert "<b>square 0.0225 &amp; pick 0</b>" in page
    assert ">p</span> <b>0.15</b>" in page and ">pick</span> <b>first</b>" in page
    assert "lmlessons-state" not in page and "[widget]" not in page

    box.controls["p"].value = 0.5
    box.controls["pick"].value = 1
    assert shown_marker(box) == "p=0.50 pick=1 square=0.2500"
    moved = box._repr_mimebundle_()
    assert "<b>square 0.2500 &amp; pick 1</b>" in moved["text/html"]
    assert "square 0.0225" not in moved["text/html"]
    assert ">p</span> <b>0.50</b>" in moved["text/html"]
    assert moved["text/plain"] == "p=0.50  pick=second"


def test_a_lesson_widget_picture_is_its_output():
    tok = train_tokenizer([s for e in EXAMPLES for s in e] * 2, vocab_size=150, min_frequency=1)
    box = objectives_widget(tok, EXAMPLES)
    before = box._repr_mimebundle_()["text/html"]
    assert shown_html(box) in before
    box.children[0].value = 1  # the "example" slider
    after = box._repr_mimebundle_()["text/html"]
    assert after != before and shown_html(box) in after
    assert f"<b>{html.escape(control_text(box.children[0]))}</b>" in after


def test_outputs_html_renders_every_kind_of_record():
    page = outputs_html(
        [
            state_output('a=1 b="x"'),
            stream("a <line>"),
            png_output(b"\x89PNG", "a chart"),
            html_output("<i>table</i>"),
        ]
    )
    assert "a &lt;line&gt;" in page and 'alt="a chart"' in page and "<i>table</i>" in page
    assert 'src="data:image/png;base64,iVBORw==' in page
    assert "a=1" not in page  # the state stays out of the picture
    assert state_output('a=1 b="x"')["data"]["text/html"] == (
        '<div class="lmlessons-state" data-state="a=1 b=&quot;x&quot;" hidden></div>'
    )


def test_quiz_picture_follows_the_answer():
    from lmlessons.exercises import quiz

    q = quiz("01.1")
    bundle = q._repr_mimebundle_()
    assert VIEW in bundle and bundle["text/plain"] == str(q)
    assert bundle["text/html"] == quiz("01.1")._repr_mimebundle_()["text/html"]  # deterministic
    assert "&#9673;" not in bundle["text/html"]  # nothing chosen yet
    feedback = q.answer("B")
    after = q._repr_mimebundle_()["text/html"]
    assert "&#9673; B. " in after and html.escape(feedback) in after
