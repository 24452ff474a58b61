"""The router-loss lesson's course layer (``lmlessons.course.moe_runs``) and its record.

- ``tiny_mixtral`` builds transformers' real ``MixtralForCausalLM`` sized to the course tokenizer;
- the biased router chooses ``select_experts(scores, k, bias)`` and weights by the unbiased
  scores; a training step moves the bias by ``update_expert_bias`` of that step's counts;
- ``route_sentence`` reports the experts the model really used; ``routing_margins`` measures
  how far each of its choices (and the gate-weight order) is from flipping;
- ``train_moe`` returns the model whose run ``moe_run`` records;
- the loader rejects malformed records, naming the key; the summary and the figures on records
  made here; a short real run has the shipped record's schema;
- the shipped record (``data/moe/runs.json``, made by ``python -m tools.moe_runs``): consistent
  with its own counts, and the claims the lesson states hold in every recorded seed;
- (slow) transformers' Trainer divides the LM loss by the accumulation steps but adds Mixtral's
  aux term whole, when the loss is normalised by ``num_items_in_batch``.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from lmlessons.course.models import tiny_mixtral, tiny_mixtral_config
from lmlessons.course.moe_runs import (
    METHODS,
    MOE_RECORDING,
    MOE_RUN_KEYS,
    MOE_SETTINGS,
    _step,
    check_moe_record,
    expert_load_figure,
    heldout_batch,
    load_figure,
    measure_routing,
    method_summary,
    moe_run,
    record_moe_runs,
    record_routing,
    recorded_moe_runs,
    route_sentence,
    routers,
    routing_margins,
    run_final,
    train_moe,
    use_biased_routers,
)
from lmlessons.course.records import seed_spread, write_record
from lmlessons.moe import expert_counts, load_spread, select_experts, update_expert_bias

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)


# --- the model ---------------------------------------------------------------------------------


def test_tiny_mixtral_is_the_real_class_sized_to_the_tokenizer(tok) -> None:
    from transformers import MixtralForCausalLM

    model = tiny_mixtral(tok)
    assert type(model) is MixtralForCausalLM
    config = model.config
    assert config.vocab_size == len(tok)
    assert model.get_input_embeddings().weight.shape == (len(tok), config.hidden_size)
    assert model.lm_head.weight.shape == (len(tok), config.hidden_size)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        tok.cls_token_id,
        tok.sep_token_id,
        tok.pad_token_id,
    )
    assert (config.num_local_experts, config.num_experts_per_tok) == (4, 2)
    assert len(routers(model)) == config.num_hidden_layers
    ids = tok(["the sea is cold"], return_tensors="pt")["input_ids"]  # (1, T)
    out = model(input_ids=ids, labels=ids, output_router_logits=True)
    assert out.logits.shape == (1, ids.shape[1], len(tok))
    assert len(out.router_logits) == config.num_hidden_layers


def test_tiny_mixtral_is_seeded_and_checks_its_arguments(tok) -> None:
    a, b, c = (tiny_mixtral(tok, seed=s, **SMALL) for s in (0, 0, 1))
    assert torch.equal(a.lm_head.weight, b.lm_head.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert tiny_mixtral_config(tok, router_aux_loss_coef=0.5).router_aux_loss_coef == 0.5
    odd = tiny_mixtral(tok, hidden_size=16, num_attention_heads=2, intermediate_size=37)
    assert odd.config._experts_implementation == "eager"  # grouped_mm fails on this size
    ids = tok(["the sea"], return_tensors="pt")["input_ids"]
    odd(input_ids=ids, labels=ids).loss.backward()
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        tiny_mixtral_config(tok, num_local_experts=2, num_experts_per_tok=3)
    with pytest.raises(ValueError, match="hidden_size"):
        tiny_mixtral_config(tok, hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        tiny_mixtral_config(tok, num_attention_heads=4, num_key_value_heads=3)


# --- the biased router -------------------------------------------------------------------------


def _biased(tok):
    model = tiny_mixtral(tok, **SMALL)
    return model, use_biased_routers(model)


def test_biased_router_chooses_on_biased_scores_and_weights_by_unbiased(tok) -> None:
    model, biased = _biased(tok)
    router = biased[0]
    assert router is routers(model)[0]  # turned in place, the same weight
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(50, SMALL["hidden_size"], generator=g)  # (N, H)
    router.expert_bias = torch.tensor([0.0, 0.3, -0.2, 0.1])
    logits, weights, indices = router(hidden)
    scores = F.linear(hidden, router.weight).softmax(-1)  # (N, E)
    torch.testing.assert_close(logits, F.linear(hidden, router.weight))
    assert torch.equal(indices, select_experts(scores, 2, router.expert_bias))
    assert not torch.equal(indices.sort(-1).values, scores.topk(2).indices.sort(-1).values)
    picked = scores.gather(-1, indices)  # (N, K): the unbiased scores of the chosen experts
    torch.testing.assert_close(weights, picked / picked.sum(-1, keepdim=True))
    biased_scores = (scores + router.expert_bias).gather(-1, indices)  # (N, K)
    assert not torch.allclose(weights, biased_scores / biased_scores.sum(-1, keepdim=True))


def test_a_zero_bias_routes_as_mixtral(tok) -> None:
    model = tiny_mixtral(tok, **SMALL)
    ids = tok(["the farmer feeds the hens"], return_tensors="pt")["input_ids"]
    with torch.no_grad(), record_routing(model) as plain:
        before = model(input_ids=ids, output_router_logits=True)
    use_biased_routers(model)
    with torch.no_grad(), record_routing(model) as biased:
        after = model(input_ids=ids, output_router_logits=True)
    assert len(plain) == len(biased) == model.config.num_hidden_layers
    for p, b in zip(plain, biased):
        assert torch.equal(p.sort(-1).values, b.sort(-1).values)  # (N, K): same experts
    torch.testing.assert_close(after.logits, before.logits)
    for p, b in zip(before.router_logits, after.router_logits):  # still returned
        torch.testing.assert_close(p, b)


def test_a_training_step_moves_the_bias_by_that_steps_counts(tok) -> None:
    model, biased = _biased(tok)
    ids = tok(["the sea is cold", "the hens lay eggs every day"], padding=True, return_tensors="pt")
    batch = {
        "input_ids": ids["input_ids"],
        "attention_mask": ids["attention_mask"],
        "labels": ids["input_ids"].masked_fill(ids["attention_mask"] == 0, -100),
    }
    with torch.no_grad(), record_routing(model) as chosen:
        model(**batch)
    expected = [
        update_expert_bias(torch.zeros(4), expert_counts(c, 4, batch["attention_mask"]), 0.01)
        for c in chosen
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    aux = _step(model, optimizer, biased, batch, 0.01, 1.0)
    assert aux > 0
    for router, bias in zip(biased, expected):
        torch.testing.assert_close(router.expert_bias, bias)
        assert bool(router.expert_bias.abs().gt(0).any())


# --- one sentence -------------------------------------------------------------------------------


def test_route_sentence_loads_sum_to_top_k_times_tokens(tok) -> None:
    model = tiny_mixtral(tok, **SMALL)
    routed = route_sentence(model, tok, "the sailors pull the nets onto the boat")
    tokens = routed["tokens"]
    assert tokens[0] == tok.cls_token and tokens[-1] == tok.sep_token
    assert len(routed["layers"]) == model.config.num_hidden_layers
    for layer in routed["layers"]:
        assert sum(layer["load"]) == 2 * len(tokens)
        assert len(layer["experts"]) == len(layer["weights"]) == len(tokens)
        counted = [sum(e in experts for experts in layer["experts"]) for e in range(4)]
        assert layer["load"] == counted
        assert all(abs(sum(w) - 1) < 1e-3 for w in layer["weights"])
    with pytest.raises(ValueError, match="text"):
        route_sentence(model, tok, "  ")


def test_route_sentence_follows_the_bias(tok) -> None:
    model, biased = _biased(tok)
    for router in biased:
        router.expert_bias = torch.tensor([0.0, 0.0, 5.0, 0.0])  # expert 2 wins every token
    routed = route_sentence(model, tok, "rain falls on the roof")
    for layer in routed["layers"]:
        assert layer["load"][2] == len(routed["tokens"])
        assert all(2 in experts for experts in layer["experts"])


def test_routing_margins_measure_the_choice_and_the_order(tok) -> None:
    text = "the farmer feeds the hens"
    model = tiny_mixtral(tok, seed=2, **SMALL)
    ids = tok(text, return_tensors="pt")["input_ids"]  # (1, T)
    logits: list[torch.Tensor] = []
    handles = [r.register_forward_hook(lambda m, a, o: logits.append(o[0])) for r in routers(model)]
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    top3 = [lg.softmax(-1).topk(3).values for lg in logits]  # (T, 3) per layer
    choice = min(float((t[:, 1] - t[:, 2]).min()) for t in top3)
    order = min(float(((t[:, 0] - t[:, 1]) / t[:, :2].sum(-1)).min()) for t in top3)
    margins = routing_margins(model, tok, text)
    assert margins["choice"] == pytest.approx(choice, abs=1e-6)
    assert margins["order"] == pytest.approx(order, abs=1e-6)
    routed = route_sentence(model, tok, text)
    gaps = [abs(w[0] - w[1]) for layer in routed["layers"] for w in layer["weights"]]
    assert margins["order"] == pytest.approx(min(gaps), abs=2e-4)  # route_sentence rounds
    for router in use_biased_routers(model):
        router.expert_bias = torch.tensor([0.0, 0.0, 5.0, 5.0])  # experts 2 and 3, by far
    biased = routing_margins(model, tok, text)
    assert 4.0 < biased["choice"] < 5.0  # the bias counts in the choice's gap
    with pytest.raises(ValueError, match="text"):
        routing_margins(model, tok, " ")


def test_train_moe_returns_the_model_of_its_run() -> None:
    model, run = train_moe("bias_1e-2", seed=4, max_steps=2, log_every=1)
    assert not model.training and run["steps"] == [0, 1, 2]
    assert run == moe_run("bias_1e-2", seed=4, max_steps=2, log_every=1)  # same seeds, same run
    biases = [[round(float(b), 4) for b in r.expert_bias] for r in routers(model)]
    assert biases == run["expert_bias"] and any(b != 0 for layer in biases for b in layer)
    measured = measure_routing(model, heldout_batch())
    assert measured["counts"] == run["final_counts"]


# --- the record: loader, summary, figures -------------------------------------------------------


def _run(seed: int, cv_end: float, overload_end: float, loss_end: float) -> dict:
    return {
        "seed": seed,
        "steps": [0, 10],
        "cv": [[0.3, 0.3], [cv_end, cv_end + 0.2]],
        "overload": [[1.2, 1.3], [overload_end - 0.1, overload_end]],
        "heldout_loss": [7.8, loss_end],
        "aux_loss": [None, 2.1],
        "final_counts": [[10, 20, 30, 40], [25, 25, 25, 25]],
        "expert_bias": [[0.0] * 4, [0.0] * 4],
    }


def _fake() -> dict:
    return {
        "settings": {"max_steps": 10, "seeds": [0, 1]},
        "seconds": 1,
        "methods": {
            "none": {**METHODS["none"], "runs": [_run(0, 0.5, 1.9, 5.2), _run(1, 0.7, 1.7, 5.4)]},
            "bias_1e-2": {
                **METHODS["bias_1e-2"],
                "runs": [_run(0, 0.1, 1.1, 5.25), _run(1, 0.2, 1.2, 5.35)],
            },
        },
    }


def test_loader_reads_a_written_record_and_names_what_is_wrong(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"tools\.moe_runs"):
        recorded_moe_runs(directory=tmp_path)
    write_record(_fake(), tmp_path, MOE_RECORDING.file, one_line_lists=True)
    assert recorded_moe_runs(directory=tmp_path) == _fake()
    for key in MOE_RECORDING.keys:
        broken = _fake()
        del broken[key]
        write_record(broken, tmp_path, MOE_RECORDING.file)
        with pytest.raises(ValueError, match=key):
            recorded_moe_runs(directory=tmp_path)
    for key in MOE_RUN_KEYS:
        broken = _fake()
        del broken["methods"]["bias_1e-2"]["runs"][1][key]
        with pytest.raises(ValueError, match=f"bias_1e-2.*{key}"):
            check_moe_record(broken)
    broken = _fake()
    broken["methods"]["none"]["runs"][0]["cv"].append([0.1, 0.1])
    with pytest.raises(ValueError, match="one value per step"):
        check_moe_record(broken)
    with pytest.raises(TypeError, match="dict"):
        check_moe_record([_fake()])
    broken = _fake()
    broken["methods"]["none"] = ["runs"]
    with pytest.raises(TypeError, match="none"):
        check_moe_record(broken)


def test_run_final_and_method_summary() -> None:
    run = _run(0, 0.5, 1.9, 5.2)
    assert run_final(run) == pytest.approx({"cv": 0.6, "overload": 1.9, "heldout_loss": 5.2})
    summary = method_summary(_fake())
    assert list(summary) == ["none", "bias_1e-2"]
    none = summary["none"]
    assert none["seeds"] == [0, 1]
    assert none["per_seed"]["cv"] == pytest.approx([0.6, 0.8])
    assert none["cv"] == pytest.approx((0.7, 2**0.5 * 0.1))  # Bessel: std of (0.6, 0.8)
    assert none["overload"] == pytest.approx(seed_spread([1.9, 1.7]))
    assert summary["bias_1e-2"]["heldout_loss"] == pytest.approx((5.3, 0.05 * 2**0.5))


def test_figures_draw_every_method() -> None:
    data = _fake()
    fig = load_figure(data)
    left, right = fig.axes
    assert len(left.lines) == 2 * 3  # per method: 2 seeds and their mean
    assert len(right.lines) == 2 * 3 + 1  # and the even load, 1
    assert list(left.lines[2].get_ydata()) == pytest.approx([0.3, 0.7])  # none's mean CV
    assert list(right.lines[5].get_ydata()) == pytest.approx([1.3, 1.15])  # bias's worst layer
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["none", "bias_1e-2"]
    fig = expert_load_figure(data, seed=1)
    assert len(fig.axes) == 2
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])  # layer 0's shares
    with pytest.raises(ValueError, match="seed 7"):
        expert_load_figure(data, seed=7)


@pytest.mark.slow
def test_a_short_real_run_has_the_records_schema() -> None:
    """Two methods, one seed, two steps of the recorded settings: the schema the loader
    checks, and the shipped record's keys."""
    lines: list[str] = []
    data = record_moe_runs(
        ["none", "bias_1e-2"], seeds=[3], max_steps=2, log=lines.append, log_every=1
    )
    check_moe_record(json.loads(json.dumps(data)))
    assert len(lines) == 2 and lines[1].startswith("bias_1e-2 seed=3")
    for method, entry in data["methods"].items():
        (run,) = entry["runs"]
        assert set(run) == set(MOE_RUN_KEYS) and run["seed"] == 3
        assert run["steps"] == [0, 1, 2] and run["aux_loss"][0] is None
        assert all(len(cv) == MOE_SETTINGS["num_hidden_layers"] for cv in run["cv"])
        moved = any(b != 0 for layer in run["expert_bias"] for b in layer)
        assert moved == (method == "bias_1e-2")
    bias = torch.tensor(data["methods"]["bias_1e-2"]["runs"][0]["expert_bias"])  # (L, E)
    assert bool((bias.abs() <= 2 * 0.01 + 1e-6).all())  # two steps of 0.01 at most
    shipped = recorded_moe_runs()
    assert set(data["settings"]) == set(shipped["settings"])
    assert set(data) == set(shipped)
    with pytest.raises(ValueError, match="method"):
        moe_run("loss_free", seed=0)
    with pytest.raises(ValueError, match="settings"):
        moe_run("none", seed=0, max_steps=1, learning_rat=1e-3)


