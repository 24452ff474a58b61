"""Router losses, lesson "keeping experts busy": a tiny Mixtral trained with each way of balancing.

The course's :func:`lmlessons.course.models.tiny_mixtral` (4 experts, each token routed to 2)
trained on the course corpus's causal-LM batches (:func:`lmlessons.course.batches.clm_batches`)
with the same seeds and steps for each method of :data:`METHODS`:

* ``"none"``: no balancing (``router_aux_loss_coef = 0``; the router logits are still returned,
  so the aux loss is measured, never added);
* ``"aux_1e-3"`` and ``"aux_1e-2"``: transformers' Mixtral loss added inside the model,
  ``loss + router_aux_loss_coef * aux_loss`` (1e-3 is ``MixtralConfig``'s default);
* ``"bias_1e-3"`` and ``"bias_1e-2"``: DeepSeek-V3's balancing without a loss: each router
  picks its experts on the softmax scores plus a per-expert bias (:class:`BiasedRouter`,
  :func:`lmlessons.moe.select_experts`) while the gate weights stay the unbiased scores, and
  after every optimizer step the bias moves by :func:`lmlessons.moe.update_expert_bias` from
  that step's expert counts, at DeepSeek-V3's speed (1e-3) and ten times faster.

Every run is measured at its logged steps on one fixed held-out batch (validation documents):
each layer's expert counts (:func:`lmlessons.moe.expert_counts`, padding not counted), their
spread (:func:`lmlessons.moe.load_spread`: coefficient of variation and the busiest expert's
count over the mean) and the held-out LM loss (transformers' mean next-token cross-entropy,
without the aux term).

``python -m tools.moe_runs`` records every method and seed into ``data/moe/runs.json``
(:func:`record_moe_runs`); :func:`recorded_moe_runs` loads that record, :func:`method_summary`
gives each method's mean and spread over the seeds (:func:`lmlessons.course.records.seed_spread`),
:func:`load_figure` and :func:`expert_load_figure` draw it. :func:`route_sentence` shows where
one sentence's tokens go.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import check_int, check_model
from lmlessons.course.models import captured_outputs
from lmlessons.course.records import Recording, check_record, check_runs, seed_spread
from lmlessons.moe import (
    DEEPSEEK_BIAS_UPDATE_SPEED,
    expert_counts,
    load_spread,
    select_experts,
    update_expert_bias,
)

__all__ = [
    "MOE_SETTINGS",
    "moe_sizes",
    "METHODS",
    "BiasedRouter",
    "routers",
    "use_biased_routers",
    "record_routing",
    "heldout_batch",
    "measure_routing",
    "moe_run",
    "train_moe",
    "MOE_CHECKPOINTS",
    "record_moe_runs",
    "MOE_RECORDING",
    "MOE_RUN_KEYS",
    "recorded_moe_runs",
    "check_moe_record",
    "run_final",
    "method_summary",
    "load_figure",
    "expert_load_figure",
    "route_sentence",
    "routing_margins",
]

#: The settings of the recorded runs: the model's size (``tiny_mixtral_config``'s names), AdamW's
#: learning rate, the batches (``clm_batches``: 16 sequences of at most 64 tokens a step), how
#: often the held-out batch is measured, and that batch (the first ``heldout_sequences``
#: validation sequences in the order of ``clm_batches`` seeded with ``heldout_seed``).
MOE_SETTINGS: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "learning_rate": 3e-3,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "batch_size": 16,
    "max_length": 64,
    "max_steps": 200,
    "log_every": 20,
    "heldout_sequences": 64,
    "heldout_seed": 0,
}

#: Each balancing method: the aux loss's coefficient (added inside the model) and the bias
#: update speed (0: no bias). ``"bias_1e-3"`` uses DeepSeek-V3's speed; in 200 steps it moves a
#: bias by 0.2 at most, so ``"bias_1e-2"`` shows the same rule given room to act in so short a run.
METHODS: dict[str, dict[str, float]] = {
    "none": {"router_aux_loss_coef": 0.0, "bias_update_speed": 0.0},
    "aux_1e-3": {"router_aux_loss_coef": 1e-3, "bias_update_speed": 0.0},
    "aux_1e-2": {"router_aux_loss_coef": 1e-2, "bias_update_speed": 0.0},
    "bias_1e-3": {"router_aux_loss_coef": 0.0, "bias_update_speed": DEEPSEEK_BIAS_UPDATE_SPEED},
    "bias_1e-2": {"router_aux_loss_coef": 0.0, "bias_update_speed": 1e-2},
}

#: The shipped MoE checkpoints (``lmlessons.load_checkpoint(name)``, made by ``python -m
#: tools.pretrain moe`` and ``moe-bias``): the model of :func:`train_moe` with this method,
#: seed 0 and :data:`MOE_SETTINGS` (200 steps), the training of the record's run of seed 0 (made
#: on another CPU: float sums in another order can send a token elsewhere and the runs drift).
MOE_CHECKPOINTS: dict[str, str] = {"moe": "none", "moe-bias": "bias_1e-2"}

_SIZE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "num_local_experts",
    "num_experts_per_tok",
)


def moe_sizes(settings: Mapping[str, Any] = MOE_SETTINGS) -> dict[str, int]:
    """The model sizes of ``settings`` (:data:`MOE_SETTINGS`), as
    :func:`lmlessons.course.models.tiny_mixtral` takes them: hidden size, layers, heads, experts
    and experts per token."""
    return {key: settings[key] for key in _SIZE_KEYS}


# --- the biased router and where the tokens go ------------------------------------------------


def _router_class() -> type[torch.nn.Module]:
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    return MixtralTopKRouter


class BiasedRouter(torch.nn.Module):
    """Mixtral's router with DeepSeek-V3's bias: the experts of each token are the top-k of
    ``softmax(logits) + expert_bias`` (:func:`lmlessons.moe.select_experts`), their gate weights
    the *unbiased* softmax scores of those experts, renormalised to sum to 1 as Mixtral's
    router does. Returns Mixtral's ``(router_logits, weights, indices)``; ``expert_bias`` is a
    buffer (no gradient). Built by :func:`use_biased_routers` (it subclasses transformers'
    ``MixtralTopKRouter`` there, so the model still returns its ``router_logits``)."""

    expert_bias: torch.Tensor
    weight: torch.nn.Parameter
    top_k: int
    hidden_dim: int

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)  # (N, H)
        router_logits = torch.nn.functional.linear(hidden_states, self.weight)  # (N, E)
        scores = router_logits.float().softmax(dim=-1)  # (N, E)
        indices = select_experts(scores, self.top_k, self.expert_bias)  # (N, K): biased choice
        weights = scores.gather(-1, indices)  # (N, K): the unbiased scores
        weights = weights / weights.sum(dim=-1, keepdim=True)  # (N, K), each row sums to 1
        return router_logits, weights, indices


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's routers (``MixtralTopKRouter``, biased or not), in layer order."""
    model = check_model(model)
    found = [m for m in model.modules() if isinstance(m, _router_class())]
    if not found:
        raise ValueError("model must be a Mixtral-style MoE model (no MixtralTopKRouter in it)")
    return found


