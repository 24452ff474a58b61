"""What the kernel sets of strict nbval change, and what they cost.

Run: ``python -m tools.bench_kernels``.

For each set of variables (none: the SIMD kernels the CPU picks, as ``make execute`` stores the
outputs; the scalar kernels of ``make test``; those plus MKL's compatible path, as
``make test-portable``), a fresh process, one thread:

- sums a float32 vector and a matrix product, and says whether their bits differ from the SIMD
  kernels' (a kernel set that changed no sum would prove nothing);
- times ``--steps`` steps of lesson 10's fine-tuning (the course GPT-2, answers only, the
  held-out loss every 25 steps).

Prints one row per set; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from conftest import MKL_COMPATIBLE, SCALAR_KERNELS

KERNEL_SETS = {
    "SIMD (make execute)": {},
    "scalar (make test)": SCALAR_KERNELS,
    "scalar + MKL compatible (make test-portable)": {**SCALAR_KERNELS, **MKL_COMPATIBLE},
}

PROBE = """
import hashlib, json, sys, time, torch
from lmlessons.course.chat import chat_tokenizer, fine_tune, instruction_set
from lmlessons.course.checkpoints import load_checkpoint
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
a, b = torch.randn(64, 777, generator=g), torch.randn(777, 129, generator=g)
x = torch.randn(3000, generator=g)
bits = hashlib.sha256((a @ b).numpy().tobytes() + x.sum().numpy().tobytes()).hexdigest()[:12]
tokenizer = chat_tokenizer()
train_set, heldout = instruction_set("train"), instruction_set("validation")
model = load_checkpoint("gpt2")
start = time.perf_counter()
fine_tune(model, train_set, tokenizer, heldout=heldout, max_steps=int(sys.argv[1]), eval_every=25)
print(json.dumps({"bits": bits, "seconds": time.perf_counter() - start}))
"""


def probe(variables: dict[str, str], steps: int) -> dict[str, object]:
    """Run the probe in a fresh process with ``variables`` set (and the others of every set
    unset, so the parent's environment cannot leak in)."""
    names = {name for kernel_set in KERNEL_SETS.values() for name in kernel_set}
    env = {k: v for k, v in os.environ.items() if k not in names} | variables
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(steps)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="fine-tuning steps (default 40)")
    args = parser.parse_args(argv)
    simd_bits = None
    for name, variables in KERNEL_SETS.items():
        result = probe(variables, args.steps)
        simd_bits = simd_bits or result["bits"]
        changed = "same bits" if result["bits"] == simd_bits else "other bits"
        print(f"{name:46s} {result['seconds']:6.1f} s  sums and products: {changed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