# --- the shipped record --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict:
    return recorded_moe_runs()


def _finals(recorded: dict, method: str) -> dict[int, dict[str, float]]:
    return {r["seed"]: run_final(r) for r in recorded["methods"][method]["runs"]}


def test_shipped_record_matches_the_code_and_its_own_counts(recorded) -> None:
    settings = recorded["settings"]
    assert {k: settings[k] for k in MOE_SETTINGS} == MOE_SETTINGS
    assert len(settings["seeds"]) >= 3
    assert list(recorded["methods"]) == list(METHODS)
    batch = heldout_batch(settings)
    tokens = int(batch["attention_mask"].sum())
    for method, entry in recorded["methods"].items():
        assert {k: entry[k] for k in METHODS[method]} == METHODS[method]
        assert [r["seed"] for r in entry["runs"]] == settings["seeds"]
        for run in entry["runs"]:
            assert run["steps"][-1] == settings["max_steps"]
            for layer, counts in enumerate(run["final_counts"]):
                assert sum(counts) == settings["num_experts_per_tok"] * tokens
                spread = load_spread(torch.tensor(counts, dtype=torch.float64))
                assert spread.cv == pytest.approx(run["cv"][-1][layer], abs=1e-4)
                assert spread.max_over_mean == pytest.approx(run["overload"][-1][layer], abs=1e-4)


