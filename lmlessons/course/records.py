"""The course's recorded runs: one place that reads, checks and writes them, and one spread.

Some runs take minutes, too long for a lesson, so a maintainer tool (``python -m tools.<name>``)
trains them once and writes a small JSON file that the package ships under
``lmlessons/data/<folder>/``; the lessons replay it.

* :func:`load_record`: read one recording (the shipped one, or the same file in ``directory``),
  a :class:`FileNotFoundError` naming the command that records it when it is missing, and
  :func:`check_record` on what it read.
* :func:`check_record`: the one schema check: a JSON object with the keys its kind needs;
  :func:`check_runs` applies it to every run of a list.
* :class:`Recording`: one kind of recording (its folder, file, keys and the tool that records
  it), loaded by :meth:`Recording.load`.
* :func:`write_record`: write a recording as the tools do (``indent=1``, a final newline;
  optionally sorted keys and lists of numbers on one line).
* :func:`record_grid`: run one experiment per cell of a grid (a setting and a seed), each
  rounded (:func:`rounded`) and logged as it ends, timed as a whole, and return the record
  (its settings, seconds and runs): the loop of every recorder.
* :func:`seed_spread`: the mean over seeds and the spread around it, the sample standard deviation
  with Bessel's correction (0 for a single seed): the one definition of "mean ± spread over the
  seeds" that every summary of recorded runs states; :func:`seed_summary` keeps the values too.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmlessons._checks import check_int

__all__ = [
    "DATA_DIR",
    "Recording",
    "check_record",
    "check_runs",
    "load_record",
    "record_grid",
    "rounded",
    "write_record",
    "seed_spread",
    "seed_summary",
]

#: The package's data folder: each recording lives in a folder of its own under it.
DATA_DIR = Path(__file__).resolve().parents[1] / "data"

_FLAT_LIST = re.compile(r"\[\n\s*([^\[\]{}]*?)\n\s*\]")  # a list holding no list or dict


def check_record(record: object, keys: Sequence[str], *, name: str = "record") -> dict[str, Any]:
    """``record`` itself when it is a dict holding every one of ``keys`` (the top-level keys a
    recording of its kind has); a :class:`TypeError` when it is no dict, a :class:`ValueError`
    naming the missing keys otherwise. ``name`` names it in the message."""
    if not isinstance(record, dict):
        raise TypeError(f"{name} must be a JSON object (dict), got {type(record).__name__}")
    missing = [k for k in keys if k not in record]
    if missing:
        raise ValueError(f"{name} lacks the keys {missing} of its kind of recording")
    return record


def check_runs(runs: object, keys: Sequence[str], *, name: str = "runs") -> list[dict[str, Any]]:
    """``runs`` itself when it is a non-empty list whose every run is a dict holding ``keys``
    (:func:`check_record`, which names the run, ``runs[i]``, and its missing keys)."""
    if not isinstance(runs, list) or not runs:
        raise ValueError(f"{name} must be a non-empty list of runs, got {type(runs).__name__}")
    return [check_record(run, keys, name=f"{name}[{i}]") for i, run in enumerate(runs)]


def load_record(
    file: str,
    *,
    folder: str,
    keys: Sequence[str],
    command: str,
    directory: str | Path | None = None,
    run_keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The recording ``file`` shipped in ``lmlessons/data/<folder>/`` (or the file of that name in
    ``directory``), checked by :func:`check_record` against ``keys`` and, with ``run_keys``, each
    of its ``runs`` by :func:`check_runs`. A missing file raises a :class:`FileNotFoundError`
    that names ``command``, the one that records it."""
    base = DATA_DIR / folder if directory is None else Path(directory).expanduser()
    path = base / file
    if not path.is_file():
        raise FileNotFoundError(f"no recorded runs at {str(path)!r}; record them with `{command}`")
    data = check_record(json.loads(path.read_text(encoding="utf-8")), keys, name=str(path))
    if run_keys is not None:
        check_runs(data.get("runs"), run_keys, name=f"{file}['runs']")
    return data


