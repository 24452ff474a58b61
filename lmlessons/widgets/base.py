"""The shape every lesson widget shares: named controls above one output, redrawn on change.

:class:`LessonWidget` is an ``ipywidgets.VBox`` (a notebook displays it as before) that also
carries typed handles for tests and lessons: ``controls`` (the control widgets by name),
``output`` (the ``ipywidgets.Output``) and :meth:`~LessonWidget.redraw`. Setting a control's
``value`` runs the same callback as moving it in the browser.

Its display bundle adds, beside ipywidgets' own ``application/vnd.jupyter.widget-view+json``
(which JupyterLab renders live), a ``text/html`` picture of what it shows right now: the controls'
values as text and the output's current HTML / PNG. A viewer without a kernel (GitHub, nbviewer)
shows that picture instead of ``LessonWidget(children=...``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from lmlessons.course.palette import MUTED
from lmlessons.course.widget_versions import ipywidgets_major, live_bundle
from lmlessons.widgets.display import OutputRecord, outputs_html, shown_state

#: What a widget draws: the records that replace its output, in one assignment.
Draw = Callable[[], Sequence[OutputRecord]]


def float_slider(
    name: str, value: float, top: float, *, step: float, **options: Any
) -> widgets.FloatSlider:
    """A slider from 0 to ``top`` described ``name`` (the argument it sets), read out as 0.00."""
    return widgets.FloatSlider(
        value=value,
        min=0.0,
        max=top,
        step=step,
        description=name,
        readout_format=".2f",
        **options,
    )


def control_text(control: widgets.Widget) -> str:
    """What a control shows as its value: a selection's label, a number in its readout format
    (``.2f`` as the slider reads it out), else ``str(value)``."""
    label = getattr(control, "label", None)
    if isinstance(label, str):
        return label
    value = getattr(control, "value", "")
    readout = getattr(control, "readout_format", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and readout:
        try:
            return format(value, readout)
        except ValueError:
            pass
    return str(value)


def _controls_html(controls: Mapping[str, widgets.Widget]) -> str:
    items = "".join(
        f'<span style="margin-right:14px"><span style="{MUTED}">'
        f"{html.escape(str(getattr(c, 'description', '') or name))}</span> "
        f"<b>{html.escape(control_text(c))}</b></span>"
        for name, c in controls.items()
    )
    return f'<div style="font-family:monospace;font-size:12px;margin:2px 0 4px 0">{items}</div>'


class LessonWidget(widgets.VBox):
    """Controls (or ``rows`` laid out from them) above one ``Output`` that ``draw`` fills.

    ``draw()`` returns the output records (see :mod:`lmlessons.widgets.display`); it runs once
    now and again whenever a control's ``value`` changes. Observers a widget registers on its
    controls before building this box run first (e.g. one that clamps another slider).
    """

    def __init__(
        self,
        controls: Mapping[str, widgets.ValueWidget],
        draw: Draw,
        *,
        rows: Sequence[widgets.Widget] | None = None,
    ) -> None:
        output = widgets.Output()
        super().__init__([*(controls.values() if rows is None else rows), output])
        self.controls: dict[str, widgets.ValueWidget] = dict(controls)
        self.output = output
        self._draw = draw
        for control in self.controls.values():
            control.observe(self.redraw, names="value")
        self.redraw()

    def redraw(self, change: object = None) -> None:
        """Draw again from the controls' current values (``change`` is the observer's event)."""
        self.output.outputs = tuple(self._draw())

    @property
    def state(self) -> str:
        """The widget's current state ``key=value ...`` (deterministic; what the browser test
        waits for). Empty when its output carries none."""
        return shown_state(self.output.outputs) or ""

    def static_html(self) -> str:
        """What the widget shows now, as static HTML: the controls' values, then the output."""
        return (
            f'<div class="lmlessons-static">{_controls_html(self.controls)}'
            f"{outputs_html(self.output.outputs)}</div>"
        )

    def static_text(self) -> str:
        """The controls' values as text (the bundle's ``text/plain``)."""
        return "  ".join(
            f"{getattr(c, 'description', '') or name}={control_text(c)}"
            for name, c in self.controls.items()
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        """ipywidgets' bundle (the live view) plus the static picture for kernel-free viewers."""
        data = live_bundle(self, **kwargs)
        if data is None:  # a closed widget: ipywidgets shows nothing
            return None
        return {**data, "text/html": self.static_html(), "text/plain": self.static_text()}

    if ipywidgets_major() < 8:  # 7 displays through this method, which IPython calls first

        def _ipython_display_(self, **kwargs: Any) -> None:
            data = self._repr_mimebundle_()
            if data is not None:
                display(data, raw=True)
                self._handle_displayed(**kwargs)