def test_without_balancing_the_load_is_uneven_in_every_seed(recorded) -> None:
    """The lesson's claim: left alone, the busiest expert of some layer gets at least 1.5 times
    its even share of the held-out tokens (top-2 of 4 experts: 2 is the most possible)."""
    for seed, end in _finals(recorded, "none").items():
        assert end["overload"] >= 1.5, seed
        assert end["cv"] >= 0.3, seed


@pytest.mark.parametrize("method", ["bias_1e-3", "bias_1e-2"])
def test_the_bias_lowers_cv_and_overload_below_none_in_every_seed(recorded, method) -> None:
    none = _finals(recorded, "none")
    for seed, end in _finals(recorded, method).items():
        assert end["cv"] < none[seed]["cv"], (method, seed)
        assert end["overload"] < none[seed]["overload"], (method, seed)


def test_the_aux_loss_lowers_the_worst_overload_but_not_always_the_cv(recorded) -> None:
    """aux 1e-2 lowers the busiest expert's overload below none's in every seed; its CV is not
    lower in every seed (the lesson must not claim it); the default 1e-3 leaves an expert
    with at least 1.7 times its share in every seed."""
    none = _finals(recorded, "none")
    strong = _finals(recorded, "aux_1e-2")
    assert all(strong[seed]["overload"] < none[seed]["overload"] for seed in none)
    assert not all(strong[seed]["cv"] < none[seed]["cv"] for seed in none)
    assert all(end["overload"] >= 1.7 for end in _finals(recorded, "aux_1e-3").values())


