"""The z-loss lesson's recorded runs: does ``log Z`` drift in the course GPT-2, at a moderate and
at a very high learning rate, and does a z-loss of 1e-4 hold it?

Wortsman et al. (arXiv:2309.14322) reproduce two instabilities of large transformers in small
ones trained at high learning rates: *attention logit growth* (Section 3.1.1: the pre-softmax
attention scores grow until the attention is nearly one-hot; their fix is qk-layernorm) and
*output logit divergence* (Section 3.1.2: late in long runs the output logits drift very
negative; a z-loss of 1e-4, :func:`lmlessons.zloss.z_loss`, removes it). The experiment here: the
course tiny GPT-2 (:func:`lmlessons.course.models.tiny_gpt2`) on the course corpus's causal-LM
batches (:func:`lmlessons.course.batches.clm_batches`), in the four arms of :data:`ZLOSS_ARMS`
(learning rate 1e-2 and 3e-1, ``z_loss_coefficient`` 0 and 1e-4), over seeds:

* :func:`lmlessons.course.training.train_steps` (the loop for any loss function) runs it,
  which logs what the loss function reports every ``log_every`` steps (the MTP runs use it too);
* :func:`logit_stats`: the mean ``log Z`` over the counted positions and the largest ``|logit|``;
* :func:`captured_qkv`, :func:`attention_scores`, :func:`max_attention_score`: the pre-softmax
  attention scores ``q k^T / sqrt(head_dim)`` of every layer, from a forward hook on each
  block's ``attn.c_attn`` (no second forward pass), and the largest ``|score|`` among the
  positions the attention uses (causal, no padding);
* :func:`zloss_run`: one run: per logged step the LM loss, mean ``log Z``, largest ``|logit|``
  and largest ``|attention score|`` on the training batch, and the held-out LM loss at the end
  (:func:`heldout_loss`);
* :func:`record_zloss_runs`: every arm and seed (``python -m tools.zloss_runs``);
  :func:`merge_zloss_records` joins records made in parts (one per learning rate);
  :func:`recorded_zloss_runs` loads the shipped record, :func:`zloss_summary` summarises each
  arm over its seeds (:func:`lmlessons.course.records.seed_summary`) and :func:`zloss_figure`
  draws ``log Z``, the loss and the attention scores step by step.

What the shipped runs show (300 steps, 3 seeds; ``tests/test_zloss_runs.py`` checks it in every
run): nothing drifts at 1e-2, and at 3e-1 the attention scores grow, not the output logits.
At 1e-2 ``log Z`` starts at ``log V`` (uniform logits), dips about 0.5 below it in the first steps
and climbs back 0.3 to 0.5, never leaving ``log V +- 0.6``, with and without the z-loss. At 3e-1
every run's ``log Z`` jumps 3.0 to 6.1 above ``log V`` within the first 100 steps, at a logged
step where the training loss is above ``log V`` too; the z-loss of 1e-4 does not stop the jumps
(its peaks 3.9 to 4.4 above, against 3.0 to 6.1 without; lower in one seed, higher in two), and
every held-out loss ends above that of the same seed at 1e-2 (6.7 to 11.5 against 5.96 to 6.05).
Meanwhile the largest attention score, 0.2 at step 1, reaches 1.3e3 to 2.4e3 at 1e-2 and 0.9e6
to 2.8e6 at 3e-1, 500 to 1,600 times the same seed's at 1e-2: Wortsman et al.'s attention logit
growth, which a z-loss on the output logits does not touch. Their output logit divergence (log Z
drifting very negative late in long runs) is out of reach of 300 steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import (
    IGNORE_INDEX,
    check_int,
    check_logits_labels,
    check_model,
    check_real,
)
from lmlessons.course.batches import clm_batches
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import captured_outputs, tiny_gpt2
from lmlessons.course.records import Recording, check_record, record_grid, seed_summary
from lmlessons.course.tokenizer import load_tokenizer
from lmlessons.course.training import LossFn, evaluate, train_steps
from lmlessons.losses import clm_loss
from lmlessons.shifting import shift_labels
from lmlessons.zloss import z_loss

__all__ = [
    "ZLOSS_SETTINGS",
    "ZLOSS_COEFFICIENTS",
    "ZLOSS_LEARNING_RATES",
    "ZLOSS_ARMS",
    "check_arm",
    "heldout_batches",
    "training_batches",
    "heldout_loss",
    "logit_stats",
    "captured_qkv",
    "attention_scores",
    "max_attention_score",
    "zloss_run",
    "record_zloss_runs",
    "merge_zloss_records",
    "ZLOSS_RECORDING",
    "recorded_zloss_runs",
    "zloss_summary",
    "zloss_figure",
]

#: The z-loss coefficients compared: none, and PaLM's 1e-4 (the one Wortsman et al. use).
ZLOSS_COEFFICIENTS = (0.0, 1e-4)

#: The learning rates compared. 1e-2, 5x the course's 2e-3, is the highest of 1e-2, 3e-2 and
#: 1e-1 (seed 0, no z-loss, 300 steps) whose loss kept falling; 3e-1 is the top of Wortsman et
#: al.'s sweep (3e-4 to 3e-1), where their small models show both instabilities.
ZLOSS_LEARNING_RATES = (1e-2, 3e-1)

#: The arms of the record: every learning rate with every coefficient, in that order.
ZLOSS_ARMS: tuple[dict[str, float], ...] = tuple(
    {"learning_rate": lr, "z_loss_coefficient": c}
    for lr in ZLOSS_LEARNING_RATES
    for c in ZLOSS_COEFFICIENTS
)

#: The settings every arm shares (each arm brings its learning rate). Weight decay is 0: it
#: pulls the weights, and so the logits, towards 0 on its own.
ZLOSS_SETTINGS: dict[str, Any] = {
    "weight_decay": 0.0,
    "warmup_steps": 20,
    "max_grad_norm": 1.0,
    "batch_size": 16,
    "max_length": 64,
    "max_steps": 300,
    "log_every": 10,
}


def check_arm(arm: object) -> dict[str, float]:
    """``arm`` as ``{"learning_rate": > 0, "z_loss_coefficient": >= 0}`` (floats): a
    :class:`TypeError` when it is no mapping, a :class:`ValueError` naming a missing or extra key
    or a bad value."""
    if not isinstance(arm, Mapping):
        raise TypeError(f"arm must be a mapping, got {type(arm).__name__}")
    if set(arm) != {"learning_rate", "z_loss_coefficient"}:
        raise ValueError(
            f"arm must hold exactly learning_rate and z_loss_coefficient, got {sorted(arm)}"
        )
    return {
        "learning_rate": check_real("learning_rate", arm["learning_rate"], positive=True),
        "z_loss_coefficient": check_real("z_loss_coefficient", arm["z_loss_coefficient"]),
    }


def training_batches(
    tokenizer: Any, settings: Mapping[str, Any], seed: int
) -> Iterator[dict[str, torch.Tensor]]:
    """The course corpus's training documents as endless causal-LM batches of ``settings``'
    ``batch_size`` and ``max_length``, in an order drawn from ``seed``: a run's batches."""
    return clm_batches(
        load_corpus(),
        tokenizer,
        batch_size=settings["batch_size"],
        max_length=settings["max_length"],
        generator=torch.Generator().manual_seed(seed),
    )


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


