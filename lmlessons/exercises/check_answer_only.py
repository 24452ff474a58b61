"""Checker for ``assistant_labels`` (lesson 10), in the runner's pattern: the learner's template
has no ``{% generation %}`` tags; expected: transformers' assistant mask *with* them. Cases: one
turn; two; three (word pieces); the same answer twice; 12 seeded conversations of 1 to 3 turns
(held-out instruction set); the course template with other ids; another template.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.utils import logging as hf_logging

from lmlessons._checks import IGNORE_INDEX
from lmlessons.answer_only import assistant_only_labels
from lmlessons.course.chat import CHAT_TEMPLATE, chat_tokenizer, instruction_set
from lmlessons.exercises._framework import Case, Mistake, Runner

SIGNATURE = (
    "assistant_labels(tokenizer, messages) -> labels   # (T,): a list of ids or a 1-D "
    "LongTensor, -100 off the assistant's tokens"
)
_TAGS = ("{% generation %}", "{% endgeneration %}")
PLAIN_TEMPLATE = CHAT_TEMPLATE.replace(_TAGS[0], "").replace(_TAGS[1], "")
OTHER_TEMPLATE = (  # bos_token opens each user turn, "reply:" heads an answer
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token }} question: "
    "{{ m['content'] }} {% else %}reply: {% generation %}{{ m['content'] }} {{ eos_token }}"
    "{% endgeneration %} {% endif %}{% endfor %}{% if add_generation_prompt %}reply:{% endif %}"
)
OK = {
    0: "one label per token; the answer and its end-of-turn token are the targets",
    2: "every assistant turn of a conversation, none of the user's or the headers",
    15: "equal to transformers' assistant mask on 12 random conversations of 1 to 3 turns",
    17: "the same on a tokenizer with other ids and on another chat template",
}


class ChatTokenizer:
    """The learner's tokenizer: its template without the tags (``reference`` keeps them)."""

    def __init__(self, template: str = CHAT_TEMPLATE, relies: Any = None, **special: str) -> None:
        self.reference, self._tokenizer, self.relies = chat_tokenizer(), chat_tokenizer(), relies
        new: Any = special.pop("new_token", [])
        for tok in (self.reference, self._tokenizer):
            tok.add_tokens(new)
            tok.add_special_tokens(dict(special))  # existing tokens in new roles: no new ids
            tok.chat_template = template
        self._tokenizer.chat_template = template.replace(_TAGS[0], "").replace(_TAGS[1], "")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> ChatTokenizer:
        return self


def _turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": t} for p in pairs for r, t in zip(("user", "assistant"), p)]


def _cases(tokenizer: ChatTokenizer) -> list[Case]:
    three = _turns(
        ("Which topic? Seeds grow.", "gardening"),
        ("First three words? A cat sat on the mat.", "a cat sat"),
        ("Which topic? The band played.", "music"),
    )
    two = _turns(("First word? The sea was calm.", "the"), ("Which topic? Boats sail.", "sea"))
    written = {
        "one question and its answer": _turns(("Which topic? The dog ran home.", "animals")),
        "two turns": two,
        "three turns, one answer of several words and one of word pieces": three,
        "two turns, the same answer twice": _turns(("First word? The sun rose.", "the")) * 2,
    }
    cases = [
        Case(f"hidden case {i + 1} ({k})", (tokenizer, m))
        for i, (k, m) in enumerate(written.items())
    ]
    pool, g = instruction_set("validation"), torch.Generator().manual_seed(10)
    for i in range(12):
        n = int(torch.randint(1, 4, (), generator=g))
        picks = torch.randint(len(pool), (n,), generator=g).tolist()
        messages = [m for j in picks for m in pool[j]["prompt"] + pool[j]["completion"]]
        cases.append(Case(f"generated case {i + 1} (turns: {n})", (tokenizer, messages)))
    ids = ChatTokenizer(relies="hard_coded_special_ids", new_token="assistant", eos_token="[MASK]")
    text = ChatTokenizer(OTHER_TEMPLATE, "wrong_value", bos_token="[SEP]", eos_token="[UNK]")
    a = "hidden case 5 (other ids: 'assistant' is one token, [MASK] ends a turn)"
    b = "hidden case 6 (another template: [SEP] question: ... reply: ... [UNK])"
    return [*cases, Case(a, (ids, three)), Case(b, (text, three))]


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


def _diagnose(case: Case, ids: list[int], got: list[int], want: list[int]) -> Mistake:
    """The mistake ``got`` shows against the labels ``want`` of the tokens ``ids``."""
    tok, n = case.args[0], len(ids)
    targets, answer = ([i for i, x in enumerate(v) if x != IGNORE_INDEX] for v in (got, want))
    last = [i for i in answer if i > max(j for j, t in enumerate(want) if t == IGNORE_INDEX)]
    inverted = [IGNORE_INDEX if t in answer else ids[t] for t in range(n)]
    kept = len(targets) == n and all(got[i] == want[i] for i in answer)
    no_eos = [i for i in answer if ids[i] != tok.eos_token_id]
    shown = f"your targets are at positions {targets}; expected {answer}"
    rules = [  # (observed, code, what was observed), the first that holds names the mistake
        # ``relies``: the code of an attempt right on the course tokenizer, wrong on this one
        (tok.relies, tok.relies, f"{shown}; right on the course tokenizer, not on this one"),
        (got == [int(w != IGNORE_INDEX) for w in want], "labels_are_boolean_mask", "0s and 1s"),
        (not targets, "no_targets", f"every label is -100; {shown}"),
        (got == ids, "trains_on_prompt", f"every token is a target ({n} of them)"),
        (got == inverted, "trains_on_prompt", f"{shown}: the prompt is, no answer token is"),
        (kept, "labels_not_ignored", f"no label is -100; the others are {set(got) - set(want)}"),
        (got[1:] == want[:-1] or got[:-1] == want[1:], "labels_shifted", f"{shown}: one place off"),
        (targets == no_eos, "drops_end_of_turn", f"no end-of-turn token is a target: {shown}"),
        (targets == last != answer, "last_answer_only", f"{shown}: only the last answer"),
        (set(answer) < set(targets), "trains_on_prompt", f"{shown}: the others are not answers"),
    ]
    code, detail = next(((c, d) for holds, c, d in rules if holds), ("wrong_value", shown))
    return Mistake(code, f"On {case.label}, {detail}.")


def check_assistant_labels(run: Runner) -> None:
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' warnings are not the learner's output
    try:
        for i, case in enumerate(_cases(ChatTokenizer())):
            ids, want = _expected(case.args[1], case.args[0].reference)
            got = _as_list(run, case, run.call(case), want)
            if got != want:
                raise _diagnose(case, ids, got, want)
            if i in OK:
                run.ok(OK[i])
    finally:
        hf_logging.set_verbosity(level)
