"""Battery for ``assistant_labels`` (lesson 10): assistant-only labels without generation tags.

The statement a learner sees: ``my_assistant_labels(tokenizer, messages)``; the tokenizer's chat
template has no ``{% generation %}`` tags; ``messages`` alternate user and assistant turns, the
last one the assistant's. Return the labels of ``apply_chat_template(messages)["input_ids"]``:
the id on every token the assistant wrote, its end-of-turn token included, -100 elsewhere (a
list or a 1-D tensor, unshifted), for conversations of one to three turns. The lesson's way in:
``messages[:i]`` rendered with ``add_generation_prompt=True`` and ``messages[:i + 1]`` are
prefixes of the tokens.

The value mistakes are the checker's catalogue (``known`` in ``check_answer_only.py``), the
structural ones ``battery/_structural.py``'s; here: other ways to make them, and the rest.
"""

from __future__ import annotations

import torch

from battery._attempt import correct, wrong

IGNORE = -100


def _ids(tokenizer, messages, **kwargs) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, **kwargs)["input_ids"])


def _spans(tokenizer, messages, header=True, next_header=False):
    """(start, end) of each assistant turn, as the lesson's prefixes give them: ``messages[:i]``
    rendered with the generation prompt (``header``), ``messages[:i + 1]`` without it (unless
    ``next_header``)."""
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(_ids(tokenizer, messages[:i], add_generation_prompt=header))
            yield start, len(_ids(tokenizer, messages[: i + 1], add_generation_prompt=next_header))


def _labels(tokenizer, messages, spans=None, fill=IGNORE):
    """The ids on ``spans`` (default: :func:`_spans`), ``fill`` elsewhere."""
    ids = _ids(tokenizer, messages)
    labels = [fill] * len(ids)
    for start, end in _spans(tokenizer, messages) if spans is None else spans:
        labels[start:end] = ids[start:end]
    return labels


def _find(seq, sub, begin=0):
    for k in range(begin, len(seq) - len(sub) + 1):
        if seq[k : k + len(sub)] == sub:
            return k
    return -1


def _searched(tokenizer, messages, eos):
    """Each answer's content tokens (and eos), searched from the start of the ids."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for message in messages:
        if message["role"] == "assistant":
            answer = tokenizer.encode(message["content"], add_special_tokens=False)
            answer += [tokenizer.eos_token_id] if eos else []
            k = _find(ids, answer)  # the first place these tokens occur
            labels[k : k + len(answer)] = ids[k : k + len(answer)]
    return labels


def _after_header(tokenizer, messages, header, eos):
    """The tokens after each occurrence of ``header`` up to the next ``eos``, that included."""
    ids = _ids(tokenizer, messages)
    labels, k = [IGNORE] * len(ids), 0
    while (k := _find(ids, header, k)) >= 0:
        k += len(header)
        end = ids.index(eos, k) + 1
        labels[k:end] = ids[k:end]
    return labels


# ---------------------------------------------------------------- wrong attempts


@wrong("trains_on_prompt")
def keeps_the_header(tokenizer, messages):
    """Starts each answer at the rendering of messages[:i] without add_generation_prompt: the
    'assistant:' header is a target."""
    return _labels(tokenizer, messages, _spans(tokenizer, messages, header=False))


@wrong("trains_on_prompt")
def generation_prompt_at_the_end_too(tokenizer, messages):
    """Renders messages[:i + 1] with add_generation_prompt=True as well: an answer followed by a
    user turn takes that turn's first tokens as targets (right for the last turn)."""
    return _labels(tokenizer, messages, _spans(tokenizer, messages, next_header=True))


@wrong("drops_end_of_turn")
def searches_content(tokenizer, messages):
    """Finds each answer by searching its content's tokens from the start of the ids: no end-of-turn
    token, and an answer word that also occurs in the question ("the") is labelled in the prompt."""
    return _searched(tokenizer, messages, eos=False)


@wrong(
    says="(two turns, the same answer twice), your targets are at positions [18, 19]; "
    "expected [18, 19, 37, 38]"
)
def searches_answer_and_eos(tokenizer, messages):
    """Searches content + eos from the start of the ids: right unless two answers are equal, then
    the first is labelled twice and the later one never."""
    return _searched(tokenizer, messages, eos=True)


@wrong("labels_not_ignored")
def zeros_elsewhere(tokenizer, messages):
    """0 instead of -100 outside the answers (token 0 is a class: the prompt trains on [PAD])."""
    return _labels(tokenizer, messages, fill=0)


@wrong("no_targets")
def asks_transformers_for_the_mask(tokenizer, messages):
    """return_assistant_tokens_mask=True on the tagless template: a mask of zeros, all labels
    -100."""
    out = tokenizer.apply_chat_template(messages, return_assistant_tokens_mask=True)
    return [i if m else IGNORE for i, m in zip(out["input_ids"], out["assistant_masks"])]


