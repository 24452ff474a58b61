"""lmlessons.course.preferences: the course's preference set (lesson 11) and its encoding."""

from __future__ import annotations

import pytest

from lmlessons.course.chat import chat_tokenizer, instruction_set
from lmlessons.course.preferences import KINDS, encode_pair, preference_set
from lmlessons.preference import preference_batch


@pytest.fixture(scope="module")
def pairs() -> list[dict]:
    return preference_set("train")


@pytest.fixture(scope="module")
def tokenizer():
    return chat_tokenizer()


def test_one_pair_per_question_chosen_is_the_right_answer(pairs):
    examples = instruction_set("train")
    assert len(pairs) == len(examples)
    for pair, example in zip(pairs, examples):
        assert pair["prompt"] == example["prompt"]
        assert pair["chosen"] == example["completion"]
        assert pair["task"] == example["task"]
        assert pair["rejected"][0]["role"] == "assistant"
        assert pair["rejected"] != pair["chosen"]


def test_every_kind_occurs_and_matches_its_task(pairs):
    assert {p["kind"] for p in pairs} == set(KINDS)
    for p in pairs:
        assert (p["task"] == "topic") == (p["kind"] == "wrong topic")


def test_the_same_list_on_every_call():
    assert preference_set("validation") == preference_set("validation")
    assert (
        preference_set("validation") != preference_set("train")[: len(preference_set("validation"))]
    )


def test_bad_split_names_the_argument():
    with pytest.raises(ValueError, match="split"):
        preference_set("test")


def test_too_long_pairs_reject_a_longer_completion(pairs, tokenizer):
    for p in [p for p in pairs if p["kind"] == "too long"][:50]:
        ids = encode_pair(tokenizer, p)
        assert len(ids["rejected_ids"]) > len(ids["chosen_ids"])
        assert ids["rejected_ids"][0] == ids["chosen_ids"][0]  # the right word first


def test_encode_pair_completions_end_in_one_sep(pairs, tokenizer):
    for p in pairs[:40]:
        ids = encode_pair(tokenizer, p)
        for key in ("chosen_ids", "rejected_ids"):
            assert ids[key][-1] == tokenizer.eos_token_id
            assert ids[key].count(tokenizer.eos_token_id) == 1
        text = tokenizer.decode(ids["prompt_ids"] + ids["chosen_ids"])
        assert text.startswith(tokenizer.bos_token)
    batch = preference_batch([encode_pair(tokenizer, p) for p in pairs[:4]], pad_token_id=0)
    assert batch["input_ids"].shape[0] == 8


def test_encode_pair_rejects_a_non_pair(tokenizer):
    with pytest.raises(TypeError, match="pair"):
        encode_pair(tokenizer, {"prompt": []})


def test_preference_sample_is_seeded_and_checked():
    from lmlessons.course.preferences import preference_sample

    first = preference_sample("validation", 8, seed=1)
    assert first == preference_sample("validation", 8, seed=1)
    assert first != preference_sample("validation", 8, seed=2)
    assert len({p["prompt"][0]["content"] + p["task"] for p in first}) == 8  # no repeats
    with pytest.raises(ValueError, match="n must be at most"):
        preference_sample("validation", 10_000)


def test_the_shipped_runs_cover_every_loss_type_beta_and_seed():
    from lmlessons.course.preferences import RUN_LOSS_TYPES, preference_runs

    record = preference_runs()
    keys = {(r["loss_type"], r["beta"], r["seed"]) for r in record["runs"]}
    betas = {r["beta"] for r in record["runs"]}
    seeds = {r["seed"] for r in record["runs"]}
    assert len(seeds) >= 3 and len(betas) >= 2
    assert keys == {(t, b, s) for t in RUN_LOSS_TYPES for b in betas for s in seeds}
    for r in record["runs"]:
        assert len(r["steps"]) == len(r["probes"]) and r["steps"][0] == 0
        assert len(r["loss"]) == r["steps"][-1]
        start = r["probes"][0]
        assert start["reward_accuracy"] == 0.0  # the policy is the reference: ties


def test_preference_runs_names_a_missing_file(tmp_path):
    from lmlessons.course.preferences import preference_runs

    with pytest.raises(FileNotFoundError, match=r"tools\.preference_runs"):
        preference_runs(tmp_path)


@pytest.mark.slow
def test_one_recorded_run_moves_the_policy():
    from lmlessons.course.preferences import preference_run

    record = preference_run("sigmoid", 0.5, 0, steps=4)
    assert record["steps"] == [0, 4] and len(record["loss"]) == 4
    assert record["loss"][0] == pytest.approx(0.6931, abs=1e-4)  # policy = reference at step 1
    before, after = record["probes"]
    margin = [p["chosen_logps"] - p["rejected_logps"] for p in (before, after)]
    assert margin[1] > margin[0]
