"""The z-loss lesson's recorded runs: does ``log Z`` drift in the course GPT-2, and does a z-loss
of 1e-4 hold it?

Wortsman et al. (arXiv:2309.14322, "output logit divergence") see the output logits of small
models trained at high learning rates drift far from 0 late in training, and a z-loss of 1e-4
(PaLM's, :func:`lmlessons.zloss.z_loss`) remove it. The experiment here: the course tiny GPT-2
(:func:`lmlessons.course.models.tiny_gpt2`) on the course corpus's causal-LM batches
(:func:`lmlessons.course.batches.clm_batches`), at :data:`ZLOSS_SETTINGS`' learning rate, with
``z_loss_coefficient`` 0 and 1e-4, over seeds:

* :func:`lmlessons.course.training.train_steps` (the loop for any loss function) runs it,
  which logs what the loss function reports every ``log_every`` steps (the MTP runs use it too);
* :func:`logit_stats`: the mean ``log Z`` over the counted positions and the largest ``|logit|``;
* :func:`zloss_run`: one run: per logged step the LM loss, mean ``log Z`` and largest
  ``|logit|``, and the held-out LM loss at the end (:func:`heldout_loss`);
* :func:`record_zloss_runs`: every coefficient and seed (``python -m tools.zloss_runs``);
  :func:`recorded_zloss_runs` loads the shipped record, :func:`zloss_summary` summarises each
  coefficient over its seeds (:func:`lmlessons.course.records.seed_summary`) and
  :func:`zloss_figure` draws ``log Z`` and the loss step by step.

What the shipped runs show (300 steps, 3 seeds; ``tests/test_zloss_runs.py`` checks it in every
run): no divergence. ``log Z`` starts at ``log V`` (uniform logits), dips about 0.5 below it in
the first steps, then climbs back slowly (by 0.4 or more by step 300), with and without the
z-loss, never leaving ``log V +- 0.6``. A z-loss of 1e-4 moves the final ``log Z`` by under 0.03
and the held-out loss by under 0.06, with no consistent sign: its gradient, ``2e-4 * log Z``
per position, is too weak to matter in so short a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX, check_int, check_logits_labels
from lmlessons.course.batches import clm_batches
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import tiny_gpt2
from lmlessons.course.records import load_record, record_grid, seed_summary
from lmlessons.course.tokenizer import load_tokenizer
from lmlessons.course.training import LossFn, evaluate, train_steps
from lmlessons.losses import clm_loss
from lmlessons.shifting import shift_labels
from lmlessons.zloss import z_loss

__all__ = [
    "ZLOSS_SETTINGS",
    "ZLOSS_COEFFICIENTS",
    "heldout_batches",
    "heldout_loss",
    "logit_stats",
    "zloss_run",
    "record_zloss_runs",
    "ZLOSS_FILE",
    "ZLOSS_KEYS",
    "ZLOSS_RUN_KEYS",
    "ZLOSS_COMMAND",
    "recorded_zloss_runs",
    "zloss_summary",
    "zloss_figure",
]

#: The z-loss coefficients compared: none, and PaLM's 1e-4 (the one Wortsman et al. use).
ZLOSS_COEFFICIENTS = (0.0, 1e-4)

#: The settings of the recorded runs. The learning rate, 5x the course's 2e-3, is the highest of
#: those tried (seed 0, no z-loss: 1e-2, 3e-2 and 1e-1 for 300 steps) whose loss kept falling;
#: none made ``log Z`` diverge. Weight decay is 0: it pulls the weights, and so the logits,
#: towards 0 on its own.
ZLOSS_SETTINGS: dict[str, Any] = {
    "learning_rate": 1e-2,
    "weight_decay": 0.0,
    "warmup_steps": 20,
    "max_grad_norm": 1.0,
    "batch_size": 16,
    "max_length": 64,
    "max_steps": 300,
    "log_every": 10,
}


#: ``loss_fn(model, batch) -> (loss, logged)``: the loss to minimise, and the floats to log.
def heldout_batches(tokenizer: Any, settings: Mapping[str, Any]) -> list[dict[str, torch.Tensor]]:
    """The course corpus's validation documents as causal-LM batches (one pass, a fixed order):
    the same held-out tokens for every run."""
    corpus = load_corpus()
    return list(
        clm_batches(
            corpus.validation,
            tokenizer,
            batch_size=settings["batch_size"],
            max_length=settings["max_length"],
            epochs=1,
            generator=torch.Generator().manual_seed(0),
        )
    )


def heldout_loss(model: torch.nn.Module, batches: Sequence[dict[str, torch.Tensor]]) -> float:
    """The held-out next-token loss of a causal LM: :func:`lmlessons.course.training.evaluate`'s
    ``clm_loss`` (token-weighted over ``batches``)."""
    return float(evaluate(model, batches, objective="clm")["clm_loss"])


@torch.no_grad()
def logit_stats(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``{"log_z": mean of logsumexp(logits) over the counted positions (those z_loss and
    clm_loss score), "max_abs_logit": the largest |logit| at those positions}`` (float32)."""
    logits, labels = check_logits_labels(logits, labels)
    counted = shift_labels(labels) != IGNORE_INDEX  # (B, T)
    if not bool(counted.any()):
        raise ValueError("labels must count at least one position (a target after the shift)")
    kept = logits.detach().float()[counted]  # (N, V)
    return {
        "log_z": float(kept.logsumexp(-1).mean()),
        "max_abs_logit": float(kept.abs().max()),
    }


