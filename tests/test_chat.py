"""lmlessons.course.chat: the chat tokenizer, the instruction set, batches, metrics and the
fine-tuning loop of lesson 10."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from _exact import same_tensors

from lmlessons.answer_only import per_token_mean_loss
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
    """A stand-in model whose next token is ``table[last token]`` (``default`` if absent), its
    logit ``margin`` above all the others (a small margin: sampling would rarely pick it)."""

    def __init__(self, table: dict[int, int], default: int, vocab: int, margin: float = 20.0):
        super().__init__()
        self.next = torch.full((vocab,), default)
        self.next[list(table)] = torch.tensor(list(table.values()))
        self.margin = margin
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None):
        chosen = torch.nn.functional.one_hot(self.next[input_ids], len(self.next))  # (B, T, V)
        return SimpleNamespace(logits=self.margin * chosen - 10.0 + self.weight)


def _targets(tokenizer, labels):
    return tokenizer.convert_ids_to_tokens([i for i in labels if i != -100])


def test_the_chat_tokenizer_reuses_the_checkpoints_special_tokens(chat_tok):
    assert chat_tok.chat_template == CHAT_TEMPLATE and "{% generation %}" in CHAT_TEMPLATE
    assert chat_tok.bos_token == chat_tok.cls_token and chat_tok.eos_token == chat_tok.sep_token
    assert chat_tok.pad_token_id not in (chat_tok.bos_token_id, chat_tok.eos_token_id)
    assert len(chat_tok) == len(chat_tokenizer())  # no token added
    with pytest.raises(Exception, match="roles user and assistant"):
        chat_tok.apply_chat_template([{"role": "system", "content": "hi"}])


def test_the_sep_eos_tokenizer_only_names_sep_as_eos(chat_tok):
    from lmlessons.course.chat import sep_eos_tokenizer
    from lmlessons.course.tokenizer import load_tokenizer

    tok, plain = sep_eos_tokenizer(), load_tokenizer()
    assert plain.eos_token is None and tok.eos_token == tok.sep_token == "[SEP]"
    assert tok.eos_token_id == chat_tok.eos_token_id and tok.chat_template is None
    assert tok.bos_token == plain.bos_token and tok.get_vocab() == plain.get_vocab()
    assert sep_eos_tokenizer() is not tok  # a fresh object each call


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
        assert same_tensors(a, b)
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
        total += per_token_mean_loss(logits, torch.tensor([r["labels"]])).item() * n
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


# ------------------------------------------------------------------------ contracts, edge by edge


def _sentence(n: int) -> str:
    return " ".join(["dogs"] * n) + "."


def test_instruction_set_keeps_sentences_of_min_to_max_words_with_their_topic():
    """A hand-made corpus: sentences of 3, 4, 14 and 15 words; the splits' topics differ."""
    from lmlessons.course.chat import MAX_WORDS, MIN_WORDS
    from lmlessons.course.corpus import Corpus

    lengths = [MIN_WORDS - 1, MIN_WORDS, MAX_WORDS, MAX_WORDS + 1]
    corpus = Corpus(
        name="hand-made",
        documents=[[_sentence(n) for n in lengths], ["Cats sat here now."], ["Sea is deep."]],
        topics=["animals", "home", "sea"],
        train_indices=(0, 1),
        validation_indices=(2,),
    )
    train_set = instruction_set(corpus=corpus)  # "train" is the default split
    short, long, cats = _sentence(MIN_WORDS), _sentence(MAX_WORDS), "Cats sat here now."
    asked = [
        ("first_word", short, "dogs"),
        ("first_word", long, "dogs"),
        ("first_word", cats, "cats"),  # the first word, lower-cased
        ("topic", short, "animals"),
        ("topic", long, "animals"),
        ("topic", cats, "home"),  # the topic of its own (train) document
    ]
    expected = [
        {
            "task": task,
            "prompt": [{"role": "user", "content": TASKS[task].format(sentence=sentence)}],
            "completion": [{"role": "assistant", "content": answer}],
        }
        for task, sentence, answer in asked
    ]
    assert train_set == expected
    assert instruction_set("validation", corpus=corpus) == []  # 3 words: too short
    with pytest.raises(TypeError, match=r"^corpus must be a Corpus \(load_corpus\), got str"):
        instruction_set("train", corpus="course")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t: conversation_labels(t, []), TypeError, "messages must be a non-empty list"),
        (lambda t: conversation_labels(t, MESSAGES[:1]), ValueError, "messages must end with"),
        (lambda t: prompt_length(t, "hi"), TypeError, "messages must be a non-empty list"),
        (lambda t: encode_example(t, {"prompt": []}), TypeError, "example must be a dict with"),
        (lambda t: encode_example(t, ["prompt", "completion"]), TypeError, "example must be a "),
        (
            lambda t: next(sft_batches([{}], t, batch_size=0)),
            ValueError,
            "batch_size must be >= 1",
        ),
        (lambda t: greedy_answers(None, 5, eos_token_id=3, max_new_tokens=1), TypeError, "prompts"),
        (
            lambda t: greedy_answers(None, ["ab"], eos_token_id=3, max_new_tokens=1),
            TypeError,
            "prompts must hold non-empty lists",
        ),
        (
            lambda t: greedy_answers(None, [[1]], eos_token_id=-1, max_new_tokens=1),
            ValueError,
            "eos_token_id must be >= 0",
        ),
        (
            lambda t: greedy_answers(None, [[1]], eos_token_id=3, max_new_tokens=0),
            ValueError,
            "max_new_tokens must be >= 1",
        ),
    ],
)
def test_bad_input_messages_start_with_the_argument(chat_tok, call, error, message):
    with pytest.raises(error) as raised:
        call(chat_tok)
    assert str(raised.value).startswith(message), str(raised.value)


