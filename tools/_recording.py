"""What every recording tool shares: the ``--out`` and ``--seeds`` of its command line, and how
it records and writes: on one thread, logging each run as it ends, to ``--out`` or else to the
user cache folder (never into the repository), then a last line with the path and the time."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.records import Recording, write_record


def recording_parser(
    doc: str, *, seeds: Sequence[int] | None = (0, 1, 2)
) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first paragraph, with ``--out`` (a folder; default: the
    user cache) and, unless ``seeds`` is None, ``--seeds`` (default ``seeds``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    if seeds is not None:
        parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    return parser


def record_and_write(
    record: Callable[..., dict[str, Any]], out: Path | None, kind: Recording, **write: bool
) -> Path:
    """``record(log=log)`` on one thread, ``log`` printing each line at once; the record written as
    ``kind.file`` in ``out`` (None: the user cache's ``kind.folder``) by :func:`write_record` with
    ``write``'s options; then ``wrote <path> (<seconds> s)``. Returns the path."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    data = record(log=partial(print, flush=True))
    folder = user_cache_dir() / kind.folder if out is None else out
    path = write_record(data, folder, kind.file, **write)
    print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")
    return path
