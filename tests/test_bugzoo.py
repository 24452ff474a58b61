"""Lesson 08's bug zoo: the recorded runs are real (their first steps re-run to the recording),
every symptom a case's feedback states holds on the recorded data, every case differs from its
nearest decoy on at least two instruments, the settings give nothing away, each bug differs
from its fix in the way it says, and the checker and the widget judge diagnoses right."""

from __future__ import annotations

import html
import math
from dataclasses import replace

import pytest
import torch
from _widgets import marker_fields, shown_html, shown_marker

from lmlessons.bugzoo import bugs
from lmlessons.bugzoo.cases import (
    CASES,
    DIAGNOSES,
    GROUPS,
    SETTINGS,
    Claim,
    case_summaries,
    claim_holds,
    differing_settings,
    evidence,
    get_case,
    group_cases,
)
from lmlessons.bugzoo.data import chat_rows, course_data, preference_rows
from lmlessons.bugzoo.instruments import INSTRUMENTS, NOT_MEASURED, distance, symptom
from lmlessons.bugzoo.instruments import symptoms as signs
from lmlessons.bugzoo.records import load_records, save_records, summary
from lmlessons.bugzoo.runs import MODEL_FAMILIES, RUNS, model_family, run
from lmlessons.exercises import check
from lmlessons.exercises.check_bugzoo import feedback
from lmlessons.packing import pad_documents
from lmlessons.shifting import num_targets
from lmlessons.widgets.bugzoo import (
    all_examples_html,
    all_symptoms_html,
    bug_zoo_widget,
    reveal_html,
    symptom_table_html,
)

PREFIX = 6  # steps re-run per recorded run
# float sums differ in their last digits across CPUs and thread counts; 6 AdamW steps keep the
# difference far below this (measured: under 1e-4)
TOLERANCE = {"rel": 2e-3, "abs": 2e-3}
RIGHT = {case.id: case.diagnosis for case in CASES}
LETTERS = [case.id for case in CASES]


@pytest.fixture(scope="module")
def records():
    return load_records()


# --------------------------------------------------------------------------------------------
# The recordings are real runs
# --------------------------------------------------------------------------------------------


def test_the_recording_holds_every_run_in_full(records):
    assert set(records) == set(RUNS)
    for run_id, spec in RUNS.items():
        history = records[run_id]["history"]
        assert records[run_id]["family"] == spec.family
        assert {len(v) for v in history.values()} == {spec.steps}, run_id


@pytest.mark.slow
@pytest.mark.parametrize("run_id", list(RUNS))
def test_the_first_steps_re_run_to_the_recording(run_id, records):
    again = run(run_id, steps=PREFIX, symptoms=False)["history"]
    recorded = records[run_id]["history"]
    assert set(again) == set(recorded)
    for key, values in again.items():
        if key == "num_items":
            assert values == recorded[key][:PREFIX]
        else:
            assert values == pytest.approx(recorded[key][:PREFIX], **TOLERANCE), key


@pytest.mark.slow
def test_the_nan_run_turns_nan_at_the_recorded_step_on_an_empty_mask(records):
    loss = records["nan_on_empty_mask"]["history"]["loss"]
    first = next(i for i, v in enumerate(loss) if math.isnan(v)) + 1
    again = run("nan_on_empty_mask", steps=first, symptoms=False)["history"]
    assert all(math.isfinite(v) for v in again["loss"][:-1])
    assert math.isnan(again["loss"][-1]) and math.isnan(again["grad_norm"][-1])
    assert again["num_items"][-1] == 0
    healthy = records["healthy_mlm_one_sentence"]["history"]
    assert healthy["num_items"][first - 1] == 0 and healthy["loss"][first - 1] == 0.0


def test_records_round_trip_with_nan_as_null(tmp_path, records):
    path = save_records({"nan_on_empty_mask": records["nan_on_empty_mask"]}, tmp_path, note="x")
    assert "NaN" not in path.read_text() and "null" in path.read_text()
    back = load_records(tmp_path)["nan_on_empty_mask"]
    assert (
        summary(back)["first_nan_step"] == summary(records["nan_on_empty_mask"])["first_nan_step"]
    )
    with pytest.raises(FileNotFoundError, match=r"tools\.bugzoo"):
        load_records(tmp_path / "missing")


# --------------------------------------------------------------------------------------------
# What the feedback says is what the runs show
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.id}-{c.run}")
def test_every_claim_of_a_case_holds_on_the_recorded_runs(case, records):
    mine, healthy = case_summaries(case, records)
    for claim in case.claims:
        assert claim_holds(claim, mine, healthy), (case.id, claim, mine, healthy)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.id}-{c.run}")
