"""The one place that knows the two ipywidgets the course runs on.

ipywidgets 8 (the course's lock, JupyterLab 4) displays a widget through ``_repr_mimebundle_``.
ipywidgets 7.7 (Google Colab's runtime, whose page renders 7's protocol) has no such method: a
widget displays through ``_ipython_display_``, which IPython prefers to any bundle. The course
shows each widget with a bundle of its own (the live view plus a static picture for viewers without
a kernel), so it asks here for the live part, built as the installed version builds it. Both
versions name the view ``application/vnd.jupyter.widget-view+json`` version 2.0.

Nothing here imports ipywidgets at module level: the course layer does not depend on it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WIDGET_VIEW", "ipywidgets_major", "live_bundle"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def ipywidgets_major() -> int:
    """The major version of the installed ipywidgets (7 or 8)."""
    import ipywidgets

    return int(ipywidgets.__version__.split(".", 1)[0])


def live_bundle(widget: Any, **kwargs: Any) -> dict[str, Any] | None:
    """The MIME bundle ipywidgets displays for ``widget`` (``text/plain`` and the live view), or
    None once the widget is closed. ``kwargs``: ``include``/``exclude``, passed on to ipywidgets 8.

    Under ipywidgets 7 the bundle is built as 7's ``Widget._ipython_display_`` builds it, without
    displaying it."""
    import ipywidgets

    if not isinstance(widget, ipywidgets.Widget):
        raise TypeError(f"widget must be an ipywidgets Widget, got {type(widget).__name__}")
    if widget.comm is None:  # closed: both versions show nothing
        return None
    if hasattr(ipywidgets.Widget, "_repr_mimebundle_"):  # ipywidgets 8
        return ipywidgets.Widget._repr_mimebundle_(widget, **kwargs)
    plaintext = repr(widget)
    data: dict[str, Any] = {
        "text/plain": plaintext[:110] + "…" if len(plaintext) > 110 else plaintext
    }
    if widget._view_name is not None:
        data[WIDGET_VIEW] = {"version_major": 2, "version_minor": 0, "model_id": widget._model_id}
    return data
