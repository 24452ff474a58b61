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

from functools import partial

from lmlessons.course.moe_runs import METHODS, MOE_RECORDING, MOE_SETTINGS, record_moe_runs
from tools._recording import record_and_write, recording_parser


def main(argv: list[str] | None = None) -> None:
    parser = recording_parser(__doc__)
    parser.add_argument("--max-steps", type=int, default=MOE_SETTINGS["max_steps"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)
    record = partial(record_moe_runs, args.methods, seeds=args.seeds, max_steps=args.max_steps)
    record_and_write(record, args.out, MOE_RECORDING, one_line_lists=True)


if __name__ == "__main__":
    main()
