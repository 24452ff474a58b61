"""Course prose kept as data: hints, quizzes, What-if answers and the mistake catalogue.

The files live in ``lmlessons/data/content/`` as TOML: the standard library reads it
(``tomllib``), and its multi-line strings hold prose and indented code as a person writes them,
without the quoting of Python string fragments. ``tests/test_content.py`` checks every file
against its schema.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

CONTENT = "data/content"


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed TOML file ``lmlessons/data/content/<name>.toml`` (e.g. ``"hints"``,
    ``"quizzes/01"``), read once per process."""
    path = resources.files("lmlessons").joinpath(f"{CONTENT}/{name}.toml")
    if not path.is_file():
        raise ValueError(f"no content file {name!r} in lmlessons/{CONTENT}")
    return tomllib.loads(path.read_text(encoding="utf-8"))


def names(folder: str) -> list[str]:
    """The names of the content files in ``lmlessons/data/content/<folder>/``, sorted (e.g.
    ``names("quizzes")`` is ``["00", "01", ...]``: ``load(f"quizzes/{name}")`` reads one)."""
    path = resources.files("lmlessons").joinpath(f"{CONTENT}/{folder}")
    if not path.is_dir():
        raise ValueError(f"no content folder {folder!r} in lmlessons/{CONTENT}")
    return sorted(p.name.removesuffix(".toml") for p in path.iterdir() if p.name.endswith(".toml"))
