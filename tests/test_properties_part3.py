"""Properties of Part III's core (lessons 11-13) against slow, obviously right references.

Every public function of ``lmlessons.preference``, ``lmlessons.grpo`` and ``lmlessons.kl``, and
the functions with logic of ``lmlessons.course.preferences`` and ``lmlessons.course.rl`` /
``grpo_learn`` (not the TRL runs), is compared on random inputs with a plain-Python loop that
says what it computes, one pair, completion, token or vocabulary entry at a time (``math`` on
floats, no tensor reductions). The inputs reach the edges: ties between rewards, groups without
spread, completions without a token, ratios on both sides of both clips, positions without a
label, ``beta`` at 0 and 1. The oracle tests against TRL (``test_*_trl.py``) and the example
tests of each module stay as they are.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmlessons.grpo import (
    LOSS_TYPES,
    aggregate_loss,
    group_advantages,
    rloo_advantages,
    token_losses,
    token_weights,
)
from lmlessons.kl import forward_kl, generalized_jsd, k1, k2, k3, kl_divergence, reverse_kl
from lmlessons.preference import (
    LOSS_TYPES as DPO_LOSS_TYPES,
)
from lmlessons.preference import (
    dpo_loss,
    preference_batch,
    preference_metrics,
    reward_accuracies,
    reward_margins,
    sequence_logprobs,
    simpo_loss,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IGNORE = -100
F64 = torch.float64

# ------------------------------------------------------------------------ plain-Python references


def _log_softmax(row: list[float]) -> list[float]:
    top = max(row)
    lse = top + math.log(sum(math.exp(x - top) for x in row))
    return [x - lse for x in row]


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _bessel_std(xs: list[float]) -> float:
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _kl(log_p: list[float], log_q: list[float]) -> float:
    return sum(math.exp(a) * (a - b) for a, b in zip(log_p, log_q))


def _rows(t: torch.Tensor) -> list:
    return t.tolist()


def _seeded(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale


seeds = st.integers(0, 2**16)
# Few distinct values, so that ties (equal rewards, a group without spread) come up often.
coarse = st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0])

# ------------------------------------------------------------------------------ preference


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 30), max_size=3),
            st.lists(st.integers(0, 30), min_size=1, max_size=4),
            st.lists(st.integers(0, 30), min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=3,
    ),
    st.integers(0, 5),
)
def test_preference_batch_is_the_chosen_rows_over_the_rejected_rows_padded(pairs, pad_id) -> None:
    examples = [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in pairs]
    rows = [(p, c) for p, c, _ in pairs] + [(p, r) for p, _, r in pairs]
    width = max(len(p) + len(c) for p, c in rows)
    out = preference_batch(examples, pad_token_id=pad_id)
    for i, (p, c) in enumerate(rows):
        n_pad = width - len(p) - len(c)
        assert out["input_ids"][i].tolist() == p + c + [pad_id] * n_pad
        assert out["attention_mask"][i].tolist() == [1] * (len(p) + len(c)) + [0] * n_pad
        assert out["completion_mask"][i].tolist() == [0] * len(p) + [1] * len(c) + [0] * n_pad
        assert out["labels"][i].tolist() == [IGNORE] * len(p) + c + [IGNORE] * n_pad
    assert all(v.shape == (len(rows), width) for v in out.values())


@settings(max_examples=30)
@given(st.integers(1, 3), st.integers(1, 5), st.integers(2, 5), seeds, st.booleans(), st.data())
def test_sequence_logprobs_sum_or_average_each_rows_target_logprobs(b, t, v, seed, average, data):
    label = st.integers(-1, v - 1).map(lambda x: IGNORE if x < 0 else x)
    labels = data.draw(st.lists(st.lists(label, min_size=t, max_size=t), min_size=b, max_size=b))
    logits = _seeded(seed, b, t, v, scale=2.0).float()
    sums, counts = [], []
    for row_logits, row_labels in zip(_rows(logits), labels):
        terms = [
            _log_softmax(row_logits[i])[row_labels[i + 1]]
            for i in range(t - 1)
            if row_labels[i + 1] != IGNORE
        ]
        sums.append(sum(terms))
        counts.append(len(terms))
    labels_t = torch.tensor(labels, dtype=torch.long)
    if average and 0 in counts:
        with pytest.raises(ValueError, match="labels row"):
            sequence_logprobs(logits, labels_t, average=True)
        return
    expected = [s / n for s, n in zip(sums, counts)] if average else sums
    got = sequence_logprobs(logits, labels_t, average=average)
    assert got.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-5)


def _dpo_by_pair(loss_type, beta, pc, pr, rc, rr, lc, lr):
    c, r = pc - rc, pr - rr
    if loss_type == "sigmoid":
        return -_log_sigmoid(beta * (c - r))
    if loss_type == "hinge":
        return max(0.0, 1 - beta * (c - r))
    if loss_type == "ipo":
        return (c / lc - r / lr - 1 / (2 * beta)) ** 2
    if loss_type == "sigmoid_norm":
        return -_log_sigmoid(beta * (c / lc - r / lr))
    assert loss_type == "bco_pair"
    return -_log_sigmoid(beta * c) - _log_sigmoid(-beta * r)


@settings(max_examples=40)
@given(
    st.sampled_from(DPO_LOSS_TYPES),
    st.sampled_from([0.05, 0.1, 0.5, 2.0]),
    st.integers(1, 4),
    seeds,
    st.data(),
)
def test_dpo_loss_is_each_pairs_formula(loss_type, beta, b, seed, data) -> None:
    logps = -_seeded(seed, 4, b, scale=3.0).abs()  # (4, B): policy c, r; reference c, r
    lengths = torch.tensor(
        data.draw(st.lists(st.integers(1, 6), min_size=2 * b, max_size=2 * b))
    ).view(2, b)  # (2, B)
    losses, chosen_rewards, rejected_rewards = dpo_loss(
        *logps,
        beta=beta,
        loss_type=loss_type,
        chosen_lengths=lengths[0],
        rejected_lengths=lengths[1],
    )
    cols = list(zip(*_rows(logps), *lengths.tolist()))
    assert losses.tolist() == pytest.approx(
        [_dpo_by_pair(loss_type, beta, *col) for col in cols], rel=1e-9, abs=1e-12
    )
    assert chosen_rewards.tolist() == pytest.approx([beta * (pc - rc) for pc, _, rc, *_ in cols])
    assert rejected_rewards.tolist() == pytest.approx(
        [beta * (pr - rr) for _, pr, _, rr, *_ in cols]
    )


@settings(max_examples=30)
@given(st.integers(1, 4), seeds, st.sampled_from([0.1, 1.0, 2.5]), st.sampled_from([0.0, 0.5, 1.0]))
def test_simpo_loss_is_each_pairs_formula(b, seed, beta, gamma) -> None:
    chosen, rejected = -_seeded(seed, 2, b).abs()  # (B,) each
    losses, c_rewards, r_rewards = simpo_loss(chosen, rejected, beta=beta, simpo_gamma=gamma)
    pairs = list(zip(chosen.tolist(), rejected.tolist()))
    expected = [-_log_sigmoid(beta * (c - r) - gamma) for c, r in pairs]
    assert losses.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert c_rewards.tolist() == pytest.approx([beta * c for c, _ in pairs])
    assert r_rewards.tolist() == pytest.approx([beta * r for _, r in pairs])


@settings(max_examples=30)
@given(st.lists(st.tuples(coarse, coarse, coarse, coarse), min_size=1, max_size=5), st.booleans())
def test_reward_accuracies_margins_and_metrics_are_the_loops(rows, with_logps) -> None:
    chosen, rejected, c_logps, r_logps = (torch.tensor(col, dtype=F64) for col in zip(*rows))
    wins = [1.0 if c > r else 0.0 for c, r, _, _ in rows]  # a tie is no win
    margins = [c - r for c, r, _, _ in rows]
    assert reward_accuracies(chosen, rejected).tolist() == wins
    assert reward_margins(chosen, rejected).tolist() == pytest.approx(margins)
    extra = {"chosen_logps": c_logps, "rejected_logps": r_logps} if with_logps else {}
    expected = {
        "rewards/chosen": _mean([row[0] for row in rows]),
        "rewards/rejected": _mean([row[1] for row in rows]),
        "rewards/accuracies": _mean(wins),
        "rewards/margins": _mean(margins),
    }
    if with_logps:
        expected |= {
            "logps/chosen": _mean([row[2] for row in rows]),
            "logps/rejected": _mean([row[3] for row in rows]),
        }
    assert preference_metrics(chosen, rejected, **extra) == pytest.approx(expected)


# ------------------------------------------------------------------------------ grpo


@st.composite
def grouped_rewards(draw) -> tuple[list[float], int]:
    g = draw(st.integers(2, 4))
    prompts = draw(st.integers(1, 3))
    rewards = draw(st.lists(coarse, min_size=g * prompts, max_size=g * prompts))
    return rewards, g


@settings(max_examples=40)
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]))
def test_group_advantages_are_reward_minus_group_mean_over_the_chosen_std(case, scale) -> None:
    rewards, g = case
    groups = [rewards[i : i + g] for i in range(0, len(rewards), g)]
    expected = []
    for group in groups:
        for r in group:
            centred = r - _mean(group)
            if scale == "group":
                centred /= _bessel_std(group) + 1e-4
            elif scale == "batch":
                centred /= _bessel_std(rewards) + 1e-4
            expected.append(centred)
    got = group_advantages(torch.tensor(rewards, dtype=F64), num_generations=g, scale_rewards=scale)
    assert got.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=30)
@given(grouped_rewards())
def test_rloo_advantages_are_reward_minus_the_mean_of_the_others(case) -> None:
    rewards, g = case
    expected = []
    for start in range(0, len(rewards), g):
        group = rewards[start : start + g]
        for i, r in enumerate(group):
            expected.append(r - _mean(group[:i] + group[i + 1 :]))
    got = rloo_advantages(torch.tensor(rewards, dtype=F64), num_generations=g)
    assert got.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-12)


@st.composite
def completions(draw, *, max_b: int = 4, max_c: int = 4):
    """A ``(B, C)`` 0/1 mask, right-padded, some completions without a token."""
    b, c = draw(st.integers(1, max_b)), draw(st.integers(1, max_c))
    lengths = draw(st.lists(st.integers(0, c), min_size=b, max_size=b))
    return [[1 if j < n else 0 for j in range(c)] for n in lengths]


@settings(max_examples=60)
@given(
    completions(),
    seeds,
    st.booleans(),
    st.booleans(),
    st.sampled_from([0.0, 0.04, 0.5]),
    st.booleans(),
    st.sampled_from(["token", "sequence"]),
    st.sampled_from([(0.2, 0.2), (0.1, 0.28), (0.0, 0.5)]),
)
def test_token_losses_are_each_tokens_clipped_surrogate_plus_beta_k3(
    mask, seed, has_old, per_token_adv, beta, correction, level, eps
) -> None:
    b, c = len(mask), len(mask[0])
    noise = _seeded(seed, 4, b, c)
    logps = -noise[0].abs()  # (B, C)
    old = logps + noise[1] * 0.5 if has_old else None  # ratios from about 0.5 to 2: both clips
    ref = logps + noise[2] * 0.7
    adv = noise[3] if per_token_adv else noise[3, :, 0]  # (B, C) or (B,)
    got = token_losses(
        logps, old, adv, epsilon_low=eps[0], epsilon_high=eps[1], ref_logps=ref, beta=beta,
        use_bias_correction_kl=correction, importance_sampling_level=level,
        completion_mask=torch.tensor(mask),
    )  # fmt: skip
    lp, ol = _rows(logps), _rows(old if has_old else logps)
    expected = []
    for i in range(b):
        seq_log_ratio = sum((lp[i][j] - ol[i][j]) * mask[i][j] for j in range(c)) / max(
            sum(mask[i]), 1
        )
        row = []
        for j in range(c):
            ratio = math.exp(seq_log_ratio if level == "sequence" else lp[i][j] - ol[i][j])
            clipped = min(max(ratio, 1 - eps[0]), 1 + eps[1])
            a = float(adv[i][j] if per_token_adv else adv[i])
            loss = -min(ratio * a, clipped * a)
            if beta:
                x = float(ref[i][j]) - lp[i][j]
                kl = math.exp(x) - x - 1
                loss += beta * kl * (ratio if correction else 1.0)
            row.append(loss)
        expected.append(row)
    assert got.shape == (b, c)
    for got_row, want_row in zip(got.tolist(), expected):
        assert got_row == pytest.approx(want_row, rel=1e-9, abs=1e-12)


def _weight_by_loop(mask, loss_type, max_len, num_items):
    b = len(mask)
    total = sum(map(sum, mask))
    out = []
    for row in mask:
        n_i = sum(row)
        if loss_type == "grpo":
            w = 1 / (b * max(n_i, 1))
        elif loss_type == "dr_grpo":
            w = 1 / (b * max_len)
        elif loss_type == "dapo" and num_items is not None:
            w = 1 / max(num_items, 1)
        else:  # bnpo, or dapo without a window count
            w = 1 / max(total, 1)
        out.append([w * m for m in row])
    return out


@settings(max_examples=60)
@given(
    completions(),
    st.sampled_from(LOSS_TYPES),
    st.integers(0, 3),
    st.sampled_from([None, 0, 1, 5, 12.5]),
    seeds,
    st.sampled_from(["float", "long", "bool"]),
)
def test_token_weights_and_aggregate_loss_are_the_loop_over_tokens(
    mask, loss_type, extra_len, num_items, seed, mask_dtype
) -> None:
    c = len(mask[0])
    max_len = c + extra_len
    dtype = {"float": torch.float32, "long": torch.long, "bool": torch.bool}[mask_dtype]
    mask_t = torch.tensor(mask).to(dtype)
    options = {"loss_type": loss_type, "max_completion_length": max_len,
               "num_items_in_batch": num_items}  # fmt: skip
    expected = _weight_by_loop(mask, loss_type, max_len, num_items)
    assert token_weights(mask_t, **options).tolist() == [
        pytest.approx(row, rel=1e-6) for row in expected
    ]
    losses = _seeded(seed, len(mask), c)  # (B, C)
    want = sum(w * x for w_row, x_row in zip(expected, _rows(losses)) for w, x in zip(w_row, x_row))
    assert float(aggregate_loss(losses, mask_t, **options)) == pytest.approx(
        want, rel=1e-6, abs=1e-9
    )


# ------------------------------------------------------------------------------ kl


@settings(max_examples=30)
@given(st.lists(st.floats(-6, 6), min_size=1, max_size=6))
def test_k1_k2_k3_are_schulmans_formulas_per_sample(xs) -> None:
    log_ratio = torch.tensor(xs, dtype=F64)
    assert k1(log_ratio).tolist() == pytest.approx([-x for x in xs])
    assert k2(log_ratio).tolist() == pytest.approx([x * x / 2 for x in xs])
    assert k3(log_ratio).tolist() == pytest.approx(
        [math.exp(x) - x - 1 for x in xs], rel=1e-9, abs=1e-12
    )


def _positions(logits: torch.Tensor) -> list[list[float]]:
    """The ``(..., V)`` rows of a tensor, in order."""
    return logits.reshape(-1, logits.shape[-1]).tolist()


@settings(max_examples=30)
@given(st.sampled_from([(3,), (2, 3), (2, 2, 4)]), seeds, st.sampled_from([0.5, 1.0, 2.0]))
def test_kl_divergence_and_both_directions_are_the_sum_over_the_vocabulary(
    shape, seed, temperature
) -> None:
    noise = _seeded(seed, 2, *shape, scale=2.0)
    student, teacher = noise[0], noise[1]
    s_rows = [_log_softmax([x / temperature for x in r]) for r in _positions(student)]
    t_rows = [_log_softmax([x / temperature for x in r]) for r in _positions(teacher)]
    lead = shape[:-1]
    forward = torch.tensor([_kl(t, s) for s, t in zip(s_rows, t_rows)], dtype=F64).view(lead)
    backward = torch.tensor([_kl(s, t) for s, t in zip(s_rows, t_rows)], dtype=F64).view(lead)
    got_f = forward_kl(student, teacher, temperature=temperature)
    got_r = reverse_kl(student, teacher, temperature=temperature)
    assert got_f.shape == got_r.shape == lead
    assert torch.allclose(got_f, forward, atol=1e-10) and torch.allclose(
        got_r, backward, atol=1e-10
    )
    log_p, log_q = torch.log_softmax(student, -1), torch.log_softmax(teacher, -1)
    want = [_kl(p, q) for p, q in zip(_positions(log_p), _positions(log_q))]
    assert kl_divergence(log_p, log_q).reshape(-1).tolist() == pytest.approx(want, abs=1e-10)


def _jsd_by_loop(s: list[float], t: list[float], beta: float) -> float:
    if beta == 0.0:
        return _kl(t, s)
    if beta == 1.0:
        return _kl(s, t)
    m = [math.log((1 - beta) * math.exp(a) + beta * math.exp(b)) for a, b in zip(s, t)]
    return beta * _kl(t, m) + (1 - beta) * _kl(s, m)


@settings(max_examples=50)
@given(
    st.sampled_from([(2, 3), (2, 3, 4), (1, 4, 2)]),
    seeds,
    st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.sampled_from(["batchmean", "sum", "none"]),
    st.booleans(),
    st.sampled_from([None, 3, 7.5]),
    st.data(),
)
def test_generalized_jsd_is_the_mixture_loop_masked_and_reduced(
    shape, seed, beta, temperature, reduction, with_labels, num_items, data
) -> None:
    noise = _seeded(seed, 2, *shape, scale=2.0)
    lead, v = shape[:-1], shape[-1]
    n = math.prod(lead)
    labels = None
    counted = [True] * n
    if with_labels:
        flat = data.draw(st.lists(st.integers(-1, v - 1), min_size=n, max_size=n))
        counted = [x >= 0 for x in flat]
        labels = torch.tensor([x if x >= 0 else IGNORE for x in flat]).view(lead)
    s_rows = [_log_softmax([x / temperature for x in r]) for r in _positions(noise[0])]
    t_rows = [_log_softmax([x / temperature for x in r]) for r in _positions(noise[1])]
    per = [_jsd_by_loop(s, t, beta) if keep else 0.0 for s, t, keep in zip(s_rows, t_rows, counted)]
    got = generalized_jsd(
        noise[0], noise[1], beta=beta, temperature=temperature, labels=labels,
        reduction=reduction, num_items_in_batch=num_items,
    )  # fmt: skip
    if num_items is not None:
        assert float(got) == pytest.approx(sum(per) / num_items, abs=1e-10)
    elif reduction == "none":
        assert got.shape == lead
        assert got.reshape(-1).tolist() == pytest.approx(per, abs=1e-10)
    elif reduction == "sum":
        assert float(got) == pytest.approx(sum(per), abs=1e-10)
    elif with_labels:
        assert float(got) == pytest.approx(sum(per) / max(sum(counted), 1), abs=1e-10)
    else:
        assert float(got) == pytest.approx(sum(per) / shape[0], abs=1e-10)


# ------------------------------------------------------------------------------ course: lesson 11


@settings(max_examples=30)
@given(st.sampled_from([(), (3,), (2, 2)]), seeds)
def test_bradley_terry_is_the_ratio_of_exponentials_elementwise(shape, seed) -> None:
    from lmlessons.course.preferences import bradley_terry

    chosen, rejected = _seeded(seed, 2, *shape, scale=3.0)
    pairs = zip(chosen.reshape(-1).tolist(), rejected.reshape(-1).tolist())
    want = [math.exp(c) / (math.exp(c) + math.exp(r)) for c, r in pairs]
    got = bradley_terry(chosen, rejected)
    assert got.shape == shape and got.reshape(-1).tolist() == pytest.approx(want, rel=1e-9)


@settings(max_examples=30)
@given(st.integers(2, 5), st.integers(1, 3), seeds, st.sampled_from([0.1, 1.0, 3.0]), st.booleans())
def test_kl_objective_and_its_closed_form_maximiser_are_the_sums_over_completions(
    y, rows, seed, beta, shared_reference
) -> None:
    from lmlessons.course.preferences import kl_objective, kl_optimal_policy

    noise = _seeded(seed, 3, rows, y, scale=1.5)
    log_pi = torch.log_softmax(noise[0], -1)  # (rows, Y)
    log_ref = torch.log_softmax(noise[1][0] if shared_reference else noise[1], -1)
    reward = noise[2][0]  # (Y,)
    refs = [log_ref.tolist()] * rows if shared_reference else log_ref.tolist()
    r = reward.tolist()
    want = [
        sum(math.exp(a) * ry for a, ry in zip(pi, r)) - beta * _kl(pi, ref)
        for pi, ref in zip(log_pi.tolist(), refs)
    ]
    assert kl_objective(log_pi, log_ref, reward, beta).tolist() == pytest.approx(want, rel=1e-9)
    best = [_log_softmax([a + ry / beta for a, ry in zip(ref, r)]) for ref in refs]
    got = kl_optimal_policy(log_ref, reward, beta)  # the shape of log_reference
    assert got.shape == log_ref.shape
    assert got.reshape(-1, y).tolist() == [
        pytest.approx(row, abs=1e-10) for row in (best[:1] if shared_reference else best)
    ]


@settings(max_examples=20)
@given(st.lists(st.lists(st.floats(-30, 0), min_size=1, max_size=5), min_size=1, max_size=4))
def test_chosen_course_reads_start_lowest_peak_and_end_of_each_run(probes) -> None:
    from lmlessons.course.preferences import chosen_course

    runs = [
        {"loss_type": "sigmoid", "beta": 0.1 * (i + 1), "seed": i,
         "probes": [{"chosen_logps": x, "rejected_logps": 0.0} for x in values]}
        for i, values in enumerate(probes)
    ]  # fmt: skip
    want = [
        {"loss_type": "sigmoid", "beta": 0.1 * (i + 1), "seed": i, "start": values[0],
         "lowest": min(values), "peak": max(values), "end": values[-1]}
        for i, values in enumerate(probes)
    ]  # fmt: skip
    assert chosen_course({"runs": runs}) == want


# -------------------------------------------------------------------------- course: lessons 12-13

WORDS = ["water", "Water", "waters", "seawater", "it's", "the", "a", "x9", "rain"]


def _words(text: str) -> list[str]:
    """The lower-case words of ``text``: maximal runs of a-z and the apostrophe."""
    out, word = [], ""
    for ch in text.lower():
        if "a" <= ch <= "z" or ch == "'":
            word += ch
        else:
            if word:
                out.append(word)
            word = ""
    return [*out, word] if word else out


texts = st.lists(st.sampled_from(WORDS), max_size=6).flatmap(
    lambda ws: st.sampled_from([" ", ", ", "-", "!"]).map(lambda sep: sep.join(ws))
)


@settings(max_examples=30)
@given(st.lists(texts, min_size=1, max_size=4), st.booleans(), st.data())
def test_rl_rewards_are_the_loops_over_words(batch, conversational, data) -> None:
    from lmlessons.course.rl import correctness_reward, length_reward, shortness_reward

    completions = (
        [[{"role": "assistant", "content": t}] for t in batch] if conversational else batch
    )
    answers = data.draw(st.lists(st.sampled_from(["water", "The", "rain"]), min_size=len(batch),
                                 max_size=len(batch)))  # fmt: skip
    words = [_words(t) for t in batch]
    assert length_reward(completions) == [float(len(w)) for w in words]
    assert shortness_reward(completions) == [-float(len(w)) for w in words]
    ids = [[0] * data.draw(st.integers(1, 5)) for _ in batch]
    assert length_reward(completions, ids) == [float(len(i)) for i in ids]
    assert shortness_reward(completions, ids) == [-float(len(i)) for i in ids]
    want = [1.0 if w and w[0] == a.lower() else 0.0 for w, a in zip(words, answers)]
    assert correctness_reward(completions, answers) == want


@settings(max_examples=30)
@given(st.lists(texts, min_size=1, max_size=5), st.integers(1, 3))
def test_word_rewards_and_sample_stats_are_the_loops_over_words(batch, n_prompts) -> None:
    from lmlessons.course.grpo_learn import (
        has_word_reward,
        sample_stats,
        word_count,
        word_count_reward,
    )

    counts = [_words(t).count("water") for t in batch]
    assert [word_count(t) for t in batch] == counts
    assert word_count_reward(batch) == [float(n) for n in counts]
    assert has_word_reward(batch) == [1.0 if n else 0.0 for n in counts]
    samples = [{"prompt": i, "completions": batch[i::n_prompts]} for i in range(n_prompts)]
    texts_in_order = [t for s in samples for t in s["completions"]]
    words = [_words(t) for t in texts_in_order]
    distinct = [len(set(w)) / len(w) if w else 1.0 for w in words]
    got = sample_stats(samples, "rain")
    rain = [w.count("rain") for w in words]
    assert got == pytest.approx({
        "has_word": sum(1 for n in rain if n) / len(words),
        "word_count": sum(rain) / len(words),
        "distinct": sum(distinct) / len(words),
        "n": float(len(words)),
    })  # fmt: skip


def _record(data, loss_types, seeds_per, steps):
    runs = []
    for lt, beta in loss_types:
        for seed in range(seeds_per):
            values = data.draw(st.lists(coarse, min_size=steps, max_size=steps))
            runs.append({"loss_type": lt, "beta": beta, "seed": seed, "reward": values,
                         "loss": [v / 2 for v in values], "mean_length": values})  # fmt: skip
    return {"experiments": {"e": {"runs": runs}}}


@settings(max_examples=25)
@given(st.integers(1, 3), st.integers(2, 6), st.data())
def test_run_summary_groups_runs_and_averages_their_windows(seeds_per, steps, data) -> None:
    from lmlessons.course.rl import run_summary

    loss_types = [("grpo", 0.0), ("dapo", 0.0), ("dapo", 0.04)]
    record = _record(data, loss_types, seeds_per, steps)
    last = data.draw(st.integers(1, steps))
    window = data.draw(st.none() | st.tuples(st.integers(1, steps), st.integers(1, steps)).map(
        sorted).map(tuple))  # fmt: skip
    got = run_summary(record, "e", metric="reward", last=last, steps=window)
    assert set(got) == {"grpo", "dapo, beta=0", "dapo, beta=0.04"}
    for lt, beta in loss_types:
        key = lt if lt == "grpo" else f"dapo, beta={beta:g}"
        group = [
            r
            for r in record["experiments"]["e"]["runs"]
            if (r["loss_type"], r["beta"]) == (lt, beta)
        ]
        cut = [r["reward"][-last:] if window is None else r["reward"][window[0] - 1 : window[1]]
               for r in group]  # fmt: skip
        finals = [_mean(c) for c in cut]
        assert got[key]["per_seed"] == pytest.approx(finals)
        assert got[key]["final"] == pytest.approx(_mean(finals))
        assert got[key]["std"] == pytest.approx(_bessel_std(finals) if len(finals) > 1 else 0.0)
        assert got[key]["first"] == pytest.approx(_mean([r["reward"][0] for r in group]))
        assert (got[key]["loss_type"], got[key]["beta"]) == (lt, beta)


@settings(max_examples=20)
@given(st.integers(2, 5), seeds)
def test_expected_reward_gradient_is_p_times_reward_minus_mean(a, seed) -> None:
    from lmlessons.course.rl import expected_reward_gradient

    logits, rewards = _seeded(seed, 2, a)
    p = [math.exp(x) for x in _log_softmax(logits.tolist())]
    j = sum(pi * r for pi, r in zip(p, rewards.tolist()))
    want = [pi * (r - j) for pi, r in zip(p, rewards.tolist())]
    assert expected_reward_gradient(logits, rewards).tolist() == pytest.approx(want, abs=1e-12)


@settings(max_examples=25)
@given(
    st.integers(2, 4),
    st.integers(1, 3),
    seeds,
    st.sampled_from(["none", "expected", "group", "rloo"]),
)
def test_reinforce_estimates_are_reward_minus_baseline_times_the_score(a, prompts, seed, baseline):
    from lmlessons.course.rl import reinforce_estimates

    g = 3
    n = g * prompts
    logits, rewards = _seeded(seed, 2, a)
    p = [math.exp(x) for x in _log_softmax(logits.tolist())]
    # the same draws as the function makes from the same generator
    actions = torch.multinomial(
        torch.tensor(p, dtype=F64),
        n,
        replacement=True,
        generator=torch.Generator().manual_seed(seed),
    ).tolist()
    r = [rewards.tolist()[k] for k in actions]
    j = sum(pi * ri for pi, ri in zip(p, rewards.tolist()))
    want = []
    for i, k in enumerate(actions):
        group = r[i - i % g : i - i % g + g]
        others = group[: i % g] + group[i % g + 1 :]
        base = {"none": 0.0, "expected": j, "group": _mean(group), "rloo": _mean(others)}[baseline]
        want.append([(r[i] - base) * ((1.0 if col == k else 0.0) - p[col]) for col in range(a)])
    got = reinforce_estimates(
        logits, rewards, num_samples=n, baseline=baseline, num_generations=g,
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    assert [pytest.approx(row, abs=1e-12) for row in want] == got.tolist()


@settings(max_examples=8)
@given(st.integers(1, 4), st.integers(1, 3), seeds, st.sampled_from([0.25, 1.0, 8.0]),
       st.sampled_from(["adamw", "sgd"]), st.sampled_from([1e-3, 0.1]))  # fmt: skip
def test_scaled_loss_updates_are_adamw_or_sgd_written_out(steps, size, seed, scale, optimizer, lr):
    from lmlessons.course.rl import scaled_loss_updates

    grads = _seeded(seed, steps, size)
    b1, b2, eps, decay = 0.9, 0.999, 1e-8, 0.01  # torch.optim.AdamW's defaults
    param, m, v = [0.0] * size, [0.0] * size, [0.0] * size
    want = []
    for t, grad in enumerate(grads.tolist(), start=1):
        before = list(param)
        for i, gi in enumerate(grad):
            gi *= scale
            if optimizer == "sgd":
                param[i] -= lr * gi
                continue
            param[i] -= lr * decay * param[i]
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            m_hat, v_hat = m[i] / (1 - b1**t), v[i] / (1 - b2**t)
            param[i] -= lr * m_hat / (math.sqrt(v_hat) + eps)
        want.append([after - b for after, b in zip(param, before)])
    got = scaled_loss_updates(grads, scale=scale, optimizer=optimizer, lr=lr)
    assert [pytest.approx(row, rel=1e-9, abs=1e-15) for row in want] == got.tolist()
