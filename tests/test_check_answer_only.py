"""The ``assistant_labels`` exercise (lesson 10): correct functions pass, each naive draft is
rejected with its own mistake, and the checker's expectations are transformers' assistant mask."""

from __future__ import annotations

import pytest
import torch

from lmlessons.answer_only import assistant_only_labels
from lmlessons.course.chat import chat_tokenizer
from lmlessons.exercises import EXERCISES, check, hint, solution
from lmlessons.exercises.check_answer_only import PLAIN_TEMPLATE, ChatTokenizer, _cases, _expected

NAME = "assistant_labels"


def _spans(tokenizer, messages):
    """(start, end) of each assistant turn, found from prefix renderings."""
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            start = len(
                tokenizer.apply_chat_template(messages[:i], add_generation_prompt=True)["input_ids"]
            )
            yield start, len(tokenizer.apply_chat_template(messages[: i + 1])["input_ids"])


def tensor_version(tokenizer, messages):
    ids = torch.tensor(tokenizer.apply_chat_template(messages)["input_ids"])
    keep = torch.zeros_like(ids, dtype=torch.bool)
    for start, end in _spans(tokenizer, messages):
        keep[start:end] = True
    return ids.masked_fill(~keep, -100)


def everything(tokenizer, messages):
    return tokenizer.apply_chat_template(messages)["input_ids"]


def with_the_mask(tokenizer, messages):  # all zeros: the template has no generation tags
    out = tokenizer.apply_chat_template(
        messages, return_dict=True, return_assistant_tokens_mask=True
    )
    return assistant_only_labels(out["input_ids"], out["assistant_masks"])


def without_eos(tokenizer, messages):
    labels = tensor_version(tokenizer, messages)
    return labels.masked_fill(labels == tokenizer.eos_token_id, -100)


def last_only(tokenizer, messages):
    ids = tokenizer.apply_chat_template(messages)["input_ids"]
    start = len(
        tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True)["input_ids"]
    )
    return [-100] * start + ids[start:]


def with_header(tokenizer, messages):  # starts before the "assistant:" header
    ids = tokenizer.apply_chat_template(messages)["input_ids"]
    labels = [-100] * len(ids)
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            start = len(tokenizer.apply_chat_template(messages[:i])["input_ids"])
            end = len(tokenizer.apply_chat_template(messages[: i + 1])["input_ids"])
            labels[start:end] = ids[start:end]
    return labels


def shifted(tokenizer, messages):
    labels = tensor_version(tokenizer, messages)
    return torch.cat([labels[1:], torch.tensor([-100])])


def one_short(tokenizer, messages):
    return tensor_version(tokenizer, messages)[:-1]


def as_floats(tokenizer, messages):
    return tensor_version(tokenizer, messages).float()


def stub(tokenizer, messages):
    raise NotImplementedError("Your code here")


@pytest.mark.parametrize(
    "fn", [EXERCISES[NAME].solution, tensor_version], ids=["solution", "tensor"]
)
def test_correct_functions_pass(fn):
    result = check(NAME, fn)
    assert result.passed, str(result)
    assert len(result.passed_checks) == 4


@pytest.mark.parametrize(
    "fn,code",
    [
        (everything, "trains_on_prompt"),
        (with_the_mask, "no_targets"),
        (without_eos, "drops_end_of_turn"),
        (last_only, "last_answer_only"),
        (with_header, "trains_on_prompt"),
        (shifted, "labels_shifted"),
        (one_short, "wrong_shape"),
        (as_floats, "wrong_dtype"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_naive_versions_are_rejected_with_their_mistake(fn, code):
    result = check(NAME, fn)
    assert result.status == "failed" and result.mistake == code, str(result)
    assert f'hint("{NAME}", 1)' in str(result)
    assert str(check(NAME, fn)) == str(result)  # deterministic text


def test_the_stub_is_not_attempted():
    result = check(NAME, stub)
    assert result.status == "not_attempted" and EXERCISES[NAME].signature in result.message


def test_the_expected_labels_are_transformers_assistant_mask_and_the_learner_gets_no_tags():
    tokenizer = ChatTokenizer()
    assert tokenizer.chat_template == PLAIN_TEMPLATE and "{% generation %}" not in PLAIN_TEMPLATE
    cases = _cases(tokenizer)
    assert len(cases) == 18 and {len(c.args[1]) // 2 for c in cases} == {1, 2, 3}
    assert {c.args[0].eos_token for c in cases} == {"[SEP]", "[MASK]", "[UNK]"}
    for case in cases:
        learner, reference = case.args[0], case.args[0].reference
        ids, labels = _expected(case.args[1], reference)
        assert labels == tensor_version(reference, case.args[1]).tolist()
        assert ids == learner.apply_chat_template(case.args[1])["input_ids"]  # the same tokens
        assert "{% generation %}" not in learner.chat_template
        assert labels.count(reference.eos_token_id) == len(case.args[1]) // 2
    assert _expected(cases[0].args[1])[1] == _expected(cases[0].args[1], chat_tokenizer())[1]


def test_hints_and_solution():
    texts = [hint(NAME, level).text for level in (1, 2, 3)]
    assert len(set(texts)) == 3 and all(len(t) > 80 for t in texts)
    assert f"def {NAME}(" in solution(NAME).source
