"""The shape every lesson widget shares: named controls above one output, redrawn on change.

:class:`LessonWidget` is an ``ipywidgets.VBox`` (a notebook displays it as before) that also
carries typed handles for tests and lessons: ``controls`` (the control widgets by name),
``output`` (the ``ipywidgets.Output``) and :meth:`~LessonWidget.redraw`. Setting a control's
``value`` runs the same callback as moving it in the browser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from lmlessons.widgets.display import OutputRecord

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