def test_the_claims_can_fail_the_healthy_run_does_not_show_them(case, records):
    healthy, mine = summary(records[case.reference]), summary(records[case.run])
    if case.diagnosis == "no_bug":  # its claims say "close to the healthy run": another run
        sibling = next(c for c in CASES if c.family == case.family and c is not case)
        other = summary(records[sibling.run])
        assert not all(claim_holds(c, other, healthy) for c in case.claims)
        return
    # a claim against another number of the same run: the healthy side has the fixed number
    for claim in (c for c in case.claims if c.against):
        healthy[claim.metric] = healthy[claim.against] = mine[claim.against]
    assert not all(claim_holds(c, healthy, healthy) for c in case.claims), case.id


def test_claim_relations():
    assert claim_holds(Claim("x", "higher", 0.1), {"x": 1.2}, {"x": 1.0})
    assert not claim_holds(Claim("x", "higher", 0.3), {"x": 1.2}, {"x": 1.0})
    assert claim_holds(Claim("x", "lower", 0.5), {"x": 0.4}, {"x": 1.0})
    assert claim_holds(Claim("x", "close", 0.05), {"x": 1.04}, {"x": 1.0})
    assert not claim_holds(Claim("x", "close", 0.01), {"x": 1.04}, {"x": 1.0})
    assert claim_holds(Claim("x", "nan"), {"x": math.nan}, {"x": 1.0})
    assert claim_holds(Claim("x", "below", 1e-5), {"x": 2e-7}, {"x": 9.0})
    assert not claim_holds(Claim("x", "below", 1e-5), {"x": 0.1}, {"x": 0.0})
    assert claim_holds(Claim("x", "higher", 1.0, against="y"), {"x": 3.0, "y": 1.0}, {})
    with pytest.raises(ValueError, match="relation"):
        claim_holds(Claim("x", "bigger"), {"x": 1.0}, {"x": 1.0})


def test_evidence_is_filled_with_the_recorded_numbers(records):
    for case in CASES:
        text = evidence(case, records)
        assert "{" not in text and "}" not in text
        assert any(ch.isdigit() for ch in text), case.id
    mine, healthy = case_summaries(get_case("A"), records)
    assert f"{mine['final_train_loss']:.2f}" in evidence(get_case("A"), records)
    assert f"{healthy['heldout_prefix_word_loss']:.2f}" in evidence(get_case("A"), records)


def test_cases_are_consistent():
    assert len(CASES) >= 7 and len({c.id for c in CASES}) == len(CASES)
    assert all(c.run in RUNS and c.reference in RUNS for c in CASES)
    assert all(c.diagnosis in DIAGNOSES for c in CASES)
    assert len({c.run for c in CASES}) == len(CASES)
    # two cases share a diagnosis only as the same bug in two model families
    for d in DIAGNOSES:
        families = [c.family for c in CASES if c.diagnosis == d]
        assert len(families) == len(set(families)), d
    assert all(model_family(c.run) == model_family(c.reference) for c in CASES)
    assert [c.diagnosis for c in CASES] != list(DIAGNOSES)[: len(CASES)]  # letters give nothing


def test_every_diagnosis_is_a_real_case_decoys_included():
    assert {c.diagnosis for c in CASES} == set(DIAGNOSES)


def _differing_settings(case):
    run, reference = RUNS[case.run], RUNS[case.reference]
    return {f for f in run.__dataclass_fields__ if getattr(run, f) != getattr(reference, f)}


def test_the_no_bug_case_runs_the_healthy_code_with_another_seed():
    (case,) = [c for c in CASES if c.diagnosis == "no_bug"]
    assert _differing_settings(case) == {"init_seed"} == set(differing_settings(case))
    assert case.bug is None and case.fix is None


def test_the_learning_rate_case_differs_only_in_its_learning_rate():
    (case,) = [c for c in CASES if c.diagnosis == "lr_too_high"]
    assert _differing_settings(case) == {"lr"}
    assert RUNS[case.run].lr >= 5 * RUNS[case.reference].lr


def _functions(spec):
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__ if callable(getattr(spec, f))}


def test_every_reference_runs_the_fixed_code_and_every_code_bug_is_one_swapped_function():
    code_bugs = set(DIAGNOSES) - {"no_bug", "lr_too_high"}
    for case in CASES:
        assert all(f.__name__.endswith("_fixed") for f in _functions(RUNS[case.reference]).values())
        if case.diagnosis not in code_bugs:
            assert case.bug is None and case.fix is None, case.id
            continue
        functions = _functions(RUNS[case.run]).items()
        broken = {n: f for n, f in functions if not f.__name__.endswith("_fixed")}
        assert list(broken.values()) == [case.bug], case.id
        (name,) = broken
        assert getattr(RUNS[case.reference], name) is case.fix, case.id
        assert _differing_settings(case) - {name} <= {"micro_batches"}, case.id


