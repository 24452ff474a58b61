"""Record the router-loss lesson's runs of a tiny Mixtral: ``python -m tools.moe_runs``.

The course's tiny ``MixtralForCausalLM`` (4 experts, top-2;
:func:`lmlessons.course.moe_runs.moe_run` with :data:`lmlessons.course.moe_runs.MOE_SETTINGS`:
16 sequences of at most 64 tokens a step, AdamW at 3e-3, 200 steps) on the course corpus, for
each balancing method and seed:

* ``none``: no balancing (``router_aux_loss_coef = 0``);
* ``aux_1e-3`` and ``aux_1e-2``: Mixtral's aux loss added inside the model with that coefficient;
* ``bias_1e-3`` and ``bias_1e-2``: DeepSeek-V3's bias on the expert choice, updated after every
  step with that speed (1e-3 is DeepSeek-V3's).

Each run keeps, every 20 steps, each layer's expert-load spread (coefficient of variation and
busiest expert over the mean) on a fixed held-out batch, the held-out LM loss and the step's aux
loss; and the final per-expert counts and biases. The shipped file was made with::

    OMP_NUM_THREADS=1 python -m tools.moe_runs --out lmlessons/data/moe

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.moe_runs import METHODS, MOE_FILE, MOE_SETTINGS, record_moe_runs
from lmlessons.course.records import write_record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=MOE_SETTINGS["max_steps"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    log = partial(print, flush=True)
    data = record_moe_runs(args.methods, seeds=args.seeds, max_steps=args.max_steps, log=log)
    out = args.out if args.out is not None else user_cache_dir() / "moe"
    path = write_record(data, out, MOE_FILE, one_line_lists=True)
    print(f"wrote {path} ({data['seconds']} s)")


if __name__ == "__main__":
    main()