def test_prompt_length_says_why_it_found_no_prefix(chat_tok):
    other = chat_tokenizer()
    other.chat_template = CHAT_TEMPLATE.replace("assistant:{% endif %}", "reply:{% endif %}")
    with pytest.raises(ValueError) as raised:
        prompt_length(other, MESSAGES)
    assert str(raised.value) == (
        "the chat template renders the prompt (add_generation_prompt=True) differently from the "
        "start of the whole conversation: no span of the answer can be found by prefix"
    )


def test_encode_example_needs_only_prompt_and_completion(chat_tok):
    example = {"prompt": MESSAGES[:1], "completion": MESSAGES[1:2]}  # no "task"
    row = encode_example(chat_tok, example)
    assert _targets(chat_tok, row["labels"]) == ["animals", "[SEP]"]


def _passes(examples, chat_tok, batch_size, seed, passes, **options):
    """What sft_batches must yield, written out: per pass, one permutation of the examples from
    the generator, cut into full batches from its start (an incomplete last batch dropped)."""
    g = torch.Generator().manual_seed(seed)
    rows = [encode_example(chat_tok, e, **options) for e in examples]
    batches = []
    for _ in range(passes):
        order = torch.randperm(len(rows), generator=g).tolist()
        for k in range(len(rows) // batch_size):
            batches.append([rows[i] for i in order[k * batch_size : (k + 1) * batch_size]])
    return batches


@pytest.mark.parametrize(
    ("n", "batch_size", "options"),
    [
        (7, 4, {}),  # one full batch per pass, three examples dropped
        (8, 4, {"train_on": "everything"}),
        (4, 4, {"pad_is_eos": True}),  # exactly one batch: as many examples as batch_size
        (3, 1, {"train_on": "completion only", "pad_is_eos": True}),
    ],
)
def test_sft_batches_are_the_permutations_cut_into_full_batches(
    chat_tok, heldout, n, batch_size, options
):
    examples = heldout[:n]
    expected = _passes(examples, chat_tok, batch_size, seed=5, passes=2, **options)
    g = torch.Generator().manual_seed(5)
    batches = sft_batches(examples, chat_tok, batch_size=batch_size, generator=g, **options)
    for rows in expected:
        batch = next(batches)
        width = max(len(r["input_ids"]) for r in rows)
        assert batch["input_ids"].shape == (batch_size, width)
        for b, r in enumerate(rows):
            n_real, n_pad = len(r["input_ids"]), width - len(r["input_ids"])
            assert (
                batch["input_ids"][b].tolist() == r["input_ids"] + [chat_tok.pad_token_id] * n_pad
            )
            assert batch["labels"][b].tolist() == r["labels"] + [-100] * n_pad
            assert batch["attention_mask"][b].tolist() == [1] * n_real + [0] * n_pad


def test_sft_batches_default_batch_size_is_sixteen(chat_tok, heldout):
    batch = next(sft_batches(heldout[:16], chat_tok, generator=torch.Generator().manual_seed(0)))
    assert batch["input_ids"].shape[0] == 16


def test_greedy_answers_are_greedy_with_eos_id_zero():
    """A small margin: sampling at temperature 1 would almost never pick the model's choice."""
    vocab, eos = 300, 0
    model = Follows({5: 6, 6: 7, 7: eos}, default=eos, vocab=vocab, margin=0.5)
    answers = greedy_answers(model, [[5], [9, 6]], eos_token_id=eos, max_new_tokens=1)
    assert answers == [[6], [7]]
    answers = greedy_answers(model, [[5], [9, 6]], eos_token_id=eos, max_new_tokens=4)
    assert answers == [[6, 7, eos], [7, eos]]


def test_fine_tune_passes_its_options_to_the_batches_and_the_optimizer(chat_tok, heldout):
    """Two passes over 6 examples (batches of 2), a second part of one step, every option away
    from its default, dropout drawing from the global generator between the two passes: the
    same losses as one call of train on the batches written out."""
    examples, probe = heldout[:6], heldout[-2:]
    options = {"train_on": "everything", "pad_is_eos": True}
    tiny = {"n_embd": 16, "n_layer": 1, "n_head": 2, "dropout": 0.1}
    model = tiny_gpt2(chat_tok, seed=0, **tiny)
    history, curve = fine_tune(
        model,
        examples,
        chat_tok,
        heldout=probe,
        max_steps=6,
        eval_every=5,
        batch_size=2,
        lr=1e-2,
        seed=4,
        **options,
    )
    assert history.step == [1, 2, 3, 4, 5, 6] and set(curve) == {0, 5, 6}
    one = tiny_gpt2(chat_tok, seed=0, **tiny)
    torch.manual_seed(4)
    batches = sft_batches(
        examples, chat_tok, batch_size=2, generator=torch.Generator().manual_seed(4), **options
    )
    optimizer = torch.optim.AdamW(one.parameters(), lr=1e-2, weight_decay=0.01)
    single = train(one, batches, max_steps=6, optimizer=optimizer, warmup_steps=5, live=False)
    assert history.loss == pytest.approx(single.loss, rel=1e-6)
    assert history.num_items == single.num_items  # every token but [SEP]: train_on, pad_is_eos
    assert (history.objective, history.vocab_size) == (single.objective, single.vocab_size)
    assert history.stopped_by == single.stopped_by


def test_fine_tune_of_one_step_measured_after_it(chat_tok, heldout, capsys):
    model = tiny_gpt2(chat_tok, seed=0, n_embd=16, n_layer=1, n_head=2)
    history, curve = fine_tune(
        model, heldout[:2], chat_tok, heldout=heldout[-1:], max_steps=1, eval_every=1, batch_size=2
    )
    assert history.num_steps == 1 and set(curve) == {0, 1}
    assert tuple(capsys.readouterr()) == ("", "")  # not live: no progress bar, no plot
    for name in ("max_steps", "eval_every"):
        with pytest.raises(ValueError) as raised:
            fine_tune(model, heldout[:2], chat_tok, heldout=heldout[-1:], **{name: 0})
        assert str(raised.value).startswith(f"{name} must be >= 1")


def test_joined_carries_steps_tokens_and_times_on():
    from lmlessons.course.chat import _joined
    from lmlessons.course.training import History

    first = History(objective="clm", vocab_size=7)
    first.step, first.loss = [1, 2, 3], [3.0, 2.0, 1.8]
    first.tokens_seen, first.wall_time, first.stopped_by = (
        [10, 25, 30],
        [1.0, 2.5, 4.0],
        "max_steps",
    )
    second = History(objective="clm", vocab_size=7, step=[1], loss=[1.5], tokens_seen=[8])
    second.wall_time, second.stopped_by = [0.5], "max_seconds"
    joined = _joined(first, second)
    assert (joined.objective, joined.vocab_size, joined.stopped_by) == ("clm", 7, "max_seconds")
    assert (joined.step, joined.loss) == ([1, 2, 3, 4], [3.0, 2.0, 1.8, 1.5])
    assert (joined.tokens_seen, joined.wall_time) == ([10, 25, 30, 38], [1.0, 2.5, 4.0, 4.5])
    empty = History(objective="clm", vocab_size=7)  # a first part without steps: no offsets
    again = _joined(empty, second)
    assert (again.step, again.tokens_seen, again.wall_time) == ([1], [8], [0.5])


class BiasLMHeadModel(torch.nn.Module):
    """A stand-in causal LM (its name ends like transformers' ``*LMHeadModel``): the same
    trainable scores at every position, so a 100-step run takes a fraction of a second."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(vocab))

    def forward(self, input_ids, attention_mask=None, **_):
        return SimpleNamespace(logits=self.bias.expand(*input_ids.shape, -1))  # (B, T, V)


@pytest.mark.slow
def test_fine_tune_defaults_100_steps_of_16_measured_every_20(chat_tok, heldout):
    examples = heldout[:16]  # exactly one batch of the default size per pass
    history, curve = fine_tune(
        BiasLMHeadModel(len(chat_tok)), examples, chat_tok, heldout=heldout[-1:]
    )
    assert history.num_steps == 100 and sorted(curve) == [0, 20, 40, 60, 80, 100]
    targets = sum(sum(t != -100 for t in encode_example(chat_tok, e)["labels"]) for e in examples)
    assert history.num_items == [targets] * 100  # every step: all 16 examples' answer tokens


def test_load_seed_runs_reads_the_shipped_recording(tmp_path):
    """The recording of ``python -m tools.answer_only_seeds``: every setting of lesson 10, one
    value per seed of each metric, rates in [0, 1]; a folder without it is an error."""
    from lmlessons.course.chat import SEED_RUN_SETTINGS, load_seed_runs

    data = load_seed_runs()
    assert len(data["seeds"]) >= 3 and data["num_heldout"] == len(instruction_set("validation"))
    assert set(data["settings"]) == set(SEED_RUN_SETTINGS)
    for run in data["settings"].values():
        assert {len(v) for v in run.values()} == {len(data["seeds"])}
        for key in ("greedy_answer_accuracy", "stop_rate"):
            assert all(0.0 <= v <= 1.0 for v in run[key])
    with pytest.raises(FileNotFoundError) as raised:
        load_seed_runs(tmp_path)
    assert str(tmp_path / "seed_runs.json") in str(raised.value)
    assert "python -m tools.answer_only_seeds" in str(raised.value)
