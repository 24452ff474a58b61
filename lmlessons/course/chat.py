"""Lesson 10: the course's chat template, a small instruction set and supervised fine-tuning runs.

* :data:`CHAT_TEMPLATE`: a Jinja chat template for the course tokenizer. A conversation renders
  as ``[CLS]user: ... assistant: ... [SEP] user: ...``; each assistant turn, its end-of-turn
  token included, sits inside ``{% generation %}`` ... ``{% endgeneration %}``, so transformers'
  ``apply_chat_template(..., return_assistant_tokens_mask=True)`` can say which tokens the
  assistant wrote.
* :func:`chat_tokenizer`: the course tokenizer with that template. It reuses two of its own
  special tokens instead of adding turn tokens: ``[CLS]`` as ``bos_token`` and ``[SEP]`` as
  ``eos_token``, the ids the course GPT-2 checkpoint was trained with as its ``bos_token_id``
  and ``eos_token_id``. New tokens would need new embedding rows (``resize_token_embeddings``),
  untrained, in a model that must learn to emit its end-of-turn token in a few steps.
* :func:`instruction_set`: questions and answers generated from the course corpus, nothing
  downloaded; ``"train"`` from the training documents, ``"validation"`` (held out) from the
  others. In TRL's conversational prompt-completion format (``prompt`` and ``completion`` are
  lists of messages), with the ``task`` beside them.
* :func:`encode_example`, :func:`sft_batches`: token ids and labels (answers only, or
  everything), padded batches for :func:`lmlessons.course.training.train`.
* :func:`answer_loss`, :func:`answer_metrics`: what a fine-tuned model does with held-out
  questions: the loss on the answer tokens, how often its greedy answer starts with the right
  answer, how often it stops.
* :func:`fine_tune`: one fine-tuning run of lesson 10 (the course's ``train`` loop), with the
  held-out answer loss measured along the way.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX, check_generator, check_int, check_model
from lmlessons.answer_only import assistant_only_labels
from lmlessons.course.corpus import Corpus, load_corpus
from lmlessons.course.tokenizer import load_tokenizer
from lmlessons.course.training import History, train
from lmlessons.sampling import sample

if TYPE_CHECKING:
    from transformers import BertTokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "TASKS",
    "TARGETS",
    "chat_tokenizer",
    "instruction_set",
    "encode_example",
    "sft_batches",
    "answer_loss",
    "answer_metrics",
    "fine_tune",
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

#: What :func:`encode_example` trains on: the answers only, or every token.
TARGETS = ("answer", "everything")

_WORD = re.compile(r"[a-z']+")
MIN_WORDS, MAX_WORDS = 4, 14  # sentences of the instruction set: short, so sequences stay short


def chat_tokenizer() -> BertTokenizer:
    """The course tokenizer with :data:`CHAT_TEMPLATE`, ``bos_token = [CLS]`` and
    ``eos_token = [SEP]`` (the course GPT-2's ``bos_token_id`` and ``eos_token_id``); its pad
    token stays ``[PAD]``, so padding never hides an end-of-turn token."""
    tokenizer = load_tokenizer()
    tokenizer.bos_token = tokenizer.cls_token
    tokenizer.eos_token = tokenizer.sep_token
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


def _check_example(example: object) -> dict[str, Any]:
    if not isinstance(example, dict) or not {"prompt", "completion"} <= set(example):
        raise TypeError("example must be a dict with 'prompt' and 'completion' message lists")
    return example


def encode_example(
    tokenizer: Any, example: dict[str, Any], *, target: str = "answer", mask_eos: bool = False
) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` of one conversation (prompt then completion).

    ``target="answer"``: labels from the template's assistant mask
    (:func:`lmlessons.answer_only.assistant_only_labels`); ``"everything"``: ``labels = input_ids``.
    ``mask_eos=True`` also sets every end-of-turn label to -100, as a collator that finds padding
    by ``pad_token_id`` does when ``pad_token = eos_token``.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    example = _check_example(example)
    rendered = tokenizer.apply_chat_template(
        example["prompt"] + example["completion"],
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids = torch.tensor(rendered["input_ids"])  # (T,)
    labels = ids.clone()
    if target == "answer":
        labels = assistant_only_labels(ids, rendered["assistant_masks"])  # (T,)
    if mask_eos:
        labels = labels.masked_fill(ids == tokenizer.eos_token_id, IGNORE_INDEX)
    return {"input_ids": ids.tolist(), "labels": labels.tolist()}


def _pad(rows: Sequence[dict[str, list[int]]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``(B, T)`` ``input_ids``, ``attention_mask``, ``labels`` (-100 on padding)."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id)  # (B, T)
    labels = torch.full((len(rows), width), IGNORE_INDEX)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        labels[i, :n] = torch.tensor(r["labels"])
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def sft_batches(
    examples: Sequence[dict[str, Any]],
    tokenizer: Any,
    *,
    batch_size: int = 16,
    target: str = "answer",
    mask_eos: bool = False,
    generator: torch.Generator | None = None,
) -> Iterator[dict[str, torch.Tensor]]:
    """Endless shuffled batches of ``examples`` (:func:`encode_example` with ``target`` and
    ``mask_eos``): ``input_ids``, ``attention_mask`` and ``labels``, each ``(B, T)``, right-padded
    with ``[PAD]`` and -100. A new permutation from ``generator`` each pass; an incomplete last
    batch of a pass is dropped."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_generator(generator)
    if len(examples) < batch_size:
        raise ValueError(f"examples must hold at least batch_size={batch_size} examples")
    encoded = [encode_example(tokenizer, e, target=target, mask_eos=mask_eos) for e in examples]
    while True:
        order = torch.randperm(len(encoded), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1, batch_size):
            rows = [encoded[i] for i in order[start : start + batch_size]]
            yield _pad(rows, tokenizer.pad_token_id)


@torch.no_grad()
def answer_loss(
    model: torch.nn.Module, examples: Sequence[dict[str, Any]], tokenizer: Any
) -> float:
    """The mean cross-entropy of ``model`` over the answer tokens of ``examples`` (their
    end-of-turn tokens included), after the shift, in one padded batch."""
    model = check_model(model)
    if not examples:
        raise ValueError("examples must not be empty")
    batch = _pad([encode_example(tokenizer, e) for e in examples], tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    finally:
        model.train(was_training)
    targets = batch["labels"][:, 1:]  # (B, T - 1): position t is scored against token t + 1
    return F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),  # (B * (T - 1), V)
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
    ).item()


