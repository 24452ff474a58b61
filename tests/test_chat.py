"""lmlessons.course.chat: the chat tokenizer, the instruction set, batches, metrics and the
fine-tuning loop of lesson 10."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lmlessons.answer_only import per_token_loss
from lmlessons.course.chat import (
    CHAT_TEMPLATE,
    TASKS,
    TRAIN_ON,
    answer_loss,
    answer_metrics,
    chat_tokenizer,
    conversation_labels,
    encode_example,
    fine_tune,
    greedy_answers,
    instruction_set,
    prompt_length,
    sft_batches,
)
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import tiny_gpt2
from lmlessons.course.training import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MESSAGES = [
    {"role": "user", "content": "Which topic? The dog ran home."},
    {"role": "assistant", "content": "animals"},
    {"role": "user", "content": "First word? The sea was calm."},
    {"role": "assistant", "content": "the"},
]
ANSWERS = ["animals", "[SEP]", "the", "[SEP]"]  # the assistant's tokens of MESSAGES


@pytest.fixture(scope="module")
def heldout():
    return instruction_set("validation")


class Always(torch.nn.Module):
    """A stand-in model whose next token is always ``token``."""

    def __init__(self, token: int, vocab: int) -> None:
        super().__init__()
        self.token, self.vocab = token, vocab
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None):
        logits = torch.full((*input_ids.shape, self.vocab), -10.0) + self.weight
        logits[..., self.token] = 10.0
        return SimpleNamespace(logits=logits)


class Follows(torch.nn.Module):
    """A stand-in model whose next token is ``table[last token]`` (``default`` if absent)."""

    def __init__(self, table: dict[int, int], default: int, vocab: int) -> None:
        super().__init__()
        self.next = torch.full((vocab,), default)
        self.next[list(table)] = torch.tensor(list(table.values()))
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None):
        chosen = torch.nn.functional.one_hot(self.next[input_ids], len(self.next))  # (B, T, V)
        return SimpleNamespace(logits=20.0 * chosen - 10.0 + self.weight)


def _targets(tokenizer, labels):
    return tokenizer.convert_ids_to_tokens([i for i in labels if i != -100])


def test_the_chat_tokenizer_reuses_the_checkpoints_special_tokens(chat_tok):
    assert chat_tok.chat_template == CHAT_TEMPLATE and "{% generation %}" in CHAT_TEMPLATE
    assert chat_tok.bos_token == chat_tok.cls_token and chat_tok.eos_token == chat_tok.sep_token
    assert chat_tok.pad_token_id not in (chat_tok.bos_token_id, chat_tok.eos_token_id)
    assert len(chat_tok) == len(chat_tokenizer())  # no token added
    with pytest.raises(Exception, match="roles user and assistant"):
        chat_tok.apply_chat_template([{"role": "system", "content": "hi"}])


def test_the_instruction_set_is_deterministic_and_held_out(heldout):
    train_set = instruction_set("train")
    assert train_set == instruction_set("train") and heldout == instruction_set("validation")
    assert {e["task"] for e in train_set} == set(TASKS)
    corpus = load_corpus("course")
    validation = {s for doc in corpus.validation for s in doc}
    questions = [e["prompt"][0]["content"] for e in heldout]
    assert all(q.split("? ", 1)[1] in validation for q in questions)
    assert not {e["prompt"][0]["content"] for e in train_set} & set(questions)
    topics = [e for e in heldout if e["task"] == "topic"]
    assert {e["completion"][0]["content"] for e in topics} == set(corpus.topic_names)
    first = [e for e in heldout if e["task"] == "first_word"]
    assert all(
        e["prompt"][0]["content"]
        .split("? ", 1)[1]
        .lower()
        .startswith(e["completion"][0]["content"])
        for e in first
    )
    with pytest.raises(ValueError, match="split"):
        instruction_set("test")
    with pytest.raises(TypeError, match="corpus"):
        instruction_set("train", corpus="course")


def test_conversation_labels_for_each_choice(chat_tok):
    rows = {mode: conversation_labels(chat_tok, MESSAGES, train_on=mode) for mode in TRAIN_ON}
    ids = rows["everything"]["input_ids"]
    assert all(set(r) == {"input_ids", "labels", "assistant_masks"} for r in rows.values())
    assert all(r["input_ids"] == ids for r in rows.values()) and rows["everything"]["labels"] == ids
    assert _targets(chat_tok, rows["assistant only"]["labels"]) == ANSWERS
    assert _targets(chat_tok, rows["completion only"]["labels"]) == ["the", "[SEP]"]
    masks = rows["assistant only"]["assistant_masks"]
    assert chat_tok.convert_ids_to_tokens([i for i, m in zip(ids, masks) if m]) == ANSWERS
    assert conversation_labels(chat_tok, MESSAGES) == rows["assistant only"]  # the default
    with pytest.raises(ValueError, match="train_on must be one of"):
        conversation_labels(chat_tok, MESSAGES, train_on="answer")
    with pytest.raises(ValueError, match="end with an assistant turn"):
        conversation_labels(chat_tok, MESSAGES[:3])
    with pytest.raises(TypeError, match="messages"):
        conversation_labels(chat_tok, "user: hi")


@pytest.mark.parametrize("train_on", TRAIN_ON)
def test_pad_is_eos_drops_every_end_of_turn_target_and_nothing_else(chat_tok, train_on):
    kept = conversation_labels(chat_tok, MESSAGES, train_on=train_on)
    masked = conversation_labels(chat_tok, MESSAGES, train_on=train_on, pad_is_eos=True)
    assert masked["input_ids"] == kept["input_ids"]
    assert "[SEP]" in _targets(chat_tok, kept["labels"])
    assert _targets(chat_tok, masked["labels"]) == [
        t for t in _targets(chat_tok, kept["labels"]) if t != "[SEP]"
    ]


def test_prompt_length_is_where_the_last_answer_starts(chat_tok):
    ids = chat_tok.apply_chat_template(MESSAGES)["input_ids"]
    tokens = chat_tok.convert_ids_to_tokens(ids)
    n = prompt_length(chat_tok, MESSAGES)
    assert tokens[n:] == ["the", "[SEP]"] and tokens[n - 1] == ":"
    one_turn = prompt_length(chat_tok, MESSAGES[:2])
    assert tokens[one_turn] == "animals" and 0 < one_turn < n
    # a template whose generation prompt is not how it renders the answer: no prefix, no span
    other = chat_tokenizer()
    other.chat_template = CHAT_TEMPLATE.replace("assistant:{% endif %}", "reply:{% endif %}")
    with pytest.raises(ValueError, match="prefix"):
        prompt_length(other, MESSAGES)
    with pytest.raises(ValueError, match="end with an assistant turn"):
        prompt_length(chat_tok, MESSAGES[:1])


def test_greedy_answers_are_cut_after_eos_and_keep_their_order(chat_tok):
    eos, vocab = chat_tok.eos_token_id, len(chat_tok)
    a, b, c, d = 11, 12, 13, 14
    model = Follows({a: eos, b: c, c: d, d: eos}, default=a, vocab=vocab)
    prompts = [[5, 6, b], [5, 6, a], [7, b], [5, 6, d]]
    answers = greedy_answers(model, prompts, eos_token_id=eos, max_new_tokens=5)
    # row 1 stops at once; its batch runs on for row 0, filling it with eos: cut after the first
    assert answers == [[c, d, eos], [eos], [c, d, eos], [eos]]
    short = greedy_answers(model, prompts, eos_token_id=eos, max_new_tokens=2)
    assert short == [[c, d], [eos], [c, d], [eos]]  # no eos within 2 tokens: not cut
    with pytest.raises(TypeError, match="prompts"):
        greedy_answers(model, [], eos_token_id=eos, max_new_tokens=2)
    with pytest.raises(TypeError, match="prompts"):
        greedy_answers(model, [[]], eos_token_id=eos, max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_answers(model, prompts, eos_token_id=eos, max_new_tokens=0)


def test_encode_example_labels_the_completion(chat_tok, heldout):
    example = heldout[0]
    answer = encode_example(chat_tok, example)
    everything = encode_example(chat_tok, example, train_on="everything")
    assert set(answer) == {"input_ids", "labels"}
    assert answer["input_ids"] == everything["input_ids"] == everything["labels"]
    words = example["completion"][0]["content"].split()
    assert _targets(chat_tok, answer["labels"]) == [*words, "[SEP]"]
    no_eos = encode_example(chat_tok, example, pad_is_eos=True)
    assert _targets(chat_tok, no_eos["labels"]) == words
    with pytest.raises(ValueError, match="train_on"):
        encode_example(chat_tok, example, train_on="answer")
    with pytest.raises(TypeError, match="example"):
        encode_example(chat_tok, ["not", "a", "dict"])


def test_sft_batches_are_padded_seeded_and_endless(chat_tok, heldout):
    examples = heldout[:10]
    batches = sft_batches(
        examples, chat_tok, batch_size=4, generator=torch.Generator().manual_seed(3)
    )
    first = [next(batches) for _ in range(5)]  # more than one pass over 10 examples
    again = sft_batches(
        examples, chat_tok, batch_size=4, generator=torch.Generator().manual_seed(3)
    )
    for a in first:
        b = next(again)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert set(a) == {"input_ids", "attention_mask", "labels"} and a["input_ids"].shape[0] == 4
        assert (a["labels"][a["attention_mask"] == 0] == -100).all()
        assert (a["input_ids"][a["attention_mask"] == 0] == chat_tok.pad_token_id).all()
    with pytest.raises(ValueError, match="batch_size"):
        next(sft_batches(examples[:2], chat_tok, batch_size=4))
    with pytest.raises(TypeError, match="generator"):
        next(sft_batches(examples, chat_tok, generator=3))


def test_answer_loss_is_the_per_token_loss_of_the_answers(chat_tok, heldout):
    examples = heldout[:6]
    model = tiny_gpt2(chat_tok, seed=0)
    rows = [encode_example(chat_tok, e) for e in examples]
    width = max(len(r["input_ids"]) for r in rows)
    total, count = 0.0, 0
    for r in rows:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([r["input_ids"]])).logits
        n = sum(label != -100 for label in r["labels"])
        total += per_token_loss(logits, torch.tensor([r["labels"]])).item() * n
        count += n
    assert width > min(len(r["input_ids"]) for r in rows)  # the batch really is padded
    assert answer_loss(model, examples, chat_tok) == pytest.approx(total / count, rel=1e-5)
    with pytest.raises(ValueError, match="examples"):
        answer_loss(model, [], chat_tok)


def test_answer_metrics_counts_stops_and_answers(chat_tok, heldout):
    examples = heldout[:5] + heldout[-5:]
    vocab = len(chat_tok)
    stops = answer_metrics(Always(chat_tok.eos_token_id, vocab), examples, chat_tok)
    assert (stops["stop_rate"], stops["greedy_answer_accuracy"], stops["num_examples"]) == (
        1.0,
        0.0,
        10,
    )
    the = chat_tok.convert_tokens_to_ids("the")
    rambles = answer_metrics(Always(the, vocab), examples, chat_tok, max_new_tokens=3)
    right = sum(e["completion"][0]["content"] == "the" for e in examples) / len(examples)
    assert rambles["stop_rate"] == 0.0
    assert rambles["greedy_answer_accuracy"] == pytest.approx(right)
    assert right > 0
    with pytest.raises(ValueError, match="max_new_tokens"):
        answer_metrics(Always(the, vocab), examples, chat_tok, max_new_tokens=0)


def test_fine_tune_is_one_run_measured_in_parts(chat_tok, heldout):
    examples, probe = heldout[:32], heldout[-8:]
    model = tiny_gpt2(chat_tok, seed=0)
    history, curve = fine_tune(
        model, examples, chat_tok, heldout=probe, max_steps=8, eval_every=5, batch_size=4
    )
    assert history.num_steps == 8 and history.step == list(range(1, 9)) and set(curve) == {0, 5, 8}
    assert curve[8] < curve[0]
    # the same steps in one call of train: the same losses
    one = tiny_gpt2(chat_tok, seed=0)
    torch.manual_seed(0)
    batches = sft_batches(
        examples, chat_tok, batch_size=4, generator=torch.Generator().manual_seed(0)
    )
    optimizer = torch.optim.AdamW(one.parameters(), lr=1e-3, weight_decay=0.01)
    single = train(one, batches, max_steps=8, optimizer=optimizer, warmup_steps=5, live=False)
    assert history.loss == pytest.approx(single.loss, rel=1e-6)
    assert history.tokens_seen == single.tokens_seen
    assert answer_loss(model, probe, chat_tok) == pytest.approx(curve[8])
    with pytest.raises(ValueError, match="eval_every"):
        fine_tune(model, examples, chat_tok, heldout=probe, eval_every=0)
