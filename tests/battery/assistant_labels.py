"""Battery for ``assistant_labels`` (lesson 10): assistant-only labels without generation tags.

The statement a learner sees: ``my_assistant_labels(tokenizer, messages)``; the tokenizer's chat
template has no ``{% generation %}`` tags; ``messages`` alternate user and assistant turns, the
last one the assistant's. Return the labels of ``apply_chat_template(messages)["input_ids"]``:
the id on every token the assistant wrote, its end-of-turn token included, -100 elsewhere (a
list or a 1-D tensor, unshifted), for conversations of one to three turns. The lesson's way in:
``messages[:i]`` rendered with ``add_generation_prompt=True`` and ``messages[:i + 1]`` are
prefixes of the tokens.
"""

from __future__ import annotations

import torch

from battery._attempt import correct, wrong

IGNORE = -100


def _ids(tokenizer, messages, **kwargs) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, **kwargs)["input_ids"])


def _spans(tokenizer, messages):
    """(start, end) of each assistant turn, as the lesson's prefixes give them."""
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(_ids(tokenizer, messages[:i], add_generation_prompt=True))
            yield start, len(_ids(tokenizer, messages[: i + 1]))


def _find(seq, sub, begin=0):
    for k in range(begin, len(seq) - len(sub) + 1):
        if seq[k : k + len(sub)] == sub:
            return k
    return -1


# ---------------------------------------------------------------- wrong attempts


@wrong("last_answer_only")
def completion_only(tokenizer, messages):
    """completion-only: every token after the last prompt is a target, the earlier answers are
    not."""
    ids = _ids(tokenizer, messages)
    start = len(_ids(tokenizer, messages[:-1], add_generation_prompt=True))
    return [IGNORE] * start + ids[start:]  # everything after the last prompt


@wrong("trains_on_prompt")
def keeps_the_header(tokenizer, messages):
    """Starts each answer at the rendering of messages[:i] without add_generation_prompt: the
    'assistant:' header is a target."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(_ids(tokenizer, messages[:i]))  # no generation prompt: "assistant:" too
            end = len(_ids(tokenizer, messages[: i + 1]))
            labels[start:end] = ids[start:end]
    return labels


@wrong("drops_end_of_turn")
def stops_before_eos(tokenizer, messages):
    """Ends each answer one token early: the end-of-turn token is not a target."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start : end - 1] = ids[start : end - 1]  # "the [SEP] is the template's"
    return labels


@wrong("drops_end_of_turn")
def searches_content(tokenizer, messages):
    """Finds each answer by searching its content's tokens from the start of the ids: no end-of-turn
    token, and an answer word that also occurs in the question ("the") is labelled in the prompt."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for message in messages:
        if message["role"] == "assistant":
            answer = tokenizer.encode(message["content"], add_special_tokens=False)
            k = _find(ids, answer)  # the first place these tokens occur
            labels[k : k + len(answer)] = ids[k : k + len(answer)]
    return labels


@wrong(
    says="(two turns, the same answer twice), your targets are at positions [18, 19]; "
    "expected [18, 19, 37, 38]"
)
def searches_answer_and_eos(tokenizer, messages):
    """Searches content + eos from the start of the ids: right unless two answers are equal, then
    the first is labelled twice and the later one never."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for message in messages:
        if message["role"] == "assistant":
            answer = tokenizer.encode(message["content"], add_special_tokens=False)
            answer = [*answer, tokenizer.eos_token_id]
            k = _find(ids, answer)  # from the start: a repeated answer finds the first one again
            labels[k : k + len(answer)] = ids[k : k + len(answer)]
    return labels


