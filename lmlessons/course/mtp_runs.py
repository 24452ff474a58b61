"""The MTP lesson's recorded runs: does predicting more than one token help a tiny model?

Gloeckle et al. (arXiv:2404.19737, "Better & Faster Large Language Models via Multi-token
Prediction") find that multi-token prediction helps large models and *hurts* small ones. The test
here, on the course GPT-2: :class:`MTPModel` with ``D`` output depths, trained with
:func:`lmlessons.mtp.mtp_loss` (the plain mean of the per-depth losses, as Gloeckle et al.'s sum
up to a constant factor), and scored on what every model here does, the held-out *next-token*
loss of depth 1, at the same number of steps on the same batches for ``D = 1, 2, 3``:

* :class:`MTPModel`: the course GPT-2 (:func:`lmlessons.course.models.tiny_gpt2`) is the trunk
  and the depth-1 head, unchanged (so ``D = 1`` is exactly the course model); each depth
  ``d > 1`` adds one GPT-2 block on the trunk's final hidden states, its own LayerNorm and the
  model's (tied) unembedding: Gloeckle et al.'s parallel heads, one transformer layer each, with
  a shared unembedding;
* :func:`mtp_run`: one run: per logged step each depth's training loss, and the held-out loss of
  each depth at the end (depth 1's is the next-token loss compared);
* :func:`record_mtp_runs` (``python -m tools.mtp_runs``), :func:`recorded_mtp_runs`,
  :func:`mtp_summary` (over seeds, :func:`lmlessons.course.records.seed_summary`, and the paired
  per-seed difference from ``D = 1``) and :func:`mtp_figure`.

Two departures from Gloeckle et al., kept so that ``D = 1`` is the course model itself: their
next-token head is a transformer layer of its own on a trunk one layer shorter, where here it is
the course model's last layer, shared with the extra depths; and the extra blocks add
parameters (one GPT-2 block each) that only the extra depths' losses train directly.

What the shipped runs show (150 steps, 3 seeds; ``tests/test_mtp_runs.py`` checks it in every
seed): each extra depth *raised* the held-out next-token loss, D = 2 by 0.20 to 0.29 over D = 1
with the same seed (mean 0.23, spread 0.05), D = 3 by 0.33 to 0.39: at this size and this
length of training, MTP hurt, as Gloeckle et al. report for small models. Not tested: longer
training, DeepSeek-V3's weighting (``mtp_weight``, which keeps depth 1's weight at 1 where the
plain mean gives it ``1 / D``), or larger models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import check_int
from lmlessons.course.models import tiny_gpt2
from lmlessons.course.records import Recording, record_grid, seed_summary
from lmlessons.course.tokenizer import load_tokenizer
from lmlessons.course.training import LossFn, train_steps
from lmlessons.course.zloss_runs import heldout_batches, heldout_loss, training_batches
from lmlessons.mtp import mtp_loss, mtp_losses, mtp_num_items

__all__ = [
    "MTP_SETTINGS",
    "MTP_DEPTHS",
    "MTPModel",
    "mtp_model",
    "heldout_depth_losses",
    "mtp_run",
    "record_mtp_runs",
    "MTP_RECORDING",
    "recorded_mtp_runs",
    "mtp_summary",
    "mtp_figure",
]

#: The numbers of depths compared: next-token only, and one or two extra depths.
MTP_DEPTHS = (1, 2, 3)

#: The settings of the recorded runs: the course's learning rate (2e-3) and weight decay (0.01),
#: 16 sequences of at most 64 tokens a step.
MTP_SETTINGS: dict[str, Any] = {
    "learning_rate": 2e-3,
    "weight_decay": 0.01,
    "warmup_steps": 20,
    "max_grad_norm": 1.0,
    "batch_size": 16,
    "max_length": 64,
    "max_steps": 150,
    "log_every": 10,
}


class MTPModel(torch.nn.Module):
    """A causal LM with ``num_depths`` output depths; ``forward`` returns their logits, depth 1
    first, each ``(B, T, V)``: what :func:`lmlessons.mtp.mtp_loss` takes.

    ``lm`` (a ``GPT2LMHeadModel``) is the trunk and depth 1: ``logits[0]`` is ``lm``'s own
    logits. Depth ``d > 1``: ``lm.lm_head(LayerNorm(GPT2Block(h)))`` with ``h`` the trunk's final
    hidden states (after its ``ln_f``), the block causal like the trunk's."""

    def __init__(self, lm: Any, num_depths: int, *, seed: int = 0) -> None:
        super().__init__()
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block

        num_depths = check_int("num_depths", num_depths, minimum=1)
        seed = check_int("seed", seed)
        self.lm = lm
        hidden = lm.config.hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.blocks = torch.nn.ModuleList(GPT2Block(lm.config) for _ in range(num_depths - 1))
        self.norms = torch.nn.ModuleList(
            torch.nn.LayerNorm(hidden, eps=lm.config.layer_norm_epsilon)
            for _ in range(num_depths - 1)
        )

    @property
    def num_depths(self) -> int:
        return len(self.blocks) + 1

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        h = self.lm.transformer(input_ids=input_ids, attention_mask=attention_mask)[0]  # (B, T, H)
        logits = [self.lm.lm_head(h)]  # depth 1: (B, T, V)
        t = input_ids.shape[-1]
        future = torch.ones(t, t, dtype=torch.bool, device=h.device).triu(1)  # (T, T) keys > query
        causal = torch.zeros(t, t, dtype=h.dtype, device=h.device)  # (T, T)
        causal = causal.masked_fill(future, torch.finfo(h.dtype).min)[None, None]  # (1, 1, T, T)
        for block, norm in zip(self.blocks, self.norms):
            logits.append(self.lm.lm_head(norm(block(h, attention_mask=causal))))  # (B, T, V)
        return logits