@dataclass(frozen=True)
class Recording:
    """One kind of recorded run: the file ``file`` shipped in ``lmlessons/data/<folder>/``,
    recorded by ``python -m tools.<tool>``, with the top-level ``keys`` and, unless ``run_keys``
    is None, a list ``runs`` whose every run holds ``run_keys``. The one place that says where a
    recording lives, what it holds and what records it: its loader (:meth:`load`) and its tool
    read it."""

    folder: str
    tool: str
    keys: tuple[str, ...]
    run_keys: tuple[str, ...] | None = None
    file: str = "runs.json"

    @property
    def command(self) -> str:
        """The command that records the shipped file (the tools run on one thread)."""
        return f"python -m tools.{self.tool} --out lmlessons/data/{self.folder}"

    def load(self, directory: str | Path | None = None) -> dict[str, Any]:
        """The shipped recording, or the file of that name in ``directory``, checked:
        :func:`load_record`."""
        return load_record(
            self.file,
            folder=self.folder,
            keys=self.keys,
            command=self.command,
            directory=directory,
            run_keys=self.run_keys,
        )


def _one_line(match: re.Match[str]) -> str:
    """A list of numbers or strings written one item a line, as one line."""
    return "[" + re.sub(r",\n\s*", ", ", match.group(1)) + "]"


def write_record(
    record: Mapping[str, Any],
    directory: str | Path,
    file: str,
    *,
    sort_keys: bool = False,
    one_line_lists: bool = False,
) -> Path:
    """Write ``record`` as JSON (``indent=1``, a final newline) to ``directory/file``, the
    folder made if needed, and return the path. ``sort_keys``: keys in sorted order;
    ``one_line_lists``: each list that holds no list or dict on one line."""
    if not isinstance(record, Mapping):
        raise TypeError(f"record must be a mapping, got {type(record).__name__}")
    path = Path(directory).expanduser() / file
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, sort_keys=sort_keys)
    if one_line_lists:
        text = _FLAT_LIST.sub(_one_line, text)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def seed_spread(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, std)`` of one value per seed: the mean, and the sample standard deviation with
    Bessel's correction (divided by ``n - 1``; 0.0 for a single seed)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError("values must be a sequence of numbers, one per seed")
    if not values:
        raise ValueError("values must hold at least one value (one per seed)")
    numbers = [float(v) for v in values]
    mean = sum(numbers) / len(numbers)
    var = sum((v - mean) ** 2 for v in numbers) / max(len(numbers) - 1, 1)
    return mean, var**0.5


def seed_summary(values: Sequence[float]) -> dict[str, Any]:
    """:func:`seed_spread` of ``values`` as ``{"mean", "std", "per_seed"}``, the values kept."""
    mean, std = seed_spread(values)
    return {"mean": mean, "std": std, "per_seed": list(values)}


def rounded(value: Any, digits: int = 4) -> Any:
    """``value`` with every float in it (alone, or in lists and dicts) rounded to ``digits``."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


def record_grid(
    run: Callable[[Any, int, dict[str, Any]], Mapping[str, Any]],
    settings: Mapping[str, Any],
    *,
    grid: Mapping[str, Sequence[Any]],
    seeds: Sequence[int],
    max_steps: int | None = None,
    describe: Callable[[Mapping[str, Any]], str],
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record of ``run(value, seed, settings)`` for every value of ``grid``'s one entry
    (``{"coefficients": (0.0, 1e-4)}``), then every seed: ``settings`` (``settings`` with
    ``max_steps`` when given, the seeds and the grid's values under its name), ``seconds`` (the
    grid's wall time) and ``runs``, each :func:`rounded`. As each run ends,
    ``log(describe(that run) + " (N s)")`` (None: silent)."""
    if len(grid) != 1:
        raise ValueError(f"grid must hold one name and its values, got {list(grid)}")
    (name, values), used = next(iter(grid.items())), dict(settings)
    if max_steps is not None:
        used["max_steps"] = check_int("max_steps", max_steps, minimum=1)
    start, runs = time.time(), []
    for value, seed in itertools.product(values, seeds):
        began = time.time()
        runs.append(rounded(dict(run(value, seed, used))))
        if log is not None:
            log(f"{describe(runs[-1])} ({time.time() - began:.0f} s)")
    record = {**used, "seeds": list(seeds), name: list(values)}
    return {"settings": record, "seconds": round(time.time() - start), "runs": runs}
