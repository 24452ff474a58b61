"""lmlessons.answer_only: answer-only labels (against transformers' assistant mask), their
invariants (hypothesis), the two normalisations, and the masks through packing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from lmlessons import clm_loss
from lmlessons.answer_only import (
    assistant_only_labels,
    completion_only_labels,
    per_example_mean_loss,
    per_token_mean_loss,
)
from lmlessons.packing import flatten_documents
from lmlessons.shifting import shift_labels

V = 13
WORDS = ["the", "dog", "ran", "home", "which", "topic", "?", "animals", "sea", "first", "word"]


def _logits(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def _conversation(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    messages = []
    for question, answer in turns:
        messages += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
    return messages


def _rendered(tok, messages):
    out = tok.apply_chat_template(messages, return_dict=True, return_assistant_tokens_mask=True)
    return out["input_ids"], out["assistant_masks"]


def _answer_positions_by_prefixes(tok, messages) -> set[int]:
    """The oracle without the generation mask: each assistant turn is what rendering the
    conversation up to it adds to the rendering up to its question with the generation prompt."""
    positions: set[int] = set()
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = tok.apply_chat_template(messages[:i], add_generation_prompt=True)["input_ids"]
        upto = tok.apply_chat_template(messages[: i + 1])["input_ids"]
        assert upto[: len(before)] == before  # the prompt is a prefix of the full rendering
        positions |= set(range(len(before), len(upto)))
    return positions


# ------------------------------------------------------------------------ assistant_only_labels


def test_assistant_only_labels_keeps_the_masked_ids():
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 1]])
    assert assistant_only_labels(ids, mask).tolist() == [[-100, 6, 7, -100], [-100, -100, -100, 12]]
    assert assistant_only_labels([5, 6], [1, 0]).tolist() == [5, -100]  # lists, as tokenizers give
    assert assistant_only_labels(ids[0], mask[0].bool()).tolist() == [-100, 6, 7, -100]
    assert ids.tolist() == [[5, 6, 7, 8], [9, 10, 11, 12]]  # not modified


def test_assistant_only_labels_rejects_bad_input():
    with pytest.raises(ValueError, match="assistant_masks must have the shape"):
        assistant_only_labels(torch.tensor([1, 2, 3]), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="only 0 and 1"):
        assistant_only_labels(torch.tensor([1, 2]), torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="input_ids"):
        assistant_only_labels("the dog", [1])
    with pytest.raises(TypeError, match="input_ids"):
        assistant_only_labels(torch.tensor([1.0, 2.0]), [1, 0])
    with pytest.raises(TypeError, match="assistant_masks"):
        assistant_only_labels([1, 2], [[1], 0])


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: assistant_only_labels(5, [1]),
            TypeError,
            "input_ids must be a torch.Tensor or a list of token ids, got int",
        ),
        (
            lambda: assistant_only_labels("the dog", [1]),
            TypeError,
            "input_ids must be a torch.Tensor or a list of token ids, got str",
        ),
        (lambda: assistant_only_labels([[1], 2], [1]), TypeError, "input_ids must hold int"),
        (lambda: assistant_only_labels([1], torch.tensor([0.5])), TypeError, "assistant_masks "),
        (lambda: assistant_only_labels([1, 2], [1, 2]), ValueError, "assistant_masks must hold"),
        (lambda: completion_only_labels("2", [3]), TypeError, "prompt_ids must be a "),
        (lambda: completion_only_labels([2], [[3]]), ValueError, "completion_ids must be one "),
        (lambda: completion_only_labels([2], "3"), TypeError, "completion_ids must be a "),
        (lambda: completion_only_labels([2], []), ValueError, "completion_ids is empty"),
    ],
)
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)


def test_the_targets_are_the_answers_transformers_renders(chat_tok):
    """Oracle: the generation mask of transformers' apply_chat_template against the answer
    tokens found by rendering prefixes of the conversation."""
    messages = _conversation(
        [("Which topic? The dog ran home.", "animals"), ("First word?", "the")]
    )
    ids, masks = _rendered(chat_tok, messages)
    labels = assistant_only_labels(ids, masks)
    targets = {i for i, label in enumerate(labels.tolist()) if label != -100}
    assert targets == _answer_positions_by_prefixes(chat_tok, messages)
    answer_tokens = [chat_tok.convert_ids_to_tokens(ids[i]) for i in sorted(targets)]
    assert answer_tokens == ["animals", "[SEP]", "the", "[SEP]"]


def test_without_generation_tags_transformers_marks_nothing(chat_tok):
    template = chat_tok.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", ""
    )
    messages = _conversation([("First word? The dog ran.", "the")])
    out = chat_tok.apply_chat_template(
        messages, chat_template=template, return_dict=True, return_assistant_tokens_mask=True
    )
    assert set(out["assistant_masks"]) == {0}
    assert (assistant_only_labels(out["input_ids"], out["assistant_masks"]) == -100).all()


turns = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    ),
    min_size=1,
    max_size=3,
)


@given(turns)
def test_every_end_of_turn_is_a_target_and_no_prompt_token_is(chat_tok, conversation):
    messages = _conversation(conversation)
    ids, masks = _rendered(chat_tok, messages)
    labels = assistant_only_labels(ids, masks).tolist()
    eos = chat_tok.eos_token_id
    # every end-of-turn token closes an answer, and each one is a target
    assert ids.count(eos) == len(conversation)
    assert all(labels[i] == eos for i, t in enumerate(ids) if t == eos)
    # no token of a prompt (start token, headers, questions) is a target
    answers = _answer_positions_by_prefixes(chat_tok, messages)
    assert all(labels[i] == -100 for i in range(len(ids)) if i not in answers)
    # the targets are the answers' tokens and one end-of-turn token per answer
    n_answer_tokens = sum(
        len(chat_tok(a, add_special_tokens=False)["input_ids"]) for _, a in conversation
    )
    assert sum(label != -100 for label in labels) == n_answer_tokens + len(conversation)


# ------------------------------------------------------------------------ completion_only_labels


def test_completion_only_labels_masks_the_prompt():
    out = completion_only_labels([2, 7, 8], torch.tensor([9, 3]))
    assert out["input_ids"].tolist() == [2, 7, 8, 9, 3]
    assert out["completion_mask"].tolist() == [0, 0, 0, 1, 1]
    assert out["labels"].tolist() == [-100, -100, -100, 9, 3]
    with pytest.raises(ValueError, match="completion_ids is empty"):
        completion_only_labels([2, 7], [])
    with pytest.raises(ValueError, match="prompt_ids must be one sequence"):
        completion_only_labels([[2, 7]], [3])
    with pytest.raises(TypeError, match="completion_ids"):
        completion_only_labels([2], "3")


@given(turns.map(lambda t: t[:1]))
def test_completion_only_equals_assistant_only_for_one_answer(chat_tok, conversation):
    messages = _conversation(conversation)
    prompt = chat_tok.apply_chat_template(messages[:1], add_generation_prompt=True)["input_ids"]
    ids, masks = _rendered(chat_tok, messages)
    out = completion_only_labels(prompt, ids[len(prompt) :])
    assert out["input_ids"].tolist() == ids
    assert torch.equal(out["labels"], assistant_only_labels(ids, masks))


def test_completion_only_trains_on_the_last_answer_only(chat_tok):
    messages = _conversation([("Which topic? The dog ran.", "animals"), ("First word?", "the")])
    prompt = chat_tok.apply_chat_template(messages[:3], add_generation_prompt=True)["input_ids"]
    ids, masks = _rendered(chat_tok, messages)
    completion = completion_only_labels(prompt, ids[len(prompt) :])["labels"]
    assistant = assistant_only_labels(ids, masks)
    assert int((completion != -100).sum()) == 2  # "the" [SEP]
    assert int((assistant != -100).sum()) == 4  # "animals" [SEP] "the" [SEP]


# ------------------------------------------------------------------------ normalisation


def test_per_token_loss_is_clm_loss():
    logits, labels = _logits(2, 6, V), torch.randint(0, V, (2, 6))
    labels[0, :4] = -100
    torch.testing.assert_close(per_token_mean_loss(logits, labels), clm_loss(logits, labels))
    torch.testing.assert_close(
        per_token_mean_loss(logits, labels, num_items_in_batch=20),
        clm_loss(logits, labels, num_items_in_batch=20),
    )


def _example_means(logits: torch.Tensor, labels: torch.Tensor) -> list[float]:
    targets = shift_labels(labels)
    means = []
    for row in range(labels.shape[0]):
        keep = targets[row] != -100
        if keep.any():
            means.append(F.cross_entropy(logits[row][keep], targets[row][keep]).item())
    return means


def test_per_example_mean_loss_weighs_every_example_the_same():
    logits = _logits(3, 7, V)
    labels = torch.randint(0, V, (3, 7), generator=torch.Generator().manual_seed(1))
    labels[0, :5] = -100  # 2 targets
    labels[2] = -100  # no target: left out
    means = _example_means(logits.detach(), labels)
    assert len(means) == 2
    loss = per_example_mean_loss(logits, labels)
    assert loss.item() == pytest.approx(sum(means) / 2, rel=1e-6)
    assert loss.item() != pytest.approx(per_token_mean_loss(logits, labels).item(), rel=1e-3)
    loss.backward()
    assert logits.grad is not None and torch.count_nonzero(logits.grad[2]) == 0


def test_per_example_mean_keeps_an_example_with_a_single_target():
    logits = _logits(2, 5, V)
    labels = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(4))
    labels[0, :4] = -100  # after the shift: one target (labels[0, 4], scored at position 3)
    means = _example_means(logits.detach(), labels)
    assert len(means) == 2
    loss = per_example_mean_loss(logits, labels)
    assert loss.item() == pytest.approx(sum(means) / 2, rel=1e-6)


def test_per_example_mean_accumulates_with_the_step_count():
    logits = _logits(4, 6, V)
    labels = torch.randint(0, V, (4, 6), generator=torch.Generator().manual_seed(2))
    labels[1, :4] = -100
    labels[3] = -100  # no target: the second micro-batch holds one example, the step three
    full = per_example_mean_loss(logits, labels)
    means = _example_means(logits.detach(), labels)
    assert full.item() == pytest.approx(sum(means) / 3, rel=1e-6)
    parts = [
        per_example_mean_loss(logits[i : i + 2], labels[i : i + 2], num_examples_in_batch=3)
        for i in (0, 2)
    ]
    torch.testing.assert_close(sum(parts), full)
    mean_of_means = (
        sum(per_example_mean_loss(logits[i : i + 2], labels[i : i + 2]) for i in (0, 2)) / 2
    )
    assert mean_of_means.item() == pytest.approx((sum(means[:2]) / 2 + means[2]) / 2, rel=1e-6)
    assert mean_of_means.item() != pytest.approx(full.item(), rel=1e-3)  # the third weighs 1/2


def test_per_example_mean_without_targets_is_zero_and_backpropagates():
    logits = _logits(2, 4, V)
    loss = per_example_mean_loss(logits, torch.full((2, 4), -100))
    assert loss.item() == 0.0
    loss.backward()
    assert logits.grad is not None and torch.count_nonzero(logits.grad) == 0


def test_per_example_mean_rejects_bad_input():
    logits = _logits(2, 4, V)
    with pytest.raises(ValueError, match="num_examples_in_batch must be >= 1"):
        per_example_mean_loss(logits, torch.zeros(2, 4, dtype=torch.long), num_examples_in_batch=0)
    with pytest.raises(TypeError, match="num_examples_in_batch"):
        per_example_mean_loss(
            logits, torch.zeros(2, 4, dtype=torch.long), num_examples_in_batch=1.5
        )
    with pytest.raises(ValueError, match=r"labels must have shape \(B, T\)"):
        per_example_mean_loss(logits[0], torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="labels must have shape"):
        per_example_mean_loss(logits, torch.zeros(2, 5, dtype=torch.long))


# ------------------------------------------------------------------------ packing


def _two_examples(tok):
    rows = []
    for question, answer in [
        ("Which topic? The dog ran home.", "animals"),
        ("First word? A sea.", "a"),
    ]:
        ids, masks = _rendered(tok, _conversation([(question, answer)]))
        rows.append((ids, assistant_only_labels(ids, masks).tolist()))
    return rows


def test_packing_input_ids_alone_trains_on_the_prompts(chat_tok):
    rows = _two_examples(chat_tok)
    packed = flatten_documents([ids for ids, _ in rows])
    n_answer_targets = sum(sum(label != -100 for label in labels) for _, labels in rows)
    n_targets = int((shift_labels(packed["labels"]) != -100).sum())
    assert n_targets == sum(len(ids) - 1 for ids, _ in rows)  # every next token, prompts too
    assert n_targets > 3 * n_answer_targets


def test_assistant_masks_survive_packing_when_the_labels_are_packed(chat_tok):
    rows = _two_examples(chat_tok)
    packed = flatten_documents([ids for ids, _ in rows], labels=[labels for _, labels in rows])
    expected = [label for _, labels in rows for label in labels]
    assert packed["labels"][0].tolist() == expected  # each first label was -100 already
    eos = chat_tok.eos_token_id
    assert all(
        label == eos for label, i in zip(expected, packed["input_ids"][0].tolist()) if i == eos
    )