@wrong("labels_shifted")
def pre_shifted(tokenizer, messages):
    """Writes the answer ids one place to the left (labels[start - 1:end - 1] = ids[start:end])."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start - 1 : end - 1] = ids[start:end]  # "position t predicts token t + 1"
    return labels


@wrong("labels_not_ignored")
def zeros_elsewhere(tokenizer, messages):
    """0 instead of -100 outside the answers (token 0 is a class: the prompt trains on [PAD])."""
    ids = _ids(tokenizer, messages)
    labels = [0] * len(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start:end] = ids[start:end]
    return labels


@wrong("labels_are_boolean_mask")
def returns_the_mask(tokenizer, messages):
    """Returns the 0/1 assistant mask, not labels."""
    ids = _ids(tokenizer, messages)
    mask = [0] * len(ids)
    for start, end in _spans(tokenizer, messages):
        mask[start:end] = [1] * (end - start)
    return mask


@wrong("trains_on_prompt")
def inverted(tokenizer, messages):
    """Keeps the prompt ids and writes -100 on the answers."""
    ids = _ids(tokenizer, messages)
    labels = list(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start:end] = [IGNORE] * (end - start)  # masks the answers, keeps the prompt
    return labels


@wrong("no_targets")
def asks_transformers_for_the_mask(tokenizer, messages):
    """return_assistant_tokens_mask=True on the tagless template: a mask of zeros, all labels
    -100."""
    out = tokenizer.apply_chat_template(messages, return_assistant_tokens_mask=True)
    return [i if m else IGNORE for i, m in zip(out["input_ids"], out["assistant_masks"])]


@wrong("trains_on_prompt")
def generation_prompt_at_the_end_too(tokenizer, messages):
    """Renders messages[:i + 1] with add_generation_prompt=True as well: an answer followed by a
    user turn takes that turn's first tokens as targets (right for the last turn)."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(_ids(tokenizer, messages[:i], add_generation_prompt=True))
            end = len(_ids(tokenizer, messages[: i + 1], add_generation_prompt=True))
            labels[start:end] = ids[start:end]  # the end overshoots into the next user turn
    return labels


@wrong("modifies_input")
def pops_the_messages(tokenizer, messages):
    """Walks back through the conversation with messages.pop(): the caller's list is emptied."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    while messages:  # walks back through the conversation by shortening it
        if messages[-1]["role"] == "assistant":
            end = len(_ids(tokenizer, messages))
            messages.pop()
            start = len(_ids(tokenizer, messages, add_generation_prompt=True))
            labels[start:end] = ids[start:end]
        else:
            messages.pop()
    return labels


@wrong("wrong_shape")
def batch_of_one(tokenizer, messages):
    """Returns a (1, T) tensor (a batch of one) instead of a list or a 1-D tensor."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start:end] = ids[start:end]
    return torch.tensor([labels])  # (1, T), as a model's batch


@wrong("wrong_dtype")
def float_labels(tokenizer, messages):
    """Float labels (torch.full_like of a float tensor of the ids)."""
    ids = torch.tensor(_ids(tokenizer, messages), dtype=torch.float)  # (T,)
    labels = torch.full_like(ids, IGNORE)
    for start, end in _spans(tokenizer, messages):
        labels[start:end] = ids[start:end]
    return labels


@wrong("hard_coded_special_ids")
def hard_coded_course_ids(tokenizer, messages):
    """Searches the course tokenizer's ids of 'assistant:' and [SEP] as literals (204, 33, 456, 398,
    66 and 3): wrong for any other tokenizer."""
    ids = _ids(tokenizer, messages)
    header, eos = [204, 33, 456, 398, 66], 3  # "assistant:" and [SEP], read off the lesson's table
    labels, k = [IGNORE] * len(ids), 0
    while (k := _find(ids, header, k)) >= 0:
        k += len(header)
        end = ids.index(eos, k) + 1
        labels[k:end] = ids[k:end]
    return labels


@wrong(
    says="[UNK]), your targets are at positions []; expected [14, 15, 16, 35, 36, 37, 38, 54, "
    "55]; right on the course tokenizer, not on this one"
)
def course_template_header(tokenizer, messages):
    """Finds 'assistant:' (encoded with the given tokenizer) and takes the tokens up to
    eos_token_id: right for the course template only; the statement says 'a tokenizer whose chat
    template has no tags', not which template (ambiguous)."""
    ids = _ids(tokenizer, messages)
    header = tokenizer.encode("assistant:", add_special_tokens=False)
    labels, k = [IGNORE] * len(ids), 0
    while (k := _find(ids, header, k)) >= 0:  # the course template's header, then up to eos
        k += len(header)
        end = ids.index(tokenizer.eos_token_id, k) + 1
        labels[k:end] = ids[k:end]
    return labels


