"""Record the z-loss lesson's runs: ``python -m tools.zloss_runs``.

The course tiny GPT-2 on the course corpus (:func:`lmlessons.course.zloss_runs.zloss_run`, the
settings of :data:`lmlessons.course.zloss_runs.ZLOSS_SETTINGS`: learning rate 1e-2, no weight
decay, 300 steps of 16 x 64 tokens), with ``z_loss_coefficient`` 0 and 1e-4, for each seed. Each
run keeps, every 10 steps, the LM loss, the mean log Z over the counted positions and the largest
|logit|, and the held-out LM loss at the end. The shipped file was made with::

    OMP_NUM_THREADS=1 python -m tools.zloss_runs --out lmlessons/data/zloss

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.records import write_record
from lmlessons.course.zloss_runs import ZLOSS_COEFFICIENTS, ZLOSS_FILE, record_zloss_runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``--out``, ``--seeds``, ``--max-steps`` (default: the settings')."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--coefficients", type=float, nargs="+", default=list(ZLOSS_COEFFICIENTS))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    log = partial(print, flush=True)
    data = record_zloss_runs(
        seeds=args.seeds, max_steps=args.max_steps, coefficients=args.coefficients, log=log
    )
    out = args.out if args.out is not None else user_cache_dir() / "zloss"
    path = write_record(data, out, ZLOSS_FILE, one_line_lists=True)
    print(f"wrote {path} ({data['seconds']} s)")


if __name__ == "__main__":
    main()