def mtp_model(num_depths: int, *, seed: int = 0, tokenizer: Any = None, **config: Any) -> MTPModel:
    """:class:`MTPModel` on the course GPT-2 ``tiny_gpt2(tokenizer, seed=seed, **config)``, its
    extra blocks initialised from ``seed`` too (the trunk is the same for every ``num_depths``)."""
    tok = load_tokenizer() if tokenizer is None else tokenizer
    return MTPModel(tiny_gpt2(tok, seed=seed, **config), num_depths, seed=seed)


def _mtp_fn() -> LossFn:
    """The loss of the MTP runs: :func:`lmlessons.mtp.mtp_loss`, logging each depth's loss."""

    def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        logits = model(batch["input_ids"], batch["attention_mask"])  # D x (B, T, V)
        losses = mtp_losses(logits, batch["labels"])  # (D,)
        loss = mtp_loss(logits, batch["labels"])  # () their mean
        return loss, {f"loss_depth_{d}": float(v) for d, v in enumerate(losses.tolist(), start=1)}

    return loss_fn


@torch.no_grad()
def heldout_depth_losses(
    model: MTPModel, batches: Sequence[dict[str, torch.Tensor]]
) -> list[float]:
    """Each depth's held-out loss over ``batches``, token-weighted: the per-depth losses with
    ``num_items_in_batch`` the target count of each depth over all ``batches``, summed."""
    depths = model.num_depths
    counts = sum(mtp_num_items(b["labels"], depths) for b in batches)  # (D,)
    if not isinstance(counts, torch.Tensor) or bool((counts == 0).any()):
        raise ValueError("batches must hold a target for every depth")
    model.eval()
    total = torch.zeros(depths)
    for b in batches:
        logits = model(b["input_ids"], b["attention_mask"])  # D x (B, T, V)
        total += mtp_losses(logits, b["labels"], num_items_in_batch=counts)  # (D,)
    return [float(v) for v in total]