def _zloss_fn(z_loss_coefficient: float) -> LossFn:
    """The loss of the z-loss runs: ``clm_loss + z_loss``, logging the LM loss and the logits."""

    def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        lm = clm_loss(logits, batch["labels"])  # (B, T, V) -> ()
        loss = lm
        if z_loss_coefficient > 0:
            loss = lm + z_loss(logits, batch["labels"], z_loss_coefficient=z_loss_coefficient)
        return loss, {"lm_loss": lm.item(), **logit_stats(logits, batch["labels"])}

    return loss_fn


def zloss_run(
    z_loss_coefficient: float,
    *,
    seed: int,
    settings: Mapping[str, Any] | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One recorded run: the course GPT-2 (initial weights and batch order from ``seed``) trained
    with ``clm_loss + z_loss(z_loss_coefficient)`` by :func:`train_steps` with ``settings``
    (default :data:`ZLOSS_SETTINGS`). ``model_config``: keywords for ``tiny_gpt2`` (tests make
    it smaller). Returns ``{"z_loss_coefficient", "seed", "step", "lm_loss", "log_z",
    "max_abs_logit": [one value per logged step], "heldout_loss": float}``."""
    seed = check_int("seed", seed, minimum=0)
    if isinstance(z_loss_coefficient, bool) or not isinstance(z_loss_coefficient, (int, float)):
        raise TypeError(f"z_loss_coefficient must be a number, got {z_loss_coefficient!r}")
    if z_loss_coefficient < 0:
        raise ValueError(f"z_loss_coefficient must be >= 0, got {z_loss_coefficient}")
    settings = dict(ZLOSS_SETTINGS if settings is None else settings)
    tok = load_tokenizer()
    model = tiny_gpt2(tok, seed=seed, **dict(model_config or {}))
    batches = clm_batches(
        load_corpus(),
        tok,
        batch_size=settings["batch_size"],
        max_length=settings["max_length"],
        generator=torch.Generator().manual_seed(seed),
    )
    logged = train_steps(model, batches, _zloss_fn(float(z_loss_coefficient)), settings)
    held_out = heldout_loss(model, heldout_batches(tok, settings))
    run = {"z_loss_coefficient": float(z_loss_coefficient), "seed": seed}
    return {**run, **logged, "heldout_loss": held_out}


def record_zloss_runs(
    *,
    seeds: Sequence[int],
    max_steps: int | None = None,
    coefficients: Sequence[float] = ZLOSS_COEFFICIENTS,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record :func:`recorded_zloss_runs` reads: ``settings`` (:data:`ZLOSS_SETTINGS` with
    ``max_steps``, ``seeds`` and ``coefficients``), ``seconds`` (the recording's wall time) and
    ``runs``: :func:`zloss_run` for every coefficient and seed, floats to 4 decimals. ``log``:
    called with one line per run as it ends (None: silent)."""
    return record_grid(
        lambda coefficient, seed, settings: zloss_run(coefficient, seed=seed, settings=settings),
        ZLOSS_SETTINGS,
        grid={"coefficients": coefficients},
        seeds=seeds,
        max_steps=max_steps,
        describe=lambda run: (
            f"z_loss_coefficient={run['z_loss_coefficient']:g} seed={run['seed']} log Z "
            f"{run['log_z'][0]:.2f} -> {run['log_z'][-1]:.2f}, max |logit| "
            f"{run['max_abs_logit'][-1]:.1f}, held-out loss {run['heldout_loss']:.3f}"
        ),
        log=log,
    )


ZLOSS_FILE = "runs.json"  # in lmlessons/data/zloss/, made by python -m tools.zloss_runs
ZLOSS_COMMAND = "OMP_NUM_THREADS=1 python -m tools.zloss_runs --out lmlessons/data/zloss"
#: The top-level keys of a z-loss recording, and the keys of each of its runs.
ZLOSS_KEYS = ("settings", "seconds", "runs")
ZLOSS_RUN_KEYS = (
    "z_loss_coefficient",
    "seed",
    "step",
    "lm_loss",
    "log_z",
    "max_abs_logit",
    "heldout_loss",
)


def recorded_zloss_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The record of ``python -m tools.zloss_runs`` (``data/zloss/runs.json``, or the same file
    name in ``directory``), its top level and every run checked for their keys
    (:data:`ZLOSS_KEYS`, :data:`ZLOSS_RUN_KEYS`): a :class:`ValueError` names a missing one."""
    return load_record(
        ZLOSS_FILE,
        folder="zloss",
        keys=ZLOSS_KEYS,
        command=ZLOSS_COMMAND,
        directory=directory,
        run_keys=ZLOSS_RUN_KEYS,
    )


def zloss_summary(data: Mapping[str, Any], *, window: int = 3) -> dict[float, dict[str, Any]]:
    """Per coefficient, over its seeds: ``log_z_start`` (each seed's first logged ``log Z``),
    ``log_z_min`` (its lowest), ``log_z_end`` (its mean over the last ``window`` logged steps),
    ``log_z_rise`` (end - start),
    ``max_abs_logit_end``, ``lm_loss_end`` and ``heldout_loss``, each ``{"mean", "std",
    "per_seed"}`` (:func:`lmlessons.course.records.seed_summary`), and ``seeds``."""
    window = check_int("window", window, minimum=1)
    groups: dict[float, list[Mapping[str, Any]]] = {}
    for run in data["runs"]:
        groups.setdefault(float(run["z_loss_coefficient"]), []).append(run)
    out: dict[float, dict[str, Any]] = {}
    for coefficient, runs in groups.items():
        values = {
            "log_z_start": [r["log_z"][0] for r in runs],
            "log_z_min": [min(r["log_z"]) for r in runs],
            "log_z_end": [sum(r["log_z"][-window:]) / len(r["log_z"][-window:]) for r in runs],
            "max_abs_logit_end": [r["max_abs_logit"][-1] for r in runs],
            "lm_loss_end": [
                sum(r["lm_loss"][-window:]) / len(r["lm_loss"][-window:]) for r in runs
            ],
            "heldout_loss": [r["heldout_loss"] for r in runs],
        }
        values["log_z_rise"] = [e - s for s, e in zip(values["log_z_start"], values["log_z_end"])]
        out[coefficient] = {name: seed_summary(v) for name, v in values.items()}
        out[coefficient]["seeds"] = [r["seed"] for r in runs]
    return out


def zloss_figure(data: Mapping[str, Any]) -> Any:
    """The recorded runs step by step: mean ``log Z`` (left), the largest ``|logit|`` (middle) and
    the LM loss (right), one line per run, one colour per coefficient."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 2.9), dpi=100)
    axes = fig.subplots(1, 3)
    coefficients = sorted({float(r["z_loss_coefficient"]) for r in data["runs"]})
    titles = {"log_z": "mean log Z", "max_abs_logit": "largest |logit|", "lm_loss": "LM loss"}
    for ax, (metric, title) in zip(axes, titles.items()):
        for run in data["runs"]:
            i = coefficients.index(float(run["z_loss_coefficient"]))
            first = run["seed"] == min(r["seed"] for r in data["runs"])
            label = f"z-loss {run['z_loss_coefficient']:g}" if first else None
            ax.plot(run["step"], run[metric], color=f"C{i}", lw=1.2, alpha=0.8, label=label)
        ax.set_xlabel("optimizer step")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig
