"""Tests that pin what mutation testing of Part IV's course layer found unpinned.

``mutmut`` on ``lmlessons.course.moe_runs``, ``zloss_runs`` and ``mtp_runs`` with their fast
tests left mutants alive, and the functions that only the slow recordings reach
(``record_moe_runs``, ``zloss_run``, ``mtp_run``, ``record_*_runs``, the loss functions they
train with, the held-out batches and loss) with no test at all. The survivors change the text
of an error message (the argument or record it names), a bound of a check (seed 0, one step,
a window of 1), a documented default (seed 0, ``window=3``, ``log=print``), what a run is
built from (the tokenizer, the seed, the sizes, the batch size and length, the weight decay,
the held-out order), how a run is logged (4 decimals, step 0, the last step), what the
recording helpers hand to a run and log, and the styling of the figures. Each test below
compares with a hand-written expectation, a plain computation or the message the source's
f-string writes, and fails on those mutants. Tiny models, fake runs where a run is only
wired, at most three training steps.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from _exact import gen, raises_exactly, same_tensors
from _tiny import SMALL_GPT2
from matplotlib.colors import to_hex
from matplotlib.layout_engine import ConstrainedLayoutEngine

from lmlessons.course import batches as course_batches
from lmlessons.course import moe_runs, mtp_runs, records, zloss_runs
from lmlessons.course.batches import clm_batches
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import tiny_gpt2, tiny_mixtral
from lmlessons.course.moe_runs import (
    METHODS,
    MOE_RECORDING,
    MOE_SETTINGS,
    _build,
    _log,
    _step,
    check_moe_record,
    expert_load_figure,
    heldout_batch,
    load_figure,
    measure_routing,
    moe_run,
    moe_sizes,
    record_moe_runs,
    recorded_moe_runs,
    route_sentence,
    routers,
    routing_margins,
    run_final,
    train_moe,
    use_biased_routers,
)
from lmlessons.course.mtp_runs import (
    MTP_SETTINGS,
    MTPModel,
    _mtp_fn,
    mtp_figure,
    mtp_model,
    mtp_run,
    mtp_summary,
    record_mtp_runs,
)
from lmlessons.course.records import write_record
from lmlessons.course.zloss_runs import (
    ZLOSS_SETTINGS,
    _zloss_fn,
    captured_qkv,
    check_arm,
    heldout_batches,
    heldout_loss,
    logit_stats,
    max_attention_score,
    merge_zloss_records,
    record_zloss_runs,
    zloss_figure,
    zloss_run,
    zloss_summary,
)
from lmlessons.losses import clm_loss
from lmlessons.mtp import mtp_loss, mtp_losses
from lmlessons.zloss import z_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IGNORE = -100
SMALL_MIXTRAL = dict(
    hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32
)
# train_moe's settings for a run of a few milliseconds a step: one layer, 2 x 16 tokens a step,
# a held-out batch of 4 sequences
TINY_MOE: dict[str, Any] = {
    **SMALL_MIXTRAL,
    "num_hidden_layers": 1,
    "batch_size": 2,
    "max_length": 16,
    "heldout_sequences": 4,
}
METHOD_NAMES = "['aux_1e-2', 'aux_1e-3', 'bias_1e-2', 'bias_1e-3', 'none']"


def _clock(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
    """``module.time.time`` reads a clock that moves 2 s a call, from 1000 s."""
    ticks = itertools.count(1000.0, 2.0)
    monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: next(ticks)))


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """The two modules hold the same tensors under the same names."""
    return same_tensors(a.state_dict(), b.state_dict())


def _text_batch(tok: Any, texts: list[str]) -> dict[str, torch.Tensor]:
    """``texts`` right-padded, with causal-LM labels (-100 on the padding)."""
    enc = tok(texts, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]  # (B, T) each
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, IGNORE)}


def _left_padded_batch(tok: Any) -> dict[str, torch.Tensor]:
    """Two rows of 8 random tokens, row 1 padded on the left (3 tokens), causal-LM labels."""
    ids = torch.randint(5, len(tok), (2, 8), generator=gen(0))  # (B, T)
    mask = torch.ones_like(ids)  # (B, T)
    mask[1, :3] = 0
    ids = ids.masked_fill(mask == 0, tok.pad_token_id)
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, IGNORE)}


def _validation_batches(tok: Any, seed: int, batch_size: int, max_length: int) -> Iterator[dict]:
    """One epoch of ``clm_batches`` over the course corpus's validation documents, seeded."""
    generator = torch.Generator().manual_seed(seed)
    documents = load_corpus().validation
    return clm_batches(
        documents, tok, batch_size=batch_size, max_length=max_length, epochs=1, generator=generator
    )


def _first_corpus_batch(tok: Any, seed: int, batch_size: int, max_length: int) -> dict:
    """The first training batch of ``clm_batches`` over the course corpus seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    batches = clm_batches(
        load_corpus(), tok, batch_size=batch_size, max_length=max_length, generator=generator
    )
    return next(batches)


def _line_style(line: Any) -> tuple[str, float, float | None]:
    return to_hex(line.get_color()), line.get_linewidth(), line.get_alpha()


def _gridded(ax: Any) -> bool:
    return ax.xaxis.get_gridlines()[0].get_alpha() == 0.3


# ===================================================================================== MoE


def test_routers_names_what_a_model_without_routers_lacks():
    """Catches the mutants that drop or change the text of ``routers``' error."""
    raises_exactly(
        ValueError,
        "model must be a Mixtral-style MoE model (no MixtralTopKRouter in it)",
        lambda: routers(torch.nn.Linear(2, 2)),
    )


def test_biased_routers_print_as_such_and_keep_the_bias_on_the_weights_device(tok):
    """Catches the mutants that rename the biased router class (what ``print(model)`` shows)
    or build the bias on the default device instead of the router weight's."""
    model = tiny_mixtral(tok, **SMALL_MIXTRAL).to("meta")
    for router in use_biased_routers(model):
        assert type(router).__name__ == "BiasedMixtralRouter"
        assert router.expert_bias.device.type == "meta" and router.expert_bias.shape == (4,)


def test_build_makes_the_seeded_sized_model_of_the_method_and_its_optimizer(tok, monkeypatch):
    """Catches the mutants of ``_build`` that drop the tokenizer, the seed, the sizes, the
    router logits, the aux coefficient or the weight decay, or bias every method's routers."""
    grown = copy.deepcopy(tok)
    grown.add_tokens(["zzqx"])  # a tokenizer one token larger than the course's
    corpus = load_corpus()
    monkeypatch.setattr(moe_runs, "_tokenizer_and_corpus", lambda: (grown, corpus))
    settings = {**MOE_SETTINGS, **TINY_MOE, "learning_rate": 0.5, "weight_decay": 0.25}
    model, optimizer, biased = _build("aux_1e-2", 1, settings)
    config = model.config
    assert config.vocab_size == len(grown) == len(tok) + 1
    assert (config.hidden_size, config.num_hidden_layers) == (16, 1)
    want = tiny_mixtral(grown, seed=1, **moe_sizes(settings))
    assert torch.equal(model.lm_head.weight, want.lm_head.weight)
    assert config.output_router_logits is True and config.router_aux_loss_coef == 0.01
    assert biased == []
    group = optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (0.5, 0.25)


def test_a_training_step_leaves_no_gradient_behind(tok):
    """Catches ``zero_grad(set_to_none=False/None)`` in ``_step``: the gradients are freed."""
    model = tiny_mixtral(tok, **SMALL_MIXTRAL)
    batch = _text_batch(tok, ["the sea is cold", "the hens lay eggs every day"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _step(model, optimizer, [], batch, 0.01, 1.0)
    assert all(p.grad is None for p in model.parameters())


def test_train_moe_names_what_is_wrong_with_its_arguments():
    """Catches the mutants that change a message of ``train_moe``'s checks or their bounds;
    each call is tiny, so a mutant that lets it through fails fast."""
    tiny = {**TINY_MOE, "max_steps": 1}
    raises_exactly(
        ValueError,
        f"method must be one of {METHOD_NAMES}, got 'x'",
        lambda: train_moe("x", seed=0, **tiny),
    )
    raises_exactly(
        ValueError, "seed must be >= 0, got -1", lambda: train_moe("none", seed=-1, **tiny)
    )
    raises_exactly(
        TypeError, "seed must be an int, got str", lambda: train_moe("none", seed="0", **tiny)
    )
    raises_exactly(
        ValueError,
        "settings must be among MOE_SETTINGS' keys, got ['learning_rat']",
        lambda: train_moe("none", seed=0, learning_rat=1e-3, **tiny),
    )
    raises_exactly(
        ValueError,
        "max_steps must be >= 1, got 0",
        lambda: train_moe("none", seed=0, max_steps=0, **TINY_MOE),
    )
    raises_exactly(
        TypeError,
        "max_steps must be an int, got float",
        lambda: train_moe("none", seed=0, max_steps=1.5, **TINY_MOE),
    )


def test_heldout_batch_is_the_first_validation_batch_of_its_settings(tok):
    """Catches ``heldout_batch`` without the settings' ``max_length`` (the default 64)."""
    settings = {"heldout_sequences": 4, "max_length": 16, "heldout_seed": 1}
    want = _validation_batches(tok, seed=1, batch_size=4, max_length=16)
    assert same_tensors(heldout_batch(settings), next(want))


def test_train_moe_logs_step_0_every_log_every_steps_and_the_last(monkeypatch):
    """Catches the mutants of ``train_moe`` that drop the batch size or length, the seed key,
    the last step, the step's aux loss or the zero bias of an unbiased run, or log other than
    4 decimals; seed 0 is a valid seed."""
    calls: list[dict[str, Any]] = []
    real = course_batches.clm_batches

    def spy(documents: Any, tokenizer: Any, **kwargs: Any) -> Iterator[dict]:
        calls.append(kwargs)
        return real(documents, tokenizer, **kwargs)

    monkeypatch.setattr(course_batches, "clm_batches", spy)
    settings = {**TINY_MOE, "log_every": 2}
    model, run = train_moe("none", seed=0, max_steps=3, **settings)
    training = calls[-1]  # the held-out batch is drawn first
    assert (training["batch_size"], training["max_length"]) == (2, 16)
    assert training["generator"].initial_seed() == 0
    assert run["seed"] == 0 and run["steps"] == [0, 2, 3]
    assert run["aux_loss"][0] is None and all(a > 0 for a in run["aux_loss"][1:])
    assert run["expert_bias"] == [[0.0, 0.0, 0.0, 0.0]]  # one layer, no bias
    measured = measure_routing(model, heldout_batch({**MOE_SETTINGS, **settings}))
    assert run["final_counts"] == measured["counts"]
    assert run["heldout_loss"][-1] == round(measured["loss"], 4)
    logged = [v for key in ("cv", "overload") for step in run[key] for v in step]
    logged += run["heldout_loss"] + run["aux_loss"][1:]
    assert all(v == round(v, 4) for v in logged)


def test_moe_run_of_one_step_rounds_the_final_bias_to_4_decimals(monkeypatch):
    """Catches ``round(b, 5)`` for the recorded bias, ``max_steps`` not handed on by ``moe_run``
    and a minimum of 2 steps: one step at speed 1.23456e-3 moves each bias by that or not."""
    speed = {"router_aux_loss_coef": 0.0, "bias_update_speed": 1.23456e-3}
    monkeypatch.setitem(METHODS, "bias_odd", speed)
    run = moe_run("bias_odd", seed=0, max_steps=1, **TINY_MOE)
    assert run["steps"] == [0, 1]
    values = {b for layer in run["expert_bias"] for b in layer}
    assert values <= {0.0012, -0.0012, 0.0} and values != {0.0}


def test_log_rounds_to_4_decimals_and_keeps_a_missing_aux_loss():
    """Catches the mutants of ``_log`` that round to other digits or drop a logged value."""
    run: dict[str, list[Any]] = {k: [] for k in ("steps", "cv", "overload", "heldout_loss")}
    run["aux_loss"] = []
    measured = {"cv": [0.123456, 0.5], "overload": [1.234567], "loss": 2.345678}
    _log(run, 0, measured, None)
    _log(run, 5, measured, 0.987654)
    assert run == {
        "steps": [0, 5],
        "cv": [[0.1235, 0.5], [0.1235, 0.5]],
        "overload": [[1.2346], [1.2346]],
        "heldout_loss": [2.3457, 2.3457],
        "aux_loss": [None, 0.9877],
    }


def _fake_moe_run(calls: list[tuple]) -> Callable[..., dict[str, Any]]:
    def fake(method: str, *, seed: int, max_steps: int, **settings: Any) -> dict[str, Any]:
        calls.append((method, seed, max_steps, settings))
        return {
            "seed": seed,
            "steps": [0, 5, 10],
            "cv": [[0.2, 0.4], [0.5, 0.5], [0.1, 0.3]],
            "overload": [[1.5, 1.7], [1.0, 1.0], [1.25, 1.5]],
            "heldout_loss": [7.0, 6.0, 5.5],
        }

    return fake


def test_record_moe_runs_hands_each_run_its_settings_and_logs_it(monkeypatch, capsys):
    """Catches the mutants of ``record_moe_runs`` (no test reached it): what each run gets,
    the log line, the record's keys and seconds, the default methods and ``log=print``."""
    calls: list[tuple] = []
    monkeypatch.setattr(moe_runs, "moe_run", _fake_moe_run(calls))
    _clock(monkeypatch, moe_runs)
    lines: list[str] = []
    data = record_moe_runs(
        ["none", "bias_1e-2"], seeds=[3], max_steps=10, log=lines.append, batch_size=2
    )
    assert calls == [("none", 3, 10, {"batch_size": 2}), ("bias_1e-2", 3, 10, {"batch_size": 2})]
    # cv: first logged step's mean over layers -> run_final's; held-out loss the last
    assert lines == [
        "none      seed=3 cv 0.300 -> 0.200, overload 1.500, held-out loss 5.500 (2 s)",
        "bias_1e-2 seed=3 cv 0.300 -> 0.200, overload 1.500, held-out loss 5.500 (2 s)",
    ]
    run = _fake_moe_run([])("none", seed=3, max_steps=10)
    assert data == {
        "settings": {**MOE_SETTINGS, "batch_size": 2, "max_steps": 10, "seeds": [3]},
        "seconds": 10,  # five clock reads of 2 s after the start
        "methods": {
            "none": {**METHODS["none"], "runs": [run]},
            "bias_1e-2": {**METHODS["bias_1e-2"], "runs": [run]},
        },
    }
    record_moe_runs(seeds=[0])  # every method, printed
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(METHODS)
    assert calls[-1][2] == MOE_SETTINGS["max_steps"]
    raises_exactly(
        ValueError,
        f"methods must be among {METHOD_NAMES}, got ['x']",
        lambda: record_moe_runs(["none", "x"], seeds=[0]),
    )


def test_check_moe_record_names_the_record_by_default_and_the_file_when_loaded(tmp_path):
    """Catches the mutants that drop or change the name in ``check_moe_record``'s messages
    (the top-level check included)."""
    raises_exactly(
        ValueError,
        "record lacks the keys ['seconds'] of its kind of recording",
        lambda: check_moe_record({"settings": {}, "methods": {}}),
    )
    raises_exactly(
        ValueError,
        "moe lacks the keys ['seconds'] of its kind of recording",
        lambda: check_moe_record({"settings": {}, "methods": {}}, name="moe"),
    )
    bad = {"settings": {}, "seconds": 1, "methods": []}
    raises_exactly(
        TypeError,
        "record['methods'] must be a JSON object (dict), got list",
        lambda: check_moe_record(bad),
    )
    write_record(bad, tmp_path, MOE_RECORDING.file)
    raises_exactly(
        TypeError,
        "runs.json['methods'] must be a JSON object (dict), got list",
        lambda: recorded_moe_runs(directory=tmp_path),
    )


def test_run_final_takes_the_last_held_out_loss():
    """Catches ``heldout_loss[+1]`` in ``run_final``: three logged losses, the last counts."""
    run = {"cv": [[0.5]], "overload": [[1.5]], "heldout_loss": [7.0, 6.0, 5.0]}
    assert run_final(run)["heldout_loss"] == 5.0


def test_route_sentence_rounds_the_gate_weights_to_4_decimals(tok):
    """Catches ``round(v, 5)`` for ``route_sentence``'s weights."""
    routed = route_sentence(tiny_mixtral(tok, **SMALL_MIXTRAL), tok, "the farmer feeds the hens")
    weights = [w for layer in routed["layers"] for row in layer["weights"] for w in row]
    assert all(w == round(w, 4) for w in weights)


def test_routing_margins_with_every_expert_chosen(tok):
    """Catches the mutants of ``routing_margins`` that measure a choice where every expert is
    chosen (``k <= E``, ``shape[-2]``), lose the ``inf`` default, or compare the first gate
    weight with every other instead of each with the next (3 chosen experts; with seed 4 the
    smallest gap is between the second and third weights, which that mutant never sees)."""
    model = tiny_mixtral(tok, seed=4, num_local_experts=3, num_experts_per_tok=3, **SMALL_MIXTRAL)
    text = "the farmer feeds the hens"
    ids = tok(text, return_tensors="pt")["input_ids"]  # (1, T)
    weights: list[torch.Tensor] = []
    hooks = [r.register_forward_hook(lambda m, a, o: weights.append(o[1])) for r in routers(model)]
    with torch.no_grad():
        model(input_ids=ids)
    for hook in hooks:
        hook.remove()
    gaps = []
    for layer in weights:  # (T, 3) per layer
        for row in layer.tolist():
            w = sorted(row, reverse=True)
            gaps += [w[0] - w[1], w[1] - w[2]]
    margins = routing_margins(model, tok, text)
    assert margins["choice"] == math.inf
    assert margins["order"] == pytest.approx(min(gaps), abs=1e-6)


def _moe_record() -> dict[str, Any]:
    """Two methods; ``none`` with two seeds, ``bias_1e-2`` with one (2 layers, 3 experts)."""

    def run(seed: int, counts: list[list[int]]) -> dict[str, Any]:
        return {
            "seed": seed,
            "steps": [0, 10],
            "cv": [[0.3, 0.5], [0.2, 0.4]],
            "overload": [[1.2, 1.4], [1.1, 1.3]],
            "final_counts": counts,
        }

    return {
        "methods": {
            "none": {"runs": [run(1, [[1, 2, 3], [3, 3, 0]]), run(2, [[2, 2, 2], [1, 1, 4]])]},
            "bias_1e-2": {"runs": [run(1, [[4, 1, 1], [2, 2, 2]])]},
        }
    }


def test_load_figure_is_styled_as_drawn():
    """Catches the styling mutants of ``load_figure``: size, dpi, layout, side by side, each
    seed thin and faint, the mean thick with the method's line style, titles, the even-load
    line, labels, grid and legend; and ``runs[1]`` for the steps (one bias run)."""
    with matplotlib.rc_context({"figure.dpi": 50}):  # the figure sets its own dpi
        fig = load_figure(_moe_record())
    assert tuple(fig.get_size_inches()) == (8.0, 3.0) and fig.dpi == 100
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    left, right = fig.axes
    assert left.get_position().x1 < right.get_position().x0
    for ax in (left, right):
        seeds = [ax.lines[0], ax.lines[1], ax.lines[3]]  # none's two seeds, bias's one
        assert [_line_style(ln) for ln in seeds] == [
            (to_hex("C0"), 0.8, 0.4), (to_hex("C0"), 0.8, 0.4), (to_hex("C1"), 0.8, 0.4)
        ]  # fmt: skip
        means = [ax.lines[2], ax.lines[4]]
        assert [(*_line_style(ln), ln.get_linestyle(), ln.get_label()) for ln in means] == [
            (to_hex("C0"), 2.0, None, "-", "none"), (to_hex("C1"), 2.0, None, "--", "bias_1e-2")
        ]  # fmt: skip
        assert all(list(ln.get_xdata()) == [0, 10] for ln in ax.lines[:5])
        assert ax.get_xlabel() == "optimizer step" and _gridded(ax)
        assert ax.title.get_fontsize() == 9
    assert left.get_title() == "expert load CV (mean over layers)"
    assert right.get_title() == "busiest expert / mean (worst layer)"
    even = right.lines[5]
    assert list(even.get_ydata()) == [1.0, 1.0] and _line_style(even) == (to_hex("gray"), 0.8, None)
    assert len(left.lines) == 5
    legend = left.get_legend()
    assert legend is not None and legend.get_texts()[0].get_fontsize() == 7


def test_expert_load_figure_is_styled_as_drawn():
    """Catches the styling mutants of ``expert_load_figure``: size, dpi, layout, shared y,
    panels side by side, float64 shares, bar positions and width, hatches, colours, labels,
    the even-share line, titles and legend."""
    with matplotlib.rc_context({"figure.dpi": 50}):
        fig = expert_load_figure(_moe_record(), seed=1)
    assert tuple(fig.get_size_inches()) == pytest.approx((4.4, 2.6)) and fig.dpi == 100
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    first, second = fig.axes
    assert first.get_position().x1 < second.get_position().x0
    assert first.get_shared_y_axes().joined(first, second)
    bars = first.patches  # layer 0's three bars, then layer 1's
    assert [p.get_height() for p in bars] == [1 / 6, 2 / 6, 3 / 6, 3 / 6, 3 / 6, 0 / 6]
    assert [p.get_x() + p.get_width() / 2 for p in bars] == pytest.approx(
        [-0.2, 0.8, 1.8, 0.2, 1.2, 2.2]
    )  # each layer's bar 0.4 wide, the two centred on the expert
    assert [p.get_width() for p in bars] == pytest.approx([0.4] * 6)
    assert [p.get_hatch() for p in bars] == [None] * 3 + ["//"] * 3
    assert [to_hex(p.get_facecolor()) for p in bars] == [to_hex("C0")] * 3 + [to_hex("C1")] * 3
    for ax, title in zip(fig.axes, ("none (seed 1)", "bias_1e-2 (seed 1)")):
        assert ax.get_title() == title and ax.title.get_fontsize() == 9
        assert ax.get_xlabel() == "expert"
        (even,) = ax.lines
        assert list(even.get_ydata()) == pytest.approx([1 / 3, 1 / 3])
        assert _line_style(even) == (to_hex("gray"), 0.8, None) and even.get_linestyle() == "--"
    assert first.get_ylabel() == "share of routed tokens" and second.get_ylabel() == ""
    legend = first.get_legend()
    assert legend is not None and second.get_legend() is None
    assert [t.get_text() for t in legend.get_texts()] == ["layer 0", "layer 1"]
    assert legend.get_texts()[0].get_fontsize() == 7


def test_expert_load_figure_hatches_every_other_layer():
    """Catches ``layer / 2`` and ``layer % 3`` for the hatch: with 3 layers, layer 2 is plain."""
    record = {"methods": {"none": {"runs": [{"seed": 0, "final_counts": [[1, 1]] * 3}]}}}
    bars = expert_load_figure(record).axes[0].patches  # 3 layers x 2 experts
    assert [p.get_hatch() for p in bars] == [None, None, "//", "//", None, None]


# ================================================================================== z-loss


def test_check_arm_names_the_type_and_the_argument():
    """Catches the mutants that name ``None``'s type or a mangled argument in check_arm."""
    raises_exactly(TypeError, "arm must be a mapping, got list", lambda: check_arm([1e-2, 0.0]))
    raises_exactly(
        ValueError,
        "learning_rate must be a finite number > 0, got 0.0",
        lambda: check_arm({"learning_rate": 0.0, "z_loss_coefficient": 0.0}),
    )
    raises_exactly(
        ValueError,
        "z_loss_coefficient must be a finite number >= 0, got -1.0",
        lambda: check_arm({"learning_rate": 1.0, "z_loss_coefficient": -1.0}),
    )


def test_captured_qkv_names_the_type_it_got():
    """Catches ``type(None).__name__`` in ``captured_qkv``'s message."""
    raises_exactly(
        TypeError,
        "model must be a GPT-2 model (.transformer.h), got Linear",
        lambda: captured_qkv(torch.nn.Linear(2, 2)),
    )


def test_max_attention_score_starts_from_0_and_skips_a_layer_with_nothing_used():
    """Catches ``largest = 1.0`` (scores below 1), taking the max of a layer with no pair used
    (all padding), and a changed message."""
    raises_exactly(
        ValueError,
        "qkv_outputs must hold at least one layer's c_attn output",
        lambda: max_attention_score([], torch.ones(1, 2), num_heads=1),
    )
    qkv = torch.full((1, 2, 6), 0.1)  # (B, T, 3C): C = 2, one head of 2
    small = max_attention_score([qkv], torch.ones(1, 2), num_heads=1)
    assert small == pytest.approx(0.02 / math.sqrt(2))  # q.k / sqrt(head_dim)
    assert max_attention_score([qkv], torch.zeros(1, 2), num_heads=1) == 0.0


def _zloss_run_record(log_z: list[float], lm_loss: list[float]) -> dict[str, Any]:
    n = len(log_z)
    return {
        "learning_rate": 1e-2,
        "z_loss_coefficient": 0.0,
        "seed": 0,
        "step": list(range(1, n + 1)),
        "lm_loss": lm_loss,
        "log_z": log_z,
        "max_abs_logit": [1.0] * n,
        "max_attention_score": [1.0] * n,
        "heldout_loss": 6.0,
    }


def test_zloss_summary_default_window_is_3_and_is_checked():
    """Catches ``window=4``, ``values[+window:]``, the ``lm_loss_end`` key, a minimum other
    than 1 and the mangled name in ``zloss_summary``'s check."""
    data = {"runs": [_zloss_run_record([1.0, 2.0, 3.0, 7.0], [9.0, 5.0, 4.0, 3.0])]}
    (arm,) = zloss_summary(data).values()
    assert arm["log_z_end"]["per_seed"] == [4.0]  # (2 + 3 + 7) / 3
    assert arm["lm_loss_end"]["per_seed"] == [4.0]  # (5 + 4 + 3) / 3
    (last,) = zloss_summary(data, window=1).values()
    assert last["log_z_end"]["per_seed"] == [7.0]
    raises_exactly(ValueError, "window must be >= 1, got 0", lambda: zloss_summary(data, window=0))
    raises_exactly(
        TypeError, "window must be an int, got str", lambda: zloss_summary(data, window="3")
    )


def _zloss_part(learning_rate: float, seconds: int) -> dict[str, Any]:
    arm = {"learning_rate": learning_rate, "z_loss_coefficient": 0.0}
    run = {**_zloss_run_record([7.0], [6.0]), **arm}
    return {"settings": {"max_steps": 2, "seeds": [0], "arms": [arm]}, "seconds": seconds,
            "runs": [run]}  # fmt: skip


def test_merge_zloss_records_of_one_part_and_its_messages():
    """Catches the mutants of ``merge_zloss_records`` that compare with or copy ``shared[1]``
    (one part), let an iterator through, or change a message or the name of a bad part."""
    part = _zloss_part(1e-2, seconds=3)
    assert merge_zloss_records([part]) == part
    message = "records must be a non-empty sequence of z-loss records"
    raises_exactly(TypeError, message, lambda: merge_zloss_records([]))
    raises_exactly(TypeError, message, lambda: merge_zloss_records(iter([part])))
    raises_exactly(
        TypeError,
        "records[1] must be a JSON object (dict), got list",
        lambda: merge_zloss_records([part, []]),
    )
    other = _zloss_part(3e-1, seconds=1)
    other["settings"]["max_steps"] = 5
    raises_exactly(
        ValueError,
        "records must share their settings (all but the arms) to be merged",
        lambda: merge_zloss_records([part, other]),
    )


def test_record_zloss_runs_hands_each_run_its_arm_and_logs_it(monkeypatch, capsys):
    """Catches the mutants of ``record_zloss_runs`` and ``_describe`` (no test reached them):
    what each run gets, the checked arms, the log line, ``log=print`` and the arms' checks."""
    calls: list[tuple] = []

    def fake_zloss_run(coefficient: float, **kwargs: Any) -> dict[str, Any]:
        calls.append((coefficient, kwargs))
        return {
            "learning_rate": kwargs["learning_rate"], "z_loss_coefficient": coefficient,
            "seed": kwargs["seed"], "step": [1, 2, 3], "lm_loss": [7.0, 6.0, 5.0],
            "log_z": [7.0, 9.5, 8.25], "max_abs_logit": [3.0, 12.34, 5.0],
            "max_attention_score": [0.5, 1234.0, 9.0], "heldout_loss": 6.1234,
        }  # fmt: skip

    monkeypatch.setattr(zloss_runs, "zloss_run", fake_zloss_run)
    _clock(monkeypatch, records)
    lines: list[str] = []
    arms = [{"learning_rate": 1, "z_loss_coefficient": 0}]
    data = record_zloss_runs(seeds=[2], max_steps=5, arms=arms, log=lines.append)
    settings = {**ZLOSS_SETTINGS, "max_steps": 5}
    assert calls == [(0.0, {"learning_rate": 1.0, "seed": 2, "settings": settings})]
    assert data["settings"]["arms"] == [{"learning_rate": 1.0, "z_loss_coefficient": 0.0}]
    assert lines == [
        "learning_rate=1 z_loss_coefficient=0 seed=2: log Z 7.00 -> peak 9.50 -> 8.25, "
        "max |logit| 12.3, max attention score 1.23e+03, held-out loss 6.123 (2 s)"
    ]
    record_zloss_runs(seeds=[0], arms=arms)  # log defaults to print
    assert capsys.readouterr().out.startswith("learning_rate=1 z_loss_coefficient=0 seed=0:")
    message = "arms must be a non-empty sequence of arms (dicts)"
    raises_exactly(TypeError, message, lambda: record_zloss_runs(seeds=[0], arms=[], log=None))
    raises_exactly(
        TypeError, message, lambda: record_zloss_runs(seeds=[0], arms=iter(arms), log=None)
    )


def test_heldout_batches_are_one_pass_over_the_validation_documents_in_the_records_order(tok):
    """Catches the mutants of ``heldout_batches`` (no test reached it): the documents, the
    batch size and length, one epoch, and the order of seed 0 the shipped record used."""
    got = heldout_batches(tok, {"batch_size": 8, "max_length": 32})
    want = list(_validation_batches(tok, seed=0, batch_size=8, max_length=32))
    assert len(got) == len(want) > 1
    assert all(same_tensors(g, w) for g, w in zip(got, want))


def test_heldout_loss_is_the_token_weighted_next_token_loss(tok):
    """Catches the mutants of ``heldout_loss`` (no test reached it)."""
    model = tiny_gpt2(tok, seed=0, **SMALL_GPT2)
    batches = heldout_batches(tok, {"batch_size": 8, "max_length": 16})[:2]
    total, count = 0.0, 0
    with torch.no_grad():
        for b in batches:
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
            logits = out.logits  # (B, T, V)
            targets = b["labels"][:, 1:]  # (B, T - 1)
            flat = logits[:, :-1].flatten(0, 1)  # (B * (T - 1), V)
            total += float(F.cross_entropy(flat, targets.flatten(), reduction="sum"))
            count += int((targets != IGNORE).sum())
    assert heldout_loss(model, batches) == pytest.approx(total / count, rel=1e-5)


def test_the_zloss_loss_adds_the_z_loss_and_logs_the_batch(tok):
    """Catches the mutants of ``_zloss_fn`` (no test reached it): the loss is ``clm_loss +
    z_loss`` (only ``clm_loss`` at 0) of the model's logits with the attention mask (left
    padding: the mask changes the real tokens' logits), and it logs the LM loss,
    ``logit_stats`` and the largest attention score of the batch under their names."""
    model = tiny_gpt2(tok, seed=0, **SMALL_GPT2)
    batch = _left_padded_batch(tok)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    with captured_qkv(model) as qkv, torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        unmasked = model(input_ids=ids).logits  # (B, T, V)
    assert logit_stats(unmasked, labels) != logit_stats(logits, labels)  # the mask matters here
    lm = clm_loss(logits, labels)  # ()
    loss, logged = _zloss_fn(0.5)(model, batch)
    torch.testing.assert_close(loss.detach(), lm + z_loss(logits, labels, z_loss_coefficient=0.5))
    assert loss.requires_grad
    assert logged == pytest.approx(
        {
            "lm_loss": float(lm),
            **logit_stats(logits, labels),
            "max_attention_score": max_attention_score(qkv, mask, num_heads=2),
        }
    )
    plain, _ = _zloss_fn(0.0)(model, batch)
    torch.testing.assert_close(plain.detach(), lm)


def test_zloss_run_trains_the_seeded_model_on_its_batches_and_scores_it(tok, monkeypatch):
    """Catches the mutants of ``zloss_run`` that change what it trains (model, seed, sizes,
    batches, loss, settings) or scores, the keys it returns, or its seed check; the training
    and the held-out loss are fakes that record what they are given."""
    seen: dict[str, Any] = {}

    def fake_train_steps(model: Any, batches: Any, loss_fn: Any, settings: Any) -> dict:
        seen.update(model=model, batch=next(batches), loss_fn=loss_fn, settings=dict(settings))
        return {"step": [1], "lm_loss": [5.0]}

    def fake_heldout_loss(model: Any, batches: Any) -> float:
        seen.update(heldout_model=model, heldout=batches)
        return 4.5

    monkeypatch.setattr(zloss_runs, "train_steps", fake_train_steps)
    monkeypatch.setattr(zloss_runs, "heldout_loss", fake_heldout_loss)
    default = {**ZLOSS_SETTINGS, "batch_size": 3, "max_length": 12}
    monkeypatch.setattr(zloss_runs, "ZLOSS_SETTINGS", default)
    settings = {**default, "batch_size": 2, "max_length": 16}
    run = zloss_run(0.5, learning_rate=0.02, seed=3, settings=settings, model_config=SMALL_GPT2)
    assert run == {"learning_rate": 0.02, "z_loss_coefficient": 0.5, "seed": 3, "step": [1],
                   "lm_loss": [5.0], "heldout_loss": 4.5}  # fmt: skip
    assert seen["settings"] == {**settings, "learning_rate": 0.02, "z_loss_coefficient": 0.5}
    model = seen["model"]
    assert seen["heldout_model"] is model
    assert _same_weights(model, tiny_gpt2(tok, seed=3, **SMALL_GPT2))
    first = _first_corpus_batch(tok, seed=3, batch_size=2, max_length=16)
    assert same_tensors(seen["batch"], first)
    want = heldout_batches(tok, seen["settings"])
    assert len(seen["heldout"]) == len(want) and same_tensors(seen["heldout"][0], want[0])
    loss, _ = seen["loss_fn"](model, first)
    torch.testing.assert_close(loss.detach(), _zloss_fn(0.5)(model, first)[0].detach())
    assert zloss_run(0.0, learning_rate=0.02, seed=0)["seed"] == 0  # the default settings
    assert seen["settings"] == {**default, "learning_rate": 0.02, "z_loss_coefficient": 0.0}
    raises_exactly(
        ValueError, "seed must be >= 0, got -1", lambda: zloss_run(0.0, learning_rate=0.1, seed=-1)
    )


def _zloss_figure_record() -> dict[str, Any]:
    def run(lr: float, coefficient: float, seed: int) -> dict[str, Any]:
        return {**_zloss_run_record([7.0, 7.5], [6.0, 5.0]), "learning_rate": lr,
                "z_loss_coefficient": coefficient, "seed": seed}  # fmt: skip

    return {"runs": [run(1e-2, 0.0, 0), run(1e-2, 1e-4, 0), run(1e-2, 0.0, 1), run(3e-1, 0.0, 0)]}


def test_zloss_figure_is_styled_as_drawn():
    """Catches the styling mutants of ``zloss_figure``: size (per row), dpi, layout, a y
    scale per column, each run's line and label (first seed only), titles, the ``log V``
    line, the bottom row's x labels, the legend, and one learning rate (no squeezing)."""
    with matplotlib.rc_context({"figure.dpi": 50}):
        fig = zloss_figure(_zloss_figure_record(), log_v=7.8)
    assert tuple(fig.get_size_inches()) == pytest.approx((10.5, 5.6)) and fig.dpi == 100
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    top, bottom = fig.axes[:3], fig.axes[3:]
    assert top[0].get_shared_y_axes().joined(top[0], bottom[0])
    assert not top[0].get_shared_y_axes().joined(top[0], top[1])
    for ax, title in zip(top, ("mean log Z", "LM loss (training batch)", "largest |attention")):
        assert ax.get_title().startswith(title) and ax.get_title().endswith(", learning rate 0.01")
        assert ax.title.get_fontsize() == 9 and _gridded(ax) and ax.get_xlabel() == ""
        runs = ax.lines[:3]
        assert [_line_style(ln) for ln in runs] == [
            (to_hex("C0"), 1.1, 0.75), (to_hex("C1"), 1.1, 0.75), (to_hex("C0"), 1.1, 0.75)
        ]  # fmt: skip
        assert [ln.get_label() for ln in runs[:2]] == ["z-loss 0", "z-loss 0.0001"]
        assert runs[2].get_label().startswith("_") and list(runs[0].get_xdata()) == [1, 2]
    assert all(ax.get_xlabel() == "optimizer step" for ax in bottom)
    log_v = top[0].lines[3]
    assert list(log_v.get_ydata()) == [7.8, 7.8] and log_v.get_label() == "log V"
    assert _line_style(log_v) == (to_hex("0.4"), 1.0, None) and log_v.get_linestyle() == "--"
    legend = top[0].get_legend()
    assert legend is not None and legend.get_texts()[0].get_fontsize() == 7
    assert all(ax.get_legend() is None for ax in fig.axes[1:])
    one_rate = {"runs": _zloss_figure_record()["runs"][:1]}
    assert [ax.get_xlabel() for ax in zloss_figure(one_rate).axes] == ["optimizer step"] * 3


# ===================================================================================== MTP


def test_mtp_model_seeds_its_blocks_and_defaults_to_seed_0(tok):
    """Catches the mutants of ``MTPModel`` and ``mtp_model`` that change the default seed 0,
    drop the seed or the sizes, or the names in the argument checks."""
    lm = tiny_gpt2(tok, seed=1, **SMALL_GPT2)
    raises_exactly(ValueError, "num_depths must be >= 1, got 0", lambda: MTPModel(lm, 0))
    raises_exactly(TypeError, "seed must be an int, got float", lambda: MTPModel(lm, 2, seed=1.5))
    default, zero, one = MTPModel(lm, 2), MTPModel(lm, 2, seed=0), MTPModel(lm, 2, seed=1)
    assert _same_weights(default.blocks, zero.blocks)
    assert not _same_weights(zero.blocks, one.blocks)
    built = mtp_model(2, seed=1, tokenizer=tok, **SMALL_GPT2)
    assert _same_weights(built.lm, lm) and _same_weights(built.blocks, one.blocks)
    plain = mtp_model(2, tokenizer=tok, **SMALL_GPT2)
    assert _same_weights(plain, MTPModel(tiny_gpt2(tok, seed=0, **SMALL_GPT2), 2, seed=0))


def test_mtp_model_is_sized_to_its_tokenizer_and_its_norms_to_the_config(tok):
    """Catches the mutants of ``mtp_model`` that ignore the tokenizer given (one token larger
    than the course's) and the dropped ``eps`` of the extra depths' LayerNorms."""
    grown = copy.deepcopy(tok)
    grown.add_tokens(["zzqx"])
    model = mtp_model(2, tokenizer=grown, layer_norm_epsilon=1e-3, **SMALL_GPT2)
    assert model.lm.config.vocab_size == len(grown) == len(tok) + 1
    assert model.norms[0].eps == 1e-3


def test_the_extra_depths_run_in_float64(tok):
    """Catches the causal mask built without ``h``'s dtype: float64's min overflows float32."""
    model = mtp_model(2, tokenizer=tok, **SMALL_GPT2).double()
    ids = torch.randint(5, len(tok), (1, 6), generator=gen(0))  # (B, T)
    assert [x.dtype for x in model(ids)] == [torch.float64, torch.float64]


def test_the_mtp_loss_reads_the_attention_mask(tok):
    """Catches the mutants of ``_mtp_fn`` (no test reached it): the loss is ``mtp_loss`` of
    the model's logits with the attention mask (left padding: the mask changes the real
    tokens' logits), and it logs each depth's loss as ``loss_depth_d`` from 1."""
    model = mtp_model(2, tokenizer=tok, **SMALL_GPT2)
    batch = _left_padded_batch(tok)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    loss, logged = _mtp_fn()(model, batch)
    with torch.no_grad():
        logits = model(ids, mask)  # 2 x (B, T, V)
        unmasked = mtp_loss(model(ids), labels)  # (): the loss without the mask
    torch.testing.assert_close(loss.detach(), mtp_loss(logits, labels))
    assert not torch.allclose(unmasked, loss.detach())  # the mask matters in this batch
    depth_losses = mtp_losses(logits, labels).tolist()  # (D,)
    assert logged == pytest.approx(
        {"loss_depth_1": depth_losses[0], "loss_depth_2": depth_losses[1]}
    )


def test_mtp_run_trains_the_seeded_mtp_model_and_scores_every_depth(tok, monkeypatch):
    """Catches the mutants of ``mtp_run`` (no test reached it): what it trains (model, seed,
    sizes, batches, loss, settings) and scores, the keys it returns, its seed check; the
    training and the held-out scores are fakes that record what they are given."""
    seen: dict[str, Any] = {}

    def fake_train_steps(model: Any, batches: Any, loss_fn: Any, settings: Any) -> dict:
        seen.update(model=model, batch=next(batches), loss_fn=loss_fn, settings=dict(settings))
        return {"step": [1], "loss_depth_1": [5.0]}

    def fake_heldout_batches(tokenizer: Any, settings: Any) -> list[str]:
        seen.update(heldout_tok=tokenizer, heldout_settings=dict(settings))
        return ["held-out"]

    monkeypatch.setattr(mtp_runs, "train_steps", fake_train_steps)
    monkeypatch.setattr(mtp_runs, "heldout_batches", fake_heldout_batches)
    monkeypatch.setattr(mtp_runs, "heldout_loss", lambda m, b: seen.update(lm=(m, b)) or 4.5)
    scores = lambda m, b: seen.update(mtp=(m, b)) or [4.5, 5.5]  # noqa: E731
    monkeypatch.setattr(mtp_runs, "heldout_depth_losses", scores)
    default = {**MTP_SETTINGS, "batch_size": 3, "max_length": 12}
    monkeypatch.setattr(mtp_runs, "MTP_SETTINGS", default)
    settings = {**default, "batch_size": 2, "max_length": 16}
    run = mtp_run(2, seed=3, settings=settings, model_config=SMALL_GPT2)
    assert run == {"num_depths": 2, "seed": 3, "step": [1], "loss_depth_1": [5.0],
                   "heldout_next_token_loss": 4.5, "heldout_depth_losses": [4.5, 5.5]}  # fmt: skip
    model = seen["model"]
    assert seen["lm"] == (model.lm, ["held-out"]) and seen["mtp"] == (model, ["held-out"])
    assert seen["settings"] == seen["heldout_settings"] == settings
    assert len(seen["heldout_tok"]) == len(tok)
    assert _same_weights(model, mtp_model(2, seed=3, tokenizer=tok, **SMALL_GPT2))
    first = _first_corpus_batch(tok, seed=3, batch_size=2, max_length=16)
    assert same_tensors(seen["batch"], first)
    loss, logged = seen["loss_fn"](model, first)
    logits = model(first["input_ids"], first["attention_mask"])  # 2 x (B, T, V)
    torch.testing.assert_close(loss.detach(), mtp_loss(logits, first["labels"]).detach())
    assert sorted(logged) == ["loss_depth_1", "loss_depth_2"]
    assert mtp_run(1, seed=0)["seed"] == 0 and seen["settings"] == default
    raises_exactly(ValueError, "seed must be >= 0, got -1", lambda: mtp_run(1, seed=-1))


def test_record_mtp_runs_hands_each_run_its_depths_and_logs_it(monkeypatch, capsys):
    """Catches the mutants of ``record_mtp_runs`` (no test reached it): what each run gets,
    the grid's name, the log line and ``log=print``."""
    calls: list[tuple] = []

    def fake_mtp_run(num_depths: int, **kwargs: Any) -> dict[str, Any]:
        calls.append((num_depths, kwargs))
        return {"num_depths": num_depths, "seed": kwargs["seed"], "step": [1, 2, 3],
                "loss_depth_1": [7.0, 6.5, 6.25], "heldout_next_token_loss": 6.12345,
                "heldout_depth_losses": [6.12345, 7.5]}  # fmt: skip

    monkeypatch.setattr(mtp_runs, "mtp_run", fake_mtp_run)
    _clock(monkeypatch, records)
    lines: list[str] = []
    data = record_mtp_runs(seeds=[4], max_steps=5, depths=[2], log=lines.append)
    assert calls == [(2, {"seed": 4, "settings": {**MTP_SETTINGS, "max_steps": 5}})]
    assert data["settings"]["depths"] == [2]
    assert lines == [
        "D=2 seed=4 depth-1 training loss 6.250, held-out next-token loss 6.1235, "
        "per depth [6.1235, 7.5] (2 s)"
    ]
    record_mtp_runs(seeds=[0], depths=[1])  # log defaults to print
    assert capsys.readouterr().out.startswith("D=1 seed=0 depth-1 training loss 6.250")


def test_mtp_summary_of_a_record_without_d1():
    """Catches ``groups.get(1, None)``: without ``D = 1`` runs there is no difference to it."""
    run = {"num_depths": 2, "seed": 0, "heldout_next_token_loss": 6.5}
    summary = mtp_summary({"runs": [run]})
    assert summary[2]["heldout_next_token_loss"]["per_seed"] == [6.5]
    assert "minus_d1" not in summary[2]


def test_mtp_figure_is_styled_as_drawn():
    """Catches the styling mutants of ``mtp_figure``: size, dpi, side by side, each run's
    line and dots, labels (first seed only), the mean line, axis labels, titles, ticks, grid
    and legends."""
    runs = [
        {"num_depths": d, "seed": s, "step": [1, 2], "loss_depth_1": [7.0, 6.0]}
        | {"heldout_next_token_loss": h}
        for d, s, h in ((1, 0, 6.0), (2, 0, 6.2), (2, 1, 6.4))
    ]
    rc = {"figure.dpi": 50, "lines.linewidth": 3.0, "lines.linestyle": ":"}
    with matplotlib.rc_context(rc):  # the figure sets its own dpi, line widths and styles
        fig = mtp_figure({"runs": runs})
    assert tuple(fig.get_size_inches()) == (8.0, 2.9) and fig.dpi == 100
    left, right = fig.axes
    assert left.get_position().x1 < right.get_position().x0
    assert [_line_style(ln) for ln in left.lines] == [
        (to_hex("C0"), 1.2, 0.8), (to_hex("C1"), 1.2, 0.8), (to_hex("C1"), 1.2, 0.8)
    ]  # fmt: skip
    assert [ln.get_label() for ln in left.lines[:2]] == ["D = 1", "D = 2"]
    assert left.lines[2].get_label().startswith("_")
    assert list(left.lines[0].get_xdata()) == [1, 2]
    dots, mean = right.lines[:3], right.lines[3]
    assert [(ln.get_marker(), ln.get_linestyle()) for ln in dots] == [("o", "None")] * 3
    assert [(list(ln.get_xdata()), to_hex(ln.get_color()), ln.get_alpha()) for ln in dots] == [
        ([1], to_hex("C0"), 0.8), ([2], to_hex("C1"), 0.8), ([2], to_hex("C1"), 0.8)
    ]  # fmt: skip
    assert list(mean.get_xdata()) == [1, 2] and mean.get_linestyle() == "-"
    assert list(mean.get_ydata()) == pytest.approx([6.0, 6.3])
    assert (_line_style(mean), mean.get_label()) == (
        (to_hex("black"), 1.5, None),
        "mean over seeds",
    )
    assert (left.get_xlabel(), left.get_title()) == (
        "optimizer step", "next-token (depth 1) training loss"
    )  # fmt: skip
    assert (right.get_xlabel(), right.get_title()) == (
        "D (output depths)",
        "held-out next-token loss",
    )
    assert list(right.get_xticks()) == [1, 2]
    for ax in (left, right):
        assert ax.title.get_fontsize() == 9 and _gridded(ax)
        legend = ax.get_legend()
        assert legend is not None and legend.get_texts()[0].get_fontsize() == 7