def mtp_run(
    num_depths: int,
    *,
    seed: int,
    settings: Mapping[str, Any] | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One recorded run: :func:`mtp_model` (``num_depths``, ``seed``) trained with ``mtp_loss``
    by :func:`lmlessons.course.training.train_steps` with ``settings`` (default
    :data:`MTP_SETTINGS`), the batches' order from ``seed``. Returns ``{"num_depths", "seed",
    "step", "loss_depth_1", ..., "loss_depth_D": [one per logged step], "heldout_next_token_loss":
    depth 1's held-out loss (evaluate's clm_loss), "heldout_depth_losses": [one per depth]}``."""
    seed = check_int("seed", seed, minimum=0)
    settings = dict(MTP_SETTINGS if settings is None else settings)
    tok = load_tokenizer()
    model = mtp_model(num_depths, seed=seed, tokenizer=tok, **dict(model_config or {}))
    logged = train_steps(model, training_batches(tok, settings, seed), _mtp_fn(), settings)
    held_out = heldout_batches(tok, settings)
    return {
        "num_depths": model.num_depths,
        "seed": seed,
        **logged,
        "heldout_next_token_loss": heldout_loss(model.lm, held_out),
        "heldout_depth_losses": heldout_depth_losses(model, held_out),
    }


def record_mtp_runs(
    *,
    seeds: Sequence[int],
    max_steps: int | None = None,
    depths: Sequence[int] = MTP_DEPTHS,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record :func:`recorded_mtp_runs` reads: ``settings`` (:data:`MTP_SETTINGS` with
    ``max_steps``, ``seeds`` and ``depths``), ``seconds`` (the recording's wall time) and
    ``runs``: :func:`mtp_run` for every number of depths and seed, floats to 4 decimals.
    ``log``: called with one line per run as it ends (None: silent)."""
    return record_grid(
        lambda num_depths, seed, settings: mtp_run(num_depths, seed=seed, settings=settings),
        MTP_SETTINGS,
        grid={"depths": depths},
        seeds=seeds,
        max_steps=max_steps,
        describe=lambda run: (
            f"D={run['num_depths']} seed={run['seed']} depth-1 training loss "
            f"{run['loss_depth_1'][-1]:.3f}, held-out next-token loss "
            f"{run['heldout_next_token_loss']:.4f}, per depth {run['heldout_depth_losses']}"
        ),
        log=log,
    )


#: Lesson 15's MTP recording (``data/mtp/runs.json``), made by ``python -m tools.mtp_runs``.
MTP_RECORDING = Recording(
    "mtp",
    "mtp_runs",
    ("settings", "seconds", "runs"),
    run_keys=(
        "num_depths",
        "seed",
        "step",
        "loss_depth_1",
        "heldout_next_token_loss",
        "heldout_depth_losses",
    ),
)


def recorded_mtp_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The record of ``python -m tools.mtp_runs`` (``data/mtp/runs.json``, or the same file name
    in ``directory``), its top level and every run checked for their keys
    (:data:`MTP_RECORDING`): a :class:`ValueError` names a missing one."""
    return MTP_RECORDING.load(directory)


def mtp_summary(data: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """Per number of depths ``D``, over its seeds: ``heldout_next_token_loss`` and, when the
    record has ``D = 1`` runs of the same seeds, ``minus_d1`` (each seed's held-out next-token
    loss minus that of ``D = 1`` with the same seed: > 0 where MTP hurt), each ``{"mean",
    "std", "per_seed"}`` (:func:`lmlessons.course.records.seed_summary`), and ``seeds``."""
    groups: dict[int, dict[int, float]] = {}
    for run in data["runs"]:
        groups.setdefault(int(run["num_depths"]), {})[run["seed"]] = run["heldout_next_token_loss"]
    out: dict[int, dict[str, Any]] = {}
    base = groups.get(1, {})
    for depths, by_seed in sorted(groups.items()):
        seeds = sorted(by_seed)
        values = [by_seed[s] for s in seeds]
        out[depths] = {"seeds": seeds, "heldout_next_token_loss": seed_summary(values)}
        if all(s in base for s in seeds):
            out[depths]["minus_d1"] = seed_summary([by_seed[s] - base[s] for s in seeds])
    return out


def mtp_figure(data: Mapping[str, Any]) -> Any:
    """Left: the depth-1 (next-token) training loss step by step, one line per run, one colour
    per ``D``. Right: each run's held-out next-token loss against ``D`` (dots), the mean over
    seeds per ``D`` (black)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 2.9), dpi=100)
    left, right = fig.subplots(1, 2)
    depths = sorted({int(r["num_depths"]) for r in data["runs"]})
    first_seed = min(r["seed"] for r in data["runs"])
    for run in data["runs"]:
        i, d = depths.index(int(run["num_depths"])), int(run["num_depths"])
        label = f"D = {d}" if run["seed"] == first_seed else None
        left.plot(run["step"], run["loss_depth_1"], color=f"C{i}", lw=1.2, alpha=0.8, label=label)
        right.plot([d], [run["heldout_next_token_loss"]], "o", color=f"C{i}", alpha=0.8)
    summary = mtp_summary(data)
    means = [summary[d]["heldout_next_token_loss"]["mean"] for d in depths]
    right.plot(depths, means, "-", color="black", lw=1.5, label="mean over seeds")
    left.set(xlabel="optimizer step", title="next-token (depth 1) training loss")
    right.set(xlabel="D (output depths)", title="held-out next-token loss", xticks=depths)
    for ax in (left, right):
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig
