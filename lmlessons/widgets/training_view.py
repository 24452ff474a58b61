"""What :func:`lmlessons.course.training.train` shows in a lesson, and :meth:`History.plot`.

:class:`LessonDisplay` is the :class:`~lmlessons.course.training.Display` that importing
:mod:`lmlessons.widgets` installs. In a notebook, a run shows a tqdm widget bar and one loss plot
(PNG through an IPython display handle, redrawn in place every ``plot_every`` seconds, never one
figure per step). When the run ends, the bar's display is replaced by :func:`progress_summary` as
HTML and text, so a stored notebook (read without a kernel) shows the final state instead of a
frozen ``0%`` widget. Outside a notebook it is the course's plain tqdm bar.
"""

from __future__ import annotations

import html
import math
import time
from typing import Any

from lmlessons.course.training import Budget, History, Progress, TextProgress
from lmlessons.widgets.display import figure_png, new_figure

__all__ = [
    "LessonDisplay",
    "in_notebook",
    "draw_history",
    "final_loss_text",
    "progress_summary",
    "FINAL_LOSS_WINDOW",
]

#: The live plot's title and the summary line state the same loss: the mean of the last steps.
FINAL_LOSS_WINDOW = 10
_LOSS_LABELS = {"mlm": "MLM loss", "clm": "causal LM loss", "pretraining": "MLM + NSP loss"}
_X_LABELS = {"step": "optimizer step", "wall_time": "seconds", "tokens_seen": "tokens seen"}


# --------------------------------------------------------------------------------------------
# The loss plot
# --------------------------------------------------------------------------------------------


def _draw_losses(ax: Any, h: History, *, x: str = "step", reference: bool = True) -> None:
    xs = getattr(h, x)
    ax.plot(xs, h.loss, color="C0", alpha=0.25, lw=1)
    ax.plot(xs, h.smoothed("loss"), color="C0", lw=2, label=_LOSS_LABELS[h.objective])
    if h.objective == "pretraining":
        ax.plot(xs, h.smoothed("mlm_loss"), color="C1", lw=1.5, label="MLM term")
        ax.plot(xs, h.smoothed("nsp_loss"), color="C2", lw=1.5, label="NSP term")
        ax.axhline(math.log(2), color="C2", ls=":", lw=1, label="ln 2 (NSP coin flip)")
    if reference:
        ax.axhline(
            h.uniform_loss, color="gray", ls="--", lw=1, label=f"ln(vocab) = {h.uniform_loss:.2f}"
        )
    ax.set_xlabel(_X_LABELS.get(x, x))
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_outside(ax)


def _legend_outside(ax: Any, *more: Any) -> None:
    """One legend for ``ax`` and its twin axes ``more``, to the right of the plot (never over a
    curve)."""
    handles, labels = ax.get_legend_handles_labels()
    for other in more:
        h, lab = other.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    ax.legend(
        handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02 + 0.1 * bool(more), 1.0)
    )


def _moving_mean(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _draw_nsp_accuracy(ax: Any, ax2: Any, h: History, *, x: str = "step") -> None:
    """The NSP accuracy (20-step moving mean) on ``ax2``, the twin axis of the loss plot ``ax``."""
    ax2.plot(
        getattr(h, x),
        _moving_mean(h.nsp_accuracy, 20),
        color="C3",
        lw=1.5,
        label="NSP accuracy (20-step mean)",
    )
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("NSP accuracy")
    _legend_outside(ax, ax2)


def draw_history(ax: Any, h: History, *, x: str = "step", reference: bool = True) -> Any:
    """The loss curve(s) of ``h`` on ``ax`` (faint raw values, bold smoothed ones, the dashed
    ``ln(vocab)``) and, for ``"pretraining"``, the NSP accuracy on a twin axis; returns ``ax``."""
    _draw_losses(ax, h, x=x, reference=reference)
    if h.objective == "pretraining":
        _draw_nsp_accuracy(ax, ax.twinx(), h, x=x)
    return ax


# --------------------------------------------------------------------------------------------
# The live display of a run
# --------------------------------------------------------------------------------------------


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a live plot can be shown)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def final_loss_text(history: History) -> str:
    """``loss 5.390 (last 10 steps)``: one wording for the plot title and the summary line."""
    n = min(FINAL_LOSS_WINDOW, len(history.loss))
    return f"loss {history.final('loss', FINAL_LOSS_WINDOW):.3f} (last {n} steps)"


