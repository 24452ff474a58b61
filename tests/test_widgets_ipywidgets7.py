"""The course's widgets under both ipywidgets it supports: 8 (its lock) and 7.7 (Google Colab's).

ipywidgets 7 has no ``_repr_mimebundle_`` and displays a widget through ``_ipython_display_``
(which IPython calls before any bundle); :mod:`lmlessons.course.widget_versions` is the one place
that branches on it. Under each version, IPython's display of a lesson widget (a ``Predict``) and
of a quiz must publish the live view and the static picture, and a closed widget nothing.

ipywidgets 7.7.1 is not in the course's lock: ``make setup`` installs it apart, into
``<venv>/ipywidgets7`` (``requirements-ipywidgets7.txt``), and the second test puts that folder
first on ``PYTHONPATH`` in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IPYWIDGETS7 = Path(sys.prefix) / "ipywidgets7"

# What IPython publishes when a cell displays each object (its display formatter, as a cell's
# last expression is shown), under whichever ipywidgets the process imports.
PROBE = """
import json
from IPython.testing.globalipapp import start_ipython

ip = start_ipython()
published = []
ip.display_pub.publish = lambda data, metadata=None, **kw: published.append(sorted(data))
import ipywidgets
from lmlessons.exercises import quiz
from lmlessons.widgets.predict import Predict

def shown(obj):
    published.clear()
    data, _ = ip.display_formatter.format(obj)
    return published[0] if published else sorted(data)

guess = Predict("How many?", unit="%", low=0, high=100, step=1)
result = {"version": ipywidgets.__version__, "widget": shown(guess), "quiz": shown(quiz("01"))}
guess.close()
result["closed"] = shown(guess)
print(json.dumps(result))
"""
LIVE = ["application/vnd.jupyter.widget-view+json", "text/html", "text/plain"]


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _env(first: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if first is not None:
        env["PYTHONPATH"] = str(first)
    return env


@pytest.mark.slow
def test_the_lock_s_ipywidgets_8_shows_the_live_view_and_the_picture() -> None:
    shown = _probe(_env(None))
    assert shown["version"].startswith("8."), shown
    assert shown["widget"] == LIVE and shown["quiz"] == LIVE, shown
    assert "application/vnd.jupyter.widget-view+json" not in shown["closed"], shown


@pytest.mark.slow
def test_colab_s_ipywidgets_7_shows_the_live_view_and_the_picture() -> None:
    if not (IPYWIDGETS7 / "ipywidgets").is_dir():
        pytest.skip(f"no ipywidgets 7 in {IPYWIDGETS7}: `make setup` installs it there")
    shown = _probe(_env(IPYWIDGETS7))
    assert shown["version"] == "7.7.1", shown
    assert shown["widget"] == LIVE and shown["quiz"] == LIVE, shown
    assert "application/vnd.jupyter.widget-view+json" not in shown["closed"], shown
