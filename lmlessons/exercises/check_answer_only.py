"""Checker for ``assistant_labels`` (lesson 10), in the runner's pattern: the learner's template
has no ``{% generation %}`` tags; expected: transformers' assistant mask *with* them. Cases: one
turn; two; three (word pieces); the same answer twice; 12 seeded conversations of 1 to 3 turns
(held-out instruction set); the course template with other ids; another template. Wrong labels
are compared with what the known mistakes (the catalogue below) give on the same case; rules
name what no entry reproduces (no target, no -100, targets beyond the answers).
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from lmlessons._checks import IGNORE_INDEX
from lmlessons.answer_only import assistant_only_labels
from lmlessons.course.chat import CHAT_TEMPLATE, chat_tokenizer, instruction_set
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner

SIGNATURE = (
    "assistant_labels(tokenizer, messages) -> labels   # (T,): a list of ids or a 1-D "
    "LongTensor, -100 off the assistant's tokens"
)


def without_generation_tags(template: str) -> str:
    """``template`` without its ``{% generation %}`` and ``{% endgeneration %}`` tags."""
    return template.replace("{% generation %}", "").replace("{% endgeneration %}", "")


PLAIN_TEMPLATE = without_generation_tags(CHAT_TEMPLATE)
OTHER_TEMPLATE = (  # bos_token opens each user turn, "reply:" heads an answer
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token }} question: "
    "{{ m['content'] }} {% else %}reply: {% generation %}{{ m['content'] }} {{ eos_token }}"
    "{% endgeneration %} {% endif %}{% endfor %}{% if add_generation_prompt %}reply:{% endif %}"
)


class ChatTokenizer:
    """The learner's tokenizer: its template without the tags (``reference`` keeps them).

    It stands in for the tokenizer it wraps: attributes are read from it and set on it (a
    learner's ``tokenizer.pad_token = tokenizer.eos_token`` changes the wrapped tokenizer, which
    the runner's ``modifies_input`` check sees). ``relies``: the mistake code of an attempt that
    is right on the course tokenizer and wrong on this one."""

    _OWN = ("reference", "_tokenizer", "relies")

    def __init__(self, template: str = CHAT_TEMPLATE, relies: Any = None, **special: str) -> None:
        self.reference = chat_tokenizer()
        self._tokenizer = chat_tokenizer()
        self.relies = relies
        new_tokens: Any = special.pop("new_token", [])
        for tokenizer in (self.reference, self._tokenizer):
            tokenizer.add_tokens(new_tokens)
            tokenizer.add_special_tokens(dict(special))  # existing tokens in new roles: no new ids
            tokenizer.chat_template = template
        self._tokenizer.chat_template = without_generation_tags(template)

    def __getattr__(self, name: str) -> Any:
        if name in self._OWN:  # not set yet (a copy being built): no delegation
            raise AttributeError(name)
        return getattr(self._tokenizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._tokenizer, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)


def _turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    """A conversation from ``(question, answer)`` pairs."""
    messages = []
    for question, answer in pairs:
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    return messages


def _cases(tokenizer: ChatTokenizer) -> list[Case]:
    """The hand-written cases, the generated ones, then two other tokenizers."""
    three = _turns(
        ("Which topic? Seeds grow.", "gardening"),
        ("First three words? A cat sat on the mat.", "a cat sat"),
        ("Which topic? The band played.", "music"),
    )
    two = _turns(("First word? The sea was calm.", "the"), ("Which topic? Boats sail.", "sea"))
    same_answer = _turns(("First word? The sun rose.", "the")) * 2
    other_ids = ChatTokenizer(
        relies="hard_coded_special_ids", new_token="assistant", eos_token="[MASK]"
    )
    other_template = ChatTokenizer(
        OTHER_TEMPLATE, "wrong_value", bos_token="[SEP]", eos_token="[UNK]"
    )
    return [
        Case(
            "hidden case 1 (one question and its answer)",
            (tokenizer, _turns(("Which topic? The dog ran home.", "animals"))),
            ok="one label per token; the answer and its end-of-turn token are the targets",
        ),
        Case("hidden case 2 (two turns)", (tokenizer, two)),
        Case(
            "hidden case 3 (three turns, one answer of several words and one of word pieces)",
            (tokenizer, three),
            ok="every assistant turn of a conversation, none of the user's or the headers",
        ),
        Case("hidden case 4 (two turns, the same answer twice)", (tokenizer, same_answer)),
        *_generated(tokenizer),
        Case(
            "hidden case 5 (other ids: 'assistant' is one token, [MASK] ends a turn)",
            (other_ids, three),
        ),
        Case(
            "hidden case 6 (another template: [SEP] question: ... reply: ... [UNK])",
            (other_template, three),
            ok="the same on a tokenizer with other ids and on another chat template",
        ),
    ]


def _generated(tokenizer: ChatTokenizer, n: int = 12) -> list[Case]:
    """``n`` seeded conversations of 1 to 3 turns from the held-out instruction set."""
    pool = instruction_set("validation")
    g = torch.Generator().manual_seed(10)
    cases = []
    for i in range(n):
        turns = int(torch.randint(1, 4, (), generator=g))
        picks = torch.randint(len(pool), (turns,), generator=g).tolist()
        messages = [m for j in picks for m in pool[j]["prompt"] + pool[j]["completion"]]
        cases.append(Case(f"generated case {i + 1} (turns: {turns})", (tokenizer, messages)))
    ok = f"equal to transformers' assistant mask on {n} random conversations of 1 to 3 turns"
    cases[-1] = replace(cases[-1], ok=ok)  # said once all of them passed
    return cases


def _expected(messages: list[dict[str, str]], reference: Any = None) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` from transformers' assistant mask, with the generation tags."""
    out: Any = (reference or chat_tokenizer()).apply_chat_template(
        messages, return_dict=True, return_assistant_tokens_mask=True
    )
    labels = assistant_only_labels(out["input_ids"], out["assistant_masks"])  # (T,)
    return out["input_ids"], labels.tolist()


def _as_list(run: Runner, case: Case, got: Any, want: list[int]) -> list[int]:
    if isinstance(got, (list, tuple)) and all(type(x) is int for x in got):
        got = torch.tensor(got, dtype=torch.long)  # (T,): a list of ids, as a LongTensor
    elif not isinstance(got, torch.Tensor):
        raise Mistake("wrong_type", f"On {case.label}, the result is {type(got).__name__}.")
    run.compare(case, got, torch.tensor(want), "the labels")
    return got.tolist()


def _targets(labels: list[int]) -> list[int]:
    """The positions whose label is not -100."""
    return [i for i, label in enumerate(labels) if label != IGNORE_INDEX]


# --------------------------------------------------------------------------- known mistakes

known = Catalogue("assistant_labels")


def _ids(tokenizer: Any, messages: list[dict[str, str]], **kwargs: Any) -> list[int]:
    """The ids of ``messages`` rendered by the chat template."""
    return list(tokenizer.apply_chat_template(messages, **kwargs)["input_ids"])


def _answers(tokenizer: Any, messages: list[dict[str, str]]) -> list[tuple[int, int]]:
    """``(start, end)`` of each answer, its end-of-turn token included, from the lesson's
    prefixes: ``messages[:i]`` with the generation prompt, ``messages[: i + 1]``."""
    return [
        (
            len(_ids(tokenizer, messages[:i], add_generation_prompt=True)),
            len(_ids(tokenizer, messages[: i + 1])),
        )
        for i, message in enumerate(messages)
        if message["role"] == "assistant"
    ]


def _labelled(tokenizer: Any, messages: list[dict[str, str]], spans: Any = None) -> list[int]:
    """The ids on ``spans`` (default: the answers), -100 elsewhere."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE_INDEX] * len(ids)
    for start, end in _answers(tokenizer, messages) if spans is None else spans:
        labels[start:end] = ids[start:end]
    return labels


@known("trains_on_prompt")
def the_input_ids(tokenizer, messages):
    """Every token is a target ({n} of them): the labels are the input ids."""
    return _ids(tokenizer, messages)


@known("trains_on_prompt")
def inverted(tokenizer, messages):
    """The prompt is a target, no answer token is."""
    ids = _ids(tokenizer, messages)
    return [
        IGNORE_INDEX if y != IGNORE_INDEX else i
        for i, y in zip(ids, _labelled(tokenizer, messages))
    ]


@known("labels_are_boolean_mask")
def the_assistant_mask(tokenizer, messages):
    """The 0/1 assistant mask, not labels (every position a target, of class 0 or 1)."""
    return [int(y != IGNORE_INDEX) for y in _labelled(tokenizer, messages)]


@known("labels_shifted")
def shifted_left(tokenizer, messages):
    """One place off, to the left (labels[t] = ids[t + 1])."""
    return [*_labelled(tokenizer, messages)[1:], IGNORE_INDEX]


@known("labels_shifted")
def shifted_right(tokenizer, messages):
    """One place off, to the right (labels[t] = ids[t - 1])."""
    return [IGNORE_INDEX, *_labelled(tokenizer, messages)[:-1]]


@known("drops_end_of_turn")
def stops_before_eos(tokenizer, messages):
    """No end-of-turn token is a target (each answer ends one token early)."""
    spans = [(start, end - 1) for start, end in _answers(tokenizer, messages)]
    return _labelled(tokenizer, messages, spans)


@known("last_answer_only")
def completion_only(tokenizer, messages):
    """Only the last answer (every token after the last prompt)."""
    start = _answers(tokenizer, messages)[-1][0]
    return _labelled(tokenizer, messages, [(start, len(_ids(tokenizer, messages)))])


def _diagnose(case: Case, ids: list[int], got: list[int], want: list[int]) -> Mistake:
    """The mistake ``got`` shows against the labels ``want`` of the tokens ``ids``: the one a
    tokenizer of the cases reveals, a known one, or the first rule that holds."""
    targets, answer = _targets(got), _targets(want)
    shown = f"your targets are at positions {targets}; expected {answer}"
    on = f"On {case.label}, {shown}"
    if case.args[0].relies:
        return Mistake(
            case.args[0].relies, f"{on}; right on the course tokenizer, not on this one."
        )
    found = known.which(case, got, want, operator.eq, convert=list, n=len(ids))
    if found is not None:
        return Mistake(found[0], f"{on}: {found[1]}.")
    kept = IGNORE_INDEX not in got and all(got[i] == want[i] for i in answer)
    rules = [  # (observed, code, what was observed): the first that holds names the mistake
        (not targets, "no_targets", f"every label is -100; {shown}"),
        (kept, "labels_not_ignored", f"no label is -100; the others are {set(got) - set(want)}"),
        (set(answer) < set(targets), "trains_on_prompt", f"{shown}: the others are not answers"),
    ]
    for holds, code, detail in rules:
        if holds:
            return Mistake(code, f"On {case.label}, {detail}.")
    return Mistake("wrong_value", f"{on}.")


def check_assistant_labels(run: Runner) -> None:
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' warnings are not the learner's output
    try:
        for case in _cases(ChatTokenizer()):
            ids, want = _expected(case.args[1], case.args[0].reference)
            got = _as_list(run, case, run.call(case), want)
            if got != want:
                raise _diagnose(case, ids, got, want)
            run.passed_case(case)
    finally:
        hf_logging.set_verbosity(level)