def test_a_case_whose_runs_differ_in_two_functions_has_no_single_bug(monkeypatch):
    two = replace(RUNS["special_tokens_masked"], mlm_loss=bugs.mlm_loss_zero_over_zero)
    monkeypatch.setitem(RUNS, "two_bugs", two)
    case = replace(get_case("B"), run="two_bugs")
    assert set(differing_settings(case)) == {"mask", "mlm_loss"}
    with pytest.raises(ValueError, match="2 functions"):
        case.bug  # noqa: B018


def test_settings_are_the_same_for_every_case_of_a_family():
    assert set(SETTINGS) == set(MODEL_FAMILIES)
    assert all(c.setting == SETTINGS[model_family(c.run)] for c in CASES)
    families = [c.family for c in CASES]
    assert all(families.count(f) >= 2 for f in families), "a family of one case names its bug"
    words = (
        "is_decoder",
        "accumulat",
        "micro",
        "random id",
        "random-id",
        "learning rate",
        "seed",
        "one sentence",
        "Trainer",
        "pack",
        "position",
        "prompt",
        "label",
        "end-of-turn",
        "swap",
        "the policy",
    )
    assert not [(f, w) for f, text in SETTINGS.items() for w in words if w in text]


# --------------------------------------------------------------------------------------------
# Each bug differs from its fix as its comment says
# --------------------------------------------------------------------------------------------


def _padded(tok):
    cls, sep = tok.cls_token_id, tok.sep_token_id
    rows = [[cls, *range(10, 30), sep], [cls, 40, 41, sep]]
    batch = pad_documents(rows, pad_token_id=tok.pad_token_id)
    return batch["input_ids"], batch["attention_mask"]


def test_masking_bugs(tok):
    ids, mask = _padded(tok)
    special = torch.isin(ids, torch.tensor(tok.all_special_ids))
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    _, fixed = bugs.mask_fixed(ids.repeat(50, 1), mask.repeat(50, 1), tok, g())
    _, special_too = bugs.mask_special_tokens_too(ids.repeat(50, 1), mask.repeat(50, 1), tok, g())
    assert not (fixed[special.repeat(50, 1)] != -100).any()
    assert (special_too[special.repeat(50, 1)] != -100).any()
    _, every = bugs.mask_every_token_a_target(ids, mask, tok, g())
    assert torch.equal(every != -100, mask == 1)


def test_loss_bug_is_nan_only_on_an_empty_mask():
    logits = torch.randn(2, 5, 7, requires_grad=True)
    empty = torch.full((2, 5), -100)
    assert math.isnan(bugs.mlm_loss_zero_over_zero(logits, empty).item())
    assert bugs.mlm_loss_fixed(logits, empty).item() == 0.0
    bugs.mlm_loss_zero_over_zero(logits, empty).backward()
    assert torch.isnan(logits.grad).all()  # the NaN reaches every gradient
    labels = empty.clone()
    labels[0, 1] = 3
    assert bugs.mlm_loss_zero_over_zero(logits, labels).item() == pytest.approx(
        bugs.mlm_loss_fixed(logits, labels).item()
    )


def test_clm_batch_bugs(tok):
    cls, sep = tok.cls_token_id, tok.sep_token_id
    rows = [[cls, 10, 11, 12, sep], [cls, 20, sep]]
    fixed = bugs.clm_batch_fixed(rows, tok)
    twice = bugs.clm_batch_shifted_twice(rows, tok)
    assert torch.equal(twice["labels"][:, :-1], fixed["labels"][:, 1:])
    eos = bugs.clm_batch_pad_is_eos(rows, tok)
    assert (fixed["labels"] == sep).sum() == 2 and (eos["labels"] == sep).sum() == 0


def test_decoder_bug_is_not_causal(tok):
    assert bugs.decoder_fixed(tok, 0).config.is_decoder
    assert not bugs.decoder_without_is_decoder(tok, 0).config.is_decoder


def test_random_negatives_touch_only_notnext_segment_b(tok):
    corpus = course_data()[0]
    from lmlessons import nsp_batches

    g = torch.Generator().manual_seed(0)
    pairs = next(nsp_batches(corpus, tok, mlm_probability=0.0, generator=g))
    noisy = bugs.negatives_random_ids(pairs, tok, g)
    changed = noisy["input_ids"] != pairs["input_ids"]
    notnext = pairs["next_sentence_label"] == 1
    assert changed[notnext].any() and not changed[~notnext].any()
    assert not changed[pairs["token_type_ids"] == 0].any()
    assert bugs.negatives_fixed(pairs, tok, g) is pairs