class _LivePlot:
    """A figure shown once through an IPython display handle and redrawn in place. Drawn
    without pyplot and rendered to PNG, so it works with any matplotlib backend."""

    def __init__(self, history: History, title: str) -> None:
        from IPython.display import display

        self.history, self.title = history, title
        self.figure = new_figure(6.5, 3)
        self.ax = self.figure.add_subplot()
        self.ax2 = self.ax.twinx() if history.objective == "pretraining" else None
        self.handle = display(self._image(), display_id=True)

    def _image(self) -> Any:
        from IPython.display import Image

        h = self.history
        self.ax.clear()
        if h.num_steps:
            _draw_losses(self.ax, h)
            if self.ax2 is not None:
                self.ax2.clear()
                _draw_nsp_accuracy(self.ax, self.ax2, h)
            last = f"step {h.step[-1]}, {h.wall_time[-1]:.0f} s, {final_loss_text(h)}"
            self.ax.set_title(f"{self.title}: {last}", fontsize=10)
        else:
            self.ax.set_title(f"{self.title}: starting...", fontsize=10)
        return Image(data=figure_png(self.figure, crop=True), format="png")

    def update(self) -> None:
        if self.handle is not None:
            self.handle.update(self._image())


def progress_summary(history: History, budget: Budget, title: str) -> str:
    """The one line that replaces the progress bar when :func:`train` ends, e.g.
    ``GPT2LMHeadModel: 120/120 steps · 9.8 s · loss 5.390 (last 10 steps)`` (a stored notebook
    shows this)."""
    h = history
    seconds = h.wall_time[-1] if h.wall_time else budget.elapsed()
    if budget.by_time:
        done = f"{h.num_steps} steps in {budget.total:g} s budget"
    else:
        done = f"{h.num_steps}/{budget.total:.0f} steps"
    parts = [f"{title}: {done}", f"{seconds:.1f} s"]
    if h.loss:
        parts.append(final_loss_text(h))
    if not h.stopped_by:
        parts.append("interrupted")
    elif h.stopped_by == "batches":
        parts.append("batches ran out")
    return " \u00b7 ".join(parts)


def _summary_bundle(text: str, finished: bool) -> dict[str, str]:
    """``text`` as HTML (a check mark when training finished) and as plain text."""
    mark, color = ("\u2714", "#1a9641") if finished else ("\u25a0", "#d7191c")
    markup = (
        '<div class="lmlessons-progress" style="font-family:monospace;font-size:12px">'
        f'<span style="color:{color}">{mark}</span> {html.escape(text)}</div>'
    )
    return {"text/html": markup, "text/plain": text}


class _NotebookProgress(TextProgress):
    """The course's tqdm bar as a widget shown through a display handle, and the
    :class:`_LivePlot`, redrawn every ``plot_every`` seconds; at the end the bar's display
    becomes :func:`progress_summary`."""

    def __init__(self, history: History, budget: Budget, title: str, plot_every: float) -> None:
        self.handle: Any = None
        super().__init__(history, budget, title)
        self.plot, self.plot_every = _LivePlot(history, title), plot_every
        self.last_plot = time.perf_counter()

    def new_bar(self, **options: Any) -> Any:
        from IPython.display import display
        from tqdm.notebook import tqdm as tqdm_notebook

        bar = tqdm_notebook(display=False, **options)
        self.handle = display(bar.container, display_id=True)
        return bar

    def update(self) -> None:
        super().update()
        if time.perf_counter() - self.last_plot >= self.plot_every:
            self.plot.update()
            self.last_plot = time.perf_counter()

    def close(self) -> None:
        super().close()
        if self.handle is not None:  # the widget bar -> one line that reads without a kernel
            text = progress_summary(self.history, self.budget, self.title)
            self.handle.update(_summary_bundle(text, bool(self.history.stopped_by)), raw=True)
            self.bar.container.close()
        self.plot.update()


class LessonDisplay:
    """The course's :class:`~lmlessons.course.training.Display`: in a notebook the live view
    above, elsewhere the plain tqdm bar; :meth:`History.plot` draws :func:`draw_history`."""

    def progress(self, history: History, budget: Budget, title: str, plot_every: float) -> Progress:
        if in_notebook():
            return _NotebookProgress(history, budget, title, plot_every)
        return TextProgress(history, budget, title)

    def plot(self, history: History, ax: Any, *, x: str, reference: bool) -> Any:
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(6, 3), dpi=80)
        return draw_history(ax, history, x=x, reference=reference)
