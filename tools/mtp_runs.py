"""Record the MTP lesson's runs: ``python -m tools.mtp_runs``.

The course GPT-2 with D output depths (:class:`lmlessons.course.mtp_runs.MTPModel`: one GPT-2
block per extra depth on the shared trunk, the tied unembedding), trained with
:func:`lmlessons.mtp.mtp_loss` (:data:`lmlessons.course.mtp_runs.MTP_SETTINGS`: learning rate
2e-3, 150 steps of 16 x 64 tokens) for D = 1, 2, 3 and each seed, on the same batches for every D.
Each run keeps every depth's training loss every 10 steps, and the held-out loss of each depth
at the end (depth 1's: the next-token loss compared). The shipped file was made with::

    OMP_NUM_THREADS=1 python -m tools.mtp_runs --out lmlessons/data/mtp

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
from functools import partial

from lmlessons.course.mtp_runs import MTP_DEPTHS, MTP_RECORDING, record_mtp_runs
from tools._recording import record_and_write, recording_parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``--out``, ``--seeds``, ``--max-steps`` (default: the settings'),
    ``--depths``."""
    parser = recording_parser(__doc__)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--depths", type=int, nargs="+", default=list(MTP_DEPTHS))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    record = partial(
        record_mtp_runs, seeds=args.seeds, max_steps=args.max_steps, depths=args.depths
    )
    record_and_write(record, args.out, MTP_RECORDING, one_line_lists=True)


if __name__ == "__main__":
    main()