@pytest.mark.slow
def test_mean_of_means_differs_only_for_unequal_micro_batches(tok):
    model = bugs.decoder_fixed(tok, 0)
    cls, sep = tok.cls_token_id, tok.sep_token_id
    equal = [bugs.clm_batch_fixed([[cls, 10, 11, sep]], tok)] * 2
    unequal = [
        bugs.clm_batch_fixed([[cls, 10, sep]], tok),
        bugs.clm_batch_fixed([[cls, *range(10, 30), sep]], tok),
    ]
    assert bugs.accumulate_mean_of_means(model, equal) == pytest.approx(
        bugs.accumulate_fixed(model, equal), rel=1e-5
    )
    assert bugs.accumulate_mean_of_means(model, unequal) != pytest.approx(
        bugs.accumulate_fixed(model, unequal), rel=1e-3
    )


@pytest.mark.slow
def test_answer_label_bug_trains_on_the_prompt_too(chat_tok):
    conversation = chat_rows("validation")[0]
    ids, mask = torch.tensor(conversation.input_ids), torch.tensor(conversation.assistant_masks)
    fixed = bugs.answer_labels_fixed(ids, mask)
    everything = bugs.answer_labels_everything(ids, mask)
    assert torch.equal(fixed != -100, mask == 1) and fixed[-1] == chat_tok.eos_token_id
    assert torch.equal(everything, ids)


def test_prompt_length_is_the_generation_prompt(chat_tok):
    from lmlessons.course.chat import instruction_set

    validation = chat_rows("validation")
    for example, conversation in zip(instruction_set("validation"), validation, strict=True):
        prompt = list(
            chat_tok.apply_chat_template(example["prompt"], add_generation_prompt=True)["input_ids"]
        )
        assert conversation.input_ids[: conversation.prompt_length] == prompt
        assert conversation.assistant_masks.index(1) == len(prompt)  # the answer starts there


def _labelled(rows):
    out = []
    for r in rows:
        labels = bugs.answer_labels_fixed(
            torch.tensor(r.input_ids), torch.tensor(r.assistant_masks)
        )
        out.append((r.input_ids, labels.tolist()))
    return out


def test_chat_batch_bug_drops_the_label_of_every_end_of_turn(chat_tok):
    validation = chat_rows("validation")
    rows = _labelled(validation[:2] + validation[-2:])
    eos = chat_tok.eos_token_id
    (fixed,) = bugs.chat_batch_fixed(rows, chat_tok)
    (bug,) = bugs.chat_batch_pad_is_eos(rows, chat_tok)
    assert (fixed["labels"] == eos).sum() == 4 and (bug["labels"] == eos).sum() == 0
    assert torch.equal(fixed["attention_mask"], bug["attention_mask"])
    assert torch.equal(fixed["labels"].masked_fill(fixed["labels"] == eos, -100), bug["labels"])


def test_packs_keep_conversations_apart_only_with_their_position_ids(tok, chat_tok):
    from lmlessons.course.models import tiny_gpt2

    validation = chat_rows("validation")
    rows = _labelled(validation[:3])
    (fixed,) = bugs.chat_packs_fixed(rows, chat_tok)
    (leaky,) = bugs.chat_packs_no_boundaries(rows, chat_tok)
    assert torch.equal(fixed["labels"], leaky["labels"]) and "position_ids" not in leaky
    model = tiny_gpt2(tok, seed=0)
    first = len(rows[0][0])
    second = slice(first, first + len(rows[1][0]))
    with torch.no_grad():
        alone = bugs.model_logits(model, {"input_ids": torch.tensor([rows[1][0]])})[0]
        packed = bugs.model_logits(model, fixed)[0, second]
        leaked = bugs.model_logits(model, leaky)[0, second]
    assert torch.allclose(packed, alone, atol=1e-5)
    assert not torch.allclose(leaked, alone, atol=1e-2)
    assert len(bugs.chat_packs_fixed(_labelled(validation[:16]), chat_tok)) > 1  # 128 tokens


@pytest.mark.slow
def test_the_trainer_bug_scales_one_step_by_the_accumulation_steps(tok):
    from lmlessons.course import trainer_ga
    from lmlessons.course.models import tiny_bert_mlm

    texts = ["The dog ran.", "It rained all day long on the farm.", "Cats sleep.", "A ship."] * 2
    batch = trainer_ga.model_inputs("BertForMaskedLM", trainer_ga.ga_batch(tok, texts))
    reference = trainer_ga.reference_gradient(tiny_bert_mlm(tok, seed=0), batch)
    ratios = {}
    for factory in (bugs.trainer_model_loss, bugs.trainer_fixed):
        grads = trainer_ga.trainer_gradient(
            tiny_bert_mlm(tok, seed=0), batch, gradient_accumulation_steps=4, trainer_class=factory
        )
        ratios[factory.__name__] = trainer_ga.compare(grads, reference)
    assert ratios["trainer_model_loss"][0] > 2.5  # about 4: four means added up
    assert ratios["trainer_fixed"][1] < 1e-5


def _pairs(n):
    return preference_rows("validation")[:n]


