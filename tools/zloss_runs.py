"""Record the z-loss lesson's runs: ``python -m tools.zloss_runs``.

The course tiny GPT-2 on the course corpus (:func:`lmlessons.course.zloss_runs.zloss_run`, the
settings of :data:`lmlessons.course.zloss_runs.ZLOSS_SETTINGS`: no weight decay, 300 steps of
16 x 64 tokens) in the arms of :data:`lmlessons.course.zloss_runs.ZLOSS_ARMS`: learning rate
1e-2 and 3e-1, each with ``z_loss_coefficient`` 0 and 1e-4, for each seed. Each run keeps, every
10 steps, the LM loss, the mean log Z over the counted positions, the largest |logit| and the
largest |pre-softmax attention score|, and the held-out LM loss at the end. The shipped file was
made with::

    OMP_NUM_THREADS=1 python -m tools.zloss_runs --out lmlessons/data/zloss

or in two processes, one per learning rate, then merged
(:func:`lmlessons.course.zloss_runs.merge_zloss_records`)::

    OMP_NUM_THREADS=1 python -m tools.zloss_runs --learning-rates 0.01 --out PART1 &
    OMP_NUM_THREADS=1 python -m tools.zloss_runs --learning-rates 0.3 --out PART2
    python -m tools.zloss_runs --merge PART1 PART2 --out lmlessons/data/zloss

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from lmlessons.course.zloss_runs import (
    ZLOSS_ARMS,
    ZLOSS_LEARNING_RATES,
    ZLOSS_RECORDING,
    merge_zloss_records,
    record_zloss_runs,
    recorded_zloss_runs,
)
from tools._recording import record_and_write, recording_parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``--out``, ``--seeds``, ``--max-steps`` (default: the settings'),
    ``--learning-rates`` (the arms kept), ``--merge`` (folders of records to join instead)."""
    parser = recording_parser(__doc__)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument(
        "--learning-rates", type=float, nargs="+", default=list(ZLOSS_LEARNING_RATES)
    )
    parser.add_argument("--merge", type=Path, nargs="+", default=None, help="record folders")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.learning_rates) - set(ZLOSS_LEARNING_RATES))
    if unknown:
        parser.error(f"--learning-rates: {unknown} not among {list(ZLOSS_LEARNING_RATES)}")
    return args


def _merged(folders: list[Path], *, log: object = None) -> dict:
    """The records in ``folders`` joined (:func:`merge_zloss_records`); ``log`` unused."""
    return merge_zloss_records([recorded_zloss_runs(directory=d) for d in folders])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.merge is not None:
        record = partial(_merged, args.merge)
    else:
        arms = [arm for arm in ZLOSS_ARMS if arm["learning_rate"] in args.learning_rates]
        record = partial(record_zloss_runs, seeds=args.seeds, max_steps=args.max_steps, arms=arms)
    record_and_write(record, args.out, ZLOSS_RECORDING, one_line_lists=True)


if __name__ == "__main__":
    main()