@wrong(says="(one question and its answer), your targets are at positions [19]; expected [18, 19]")
def skips_first_answer_token(tokenizer, messages):
    """Starts one token late: the first token of every answer is not a target."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start + 1 : end] = ids[start + 1 : end]  # "the prompt's last token is at start"
    return labels


@wrong(says="(two turns), your targets are at positions [18, 19]; expected [18, 19, 35, 36]")
def returns_inside_the_loop(tokenizer, messages):
    """'return labels' one level too deep: only the first assistant turn is labelled."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(_ids(tokenizer, messages[:i], add_generation_prompt=True))
            end = len(_ids(tokenizer, messages[: i + 1]))
            labels[start:end] = ids[start:end]
            return labels  # one indentation level too deep
    return labels


@wrong("wrong_type")
def returns_ids_and_labels(tokenizer, messages):
    """Returns the pair (input_ids, labels) instead of the labels."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    for start, end in _spans(tokenizer, messages):
        labels[start:end] = ids[start:end]
    return ids, labels


@wrong("wrong_shape")
def retokenizes_the_text(tokenizer, messages):
    """Renders with tokenize=False and calls tokenizer.encode(text): add_special_tokens adds a
    second [CLS] and a final [SEP], so the labels are two tokens longer than the ids."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    ids = tokenizer.encode(text)  # add_special_tokens=True: a second [CLS] and a [SEP]
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            prompt = tokenizer.apply_chat_template(
                messages[:i], add_generation_prompt=True, tokenize=False
            )
            turn = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
            start = len(tokenizer.encode(prompt)) - 1  # minus the [SEP] it adds
            end = len(tokenizer.encode(turn)) - 1
            labels[start:end] = ids[start:end]
    return labels


# ---------------------------------------------------------------- correct attempts


@correct
def char_offsets(tokenizer, messages):
    """Character spans of the rendered prefixes, mapped to tokens with the fast tokenizer's
    offset_mapping (calls tokenizer(text, ...), as any tokenizer allows)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            begin = len(
                tokenizer.apply_chat_template(
                    messages[:i], add_generation_prompt=True, tokenize=False
                )
            )
            spans.append(
                (begin, len(tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)))
            )
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
def turn_minus_header(tokenizer, messages):
    """One pass over the turns: each turn's token span minus the header that the generation prompt
    adds."""
    ids = _ids(tokenizer, messages)
    labels = [IGNORE] * len(ids)
    before = 0  # tokens of messages[:i]
    for i, message in enumerate(messages):
        after = len(_ids(tokenizer, messages[: i + 1]))
        if message["role"] == "assistant":
            header = len(_ids(tokenizer, messages[:i], add_generation_prompt=True)) - before
            for t in range(before + header, after):
                labels[t] = ids[t]
        before = after
    return labels


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


# ---------------------------------------------------------------- other naive versions


@wrong("trains_on_prompt")
def trains_on_everything(tokenizer, messages):
    """Labels = the conversation's ids: every token, the prompts included, is a target."""
    return _ids(tokenizer, messages)


@wrong("wrong_shape")
def one_label_short(tokenizer, messages):
    """Right labels, but the last one dropped ('the last token predicts nothing')."""
    return torch_mask(tokenizer, messages)[:-1]


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.course.chat.conversation_labels")
def the_course_conversation_labels(tokenizer, messages):
    """Takes the labels of the course's own conversation_labels: nothing written."""
    from lmlessons.course.chat import conversation_labels

    return conversation_labels(tokenizer, messages)["labels"]


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(tokenizer, messages):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions_part2 import assistant_labels

    return assistant_labels(tokenizer, messages)