@pytest.mark.slow
def test_swapped_preference_rows_put_the_rejected_answers_first(chat_tok):
    fixed = bugs.preference_rows_fixed(_pairs(3), chat_tok)
    swapped = bugs.preference_rows_swapped(_pairs(3), chat_tok)
    first = fixed["labels"][0][fixed["labels"][0] != -100].tolist()
    assert first == _pairs(1)[0]["chosen_ids"]
    assert torch.equal(swapped["labels"][:3], fixed["labels"][3:])
    assert torch.equal(swapped["labels"][3:], fixed["labels"][:3])


def test_prompt_in_chosen_labels_the_prompts_of_the_chosen_rows_only(chat_tok):
    fixed = bugs.preference_rows_fixed(_pairs(3), chat_tok)
    bug = bugs.preference_rows_prompt_in_chosen(_pairs(3), chat_tok)
    prompt = (fixed["completion_mask"] == 0) & (fixed["attention_mask"] == 1)  # (6, T)
    assert (bug["labels"][:3][prompt[:3]] != -100).all()
    assert torch.equal(bug["labels"][3:], fixed["labels"][3:])
    completion = fixed["completion_mask"] == 1
    assert torch.equal(bug["labels"][completion], fixed["labels"][completion])


def test_a_reference_that_is_the_policy_moves_with_it(chat_tok):
    from lmlessons.course.models import tiny_gpt2

    batch = bugs.preference_rows_fixed(_pairs(4), chat_tok)
    policy, reference = tiny_gpt2(chat_tok, seed=0), tiny_gpt2(chat_tok, seed=0)
    before = bugs.reference_logps_fixed(reference, policy, batch)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(bugs.reference_logps_fixed(reference, policy, batch), before)
    moved = bugs.reference_logps_policy(reference, policy, batch)
    assert not torch.allclose(moved, before, atol=1e-3)
    logits = bugs.model_logits(policy, bugs.preference_inputs(batch))
    from lmlessons.preference import sequence_logprobs

    assert torch.allclose(moved, sequence_logprobs(logits, batch["labels"]))  # log-ratios all 0


def _moe_and_batch(tok):
    from lmlessons.bugzoo.data import MOE_LENGTH, padded_to_length
    from lmlessons.bugzoo.runs import RUNS, run_model

    model = run_model(RUNS["healthy_moe"], tok)  # router_aux_loss_coef = MOE_AUX_COEF
    cls, sep = tok.cls_token_id, tok.sep_token_id
    rows = [[cls, *range(10, 30), sep], [cls, 40, 41, sep], [cls, 50, 51, 52, sep]]
    batch = padded_to_length(bugs.clm_batch_fixed(rows, tok), MOE_LENGTH, tok.pad_token_id)
    return model, batch


def test_the_fixed_moe_loss_is_mixtrals_own_and_the_padding_bug_balances_the_padding(tok):
    from lmlessons.bugzoo.runs import MOE_AUX_COEF

    model, batch = _moe_and_batch(tok)
    n = int(num_targets(batch["labels"], shift=True).sum())
    lm, aux = bugs.moe_loss_fixed(model, batch, n)
    own = model(**batch, output_router_logits=True)  # transformers adds coef * its aux loss
    assert model.config.router_aux_loss_coef == MOE_AUX_COEF
    assert torch.allclose(lm + MOE_AUX_COEF * aux, own.loss, atol=1e-5)
    assert torch.allclose(aux, own.aux_loss)
    lm_bug, aux_bug = bugs.moe_loss_aux_over_padding(model, batch, n)
    assert torch.equal(lm_bug, lm) and not torch.allclose(aux_bug, aux, atol=1e-4)
    # without padding the two agree: the bug is the padding only
    whole = {k: v[:1, :22] for k, v in batch.items()}  # the first row, no padding
    n1 = int(num_targets(whole["labels"], shift=True).sum())
    assert torch.allclose(
        bugs.moe_loss_fixed(model, whole, n1)[1],
        bugs.moe_loss_aux_over_padding(model, whole, n1)[1],
    )


def test_without_output_router_logits_the_aux_loss_is_silently_zero(tok):
    model, batch = _moe_and_batch(tok)
    n = int(num_targets(batch["labels"], shift=True).sum())
    assert model(**bugs._moe_inputs(batch)).router_logits is None  # the config's default: False
    lm, aux = bugs.moe_loss_router_logits_off(model, batch, n)
    assert aux == 0 and not isinstance(aux, torch.Tensor)  # transformers returns a plain 0
    assert torch.equal(lm, bugs.moe_loss_fixed(model, batch, n)[0])


