"""The ``assistant_labels`` exercise (lesson 10) beyond its attempts (``tests/battery/``): the
stub, the checker's expectations against transformers' assistant mask, hints and solution."""

from __future__ import annotations

from battery.assistant_labels import torch_mask as tensor_version

from lmlessons.course.chat import chat_tokenizer
from lmlessons.exercises import EXERCISES, check, hint, solution
from lmlessons.exercises.check_answer_only import PLAIN_TEMPLATE, ChatTokenizer, _cases, _expected

NAME = "assistant_labels"
__all__ = ["tensor_version"]  # a correct function tests/test_exercises.py borrows


def test_the_stub_is_not_attempted():
    def stub(tokenizer, messages):
        raise NotImplementedError("Your code here")

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