@wrong("wrong_shape")
def batch_of_one(tokenizer, messages):
    """Returns a (1, T) tensor (a batch of one) instead of a list or a 1-D tensor."""
    return torch.tensor([_labels(tokenizer, messages)])  # (1, T), as a model's batch


@wrong("wrong_shape")
def one_label_short(tokenizer, messages):
    """Right labels, but the last one dropped ('the last token predicts nothing')."""
    return torch_mask(tokenizer, messages)[:-1]


@wrong("wrong_dtype")
def float_labels(tokenizer, messages):
    """Float labels (a float tensor of the ids, -100 outside the answers)."""
    return torch.tensor(_labels(tokenizer, messages), dtype=torch.float)  # (T,)


@wrong("hard_coded_special_ids")
def hard_coded_course_ids(tokenizer, messages):
    """Searches the course tokenizer's ids of 'assistant:' and [SEP] as literals (204, 33, 456, 398,
    66 and 3): wrong for any other tokenizer."""
    return _after_header(tokenizer, messages, [204, 33, 456, 398, 66], 3)  # the lesson's table


@wrong(
    says="[UNK]), your targets are at positions []; expected [14, 15, 16, 35, 36, 37, 38, 54, "
    "55]; right on the course tokenizer, not on this one"
)
def course_template_header(tokenizer, messages):
    """Finds 'assistant:' (encoded with the given tokenizer) and takes the tokens up to
    eos_token_id: right for the course template only; the statement says 'a tokenizer whose chat
    template has no tags', not which template (ambiguous)."""
    header = tokenizer.encode("assistant:", add_special_tokens=False)
    return _after_header(tokenizer, messages, header, tokenizer.eos_token_id)


@wrong(says="(one question and its answer), your targets are at positions [19]; expected [18, 19]")
def skips_first_answer_token(tokenizer, messages):
    """Starts one token late: the first token of every answer is not a target."""
    return _labels(tokenizer, messages, [(s + 1, e) for s, e in _spans(tokenizer, messages)])


@wrong(says="(two turns), your targets are at positions [18, 19]; expected [18, 19, 35, 36]")
def returns_inside_the_loop(tokenizer, messages):
    """'return labels' one level too deep: only the first assistant turn is labelled."""
    return _labels(tokenizer, messages, list(_spans(tokenizer, messages))[:1])


@wrong("wrong_shape")
def retokenizes_the_text(tokenizer, messages):
    """Renders with tokenize=False and calls tokenizer.encode(text): add_special_tokens adds a
    second [CLS] and a final [SEP], so the labels are two tokens longer than the ids."""

    def encode(part, **kwargs):  # add_special_tokens=True: a second [CLS] and a [SEP]
        return tokenizer.encode(tokenizer.apply_chat_template(part, tokenize=False, **kwargs))

    ids = encode(messages)
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(encode(messages[:i], add_generation_prompt=True)) - 1  # minus its [SEP]
            end = len(encode(messages[: i + 1])) - 1
            labels[start:end] = ids[start:end]
    return labels


@wrong("delegates_to_course", says="lmlessons.course.chat.conversation_labels")
def the_course_conversation_labels(tokenizer, messages):
    """Takes the labels of the course's own conversation_labels: nothing written."""
    from lmlessons.course.chat import conversation_labels

    return conversation_labels(tokenizer, messages)["labels"]


# ---------------------------------------------------------------- correct attempts


@correct
def char_offsets(tokenizer, messages):
    """Character spans of the rendered prefixes, mapped to tokens with the fast tokenizer's
    offset_mapping (calls tokenizer(text, ...), as any tokenizer allows)."""

    def text(part, **kwargs):
        return tokenizer.apply_chat_template(part, tokenize=False, **kwargs)

    enc = tokenizer(text(messages), add_special_tokens=False, return_offsets_mapping=True)
    spans = [
        (len(text(messages[:i], add_generation_prompt=True)), len(text(messages[: i + 1])))
        for i, message in enumerate(messages)
        if message["role"] == "assistant"
    ]
    return [
        tok if any(b <= s < e for b, e in spans) and e_ > s else IGNORE
        for tok, (s, e_) in zip(enc["input_ids"], enc["offset_mapping"])
    ]


@correct
def torch_mask(tokenizer, messages):
    """A boolean torch mask from the prefix lengths, then torch.where."""
    ids = torch.tensor(_ids(tokenizer, messages))  # (T,)
    is_answer = torch.zeros_like(ids, dtype=torch.bool)  # (T,)
    for start, end in _spans(tokenizer, messages):
        is_answer[start:end] = True
    return torch.where(is_answer, ids, torch.full_like(ids, IGNORE))  # (T,)


@correct
def common_prefix(tokenizer, messages):
    """The start as the common prefix of the prompt's and the conversation's tokens, the end from
    messages[:i + 1]."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = _ids(tokenizer, messages[:i], add_generation_prompt=True)
        start = next((k for k, (a, b) in enumerate(zip(prompt, ids)) if a != b), len(prompt))
        end = len(_ids(tokenizer, messages[: i + 1]))
        labels[start:end] = ids[start:end]
    return labels