def test_the_accumulation_bug_adds_k_aux_losses_where_the_fix_averages_them(tok):
    model, batch = _moe_and_batch(tok)
    micro = [{k: v[i : i + 1] for k, v in batch.items()} for i in range(3)]
    loss, aux = bugs.moe_accumulate_fixed(model, micro, bugs.moe_loss_fixed)
    model.zero_grad(set_to_none=True)
    loss_bug, aux_bug = bugs.moe_accumulate_aux_not_divided(model, micro, bugs.moe_loss_fixed)
    assert aux_bug == pytest.approx(3 * aux, rel=1e-5)
    coef = model.config.router_aux_loss_coef
    assert loss_bug - loss == pytest.approx(2 * coef * aux, rel=1e-4)  # 3 aux terms, not 1
    model.zero_grad(set_to_none=True)
    one = [batch]  # one micro-batch: the two agree
    assert bugs.moe_accumulate_fixed(model, one, bugs.moe_loss_fixed) == pytest.approx(
        bugs.moe_accumulate_aux_not_divided(model, one, bugs.moe_loss_fixed)
    )


def test_mtp_bugs_score_depth_2_one_token_ahead_or_not_at_all(tok):
    from lmlessons.bugzoo.runs import RUNS, run_model
    from lmlessons.mtp import mtp_losses

    model = run_model(RUNS["healthy_mtp"], tok)
    batch = bugs.clm_batch_fixed([[tok.cls_token_id, *range(10, 30), tok.sep_token_id]] * 2, tok)
    logits = model(batch["input_ids"], batch["attention_mask"])  # 2 x (B, T, V)
    _, losses = bugs.mtp_loss_fixed(logits, batch["labels"])
    assert torch.equal(losses, mtp_losses(logits, batch["labels"]))
    _, short = bugs.mtp_loss_shifted_one_short(logits, batch["labels"])
    assert torch.allclose(short[0], losses[0]) and not torch.allclose(short[1], losses[1])
    assert torch.allclose(short[1], mtp_losses(logits[1:], batch["labels"])[0])  # 1 ahead
    only, logged = bugs.mtp_loss_extra_depth_not_added(logits, batch["labels"])
    assert torch.equal(logged, losses) and torch.equal(only, losses[0])
    only.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.blocks.parameters())
    assert model.lm.lm_head.weight.grad.any()


def test_the_padding_check_is_zero_for_the_fixed_loss_only(tok):
    from lmlessons.bugzoo.symptoms import padding_sensitivity

    model, batch = _moe_and_batch(tok)
    for moe_loss, moves in ((bugs.moe_loss_fixed, False), (bugs.moe_loss_aux_over_padding, True)):
        step = lambda m, micro, f=moe_loss: bugs.moe_accumulate_fixed(m, micro, f)[0]  # noqa: E731
        check = padding_sensitivity(model, [batch], step, tok.unk_token_id)
        assert (check["gradient_padding_change"] > 1e-3) == moves, moe_loss.__name__
        assert (check["loss_padding_change"] > 1e-5) == moves, moe_loss.__name__


# --------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------


def test_all_right_passes(records):
    result = check("bug_zoo", RIGHT)
    assert result.passed and result.status == "passed"
    assert len(result.passed_checks) == len(CASES)


def test_one_wrong_fails_naming_the_case_and_the_evidence(records):
    answers = {**RIGHT, "C": "labels_shifted_twice"}
    result = check("bug_zoo", answers)
    assert result.status == "failed" and result.mistake == "wrong_diagnosis"
    head = result.message.split("\n\n")[0]  # the verdict's first line names the wrong cases
    assert head == f"1 of {len(CASES)} diagnoses wrong: case C."
    assert DIAGNOSES["labels_shifted_twice"].would_show in result.message
    assert evidence(get_case("C"), records) in result.message
    assert f"Right so far: {', '.join(c for c in LETTERS if c != 'C')}." in result.message
    assert "hint(" not in str(result)  # no hints for this exercise: the footer points at the widget


def test_partial_answers_say_which_are_right():
    result = check("bug_zoo", {"A": RIGHT["A"], "B": None, "F": RIGHT["F"]})
    assert result.status == "failed" and result.mistake == "incomplete"
    missing = ", ".join(c.id for c in group_cases("part1") if c.id not in "AF")
    assert "Right so far: A, F." in result.message
    assert f"Not answered yet: {missing}." in result.message  # the groups started only
    later = [c.id for c in CASES if c.group != "part1"]
    assert all(f"{c}" in result.message.split("Not started")[1] for c in later)
    assert check("bug_zoo", {}).status == "not_attempted"
    assert check("bug_zoo", {c: None for c in RIGHT}).status == "not_attempted"


def test_each_group_passes_on_its_own_once_started():
    for group in GROUPS:
        answers = {c.id: c.diagnosis for c in group_cases(group)}
        assert check("bug_zoo", answers).passed, group
        first, *rest = group_cases(group)
        result = check("bug_zoo", {c.id: c.diagnosis for c in rest})
        assert result.mistake == "incomplete" and f"Not answered yet: {first.id}." in result.message