def captured_qkv(model: torch.nn.Module) -> AbstractContextManager[list[torch.Tensor]]:
    """Within the ``with`` block, every call of a GPT-2 block's ``attn.c_attn`` in ``model``
    appends its output, the queries, keys and values side by side ``(B, T, 3 * n_embd)``
    (detached), to the yielded list: after one forward pass, one entry per layer in layer
    order (:func:`lmlessons.course.models.captured_outputs`)."""
    model = check_model(model)
    blocks = getattr(getattr(model, "transformer", None), "h", None)
    if blocks is None:
        raise TypeError(f"model must be a GPT-2 model (.transformer.h), got {type(model).__name__}")
    return captured_outputs([block.attn.c_attn for block in blocks], torch.Tensor.detach)


@torch.no_grad()
def attention_scores(
    qkv: torch.Tensor, attention_mask: torch.Tensor, *, num_heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-softmax attention scores of one GPT-2 layer from its ``c_attn`` output ``qkv``
    ``(B, T, 3C)``: ``(scores, used)``, ``scores = q k^T / sqrt(head_dim)`` ``(B, H, T, T)``
    (float32) with ``-inf`` where query ``t`` may not look at key ``s`` (``s > t``, or ``s`` is
    padding), and ``used`` ``(B, 1, T, T)``, the pairs the attention uses: ``s <= t``, both real
    tokens (``attention_mask`` ``(B, T)``, 1 on real tokens)."""
    num_heads = check_int("num_heads", num_heads, minimum=1)
    if not isinstance(qkv, torch.Tensor) or qkv.ndim != 3 or qkv.shape[-1] % (3 * num_heads):
        raise ValueError("qkv must be a (B, T, 3 * n_embd) tensor, n_embd a multiple of num_heads")
    batch, length, width = qkv.shape
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != (batch, length):
        raise ValueError(f"attention_mask must be a ({batch}, {length}) tensor")
    head_dim = width // 3 // num_heads
    q, k, _ = qkv.float().split(width // 3, dim=-1)  # 3 x (B, T, C)
    q = q.view(batch, length, num_heads, head_dim).transpose(1, 2)  # (B, H, T, d)
    k = k.view(batch, length, num_heads, head_dim).transpose(1, 2)  # (B, H, T, d)
    scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)  # (B, H, T, T)
    real = attention_mask.bool()  # (B, T)
    causal = torch.ones(length, length, dtype=torch.bool, device=qkv.device).tril()  # (T, T)
    visible = causal & real[:, None, None, :]  # (B, 1, T, T): the keys each query may see
    used = visible & real[:, None, :, None]  # (B, 1, T, T): and the query is a real token
    return scores.masked_fill(~visible, float("-inf")), used


def max_attention_score(
    qkv_outputs: Sequence[torch.Tensor], attention_mask: torch.Tensor, *, num_heads: int
) -> float:
    """The largest ``|score|`` of :func:`attention_scores` over every layer's ``c_attn`` output
    in ``qkv_outputs`` (:func:`captured_qkv`), every head and every pair the attention uses."""
    if not qkv_outputs:
        raise ValueError("qkv_outputs must hold at least one layer's c_attn output")
    largest = 0.0
    for qkv in qkv_outputs:
        scores, used = attention_scores(qkv, attention_mask, num_heads=num_heads)
        kept = scores[used.expand_as(scores)]  # (N,): the scores the softmax weighs
        largest = max(largest, float(kept.abs().max())) if kept.numel() else largest
    return largest


def _zloss_fn(z_loss_coefficient: float) -> LossFn:
    """The loss of the z-loss runs: ``clm_loss + z_loss``, logging the LM loss, the logits and
    the largest attention score of the batch."""

    def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        with captured_qkv(model) as qkv:
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        logits = out.logits  # (B, T, V)
        lm = clm_loss(logits, batch["labels"])  # (B, T, V) -> ()
        loss = lm
        if z_loss_coefficient > 0:
            loss = lm + z_loss(logits, batch["labels"], z_loss_coefficient=z_loss_coefficient)
        config: Any = model.config
        score = max_attention_score(qkv, batch["attention_mask"], num_heads=int(config.n_head))
        logged = {"lm_loss": lm.item(), **logit_stats(logits, batch["labels"])}
        return loss, {**logged, "max_attention_score": score}

    return loss_fn


def zloss_run(
    z_loss_coefficient: float,
    *,
    learning_rate: float,
    seed: int,
    settings: Mapping[str, Any] | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One recorded run: the course GPT-2 (initial weights and batch order from ``seed``) trained
    with ``clm_loss + z_loss(z_loss_coefficient)`` by :func:`train_steps` at ``learning_rate``
    with ``settings`` (default :data:`ZLOSS_SETTINGS`). ``model_config``: keywords for
    ``tiny_gpt2`` (tests make it smaller). Returns ``{"learning_rate", "z_loss_coefficient",
    "seed", "step", "lm_loss", "log_z", "max_abs_logit", "max_attention_score": [one value per
    logged step], "heldout_loss": float}``."""
    arm = check_arm({"learning_rate": learning_rate, "z_loss_coefficient": z_loss_coefficient})
    seed = check_int("seed", seed, minimum=0)
    used = {**(ZLOSS_SETTINGS if settings is None else settings), **arm}
    tok = load_tokenizer()
    model = tiny_gpt2(tok, seed=seed, **dict(model_config or {}))
    batches = training_batches(tok, used, seed)
    logged = train_steps(model, batches, _zloss_fn(arm["z_loss_coefficient"]), used)
    held_out = heldout_loss(model, heldout_batches(tok, used))
    return {**arm, "seed": seed, **logged, "heldout_loss": held_out}


def _describe(run: Mapping[str, Any]) -> str:
    """One line for the log of a recording: the arm, the seed and what the run ended with."""
    return (
        f"learning_rate={run['learning_rate']:g} z_loss_coefficient={run['z_loss_coefficient']:g} "
        f"seed={run['seed']}: log Z {run['log_z'][0]:.2f} -> peak {max(run['log_z']):.2f} -> "
        f"{run['log_z'][-1]:.2f}, max |logit| {max(run['max_abs_logit']):.1f}, max attention "
        f"score {max(run['max_attention_score']):.3g}, held-out loss {run['heldout_loss']:.3f}"
    )


def record_zloss_runs(
    *,
    seeds: Sequence[int],
    max_steps: int | None = None,
    arms: Sequence[Mapping[str, float]] = ZLOSS_ARMS,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record :func:`recorded_zloss_runs` reads: ``settings`` (:data:`ZLOSS_SETTINGS` with
    ``max_steps``, ``seeds`` and ``arms``), ``seconds`` (the recording's wall time) and ``runs``:
    :func:`zloss_run` for every arm (:func:`check_arm`) and seed, floats to 4 decimals. ``log``:
    called with one line per run as it ends (None: silent)."""
    if isinstance(arms, Mapping) or not isinstance(arms, Sequence) or not arms:
        raise TypeError("arms must be a non-empty sequence of arms (dicts)")
    checked = [check_arm(arm) for arm in arms]
    return record_grid(
        lambda arm, seed, settings: zloss_run(
            arm["z_loss_coefficient"],
            learning_rate=arm["learning_rate"],
            seed=seed,
            settings=settings,
        ),
        ZLOSS_SETTINGS,
        grid={"arms": checked},
        seeds=seeds,
        max_steps=max_steps,
        describe=_describe,
        log=log,
    )


def merge_zloss_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One record from records of :func:`record_zloss_runs` made in parts (e.g. one process per
    learning rate) with the same settings and seeds: their arms and runs in the order given,
    ``seconds`` the sum of theirs. A :class:`ValueError` when the settings (arms aside) differ or
    an arm repeats."""
    if isinstance(records, Mapping) or not isinstance(records, Sequence) or not records:
        raise TypeError("records must be a non-empty sequence of z-loss records")
    checked = [
        check_record(r, ZLOSS_RECORDING.keys, name=f"records[{i}]") for i, r in enumerate(records)
    ]
    shared = [{k: v for k, v in r["settings"].items() if k != "arms"} for r in checked]
    if any(s != shared[0] for s in shared):
        raise ValueError("records must share their settings (all but the arms) to be merged")
    arms = [arm for r in checked for arm in r["settings"]["arms"]]
    if len({(a["learning_rate"], a["z_loss_coefficient"]) for a in arms}) != len(arms):
        raise ValueError(f"records must hold different arms, got {arms}")
    return {
        "settings": {**shared[0], "arms": arms},
        "seconds": sum(r["seconds"] for r in checked),
        "runs": [run for r in checked for run in r["runs"]],
    }


#: Lesson 15's z-loss recording (``data/zloss/runs.json``), made by ``python -m tools.zloss_runs``.
ZLOSS_RECORDING = Recording(
    "zloss",
    "zloss_runs",
    ("settings", "seconds", "runs"),
    run_keys=(
        "learning_rate",
        "z_loss_coefficient",
        "seed",
        "step",
        "lm_loss",
        "log_z",
        "max_abs_logit",
        "max_attention_score",
        "heldout_loss",
    ),
)


def recorded_zloss_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The record of ``python -m tools.zloss_runs`` (``data/zloss/runs.json``, or the same file
    name in ``directory``), its top level and every run checked for their keys
    (:data:`ZLOSS_RECORDING`): a :class:`ValueError` names a missing one."""
    return ZLOSS_RECORDING.load(directory)


def _arm(run: Mapping[str, Any]) -> tuple[float, float]:
    """A run's arm as a key: ``(learning_rate, z_loss_coefficient)``."""
    return float(run["learning_rate"]), float(run["z_loss_coefficient"])


def _tail_mean(values: Sequence[float], window: int) -> float:
    """The mean of the last ``window`` values."""
    return sum(values[-window:]) / len(values[-window:])


def zloss_summary(
    data: Mapping[str, Any], *, window: int = 3
) -> dict[tuple[float, float], dict[str, Any]]:
    """Per arm ``(learning_rate, z_loss_coefficient)``, over its seeds: ``log_z_start`` (each
    seed's first logged ``log Z``), ``log_z_min`` and ``log_z_peak`` (its lowest and highest),
    ``log_z_end`` (its mean over the last ``window`` logged steps), ``log_z_rise`` (end - start),
    ``max_abs_logit_peak`` and ``max_attention_score_peak`` (the largest over the logged steps),
    ``lm_loss_end`` (last ``window``) and ``heldout_loss``, each ``{"mean", "std", "per_seed"}``
    (:func:`lmlessons.course.records.seed_summary`), and ``seeds``."""
    window = check_int("window", window, minimum=1)
    groups: dict[tuple[float, float], list[Mapping[str, Any]]] = {}
    for run in data["runs"]:
        groups.setdefault(_arm(run), []).append(run)
    out: dict[tuple[float, float], dict[str, Any]] = {}
    for arm, runs in groups.items():
        values = {
            "log_z_start": [r["log_z"][0] for r in runs],
            "log_z_min": [min(r["log_z"]) for r in runs],
            "log_z_peak": [max(r["log_z"]) for r in runs],
            "log_z_end": [_tail_mean(r["log_z"], window) for r in runs],
            "max_abs_logit_peak": [max(r["max_abs_logit"]) for r in runs],
            "max_attention_score_peak": [max(r["max_attention_score"]) for r in runs],
            "lm_loss_end": [_tail_mean(r["lm_loss"], window) for r in runs],
            "heldout_loss": [r["heldout_loss"] for r in runs],
        }
        values["log_z_rise"] = [e - s for s, e in zip(values["log_z_start"], values["log_z_end"])]
        out[arm] = {name: seed_summary(v) for name, v in values.items()}
        out[arm]["seeds"] = [r["seed"] for r in runs]
    return out


_PANELS = {
    "log_z": "mean log Z",
    "lm_loss": "LM loss (training batch)",
    "max_attention_score": "largest |attention score|",
}


def zloss_figure(data: Mapping[str, Any], *, log_v: float | None = None) -> Any:
    """The recorded runs step by step, one row per learning rate: mean ``log Z`` (with ``log_v``
    as a dashed line when given), the LM loss, and the largest ``|attention score|`` (log
    scale); one line per run, one colour per z-loss coefficient, each column on one y scale."""
    from matplotlib.figure import Figure

    rates = sorted({_arm(r)[0] for r in data["runs"]})
    coefficients = sorted({_arm(r)[1] for r in data["runs"]})
    first_seed = min(r["seed"] for r in data["runs"])
    fig = Figure(figsize=(10.5, 2.6 * len(rates) + 0.4), dpi=100, layout="constrained")
    axes = fig.subplots(len(rates), len(_PANELS), sharey="col", squeeze=False)
    for run in data["runs"]:
        lr, coefficient = _arm(run)
        row, colour = rates.index(lr), f"C{coefficients.index(coefficient)}"
        label = f"z-loss {coefficient:g}" if run["seed"] == first_seed else None
        for ax, metric in zip(axes[row], _PANELS):
            ax.plot(run["step"], run[metric], color=colour, lw=1.1, alpha=0.75, label=label)
    for row, lr in enumerate(rates):
        for ax, title in zip(axes[row], _PANELS.values()):
            ax.set_title(f"{title}, learning rate {lr:g}", fontsize=9)
            ax.grid(alpha=0.3)
        if log_v is not None:
            axes[row][0].axhline(log_v, color="0.4", ls="--", lw=1, label="log V")
        axes[row][2].set_yscale("log")
    for ax in axes[-1]:
        ax.set_xlabel("optimizer step")
    axes[0][0].legend(fontsize=7)
    return fig
