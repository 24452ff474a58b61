"""Lesson 10: the course's chat template, a small instruction set and supervised fine-tuning runs.

* :data:`CHAT_TEMPLATE`: a Jinja chat template for the course tokenizer. A conversation renders
  as ``[CLS]user: ... assistant: ... [SEP] user: ...``; each assistant turn, its end-of-turn
  token included, sits inside ``{% generation %}`` ... ``{% endgeneration %}``, so transformers'
  ``apply_chat_template(..., return_assistant_tokens_mask=True)`` can say which tokens the
  assistant wrote.
* :func:`sep_eos_tokenizer`: the course tokenizer with ``eos_token = [SEP]``, what TRL needs;
  :func:`chat_tokenizer`: that tokenizer with the chat template. It reuses two of its own
  special tokens instead of adding turn tokens: ``[CLS]`` as ``bos_token`` and ``[SEP]`` as
  ``eos_token``, the ids the course GPT-2 checkpoint was trained with as its ``bos_token_id``
  and ``eos_token_id``. New tokens would need new embedding rows (``resize_token_embeddings``),
  untrained, in a model that must learn to emit its end-of-turn token in a few steps.
* :func:`instruction_set`: questions and answers generated from the course corpus, nothing
  downloaded; ``"train"`` from the training documents, ``"validation"`` (held out) from the
  others. In TRL's conversational prompt-completion format (``prompt`` and ``completion`` are
  lists of messages), with the ``task`` beside them.
* :func:`conversation_labels`: the one place a conversation is rendered and labelled, under
  each choice of :data:`TRAIN_ON` (the assistant's turns, the last completion, or every token);
  :func:`prompt_length`: the tokens before the last answer (the prompt rendered with the
  generation prompt, a prefix of the conversation).
* :func:`encode_example`, :func:`sft_batches`: the same for the instruction set's examples, and
  padded batches for :func:`lmlessons.course.training.train`.
* :func:`greedy_answers`: each prompt's greedy continuation, cut after the end-of-turn token.
* :func:`answer_loss`, :func:`answer_metrics`: what a fine-tuned model does with held-out
  questions: the loss on the answer tokens (``answer_loss``), how often its greedy answer starts
  with the right answer (``greedy_answer_accuracy``), how often it stops (``stop_rate``).
* :func:`fine_tune`: one fine-tuning run of lesson 10 (the course's ``train`` loop), with the
  held-out answer loss measured along the way.
* :data:`SEED_RUN_SETTINGS`, :func:`record_seed_runs`, :func:`load_seed_runs`: lesson 10's three
  runs repeated over seeds (recorded by ``python -m tools.answer_only_seeds``), replayed from
  ``data/answer_only/`` through :meth:`lmlessons.course.records.Recording.load`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lmlessons._checks import IGNORE_INDEX, check_generator, check_int, check_model
from lmlessons.answer_only import assistant_only_labels, completion_only_labels
from lmlessons.course.batches import row_batches
from lmlessons.course.corpus import Corpus, load_corpus
from lmlessons.course.records import Recording
from lmlessons.course.tokenizer import load_tokenizer
from lmlessons.course.training import History, train
from lmlessons.losses import clm_loss
from lmlessons.packing import pad
from lmlessons.sampling import sample

if TYPE_CHECKING:
    from transformers import BertTokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "TASKS",
    "TRAIN_ON",
    "sep_eos_tokenizer",
    "chat_tokenizer",
    "instruction_set",
    "conversation_labels",
    "prompt_length",
    "encode_example",
    "sft_batches",
    "greedy_answers",
    "answer_loss",
    "answer_metrics",
    "fine_tune",
    "SEED_RUN_SETTINGS",
    "SEED_RECORDING",
    "record_seed_runs",
    "load_seed_runs",
]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "user: {{ message['content'] }} "
    "{% elif message['role'] == 'assistant' %}"
    "assistant: {% generation %}{{ message['content'] }} {{ eos_token }}{% endgeneration %} "
    "{% else %}{{ raise_exception('the course template knows the roles user and assistant') }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

#: The questions of the instruction set, by task: what the user asks about a corpus sentence.
TASKS: dict[str, str] = {
    "first_word": "First word? {sentence}",
    "topic": "Which topic? {sentence}",
}

#: What the labels train on: the assistant's turns (TRL's ``assistant_only_loss``), the last
#: answer only (``completion_only_loss``: the prompt is everything before it), or every token.
TRAIN_ON: tuple[str, ...] = ("assistant only", "completion only", "everything")

_WORD = re.compile(r"[a-z']+")
MIN_WORDS, MAX_WORDS = 4, 14  # sentences of the instruction set: short, so sequences stay short


def sep_eos_tokenizer() -> BertTokenizer:
    """The course tokenizer with ``eos_token = [SEP]`` (its own ``sep_token``, the course
    GPT-2's ``eos_token_id``), nothing else changed. The course tokenizer names no end-of-text
    token, and TRL needs one: ``GRPOTrainer`` stops a generation at ``eos_token_id`` and
    ``DPOTrainer`` appends ``eos_token`` to every completion."""
    tokenizer = load_tokenizer()
    tokenizer.eos_token = tokenizer.sep_token
    return tokenizer


def chat_tokenizer() -> BertTokenizer:
    """:func:`sep_eos_tokenizer` with :data:`CHAT_TEMPLATE` and ``bos_token = [CLS]`` (the course
    GPT-2's ``bos_token_id``); its pad token stays ``[PAD]``, so padding never hides an
    end-of-turn token."""
    tokenizer = sep_eos_tokenizer()
    tokenizer.bos_token = tokenizer.cls_token
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _example(task: str, sentence: str, topic: str) -> dict[str, Any]:
    words = _WORD.findall(sentence.lower())
    answer = words[0] if task == "first_word" else topic
    return {
        "task": task,
        "prompt": [{"role": "user", "content": TASKS[task].format(sentence=sentence)}],
        "completion": [{"role": "assistant", "content": answer}],
    }


def instruction_set(split: str = "train", *, corpus: Corpus | None = None) -> list[dict[str, Any]]:
    """Every question of :data:`TASKS` about every short sentence (4 to 14 words) of ``split``'s
    documents, in corpus order: the same list on every machine.

    ``split``: ``"train"`` or ``"validation"`` (documents the model never trained on, neither
    in pretraining nor here). Each example is ``{"task", "prompt", "completion"}``.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    corpus = load_corpus("course") if corpus is None else corpus
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus (load_corpus), got {type(corpus).__name__}")
    docs = corpus.train if split == "train" else corpus.validation
    topics = corpus.train_topics if split == "train" else corpus.validation_topics
    sentences = [
        (s, topic)
        for doc, topic in zip(docs, topics)
        for s in doc
        if MIN_WORDS <= len(_WORD.findall(s.lower())) <= MAX_WORDS
    ]
    return [_example(task, s, topic) for task in TASKS for s, topic in sentences]


def _check_messages(messages: object) -> list[dict[str, str]]:
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise TypeError("messages must be a non-empty list of {'role', 'content'} dicts")
    if not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
        raise ValueError("messages must end with an assistant turn (the completion)")
    return list(messages)


def prompt_length(tokenizer: Any, messages: Sequence[dict[str, str]]) -> int:
    """The number of tokens before the last answer of ``messages`` (which must end with an
    assistant turn): every message before it, rendered with ``add_generation_prompt=True``, as the
    model sees the prompt when it answers. TRL's ``SFTTrainer`` takes the same prompt for a
    conversational prompt-completion example (its ``completion_mask`` starts here).

    Raises ``ValueError`` if that rendering is not a prefix of the whole conversation's (a
    template that renders a turn differently once the next one follows).
    """
    messages = _check_messages(messages)
    prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(messages)
    prompt_ids, ids = list(prompt["input_ids"]), list(whole["input_ids"])
    if ids[: len(prompt_ids)] != prompt_ids:
        raise ValueError(
            "the chat template renders the prompt (add_generation_prompt=True) differently from "
            "the start of the whole conversation: no span of the answer can be found by prefix"
        )
    return len(prompt_ids)


def conversation_labels(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    *,
    train_on: str = "assistant only",
    pad_is_eos: bool = False,
) -> dict[str, list[int]]:
    """``input_ids``, ``labels`` and ``assistant_masks`` of ``messages`` (ending with an
    assistant turn) rendered by the tokenizer's chat template
    (``apply_chat_template(..., return_assistant_tokens_mask=True)``).

    ``train_on``, one of :data:`TRAIN_ON`: ``"assistant only"``, the ids where the assistant mask
    is 1 (:func:`lmlessons.answer_only.assistant_only_labels`, TRL's ``assistant_only_loss``);
    ``"completion only"``, the tokens after :func:`prompt_length`
    (:func:`lmlessons.answer_only.completion_only_labels`, TRL's ``completion_only_loss``);
    ``"everything"``, ``labels = input_ids``. ``pad_is_eos=True``: every label equal to the
    end-of-turn token becomes -100, as ``DataCollatorForLanguageModeling`` leaves them when
    ``pad_token = eos_token`` (it finds padding by ``pad_token_id``).
    """
    if train_on not in TRAIN_ON:
        raise ValueError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    messages = _check_messages(messages)
    rendered = tokenizer.apply_chat_template(
        messages, return_dict=True, return_assistant_tokens_mask=True
    )
    ids = torch.tensor(rendered["input_ids"])  # (T,)
    masks = list(rendered["assistant_masks"])
    if train_on == "assistant only":
        labels = assistant_only_labels(ids, masks)  # (T,)
    elif train_on == "completion only":
        n = prompt_length(tokenizer, messages)
        labels = completion_only_labels(ids[:n], ids[n:])["labels"]  # (T,)
    else:
        labels = ids.clone()  # (T,)
    if pad_is_eos:
        labels = labels.masked_fill(ids == tokenizer.eos_token_id, IGNORE_INDEX)  # (T,)
    return {"input_ids": ids.tolist(), "labels": labels.tolist(), "assistant_masks": masks}


def _check_example(example: object) -> dict[str, Any]:
    if not isinstance(example, dict) or not {"prompt", "completion"} <= set(example):
        raise TypeError("example must be a dict with 'prompt' and 'completion' message lists")
    return example


def encode_example(
    tokenizer: Any,
    example: dict[str, Any],
    *,
    train_on: str = "assistant only",
    pad_is_eos: bool = False,
) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` of one example of :func:`instruction_set`, its prompt then its
    completion: :func:`conversation_labels` with ``train_on`` and ``pad_is_eos``."""
    example = _check_example(example)
    row = conversation_labels(
        tokenizer,
        list(example["prompt"]) + list(example["completion"]),
        train_on=train_on,
        pad_is_eos=pad_is_eos,
    )
    return {"input_ids": row["input_ids"], "labels": row["labels"]}


def _batch(rows: Sequence[dict[str, list[int]]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``(B, T)`` ``input_ids`` (``pad_token_id``), ``attention_mask`` (0) and
    ``labels`` (-100) of :func:`encode_example` rows, each by :func:`lmlessons.packing.pad`."""
    ids = [r["input_ids"] for r in rows]
    return {
        "input_ids": pad(ids, pad_token_id),  # (B, T)
        "attention_mask": pad([[1] * len(r) for r in ids], 0),  # (B, T)
        "labels": pad([r["labels"] for r in rows], IGNORE_INDEX),  # (B, T)
    }


def sft_batches(
    examples: Sequence[dict[str, Any]],
    tokenizer: Any,
    *,
    batch_size: int = 16,
    train_on: str = "assistant only",
    pad_is_eos: bool = False,
    generator: torch.Generator | None = None,
) -> Iterator[dict[str, torch.Tensor]]:
    """Endless shuffled batches of ``examples`` (:func:`encode_example` with ``train_on`` and
    ``pad_is_eos``): ``input_ids``, ``attention_mask`` and ``labels``, each ``(B, T)``, right-padded
    with ``[PAD]`` and -100. A new permutation from ``generator`` each pass; an incomplete last
    batch of a pass is dropped."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_generator(generator)
    if len(examples) < batch_size:
        raise ValueError(f"examples must hold at least batch_size={batch_size} examples")
    encoded = [
        encode_example(tokenizer, e, train_on=train_on, pad_is_eos=pad_is_eos) for e in examples
    ]
    for rows in row_batches(encoded, batch_size, generator):  # endless; incomplete ones dropped
        yield _batch(rows, tokenizer.pad_token_id)


@torch.no_grad()
def answer_loss(
    model: torch.nn.Module, examples: Sequence[dict[str, Any]], tokenizer: Any
) -> float:
    """``answer_loss``: the mean cross-entropy of ``model`` over the answer tokens of
    ``examples``, their end-of-turn tokens included (assistant-only labels), in one padded batch:
    :func:`lmlessons.losses.clm_loss`, which is transformers' ``ForCausalLMLoss``."""
    model = check_model(model)
    if not examples:
        raise ValueError("examples must not be empty")
    batch = _batch([encode_example(tokenizer, e) for e in examples], tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    finally:
        model.train(was_training)
    return clm_loss(logits, batch["labels"]).item()  # the shift happens inside


def _check_prompts(prompts: object) -> list[list[int]]:
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence) or not prompts:
        raise TypeError("prompts must be a non-empty list of token-id lists")
    for p in prompts:
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or not p:
            raise TypeError("prompts must hold non-empty lists of token ids")
    return [list(p) for p in prompts]


def greedy_answers(
    model: torch.nn.Module,
    prompts: list[list[int]],
    *,
    eos_token_id: int,
    max_new_tokens: int,
) -> list[list[int]]:
    """The greedy continuation of each prompt, at most ``max_new_tokens`` new tokens, cut after
    ``eos_token_id`` when it came (kept; a continuation without it did not stop). Prompts of one
    length run as one batch of :func:`lmlessons.sampling.sample` (``temperature=0``), so no
    prompt is padded: transformers' ``model.generate(do_sample=False)`` one length at a time.
    """
    prompts = _check_prompts(prompts)
    eos = check_int("eos_token_id", eos_token_id, minimum=0)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    out: list[list[int]] = [[] for _ in prompts]
    for length in sorted({len(p) for p in prompts}):
        rows = [i for i, p in enumerate(prompts) if len(p) == length]
        ids = torch.tensor([prompts[i] for i in rows])  # (b, length)
        new = sample(model, ids, max_new_tokens=max_new_tokens, temperature=0, eos_token_id=eos)
        for i, row in zip(rows, new[:, length:].tolist()):  # (b, n): the new tokens
            out[i] = row[: row.index(eos) + 1] if eos in row else row
    return out


@torch.no_grad()
def answer_metrics(
    model: torch.nn.Module,
    examples: Sequence[dict[str, Any]],
    tokenizer: Any,
    *,
    max_new_tokens: int = 6,
) -> dict[str, float]:
    """Held-out answers of ``model``: ``answer_loss`` (:func:`answer_loss`: mean cross-entropy
    over the answer tokens, their end-of-turn token included), ``greedy_answer_accuracy`` (share
    of greedy answers, :func:`greedy_answers`, that begin with the reference answer, whether or
    not they stop after it), ``stop_rate`` (share of greedy answers that emit the end-of-turn
    token within ``max_new_tokens``), and ``num_examples``."""
    model = check_model(model)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    if not examples:
        raise ValueError("examples must not be empty")
    eos = tokenizer.eos_token_id
    conversations = [list(_check_example(e)["prompt"]) + list(e["completion"]) for e in examples]
    ids = [conversation_labels(tokenizer, c)["input_ids"] for c in conversations]
    starts = [prompt_length(tokenizer, c) for c in conversations]
    # sample() restores the model's mode
    answers = greedy_answers(
        model,
        [row[:n] for row, n in zip(ids, starts)],
        eos_token_id=eos,
        max_new_tokens=max_new_tokens,
    )
    wanted = [row[n:-1] for row, n in zip(ids, starts)]  # the reference answers without [SEP]
    right = sum(a[: len(w)] == w for a, w in zip(answers, wanted))
    return {
        "answer_loss": answer_loss(model, examples, tokenizer),
        "greedy_answer_accuracy": right / len(examples),
        "stop_rate": sum(bool(a) and a[-1] == eos for a in answers) / len(examples),
        "num_examples": len(examples),
    }


def fine_tune(
    model: torch.nn.Module,
    examples: Sequence[dict[str, Any]],
    tokenizer: Any,
    *,
    heldout: Sequence[dict[str, Any]],
    max_steps: int = 100,
    eval_every: int = 20,
    train_on: str = "assistant only",
    pad_is_eos: bool = False,
    batch_size: int = 16,
    lr: float = 1e-3,
    seed: int = 0,
) -> tuple[History, dict[int, float]]:
    """Fine-tune ``model`` on ``examples`` with :func:`lmlessons.course.training.train` (AdamW,
    5 warm-up steps, then a constant ``lr``) and measure the held-out :func:`answer_loss` before
    the first step and every ``eval_every`` steps.

    Returns the training history (its ``loss`` is the loss the run reports: over its own
    targets, ``train_on``) and ``{step: held-out answer loss}``.
    The batches and the dropout draws are seeded by ``seed``.
    """
    max_steps = check_int("max_steps", max_steps, minimum=1)
    eval_every = check_int("eval_every", eval_every, minimum=1)
    torch.manual_seed(seed)  # dropout (the checkpoint's config keeps GPT-2's 0.1)
    g = torch.Generator().manual_seed(seed)
    batches = sft_batches(
        examples,
        tokenizer,
        batch_size=batch_size,
        train_on=train_on,
        pad_is_eos=pad_is_eos,
        generator=g,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    curve = {0: answer_loss(model, heldout, tokenizer)}
    history: History | None = None
    while (done := history.num_steps if history else 0) < max_steps:
        part = train(
            model,
            batches,
            max_steps=min(eval_every, max_steps - done),
            optimizer=optimizer,
            warmup_steps=5 if history is None else 0,
            live=False,
        )
        history = part if history is None else _joined(history, part)
        curve[history.num_steps] = answer_loss(model, heldout, tokenizer)
    assert history is not None
    return history, curve


def _joined(first: History, second: History) -> History:
    """Two consecutive parts of one run as one history (steps, tokens and times carried on)."""
    joined = History(objective=first.objective, vocab_size=first.vocab_size)
    offsets = {
        "step": first.num_steps,
        "tokens_seen": first.tokens_seen[-1] if first.tokens_seen else 0,
        "wall_time": first.wall_time[-1] if first.wall_time else 0.0,
    }
    for f in dataclasses.fields(History):
        a, b = getattr(first, f.name), getattr(second, f.name)
        if isinstance(a, list):
            setattr(joined, f.name, a + [v + offsets.get(f.name, 0) for v in b])
    joined.stopped_by = second.stopped_by
    return joined


#: Lesson 10's three fine-tuning runs, by name: the options of :func:`fine_tune` each one uses.
SEED_RUN_SETTINGS: dict[str, dict[str, Any]] = {
    "answers only": {"train_on": "assistant only"},
    "every token": {"train_on": "everything"},
    "answers only, pad = eos": {"train_on": "assistant only", "pad_is_eos": True},
}
#: Lesson 10's runs over seeds, made by ``python -m tools.answer_only_seeds``.
SEED_RECORDING = Recording(
    "answer_only", "answer_only_seeds", ("seeds", "settings"), file="seed_runs.json"
)


def _seed_run(
    name: str, seed: int, data: tuple[list[Any], list[Any]], max_steps: int, eval_every: int
) -> dict[str, float]:
    """One run of :data:`SEED_RUN_SETTINGS` ``name`` with ``seed``: its metrics, 4 decimals."""
    from lmlessons.course.checkpoints import load_checkpoint

    tokenizer, (train_set, heldout) = chat_tokenizer(), data
    model = load_checkpoint("gpt2")
    history, _ = fine_tune(
        model, train_set, tokenizer, heldout=heldout, max_steps=max_steps,
        eval_every=eval_every, seed=seed, **SEED_RUN_SETTINGS[name],
    )  # fmt: skip
    metrics = answer_metrics(model, heldout, tokenizer, max_new_tokens=6)
    values = {"reported_loss": history.final(window=10), **metrics}
    keys = ("reported_loss", "answer_loss", "greedy_answer_accuracy", "stop_rate")
    return {k: round(float(values[k]), 4) for k in keys}


def record_seed_runs(
    seeds: Sequence[int],
    *,
    max_steps: int = 100,
    eval_every: int = 25,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record :func:`load_seed_runs` reads: every run of :data:`SEED_RUN_SETTINGS` for every
    seed (:func:`fine_tune` of the course GPT-2, then :func:`answer_metrics` on the held-out
    questions), one value per seed in each list, rounded to 4 decimals. ``log``: called with one
    line per run (None: silent)."""
    data = (instruction_set("train"), instruction_set("validation"))
    runs: dict[str, dict[str, list[float]]] = {}
    for name in SEED_RUN_SETTINGS:
        row: dict[str, list[float]] = {}
        for seed in seeds:
            for key, value in _seed_run(name, seed, data, max_steps, eval_every).items():
                row.setdefault(key, []).append(value)
            if log is not None:
                log(f"{name:24s} seed {seed}: " + ", ".join(f"{k} {v[-1]}" for k, v in row.items()))
        runs[name] = row
    num_heldout = len(data[1])
    return {
        "seeds": list(seeds),
        "max_steps": max_steps,
        "num_heldout": num_heldout,
        "settings": runs,
    }


def load_seed_runs(directory: str | Path | None = None) -> dict[str, Any]:
    """The runs of :data:`SEED_RUN_SETTINGS` over several seeds, as recorded by
    ``python -m tools.answer_only_seeds``: ``{"seeds": [...], "num_heldout": n, "settings":
    {name: {"answer_loss": [...], "greedy_answer_accuracy": [...], "stop_rate": [...],
    "reported_loss": [...]}}}``, one value per seed. ``directory`` defaults to the shipped
    ``data/answer_only/``."""
    return SEED_RECORDING.load(directory)