def test_groups_follow_the_lessons_that_teach_their_bugs():
    assert list(GROUPS) == ["part1", "part2", "part3", "part4"]
    assert all(c.group in GROUPS for c in CASES)
    lessons = {g: {c.lesson for c in group_cases(g)} for g in GROUPS}
    assert lessons["part1"] <= {"", "01", "02", "03", "04", "05", "06", "07"}
    assert lessons["part2"] <= {"09", "10"} and lessons["part3"] <= {"11", "12"}
    assert lessons["part4"] == {"14", "15"}
    assert len(group_cases("part3")) >= 3 and len(group_cases("part4")) >= 3
    with pytest.raises(ValueError, match="part1"):
        group_cases("part5")


def test_a_group_offers_the_diagnoses_of_its_cases_and_of_the_groups_before():
    from lmlessons.bugzoo.cases import offered_diagnoses

    first = {d.id for d in offered_diagnoses("part1")}
    assert first == {c.diagnosis for c in group_cases("part1")}
    assert "reference_is_policy" not in first and "prompt_not_masked" not in first
    third = {d.id for d in offered_diagnoses("part3")}
    assert third < set(DIAGNOSES) and "router_logits_off" not in third
    assert {d.id for d in offered_diagnoses("part4")} == set(DIAGNOSES)
    assert offered_diagnoses() == tuple(DIAGNOSES.values())


def test_a_function_returning_the_answers_is_checked_and_a_stub_is_not_attempted():
    assert check("bug_zoo", lambda: RIGHT).passed

    def stub():
        raise NotImplementedError("Your code here")

    assert check("bug_zoo", stub).status == "not_attempted"
    assert check("bug_zoo", lambda: None).status == "not_attempted"
    assert check("bug_zoo", lambda: {"A": "no_bug"}).mistake == "wrong_diagnosis"


def test_unknown_ids_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown case 'Z'.*A, B"):
        check("bug_zoo", {"Z": "no_bug"})
    with pytest.raises(ValueError, match=r"unknown diagnosis 'typo'.*no_bug"):
        check("bug_zoo", {"A": "typo"})
    with pytest.raises(TypeError, match="dict"):
        check("bug_zoo", ["A", "no_bug"])


def test_feedback_for_each_case(records):
    for case in CASES:
        right, text = feedback(case.id, case.diagnosis, records)
        assert right and text.startswith(f"Case {case.id}: right")
        wrong = "no_bug" if case.diagnosis != "no_bug" else "lr_too_high"
        right, text = feedback(case.id, wrong, records)
        assert not right and DIAGNOSES[wrong].would_show in text


# --------------------------------------------------------------------------------------------
# The widget and the reveal
# --------------------------------------------------------------------------------------------


def test_widget_shows_the_case_and_its_kernel_free_picture(records):
    box = bug_zoo_widget(records)
    assert marker_fields(shown_marker(box)) == {
        "case": "A",
        "diagnosis": "none",
        "verdict": "none",
        "answered": "0",
        "right": "0",
    }
    page = box._repr_mimebundle_()["text/html"]
    assert symptom_table_html("A", records) in page and "data:image/png;base64," in page
    assert html.escape(get_case("A").setting) in page


def test_widget_judges_and_keeps_each_case_answer(records):
    box = bug_zoo_widget(records)
    before = box._repr_mimebundle_()["text/html"]
    box.controls["diagnosis"].value = "no_bug"
    f = marker_fields(shown_marker(box))
    assert f["verdict"] == "wrong" and f["answered"] == "1" and f["right"] == "0"
    assert html.escape(DIAGNOSES["no_bug"].would_show) in shown_html(box)
    assert box._repr_mimebundle_()["text/html"] != before
    box.controls["diagnosis"].value = RIGHT["A"]
    assert marker_fields(shown_marker(box))["verdict"] == "right"
    box.controls["case"].value = "B"  # a new case starts unanswered ...
    f = marker_fields(shown_marker(box))
    assert f["case"] == "B" and f["diagnosis"] == "none" and f["right"] == "1"
    box.controls["case"].value = "A"  # ... and the old one keeps its answer
    assert marker_fields(shown_marker(box))["diagnosis"] == RIGHT["A"]
    assert (
        box.answers == {"A": RIGHT["A"]} and check("bug_zoo", box.answers).mistake == "incomplete"
    )


def test_widget_of_a_group_offers_its_cases_only(records):
    box = bug_zoo_widget(records, group="part3")
    options = [value for _, value in box.controls["case"].options]
    assert options == [c.id for c in group_cases("part3")]
    assert marker_fields(shown_marker(box))["case"] == options[0]
    with pytest.raises(ValueError, match="not in group"):
        bug_zoo_widget(records, group="part3", case="A")


def test_group_tables_show_the_group_and_its_instruments(records):
    page = all_symptoms_html(records, group="part3")
    assert page.count("<tr>") == len(group_cases("part3")) + 1
    assert "NSP" not in page and "reward accuracy" in page
    assert all_examples_html(records, group="part2").count("<tr>") == 4