def _greedy_answers(
    model: torch.nn.Module, prompts: list[list[int]], eos: int, max_new_tokens: int
) -> list[list[int]]:
    """Greedy continuations of each prompt (prompts of one length run as one batch), each
    cut after ``eos`` when it came."""
    out: list[list[int]] = [[] for _ in prompts]
    for length in sorted({len(p) for p in prompts}):
        rows = [i for i, p in enumerate(prompts) if len(p) == length]
        ids = torch.tensor([prompts[i] for i in rows])  # (b, length)
        new = sample(model, ids, max_new_tokens=max_new_tokens, temperature=0, eos_token_id=eos)
        for i, row in zip(rows, new[:, length:].tolist()):
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
    """Held-out answers of ``model``: ``answer_loss`` (mean cross-entropy over the answer tokens,
    their end-of-turn token included), ``answer_accuracy`` (share of greedy answers that begin
    with the reference answer, whether or not they stop after it), ``stop_rate`` (share of greedy
    answers that emit the end-of-turn token within ``max_new_tokens``), and ``num_examples``."""
    model = check_model(model)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    if not examples:
        raise ValueError("examples must not be empty")
    eos = tokenizer.eos_token_id
    prompts = [
        tokenizer.apply_chat_template(e["prompt"], add_generation_prompt=True)["input_ids"]
        for e in examples
    ]
    answers = _greedy_answers(model, prompts, eos, max_new_tokens)  # sample() restores the mode
    # the reference answers without their end-of-turn token
    wanted = [
        encode_example(tokenizer, e)["input_ids"][len(p) : -1] for e, p in zip(examples, prompts)
    ]
    return {
        "answer_loss": answer_loss(model, examples, tokenizer),
        "answer_accuracy": sum(a[: len(w)] == w for a, w in zip(answers, wanted)) / len(examples),
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
    target: str = "answer",
    mask_eos: bool = False,
    batch_size: int = 16,
    lr: float = 1e-3,
    seed: int = 0,
) -> tuple[History, dict[int, float]]:
    """Fine-tune ``model`` on ``examples`` with :func:`lmlessons.course.training.train` (AdamW,
    5 warm-up steps, then a constant ``lr``) and measure the held-out :func:`answer_loss` before
    the first step and every ``eval_every`` steps.

    Returns the training history (its ``loss`` is the loss the run reports: over the answer
    tokens, or over every token with ``target="everything"``) and ``{step: held-out answer loss}``.
    The batches and the dropout draws are seeded by ``seed``.
    """
    max_steps = check_int("max_steps", max_steps, minimum=1)
    eval_every = check_int("eval_every", eval_every, minimum=1)
    torch.manual_seed(seed)  # dropout (the checkpoint's config keeps GPT-2's 0.1)
    g = torch.Generator().manual_seed(seed)
    batches = sft_batches(
        examples, tokenizer, batch_size=batch_size, target=target, mask_eos=mask_eos, generator=g
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