def test_the_pooled_aux_loss_is_at_its_minimum_while_a_layer_stays_uneven(recorded) -> None:
    """Mixtral's loss averages f and P over the layers before the product: with coefficient
    1e-2 it reaches its minimum, top_k, in every seed (last logged training step, within
    0.05) while some layer's held-out CV is still at least 0.3."""
    top_k = recorded["settings"]["num_experts_per_tok"]
    for run in recorded["methods"]["aux_1e-2"]["runs"]:
        assert abs(run["aux_loss"][-1] - top_k) < 0.05, run["seed"]
        assert max(run["cv"][-1]) >= 0.3, run["seed"]


def test_the_deepseek_speed_is_still_moving_the_bias_at_the_end(recorded) -> None:
    """At 1e-3 a bias can move 0.2 in 200 steps; in every seed some bias has moved at least
    90% of that: the update was still limited by its speed (why the record also has 1e-2)."""
    settings = recorded["settings"]
    reach = METHODS["bias_1e-3"]["bias_update_speed"] * settings["max_steps"]
    for run in recorded["methods"]["bias_1e-3"]["runs"]:
        largest = max(abs(b) for layer in run["expert_bias"] for b in layer)
        assert 0.9 * reach <= largest <= reach + 1e-4, run["seed"]


def test_the_faster_bias_balances_best_in_every_seed(recorded) -> None:
    fast = _finals(recorded, "bias_1e-2")
    for method in ("none", "aux_1e-3", "aux_1e-2", "bias_1e-3"):
        for seed, end in _finals(recorded, method).items():
            assert fast[seed]["cv"] < end["cv"], (method, seed)


