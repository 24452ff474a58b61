"""lmlessons.widgets.training_view: what train shows in a lesson (one live plot updated in place, a
progress bar that ends as a summary line), the plain bar outside a notebook, History.plot."""

from __future__ import annotations

import pytest
import torch
from _tiny import SMALL_BERT, SMALL_GPT2

import lmlessons.course.training as training_module
import lmlessons.widgets.training_view as view
from lmlessons import (
    History,
    clm_batches,
    load_corpus,
    nsp_batches,
    tiny_bert_pretraining,
    tiny_gpt2,
)
from lmlessons.course.training import Budget, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def docs():
    return load_corpus("course").train[:40]


def g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(autouse=True)
def lesson_display(monkeypatch):
    """The display importing lmlessons.widgets installs (whatever another test left)."""
    monkeypatch.setattr(training_module, "_DISPLAY", view.LessonDisplay())


def test_importing_the_widgets_installs_the_lesson_display(monkeypatch) -> None:
    import importlib

    import lmlessons.widgets

    monkeypatch.setattr(training_module, "_DISPLAY", None)
    importlib.reload(lmlessons.widgets)
    assert isinstance(training_module._DISPLAY, view.LessonDisplay)


class _Handle:
    def __init__(self, obj) -> None:
        self.shown = obj
        self.updates: list = []
        self.raw: list[bool] = []

    def update(self, obj, raw: bool = False) -> None:
        self.updates.append(obj)
        self.raw.append(raw)


def _fake_notebook(monkeypatch) -> list[_Handle]:
    """Pretend to be in a notebook: every ``display(obj, display_id=True)`` returns a handle."""
    import IPython.display

    handles: list[_Handle] = []

    def fake_display(obj, display_id=None):
        assert display_id is True
        handles.append(_Handle(obj))
        return handles[-1]

    monkeypatch.setattr(view, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    return handles


@pytest.mark.slow
def test_live_plot_is_one_figure_updated_in_place(tok, docs, monkeypatch) -> None:
    import matplotlib.pyplot as plt

    handles = _fake_notebook(monkeypatch)
    figures_before = plt.get_fignums()
    model = tiny_bert_pretraining(tok, **SMALL_BERT)
    train(
        model,
        nsp_batches(docs, tok, batch_size=8, max_length=32, generator=g()),
        max_steps=4,
        live=True,
        plot_every=0.0,
    )
    bar, plot = handles  # two displays: the progress bar, then the figure ...
    assert len(plot.updates) == 5  # ... redrawn after each of the 4 steps and once at the end
    png = plot.updates[-1].data
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == figures_before  # no pyplot figure left to pop up
    assert len(bar.updates) == 1  # the bar is replaced once, at the end


def test_live_bar_ends_as_a_summary_line(tok, docs, monkeypatch) -> None:
    """In a notebook the tqdm widget moves while training, then its display is replaced by one
    line of HTML and text with the final state (what a stored notebook shows without a kernel);
    the numbers are those of a run without any display."""
    import ipywidgets

    handles = _fake_notebook(monkeypatch)
    batches = clm_batches(docs, tok, batch_size=4, max_length=16, generator=g())
    h = train(tiny_gpt2(tok, **SMALL_GPT2), batches, max_steps=3, live=True, title="tiny")
    bar = handles[0]
    assert isinstance(bar.shown, ipywidgets.HBox)  # the live tqdm widget ...
    (summary,) = bar.updates  # ... replaced at the end by a plain summary
    assert bar.raw == [True] and set(summary) == {"text/html", "text/plain"}
    text = summary["text/plain"]
    mean = sum(h.loss) / len(h.loss)
    assert (
        text
        == f"tiny: 3/3 steps \u00b7 {h.wall_time[-1]:.1f} s \u00b7 loss {mean:.3f} (last 3 steps)"
    )
    assert "lmlessons-progress" in summary["text/html"] and "3/3 steps" in summary["text/html"]
    assert "\u2714" in summary["text/html"]  # finished: a check mark
    assert bar.shown.children[1].value == 3  # the widget bar itself ended full

    quiet = train(
        tiny_gpt2(tok, **SMALL_GPT2),
        clm_batches(docs, tok, batch_size=4, max_length=16, generator=g()),
        max_steps=3,
        live=False,
    )
    assert quiet.loss == h.loss  # the display changes no number


def test_progress_summary_lines() -> None:
    h = History(objective="clm", vocab_size=10, step=[1, 2], loss=[2.5, 2.25])
    h.wall_time = [0.4, 9.84]
    steps = Budget(max_steps=5, max_seconds=None, grad_accum_steps=1, total=5, by_time=False)
    assert (
        view.progress_summary(h, steps, "m")
        == "m: 2/5 steps \u00b7 9.8 s \u00b7 loss 2.375 (last 2 steps) \u00b7 interrupted"
    )
    h.stopped_by = "batches"
    assert view.progress_summary(h, steps, "m").endswith("(last 2 steps) \u00b7 batches ran out")
    h.stopped_by = "max_seconds"
    timed = Budget(max_steps=None, max_seconds=10, grad_accum_steps=1, total=10, by_time=True)
    assert (
        view.progress_summary(h, timed, "m")
        == "m: 2 steps in 10 s budget \u00b7 9.8 s \u00b7 loss 2.375 (last 2 steps)"
    )
    h.loss = [float(i) for i in range(30)]  # the mean of the last 10 steps, as the plot's title
    assert "loss 24.500 (last 10 steps)" in view.progress_summary(h, timed, "m")


def test_not_in_a_notebook_no_plot(tok, docs, capsys) -> None:
    assert view.in_notebook() is False
    model = tiny_gpt2(tok, **SMALL_GPT2)
    train(
        model,
        clm_batches(docs, tok, batch_size=4, max_length=16, generator=g()),
        max_steps=2,
        live=True,
    )
    captured = capsys.readouterr()
    assert "GPT2LMHeadModel" in captured.err and "2/2" in captured.err  # the tqdm bar, on stderr
    assert captured.out == ""  # no figure, no summary line


def test_history_plot() -> None:
    import matplotlib.pyplot as plt

    h = History(objective="clm", vocab_size=100, step=[1, 2, 3], loss=[4.0, 2.0, 3.0])
    ax = h.plot()
    raw, smooth, uniform = ax.get_lines()  # faint raw values, bold smoothed ones, ln(vocab)
    assert list(raw.get_ydata()) == h.loss and list(smooth.get_ydata()) == h.smoothed()
    assert list(uniform.get_ydata()) == [h.uniform_loss] * 2  # a horizontal line
    assert "ln(vocab) = 4.61" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(ax.figure)
    pre = History(objective="pretraining", vocab_size=100, step=[1, 2], loss=[4.0, 3.0])
    pre.mlm_loss, pre.nsp_loss, pre.nsp_accuracy = [3.3, 2.4], [0.7, 0.6], [0.5, 1.0]
    ax = pre.plot(reference=False)
    (twin,) = [a for a in ax.figure.axes if a is not ax]  # the NSP accuracy, on a twin axis
    assert list(twin.get_lines()[0].get_ydata()) == [0.5, 0.75]  # its moving mean
    assert len(ax.get_lines()) == 5  # loss raw + smoothed, MLM term, NSP term, ln 2
    plt.close(ax.figure)