def test_reveal_shows_the_code_that_ran_or_the_settings_that_differ():
    import inspect

    for case in CASES:
        page = html.unescape(reveal_html(case))
        assert case.title in page and case.diagnosis in page
        if case.bug is None:
            for name in _differing_settings(case):
                assert f"{name}: {getattr(RUNS[case.run], name)!r}" in page, case.id
            continue
        for fn in (case.bug, case.fix):
            assert fn.__name__ in page
        assert "BUG" in inspect.getsource(case.bug) and "FIX" in inspect.getsource(case.fix)


@pytest.mark.slow
def test_the_tool_records_into_a_folder_it_is_given(tmp_path, capsys):
    from tools import bugzoo

    assert bugzoo.main(["nan_on_empty_mask", "--out", str(tmp_path)]) == 0
    recorded = load_records(tmp_path)
    assert list(recorded) == ["nan_on_empty_mask"]
    assert summary(recorded["nan_on_empty_mask"])["first_nan_step"] > 0
    with pytest.raises(SystemExit):
        bugzoo.main(["no_such_run", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # it writes only where it is told
        bugzoo.main(["nan_on_empty_mask"])
    assert [p.name for p in tmp_path.iterdir()] == ["runs.json"]


# --------------------------------------------------------------------------------------------
# Every case needs two instruments to tell it from its nearest decoy
# --------------------------------------------------------------------------------------------


def _sign_rows(records):
    """Each case's signs, and for each model family a run with no symptom (every instrument
    "≈" where measured): the decoys a diagnosis must rule out."""
    rows = {c.id: signs(c.family, *case_summaries(c, records)) for c in CASES}
    for family in MODEL_FAMILIES:
        rows[f"no symptom ({family})"] = {
            i.id: NOT_MEASURED if i.metric(family) is None else "≈" for i in INSTRUMENTS
        }
    return rows


def nearest_decoys(records):
    """``{case: (nearest other case or symptom-free run, on how many instruments they differ)}``
    (a symptom-free run is the no-bug case's own diagnosis, not a decoy of it)."""
    rows = _sign_rows(records)
    nearest = {}
    for case in CASES:
        others = {
            k: distance(rows[case.id], v)
            for k, v in rows.items()
            if k != case.id and not (case.diagnosis == "no_bug" and k.startswith("no symptom"))
        }
        decoy = min(others, key=others.__getitem__)
        nearest[case.id] = (decoy, others[decoy])
    return nearest


def test_every_case_differs_from_its_nearest_decoy_on_two_instruments(records):
    close = {c: d for c, d in nearest_decoys(records).items() if d[1] < 2}
    assert not close, f"cases told apart from a decoy by fewer than 2 instruments: {close}"


def test_the_decoy_check_fails_when_a_case_shows_one_symptom(records):
    (case,) = [c for c in CASES if c.diagnosis == "mean_of_means"]
    doctored = {**records, case.run: {**records[case.run]}}
    doctored[case.run]["one_step_check"] = records[case.reference]["one_step_check"]
    assert nearest_decoys(doctored)[case.id][1] < 2


def test_symptom_signs():
    assert symptom(1.0, 1.0) == symptom(1.04, 1.0) == symptom(0.96, 1.0) == "≈"
    assert symptom(1.1, 1.0) == "↑" and symptom(0.9, 1.0) == "↓"
    assert symptom(2.0, 1.0) == "↑↑" and symptom(0.5, 1.0) == "↓↓"
    assert symptom(math.nan, 1.0) == "NaN" and symptom(None, 1.0) == NOT_MEASURED
    assert symptom(1e-7, 3e-7, floor=1e-3) == "≈" and symptom(0.1, 1e-7, floor=1e-3) == "↑↑"
    assert distance({"a": "≈", "b": "↑"}, {"a": "≈", "b": "↑↑"}) == 1


def test_the_symptom_tables_hold_every_case(records):
    page = all_symptoms_html(records)
    assert page.count("<tr>") == len(CASES) + 1
    assert all(html.escape(i.label) in page for i in INSTRUMENTS)
    assert "NaN from step" in page  # the 0 / 0 case
    examples = all_examples_html(records)
    assert examples.count("<tr>") == len(CASES) + 1


def test_healthy_curves_do_not_rise(records):
    for reference in {c.reference for c in CASES}:
        loss = records[reference]["history"]["loss"]
        first, last = sum(loss[:20]) / 20, sum(loss[-20:]) / 20
        assert last <= first * 1.05, (reference, first, last)
    (case,) = [c for c in CASES if c.diagnosis == "lr_too_high"]
    loss = records[case.run]["history"]["loss"]
    assert sum(loss[-20:]) / 20 > 1.05 * sum(loss[:20]) / 20  # the learning-rate case does