def test_balancing_costs_little_held_out_loss_in_every_seed(recorded) -> None:
    """Within the budget, no method's held-out LM loss is more than 0.1 nat from the
    unbalanced run's of the same seed: the record cannot tell them apart by loss."""
    none = _finals(recorded, "none")
    for method in METHODS:
        for seed, end in _finals(recorded, method).items():
            assert abs(end["heldout_loss"] - none[seed]["heldout_loss"]) < 0.1, (method, seed)


# --- transformers' Trainer: the aux term and gradient accumulation ------------------------------

GA_TEXTS = (
    "the sea is cold",
    "rain falls on the roof of the old barn",
    "the hens lay eggs",
    "we sing songs at school every morning",
)


def _ga_gradients(tok, coef: float, steps: int) -> list[torch.Tensor]:
    """One real Trainer step on the 4 rows in ``steps`` micro-batches (in order), of a tiny
    Mixtral that adds ``coef * aux_loss`` inside its forward."""
    from lmlessons.course.trainer_ga import ga_batch, trainer_gradient

    batch = ga_batch(tok, GA_TEXTS)
    inputs = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": batch["clm_labels"],
    }
    model = tiny_mixtral(tok, **SMALL, router_aux_loss_coef=coef, output_router_logits=True)
    return trainer_gradient(model, inputs, gradient_accumulation_steps=steps)