def use_biased_routers(model: torch.nn.Module) -> list[BiasedRouter]:
    """Turn every router of ``model`` into a :class:`BiasedRouter` in place (same weight, a
    zero ``expert_bias`` buffer) and return them in layer order. Call it before building the
    optimizer or after: the router weights stay the same parameters."""
    biased_class = type("BiasedMixtralRouter", (BiasedRouter, _router_class()), {})
    out: list[Any] = []
    for router in routers(model):
        if not isinstance(router, BiasedRouter):
            router.__class__ = biased_class
            weight: Any = router.weight
            bias = torch.zeros(int(weight.shape[0]), device=weight.device)  # (E,)
            router.register_buffer("expert_bias", bias)
        out.append(router)
    return out


def record_routing(model: torch.nn.Module) -> AbstractContextManager[list[torch.Tensor]]:
    """Within the ``with`` block, every router call of ``model`` appends its chosen experts
    ``(N, K)`` (N = B * T tokens) to the yielded list: after one forward pass, one entry per
    layer in layer order. The experts actually used, the bias included."""
    return captured_outputs(routers(model), lambda output: output[2].detach())  # (N, K)


def _num_experts(model: torch.nn.Module) -> int:
    config: Any = model.config
    return int(config.num_local_experts)


def _layer_counts(
    chosen: Sequence[torch.Tensor], num_experts: int, attention_mask: torch.Tensor
) -> list[torch.Tensor]:
    """Each layer's expert counts ``(E,)`` over the real tokens."""
    return [expert_counts(c, num_experts, attention_mask) for c in chosen]


# --- the runs ---------------------------------------------------------------------------------