def _aux_gradient(tok, coef: float, steps: int) -> list[torch.Tensor]:
    """By hand: ``coef`` times the gradient of the sum of Mixtral's aux loss over the
    ``steps`` micro-batches (each with its own attention mask)."""
    from lmlessons.course.trainer_ga import ga_batch

    batch = ga_batch(tok, GA_TEXTS)
    model = tiny_mixtral(tok, **SMALL, output_router_logits=True)
    rows = len(GA_TEXTS) // steps
    total = torch.zeros(())
    for start in range(0, len(GA_TEXTS), rows):
        part = slice(start, start + rows)
        out = model(
            input_ids=batch["input_ids"][part], attention_mask=batch["attention_mask"][part]
        )
        total = total + coef * out.aux_loss
    total.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]


def _relative(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    diff = sum(float(((x - y) ** 2).sum()) for x, y in zip(a, b)) ** 0.5
    return diff / sum(float((y**2).sum()) for y in b) ** 0.5


@pytest.mark.slow
def test_trainer_normalises_the_lm_loss_but_adds_the_aux_term_per_micro_batch(tok) -> None:
    """transformers' Trainer with 2 accumulation steps passes ``num_items_in_batch`` and does not
    divide the micro-batch losses: the LM gradient equals the 1-step gradient, but Mixtral adds
    ``router_aux_loss_coef * aux_loss`` inside its forward to each micro-batch's loss, so the
    step's aux gradient is the SUM of the micro-batches' (not their mean)."""
    coef = 0.5
    lm_1, lm_2 = (_ga_gradients(tok, 0.0, k) for k in (1, 2))
    assert _relative(lm_2, lm_1) < 1e-4  # LM loss: sum / num_items_in_batch, exact
    with_aux = {k: _ga_gradients(tok, coef, k) for k in (1, 2)}
    aux_part = {k: [a - b for a, b in zip(with_aux[k], lm)] for k, lm in ((1, lm_1), (2, lm_2))}
    assert _relative(aux_part[1], _aux_gradient(tok, coef, 1)) < 1e-3
    summed = _aux_gradient(tok, coef, 2)  # coef * grad(aux_1 + aux_2)
    assert _relative(aux_part[2], summed) < 1e-3
    halved = [g / 2 for g in summed]  # what a mean over the micro-batches would give
    assert _relative(aux_part[2], halved) > 0.5


@pytest.mark.slow
def test_the_tool_records_a_loadable_file(tmp_path, capsys) -> None:
    from tools.moe_runs import main

    main(["--out", str(tmp_path), "--seeds", "5", "--max-steps", "1", "--methods", "bias_1e-3"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("bias_1e-3 seed=5") and printed[-1].startswith("wrote")
    data = recorded_moe_runs(directory=tmp_path)
    assert list(data["methods"]) == ["bias_1e-3"]
    (run,) = data["methods"]["bias_1e-3"]["runs"]
    assert run["steps"] == [0, 1] and data["settings"]["seeds"] == [5]
    assert sorted(abs(b) for b in run["expert_bias"][0]) != [0.0] * 4  # one update of 1e-3