def _tokenizer_and_corpus() -> tuple[Any, Any]:
    from lmlessons.course.corpus import load_corpus
    from lmlessons.course.tokenizer import load_tokenizer

    return load_tokenizer(), load_corpus()


def heldout_batch(settings: Mapping[str, Any] = MOE_SETTINGS) -> dict[str, torch.Tensor]:
    """The fixed held-out batch: the first ``heldout_sequences`` validation sequences of
    ``clm_batches`` (``max_length``) seeded with ``heldout_seed``, ``(B, T)`` each."""
    from lmlessons.course.batches import clm_batches

    tok, corpus = _tokenizer_and_corpus()
    batches = clm_batches(
        corpus.validation,
        tok,
        batch_size=settings["heldout_sequences"],
        max_length=settings["max_length"],
        epochs=1,
        generator=torch.Generator().manual_seed(settings["heldout_seed"]),
    )
    return next(batches)


@torch.no_grad()
def measure_routing(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The model on ``batch`` (in eval mode): ``counts`` (per layer, per expert, real tokens
    only), ``cv`` and ``overload`` per layer (:func:`lmlessons.moe.load_spread`) and ``loss``,
    the LM loss alone (transformers' mean next-token cross-entropy over the labels)."""
    was_training = model.training
    model.eval()
    try:
        with record_routing(model) as chosen:
            out = model(**batch, output_router_logits=False)  # the LM loss, no aux term
    finally:
        model.train(was_training)
    counts = _layer_counts(chosen, _num_experts(model), batch["attention_mask"])
    spreads = [load_spread(c) for c in counts]
    return {
        "counts": [[int(v) for v in c.tolist()] for c in counts],
        "cv": [s.cv for s in spreads],
        "overload": [s.max_over_mean for s in spreads],
        "loss": float(out.loss),
    }


def _build(method: str, seed: int, settings: Mapping[str, Any]) -> tuple[Any, Any, list[Any]]:
    """The seeded tiny Mixtral of ``method``, its AdamW, and its biased routers (or [])."""
    from lmlessons.course.models import tiny_mixtral

    tok, _ = _tokenizer_and_corpus()
    model = tiny_mixtral(
        tok,
        seed=seed,
        output_router_logits=True,  # every method returns the router logits (for aux_loss)
        router_aux_loss_coef=METHODS[method]["router_aux_loss_coef"],
        **moe_sizes(settings),
    )
    biased = use_biased_routers(model) if METHODS[method]["bias_update_speed"] > 0 else []
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings["learning_rate"], weight_decay=settings["weight_decay"]
    )
    return model, optimizer, biased


def _step(
    model: Any, optimizer: Any, biased: list[Any], batch: Any, speed: float, clip: float
) -> float:
    """One optimizer step on ``batch``; the biases move by that step's counts. Returns the
    step's aux loss (Mixtral's, measured whatever its coefficient)."""
    with record_routing(model) as chosen:
        out = model(**batch, output_router_logits=True)  # LM loss + coef * aux_loss
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    counts = _layer_counts(chosen, _num_experts(model), batch["attention_mask"])
    for router, layer_counts in zip(biased, counts):
        router.expert_bias = update_expert_bias(router.expert_bias, layer_counts, speed)
    return float(out.aux_loss.detach())


def moe_run(
    method: str, *, seed: int, max_steps: int | None = None, **settings: Any
) -> dict[str, Any]:
    """One recorded run of ``method`` (:data:`METHODS`) with :data:`MOE_SETTINGS` (``settings``
    override them; ``max_steps`` too): the run of :func:`train_moe`, without its model.

    Returns ``{"seed", "steps", "cv", "overload", "heldout_loss", "aux_loss", "final_counts",
    "expert_bias"}``: at step 0 and every ``log_every`` steps (and the last), each layer's
    ``cv`` and ``overload`` on the held-out batch (:func:`measure_routing`), the held-out LM
    loss, and the training step's aux loss (None at step 0); ``final_counts`` the held-out
    counts per layer at the end, ``expert_bias`` each layer's final bias (zeros without)."""
    return train_moe(method, seed=seed, max_steps=max_steps, **settings)[1]


def train_moe(
    method: str, *, seed: int, max_steps: int | None = None, **settings: Any
) -> tuple[Any, dict[str, Any]]:
    """Train the tiny Mixtral of ``method`` (:data:`METHODS`) with :data:`MOE_SETTINGS`
    (``settings`` override them; ``max_steps`` too) and return ``(model, run)``: the trained
    model in eval mode (its routers :class:`BiasedRouter` with their trained bias when the
    method has one) and the run :func:`moe_run` records. The training batches come from
    ``clm_batches`` over the course corpus, seeded with ``seed``, as are the initial weights."""
    from lmlessons.course.batches import clm_batches

    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    seed = check_int("seed", seed, minimum=0)
    unknown = sorted(set(settings) - set(MOE_SETTINGS))
    if unknown:
        raise ValueError(f"settings must be among MOE_SETTINGS' keys, got {unknown}")
    s = {**MOE_SETTINGS, **settings}
    if max_steps is not None:
        s["max_steps"] = check_int("max_steps", max_steps, minimum=1)
    tok, corpus = _tokenizer_and_corpus()
    heldout = heldout_batch(s)
    model, optimizer, biased = _build(method, seed, s)
    batches = clm_batches(
        corpus, tok, batch_size=s["batch_size"], max_length=s["max_length"],
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    run: dict[str, Any] = {"seed": seed, **{k: [] for k in _SERIES}}
    _log(run, 0, measure_routing(model, heldout), None)
    model.train()
    speed = METHODS[method]["bias_update_speed"]
    for step in range(1, s["max_steps"] + 1):
        aux = _step(model, optimizer, biased, next(batches), speed, s["max_grad_norm"])
        if step % s["log_every"] == 0 or step == s["max_steps"]:
            run["final"] = measure_routing(model, heldout)
            _log(run, step, run["final"], aux)
    final = run.pop("final")
    run["final_counts"] = final["counts"]
    zeros = [0.0] * s["num_local_experts"]
    run["expert_bias"] = [[round(float(b), 4) for b in r.expert_bias] for r in biased] or [
        zeros for _ in range(s["num_hidden_layers"])
    ]
    return model.eval(), run


_SERIES = ("steps", "cv", "overload", "heldout_loss", "aux_loss")


def _log(run: dict[str, Any], step: int, measured: Mapping[str, Any], aux: float | None) -> None:
    """Append one logged step to ``run`` (4 decimals)."""
    run["steps"].append(step)
    run["cv"].append([round(v, 4) for v in measured["cv"]])
    run["overload"].append([round(v, 4) for v in measured["overload"]])
    run["heldout_loss"].append(round(measured["loss"], 4))
    run["aux_loss"].append(None if aux is None else round(aux, 4))


def record_moe_runs(
    methods: Sequence[str] = tuple(METHODS),
    *,
    seeds: Sequence[int],
    max_steps: int = MOE_SETTINGS["max_steps"],
    log: Callable[[str], None] | None = print,
    **settings: Any,
) -> dict[str, Any]:
    """The record :func:`recorded_moe_runs` reads: ``settings`` (:data:`MOE_SETTINGS` with
    ``settings``, ``max_steps`` and ``seeds``), ``seconds`` (the recording's wall time) and
    ``methods``: per method its :data:`METHODS` entry and ``runs``, one :func:`moe_run` per
    seed. ``log``: called with one line per run as it ends (None: silent)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods must be among {sorted(METHODS)}, got {unknown}")
    start = time.time()
    recorded: dict[str, Any] = {}
    for method in methods:
        runs = []
        for seed in seeds:
            began = time.time()
            run = moe_run(method, seed=seed, max_steps=max_steps, **settings)
            runs.append(run)
            if log is not None:
                end = run_final(run)
                log(
                    f"{method:9s} seed={seed} cv {sum(run['cv'][0]) / len(run['cv'][0]):.3f} -> "
                    f"{end['cv']:.3f}, overload {end['overload']:.3f}, held-out loss "
                    f"{end['heldout_loss']:.3f} ({time.time() - began:.0f} s)"
                )
        recorded[method] = {**METHODS[method], "runs": runs}
    return {
        "settings": {**MOE_SETTINGS, **settings, "max_steps": max_steps, "seeds": list(seeds)},
        "seconds": round(time.time() - start),
        "methods": recorded,
    }


# --- the record, its summary and its figures --------------------------------------------------

#: Lesson 14's recording (``data/moe/runs.json``), made by ``python -m tools.moe_runs``; its runs
#: are by method (:func:`check_moe_record` checks them).
MOE_RECORDING = Recording("moe", "moe_runs", ("settings", "seconds", "methods"))
#: The keys of every run of a record.
MOE_RUN_KEYS = ("seed", *_SERIES, "final_counts", "expert_bias")


def check_moe_record(record: object, *, name: str = "record") -> dict[str, Any]:
    """``record`` when it has :data:`MOE_RECORDING`'s keys and each method's every run
    :data:`MOE_RUN_KEYS` (:func:`lmlessons.course.records.check_record`, which names the
    missing keys), one logged value per logged step."""
    data = check_record(record, MOE_RECORDING.keys, name=name)
    methods = check_record(data["methods"], (), name=f"{name}['methods']")
    for method, entry in methods.items():
        where = f"{name}['methods'][{method!r}]"
        check_record(entry, ("runs",), name=where)
        for i, run in enumerate(check_runs(entry["runs"], MOE_RUN_KEYS, name=f"{where}['runs']")):
            lengths = {k: len(run[k]) for k in _SERIES}
            if len(set(lengths.values())) != 1:
                raise ValueError(
                    f"{where}['runs'][{i}] must log one value per step in each of {lengths}"
                )
    return data


def recorded_moe_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The record of ``python -m tools.moe_runs`` (``data/moe/runs.json``, or the same file
    name in ``directory``), checked by :func:`check_moe_record`: ``settings``, ``seconds`` and
    ``methods``, by name (:data:`METHODS`), each with its ``runs`` (:func:`moe_run`)."""
    return check_moe_record(MOE_RECORDING.load(directory), name=MOE_RECORDING.file)


def run_final(run: Mapping[str, Any]) -> dict[str, float]:
    """One run's end: ``cv`` the mean over layers of the last logged CV, ``overload`` the
    worst layer's busiest expert over the mean, ``heldout_loss`` the last held-out LM loss."""
    cv, overload = run["cv"][-1], run["overload"][-1]
    return {
        "cv": sum(cv) / len(cv),
        "overload": max(overload),
        "heldout_loss": float(run["heldout_loss"][-1]),
    }


def method_summary(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each method's end over its seeds: for ``cv``, ``overload`` and ``heldout_loss``
    (:func:`run_final`) the ``(mean, spread)`` of :func:`lmlessons.course.records.seed_spread`
    and the per-seed values: ``{method: {"cv": (m, s), ..., "per_seed": {"cv": [...], ...},
    "seeds": [...]}}``."""
    out: dict[str, dict[str, Any]] = {}
    for method, entry in data["methods"].items():
        finals = [run_final(r) for r in entry["runs"]]
        per_seed = {k: [f[k] for f in finals] for k in ("cv", "overload", "heldout_loss")}
        out[method] = {k: seed_spread(v) for k, v in per_seed.items()}
        out[method]["per_seed"] = per_seed
        out[method]["seeds"] = [r["seed"] for r in entry["runs"]]
    return out


def load_figure(data: Mapping[str, Any]) -> Any:
    """Held-out expert load over the steps, one colour per method: the CV (mean over layers,
    left) and the worst layer's overload (right); each seed thin, the seeds' mean thick."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 3.0), dpi=100, layout="constrained")
    axes = fig.subplots(1, 2)
    for i, (method, entry) in enumerate(data["methods"].items()):
        for ax, key, reduce in ((axes[0], "cv", _mean), (axes[1], "overload", max)):
            curves = [[reduce(v) for v in r[key]] for r in entry["runs"]]
            steps = entry["runs"][0]["steps"]
            for curve in curves:
                ax.plot(steps, curve, color=f"C{i}", lw=0.8, alpha=0.4)
            mean = [_mean(column) for column in zip(*curves)]
            style = _STYLES[i % len(_STYLES)]  # a second cue beside the colour
            ax.plot(steps, mean, color=f"C{i}", lw=2.0, ls=style, label=method)
    axes[0].set_title("expert load CV (mean over layers)", fontsize=9)
    axes[1].set_title("busiest expert / mean (worst layer)", fontsize=9)
    axes[1].axhline(1.0, color="gray", lw=0.8)
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig


_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def expert_load_figure(data: Mapping[str, Any], *, seed: int | None = None) -> Any:
    """The held-out load of each expert at the end, one panel per method, a bar per expert and
    layer: its share of the routed tokens (the dashed line: an even share, 1 / E). ``seed``:
    that seed's run (default: the first recorded)."""
    from matplotlib.figure import Figure

    methods = data["methods"]
    fig = Figure(figsize=(2.2 * len(methods), 2.6), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(methods), sharey=True, squeeze=False)[0]
    for ax, (method, entry) in zip(axes, methods.items()):
        runs = [r for r in entry["runs"] if seed is None or r["seed"] == seed]
        if not runs:
            raise ValueError(f"seed {seed} is not recorded for {method!r}")
        counts = torch.tensor(runs[0]["final_counts"], dtype=torch.float64)  # (L, E)
        shares = counts / counts.sum(dim=-1, keepdim=True)  # (L, E)
        num_layers, num_experts = shares.shape
        width = 0.8 / num_layers
        for layer in range(num_layers):
            xs = [e + (layer - (num_layers - 1) / 2) * width for e in range(num_experts)]
            hatch = "//" if layer % 2 else None  # a second cue beside the colour
            ax.bar(
                xs, shares[layer].tolist(), width, color=f"C{layer}", hatch=hatch,
                label=f"layer {layer}",
            )  # fmt: skip
        ax.axhline(1 / num_experts, color="gray", ls="--", lw=0.8)
        ax.set_xticks(range(num_experts))
        ax.set_xlabel("expert")
        ax.set_title(f"{method} (seed {runs[0]['seed']})", fontsize=9)
    axes[0].set_ylabel("share of routed tokens")
    axes[0].legend(fontsize=7)
    return fig


# --- one sentence ------------------------------------------------------------------------------


@torch.no_grad()
def _router_outputs(
    model: torch.nn.Module, tokenizer: Any, text: str
) -> tuple[list[str], list[torch.nn.Module], list[tuple[torch.Tensor, ...]]]:
    """``text`` with its special tokens through ``model`` (eval mode): its tokens, the routers
    in layer order and each router's output ``(logits (T, E), weights (T, K), experts (T, K))``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    model = check_model(model)
    ids = tokenizer(text, return_tensors="pt")["input_ids"]  # (1, T)
    found = routers(model)
    was_training = model.training
    model.eval()
    try:  # each router's (T, E), (T, K), (T, K)
        with captured_outputs(found, lambda out: tuple(o.detach() for o in out)) as outputs:
            model(input_ids=ids)
    finally:
        model.train(was_training)
    return tokenizer.convert_ids_to_tokens(ids[0].tolist()), found, outputs


def route_sentence(model: torch.nn.Module, tokenizer: Any, text: str) -> dict[str, Any]:
    """Where the tokens of ``text`` go: ``{"tokens": [str, ...], "layers": [{"experts": [[e,
    ...] per token], "weights": [[w, ...] per token], "load": [tokens per expert]}, ...]}``,
    one entry per layer. ``text`` is tokenized with the special tokens ([CLS] ... [SEP]); each
    token's ``top_k`` experts are the ones its router chose (the bias included), ``weights``
    their gate weights, so each layer's loads sum to ``top_k`` times the number of tokens."""
    tokens, _, outputs = _router_outputs(model, tokenizer, text)
    num_experts = _num_experts(model)
    layers = [
        {
            "experts": c.tolist(),
            "weights": [[round(float(v), 4) for v in row] for row in w],
            "load": [int(v) for v in expert_counts(c, num_experts).tolist()],
        }
        for _, w, c in outputs
    ]
    return {"tokens": tokens, "layers": layers}


def routing_margins(model: torch.nn.Module, tokenizer: Any, text: str) -> dict[str, float]:
    """How close :func:`route_sentence`'s routing of ``text`` is to changing, over every token
    and layer: ``"choice"``, the smallest gap between a token's k-th and (k+1)-th selection
    score (the softmax scores, plus ``expert_bias`` for a :class:`BiasedRouter`), and
    ``"order"``, the smallest gap between two of its chosen experts' gate weights (the order
    :func:`lmlessons.widgets.moe.routing_table` shows). A gap far above float noise means any
    CPU routes the sentence the same way."""
    _, found, outputs = _router_outputs(model, tokenizer, text)
    choice, order = [], []
    for router, (logits, weights, _) in zip(found, outputs):
        scores = logits.float().softmax(dim=-1)  # (T, E)
        if isinstance(router, BiasedRouter):
            scores = scores + router.expert_bias  # (T, E): what the choice ranks
        k = weights.shape[-1]
        ranked = scores.sort(dim=-1, descending=True).values  # (T, E)
        if k < ranked.shape[-1]:  # with every expert chosen there is no choice to flip
            choice.append((ranked[:, k - 1] - ranked[:, k]).min())
        chosen = weights.sort(dim=-1, descending=True).values  # (T, K)
        order.append((chosen[:, :-1] - chosen[:, 1:]).min())
    return {"choice": float(min(choice, default=math.inf)), "order": float(min(order))}
