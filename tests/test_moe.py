"""``lmlessons.moe``: the router losses equal transformers' and obviously right loops.

- Oracles (the installed transformers 5.23): Mixtral's ``load_balancing_loss_func`` and the copies
  of it in other MoE models, the Switch Transformer's two router losses, tiny Mixtral and Switch
  models built from configs (nothing downloaded), DeepSeek-V3's biased expert choice;
- the numbers transformers' own tests assert, reproduced with ``lmlessons.moe``;
- properties (hypothesis) against loops, Megatron-LM's invariant of the sequence-wise loss;
- validation: bad input names the argument.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lmlessons.moe import (
    DEEPSEEK_BIAS_UPDATE_SPEED,
    batch_aux_loss,
    expert_counts,
    expert_fractions,
    load_balancing_loss_func,
    load_spread,
    router_z_loss_func,
    select_experts,
    sequence_aux_loss,
    switch_load_balancing_loss,
    update_expert_bias,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: The MoE models of transformers 5.23 whose ``load_balancing_loss_func`` behaves as Mixtral's
#: (each checked below). Doge's differs (product-key routing, ``f`` divided by ``top_k``) and the
#: Switch Transformer's is another formula (:func:`switch_load_balancing_loss`).
MIXTRAL_COPIES = (
    "dbrx",
    "deepseek_v4",
    "ernie4_5_moe",
    "ernie4_5_vl_moe",
    "flex_olmo",
    "flint",
    "glm4v_moe",
    "glm5_next",
    "gpt_oss",
    "granitemoe",
    "granitemoe_swa",
    "granitemoehybrid",
    "granitemoeshared",
    "jamba",
    "jetmoe",
    "laguna",
    "mellum",
    "minimax",
    "minimax_m2",
    "minimax_m3_vl",
    "nllb_moe",
    "olmoe",
    "phimoe",
    "qwen2_moe",
    "qwen3_5_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_omni_moe",
    "qwen3_vl_moe",
    "qwen4_exp",
)


def _upstream(model: str, name: str = "load_balancing_loss_func"):
    module = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    return getattr(module, name)


def _gate_logits(layers: int, tokens: int, experts: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(tokens, experts, generator=g) * 2 for _ in range(layers))


def _padded_mask(batch: int, seq: int, seed: int) -> torch.Tensor:
    """Rows of random real lengths, some left- and some right-padded, one all padding."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for b in range(batch):
        length = 0 if b == 1 else int(torch.randint(1, seq + 1, (1,), generator=g))
        if b % 2:
            mask[b, seq - length :] = 1
        else:
            mask[b, :length] = 1
    return mask


# --- oracles: transformers' functions on random inputs --------------------------------------


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("masked", [False, True])
def test_mixtral_load_balancing_loss_equals_transformers(layers, top_k, masked) -> None:
    batch, seq, experts = 4, 5, 6
    gate = _gate_logits(layers, batch * seq, experts, seed=10 * layers + top_k)
    mask = _padded_mask(batch, seq, seed=top_k) if masked else None
    expected = _upstream("mixtral")(gate, experts, top_k, mask)
    got = load_balancing_loss_func(gate, experts, top_k, mask)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    if masked:  # the padding changes the loss: the mask is used
        assert not torch.allclose(got, load_balancing_loss_func(gate, experts, top_k), atol=1e-4)


def test_mixtral_loss_in_bfloat16_equals_transformers() -> None:
    """Softmax and top-k in the logits' dtype, the sums in float32, as upstream."""
    gate = tuple(g.bfloat16() for g in _gate_logits(2, 40, 8, seed=5))
    mask = _padded_mask(5, 8, seed=5)
    for m in (None, mask):
        expected = _upstream("mixtral")(gate, 8, 2, m)
        got = load_balancing_loss_func(gate, 8, 2, m)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_mixtral_loss_gradient_equals_transformers() -> None:
    gate = tuple(g.requires_grad_() for g in _gate_logits(2, 12, 5, seed=3))
    mask = _padded_mask(3, 4, seed=3)
    (up,) = torch.autograd.grad(_upstream("mixtral")(gate, 5, 2, mask), gate[0])
    (mine,) = torch.autograd.grad(load_balancing_loss_func(gate, 5, 2, mask), gate[0])
    torch.testing.assert_close(mine, up, rtol=1e-5, atol=1e-7)
    assert mine[mask.reshape(-1) == 0].abs().max() == 0  # padding gets no gradient


@pytest.mark.parametrize("model", MIXTRAL_COPIES)
def test_moe_models_copy_mixtrals_loss(model) -> None:
    """Each model's own ``load_balancing_loss_func`` gives Mixtral's loss, masked or not."""
    gate = _gate_logits(2, 4 * 5, 6, seed=7)
    mask = _padded_mask(4, 5, seed=7)
    copy = _upstream(model)
    for top_k, m in ((2, None), (3, mask), (1, mask)):
        torch.testing.assert_close(
            copy(gate, 6, top_k, m), load_balancing_loss_func(gate, 6, top_k, m), rtol=1e-6, atol=0
        )


def test_transformers_returns_zero_for_a_list_where_moe_raises() -> None:
    gate = _gate_logits(2, 6, 4, seed=0)
    assert _upstream("mixtral")(list(gate), 4, 2) == 0
    with pytest.raises(TypeError, match="gate_logits must be a tuple"):
        load_balancing_loss_func(list(gate), 4, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("top_k", [1, 2])
def test_switch_load_balancing_loss_equals_transformers(top_k) -> None:
    g = torch.Generator().manual_seed(top_k)
    probs = torch.randn(3, 7, 5, generator=g).softmax(-1)
    shape = (3, 7) if top_k == 1 else (3, 7, top_k)
    indices = torch.randint(0, 5, shape, generator=g)
    expected = _upstream("switch_transformers")(probs, indices)
    torch.testing.assert_close(switch_load_balancing_loss(probs, indices), expected)


def test_router_z_loss_equals_switch_and_masks_padding() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 4, generator=g) * 3
    upstream = _upstream("switch_transformers", "router_z_loss_func")
    torch.testing.assert_close(router_z_loss_func(logits), upstream(logits))
    mask = _padded_mask(3, 5, seed=1)
    real = logits[mask.bool()][None]  # (1, real tokens, E): the real tokens only, as one group
    torch.testing.assert_close(router_z_loss_func(logits, mask), upstream(real))
    assert not torch.allclose(router_z_loss_func(logits, mask), upstream(logits))


# --- the numbers transformers' own tests assert ----------------------------------------------
# tests/models/switch_transformers/test_modeling_switch_transformers.py (huggingface/transformers
# commit 1ac8f60d0cf6c7206437238e5d617689a7f4dc47), class SwitchTransformerRouterTest, and
# tests/models/mixtral/test_modeling_mixtral.py (commit 79f1fc71ad1e0220e2b05723f5fd2e14bc270de5),
# test_load_balancing_loss.

SWITCH_PROBS = [
    [0.35490513, 0.60419905],
    [0.4275843, 0.23061597],
    [0.32985854, 0.43953657],
    [0.25099766, 0.27730572],
    [0.7678207, 0.71474564],
]
SWITCH_INDICES = [[0], [1], [1], [0], [0]]
SWITCH_Z_LOGITS = [
    [
        [-4.2124424, 3.891939, -3.6481273, 1.8849981],
        [0.32625437, 2.918651, 0.84758997, -4.556842],
        [-3.32062, 4.6977115, -0.15439987, 0.44086337],
        [3.4467149, 4.3436565, -4.7224274, -4.264637],
        [-2.224406, -2.5318158, -1.3832569, 1.1891162],
        [-2.320062, -0.44705987, 4.289819, -0.00662684],
    ],
    [
        [0.99470854, -0.6992364, 0.25503993, 4.2952085],
        [3.5937333, -3.2408535, -4.298278, 4.426601],
        [0.7669008, 2.6588762, 2.4505413, 4.6051874],
        [0.23330331, -3.0845237, 0.6262374, -2.9865491],
        [0.7595146, -2.1099675, -4.155346, -2.8326452],
        [2.3771453, 1.004138, -3.1781673, 0.7581556],
    ],
]


def test_switch_router_test_numbers() -> None:
    """0.8741045 and 13.786719 (``assertAlmostEqual(..., places=5)`` upstream). Its balancing
    test passes a (T, E) tensor with (T, 1) indices, which transformers treats as one group of
    T tokens: the (1, T, E) group here."""
    probs = torch.tensor(SWITCH_PROBS)  # (5, 2)
    indices = torch.tensor(SWITCH_INDICES, dtype=torch.int32)  # (5, 1)
    balance = switch_load_balancing_loss(probs[None], indices.view(1, -1))
    assert round(balance.item() - 0.8741045, 5) == 0
    torch.testing.assert_close(balance, _upstream("switch_transformers")(probs, indices))
    z_loss = router_z_loss_func(torch.tensor(SWITCH_Z_LOGITS))
    assert round(z_loss.item() - 13.786719, 5) == 0


def _tiny_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=37,
        num_local_experts=8,
        num_experts_per_tok=2,
        output_router_logits=True,
        max_position_embeddings=2048,
        experts_implementation="eager",  # grouped_mm needs 16-byte strides on the CPU
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return MixtralForCausalLM(config).eval()


@pytest.mark.parametrize(
    "pad_length", [50, pytest.param(1000, marks=pytest.mark.slow, id="upstream-1000")]
)
def test_mixtral_tiny_model_load_balancing(pad_length) -> None:
    """Mixtral's test: (91, 8) router logits, aux loss close to top_k = 2, the same with left
    padding and the mask, another without the mask; here also equal to lmlessons.moe's."""
    model = _tiny_mixtral()
    pad_id = 1  # upstream's pad id for this test: any id not drawn below
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(2, 99, (13, 7), generator=g)
    mask = input_ids.ne(pad_id)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=mask)
    assert out.router_logits[0].shape == (91, 8)
    torch.testing.assert_close(out.aux_loss, torch.tensor(2.0), rtol=1e-2, atol=1e-2)
    mine = load_balancing_loss_func(out.router_logits, 8, 2, mask)
    torch.testing.assert_close(mine, out.aux_loss, rtol=1e-6, atol=1e-6)

    padded = torch.cat([torch.full((13, pad_length), pad_id), input_ids], dim=1)  # left padding
    padded_mask = padded.ne(pad_id)
    with torch.no_grad():
        with_mask = model(input_ids=padded, attention_mask=padded_mask)
        without = model(input_ids=padded)
    torch.testing.assert_close(with_mask.aux_loss, out.aux_loss, rtol=1e-4, atol=1e-4)
    mine = load_balancing_loss_func(with_mask.router_logits, 8, 2, padded_mask)
    torch.testing.assert_close(mine, out.aux_loss, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(without.aux_loss, out.aux_loss, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        load_balancing_loss_func(without.router_logits, 8, 2), without.aux_loss
    )


def test_mixtral_adds_coef_times_aux_loss_to_the_lm_loss() -> None:
    from transformers import MixtralConfig

    assert MixtralConfig().router_aux_loss_coef == 1e-3
    model = _tiny_mixtral()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 99, (2, 6), generator=g)
    with torch.no_grad():
        with_router = model(input_ids=ids, labels=ids, output_router_logits=True)
        without = model(input_ids=ids, labels=ids, output_router_logits=False)
    assert without.aux_loss is None
    added = model.config.router_aux_loss_coef * load_balancing_loss_func(
        with_router.router_logits, 8, 2
    )
    torch.testing.assert_close(with_router.loss - without.loss, added, rtol=1e-4, atol=1e-7)


def _tiny_switch(num_sparse_layers: int):
    from transformers import SwitchTransformersConfig, SwitchTransformersForConditionalGeneration

    config = SwitchTransformersConfig(
        vocab_size=99,
        d_model=32,
        d_kv=8,
        d_ff=37,
        num_heads=4,
        num_experts=4,
        expert_capacity=100,  # no token dropped
        num_layers=2,
        num_decoder_layers=2,
        num_sparse_encoder_layers=num_sparse_layers,  # sparse step = 2 // num_sparse_layers
        num_sparse_decoder_layers=num_sparse_layers,
        router_jitter_noise=0.0,
        dropout_rate=0.0,
        decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    return SwitchTransformersForConditionalGeneration(config).eval()


def _switch_outputs(model):
    g = torch.Generator().manual_seed(0)
    ids, labels = (
        torch.randint(2, 99, (3, 6), generator=g),
        torch.randint(2, 99, (3, 5), generator=g),
    )
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, output_router_logits=True)
        plain = model(input_ids=ids, labels=labels, output_router_logits=False)
    return out, plain


def test_switch_sparse_step_one_returns_zero_router_losses() -> None:
    """``encoder_sparse_step == 1`` makes every layer sparse, yet the forward computes the router
    losses only when the step is > 1: the four fields are 0 and the loss has no router term."""
    model = _tiny_switch(num_sparse_layers=2)
    assert model.config.encoder_sparse_step == model.config.decoder_sparse_step == 1
    assert all(block.is_sparse for block in (*model.encoder.block, *model.decoder.block))
    out, plain = _switch_outputs(model)
    fields = ("encoder_z_loss", "encoder_aux_loss", "decoder_z_loss", "decoder_aux_loss")
    assert [getattr(out, name) for name in fields] == [0, 0, 0, 0]
    assert torch.equal(out.loss, plain.loss)
    logits = torch.cat(out.encoder_router_logits, dim=1)  # (B, layers * T, E): both layers routed
    assert router_z_loss_func(logits) > 1  # what the z-loss would have been


def test_switch_sparse_step_two_returns_lmlessons_router_losses() -> None:
    model = _tiny_switch(num_sparse_layers=1)
    assert model.config.encoder_sparse_step == 2
    assert [block.is_sparse for block in model.encoder.block] == [False, True]
    out, plain = _switch_outputs(model)
    total = torch.tensor(0.0)
    for side in ("encoder", "decoder"):
        logits = torch.cat(getattr(out, f"{side}_router_logits"), dim=1)  # (B, T, E)
        z_loss = router_z_loss_func(logits)
        aux = switch_load_balancing_loss(logits.softmax(-1), logits.argmax(-1))
        torch.testing.assert_close(getattr(out, f"{side}_z_loss"), z_loss)
        torch.testing.assert_close(getattr(out, f"{side}_aux_loss"), aux)
        assert z_loss > 0 and aux > 0
        total = total + model.config.router_z_loss_coef * z_loss
        total = total + model.config.router_aux_loss_coef * aux
    torch.testing.assert_close(out.loss - plain.loss, total, rtol=1e-4, atol=1e-6)


def test_deepseek_v3_router_picks_with_the_bias() -> None:
    """transformers' ``DeepseekV3TopkRouter`` (one group) chooses ``select_experts(sigmoid,
    top_k, e_score_correction_bias)``, and the bias changes the choice."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    config = DeepseekV3Config(
        hidden_size=16, n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1
    )
    router = DeepseekV3TopkRouter(config)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        router.weight.copy_(torch.randn(8, 16, generator=g))
        router.e_score_correction_bias.copy_(torch.randn(8, generator=g))
    logits, weights, chosen = router(torch.randn(20, 16, generator=g))
    scores = logits.sigmoid()
    mine = select_experts(scores, 2, router.e_score_correction_bias)
    assert torch.equal(chosen.sort(-1).values, mine.sort(-1).values)
    assert not torch.equal(chosen.sort(-1).values, select_experts(scores, 2).sort(-1).values)
    # the gate weights are the scores without the bias (normalised over the chosen experts)
    gathered = scores.gather(1, chosen)  # (N, K)
    expected = gathered / gathered.sum(-1, keepdim=True) * config.routed_scaling_factor
    torch.testing.assert_close(weights, expected)
    # a buffer, not a parameter: no optimizer ever updates it
    assert "e_score_correction_bias" in dict(router.named_buffers())
    assert "e_score_correction_bias" not in dict(router.named_parameters())


# --- even routing, bounds, load statistics ---------------------------------------------------


def _even_logits(experts: int, top_k: int) -> torch.Tensor:
    """``E`` tokens, token ``i`` preferring experts ``i, ..., i + k - 1`` (mod ``E``) equally:
    every expert gets ``k`` tokens and, by symmetry, the same mean probability."""
    logits = torch.zeros(experts, experts)
    for i in range(experts):
        for j in range(top_k):
            logits[i, (i + j) % experts] = 5.0 - 1e-3 * j  # no ties inside a token's top-k
    return logits


@pytest.mark.parametrize(("experts", "top_k"), [(4, 1), (8, 2), (6, 3)])
def test_even_routing_gives_top_k_for_mixtral_and_one_for_switch(experts, top_k) -> None:
    logits = _even_logits(experts, top_k)
    f, p = expert_fractions((logits,), experts, top_k)
    torch.testing.assert_close(f, torch.full((experts,), top_k / experts))
    torch.testing.assert_close(p, torch.full((experts,), 1 / experts))
    loss = load_balancing_loss_func((logits, logits), experts, top_k)
    torch.testing.assert_close(loss, torch.tensor(float(top_k)))
    torch.testing.assert_close(_upstream("mixtral")((logits,), experts, top_k), loss)
    top1 = _even_logits(experts, 1)[None]  # (1, E, E)
    switch = switch_load_balancing_loss(top1.softmax(-1), top1.argmax(-1))
    torch.testing.assert_close(switch, torch.tensor(1.0))
    counts = expert_counts(logits.topk(top_k).indices, experts)
    assert counts.tolist() == [top_k] * experts
    assert load_spread(counts) == (0.0, 1.0)


def test_collapsed_routing_reaches_num_experts_and_spreads_worst() -> None:
    experts = 4
    logits = torch.tensor([[30.0, 20.0, 0.0, 0.0]]).repeat(6, 1)  # every token: experts 0 and 1
    loss = load_balancing_loss_func((logits,), experts, top_k=2)
    torch.testing.assert_close(loss, torch.tensor(float(experts)), rtol=1e-4, atol=1e-4)
    spread = load_spread(expert_counts(logits.topk(1).indices, experts))  # top-1: all on expert 0
    assert spread.max_over_mean == experts
    assert math.isclose(spread.cv, math.sqrt(experts - 1))


def test_expert_counts_skip_padding() -> None:
    indices = torch.tensor([[[0, 1], [2, 1]], [[3, 0], [1, 2]]])  # (B=2, T=2, K=2)
    mask = torch.tensor([[1, 0], [1, 1]])
    assert expert_counts(indices, 4).tolist() == [2, 3, 2, 1]
    assert expert_counts(indices, 4, mask).tolist() == [2, 2, 1, 1]


# --- properties against loops ----------------------------------------------------------------


def _loop_mixtral(gate, experts, top_k, mask, per_layer=False):
    """Mixtral's loss with loops in float64: count each real token's top-k experts, add its
    probabilities, divide by the real tokens."""
    keep = [True] * gate[0].shape[0] if mask is None else [bool(v) for v in mask.reshape(-1)]
    layer_losses, counts, prob_sums, total = [], [0.0] * experts, [0.0] * experts, 0
    for layer in gate:
        c, s, n = [0.0] * experts, [0.0] * experts, 0
        for row, kept in zip(layer.double(), keep, strict=True):
            if not kept:
                continue
            probs = row.softmax(-1).tolist()
            for e in sorted(range(experts), key=lambda e: -probs[e])[:top_k]:
                c[e] += 1
            s = [a + b for a, b in zip(s, probs, strict=True)]
            n += 1
        layer_losses.append(experts * sum(c[e] / n * s[e] / n for e in range(experts)))
        counts = [a + b for a, b in zip(counts, c, strict=True)]
        prob_sums = [a + b for a, b in zip(prob_sums, s, strict=True)]
        total += n
    if per_layer:
        return sum(layer_losses) / len(layer_losses)
    return experts * sum(counts[e] / total * prob_sums[e] / total for e in range(experts))


@st.composite
def routing(draw):
    experts = draw(st.integers(2, 6))
    top_k = draw(st.integers(1, experts))
    layers, batch, seq = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    mask_bits = draw(st.lists(st.booleans(), min_size=batch * seq, max_size=batch * seq))
    mask = torch.tensor(mask_bits, dtype=torch.long).view(batch, seq)
    gate = _gate_logits(layers, batch * seq, experts, seed)
    return gate, experts, top_k, (mask if draw(st.booleans()) else None)


@given(routing(), st.booleans())
def test_load_balancing_loss_equals_loops(case, per_layer) -> None:
    gate, experts, top_k, mask = case
    if mask is not None and not bool(mask.any()):  # all padding: rejected, not NaN
        with pytest.raises(ValueError, match="attention_mask must keep at least one token"):
            load_balancing_loss_func(gate, experts, top_k, mask, per_layer=per_layer)
        return
    got = load_balancing_loss_func(gate, experts, top_k, mask, per_layer=per_layer)
    expected = _loop_mixtral(gate, experts, top_k, mask, per_layer=per_layer)
    assert math.isclose(got.item(), expected, rel_tol=1e-5, abs_tol=1e-6)
    assert got.item() <= experts + 1e-5
    f, p = expert_fractions(gate, experts, top_k, mask)
    assert math.isclose(f.sum().item(), top_k, rel_tol=1e-6)
    assert math.isclose(p.sum().item(), 1.0, rel_tol=1e-5)


@given(routing())
def test_per_layer_minus_pooled_is_the_covariance_over_layers(case) -> None:
    """mean_l(E * sum f_l P_l) - E * sum(mean f)(mean P) = E * sum_e cov_l(f_le, P_le)."""
    gate, experts, top_k, mask = case
    if mask is not None and not bool(mask.any()):
        return
    f, p = expert_fractions(gate, experts, top_k, mask, per_layer=True)  # (L, E) each
    cov = ((f - f.mean(0)) * (p - p.mean(0))).mean(0)  # (E,)
    gap = load_balancing_loss_func(gate, experts, top_k, mask, per_layer=True)
    gap = gap - load_balancing_loss_func(gate, experts, top_k, mask)
    assert math.isclose(gap.item(), experts * cov.sum().item(), abs_tol=1e-5)


def _loop_sequence_loss(scores, indices, alpha):
    """DeepSeek-V3's eqs. with loops: per sequence f_i = E/(K*T) * count_i, P_i = mean of the
    normalised scores, alpha * sum f_i P_i; mean over sequences."""
    batch, seq, experts = scores.shape
    top_k, losses = indices.shape[-1], []
    for b in range(batch):
        count, prob = [0] * experts, [0.0] * experts
        for t in range(seq):
            for e in indices[b, t].tolist():
                count[e] += 1
            total = float(scores[b, t].double().sum())
            for e in range(experts):
                prob[e] += float(scores[b, t, e]) / total / seq
        losses.append(
            alpha * sum(experts / (top_k * seq) * count[e] * prob[e] for e in range(experts))
        )
    return sum(losses) / batch


@given(
    st.integers(1, 4), st.integers(1, 5), st.integers(2, 6), st.integers(1, 6), st.integers(0, 999)
)
def test_sequence_aux_loss_equals_loops_and_megatron_invariant(
    batch, seq, experts, k, seed
) -> None:
    top_k = min(k, experts)
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, seq, experts, generator=g).sigmoid()
    bias = torch.randn(experts, generator=g) * 0.1
    indices = select_experts(scores, top_k, bias)  # (B, T, K)
    got = sequence_aux_loss(scores, indices, alpha=0.5)
    assert math.isclose(got.item(), _loop_sequence_loss(scores, indices, 0.5), rel_tol=1e-5)
    # Megatron-LM's router test: at batch size 1 it is the batch-wise loss; at batch size B the
    # mean of the batch-wise losses of each sequence alone.
    rows = [batch_aux_loss(scores[b : b + 1], indices[b : b + 1], alpha=0.5) for b in range(batch)]
    torch.testing.assert_close(got, torch.stack(rows).mean())
    torch.testing.assert_close(sequence_aux_loss(scores[:1], indices[:1], 0.5), rows[0])


def test_batch_aux_loss_is_mixtrals_divided_by_top_k() -> None:
    """With softmax scores (already normalised) and ``alpha = 1``, DeepSeek's batch-wise loss is
    Mixtral's over ``top_k``: the same ``E * sum(f * P)`` with ``f`` divided by ``K``."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 6, generator=g)
    indices = logits.topk(3).indices  # (B, T, 3)
    deepseek = batch_aux_loss(logits.softmax(-1), indices, alpha=1.0)
    mixtral = load_balancing_loss_func((logits.reshape(10, 6),), 6, top_k=3)
    torch.testing.assert_close(deepseek, mixtral / 3)
    assert not torch.allclose(sequence_aux_loss(logits.softmax(-1), indices, 1.0), deepseek)


def test_update_expert_bias_moves_against_the_load_and_balances() -> None:
    counts = torch.tensor([10.0, 2.0, 6.0, 6.0])  # mean 6
    new = update_expert_bias(torch.zeros(4), counts, step=0.1)
    torch.testing.assert_close(new, torch.tensor([-0.1, 0.1, 0.0, 0.0]))
    assert DEEPSEEK_BIAS_UPDATE_SPEED == 1e-3
    # A fixed router that favours expert 0: the bias loop spreads its tokens.
    g = torch.Generator().manual_seed(0)
    scores = (torch.randn(256, 8, generator=g) + torch.linspace(1.5, 0, 8)).sigmoid()
    bias = torch.zeros(8)
    before = load_spread(expert_counts(select_experts(scores, 2, bias), 8))
    for _ in range(200):
        bias = update_expert_bias(bias, expert_counts(select_experts(scores, 2, bias), 8), 1e-2)
    after = load_spread(expert_counts(select_experts(scores, 2, bias), 8))
    assert after.cv < before.cv / 3 and after.max_over_mean < before.max_over_mean


def test_load_spread_equals_its_definition() -> None:
    counts = torch.tensor([3.0, 0.0, 9.0, 4.0])
    mean = 4.0
    std = math.sqrt(sum((c - mean) ** 2 for c in counts.tolist()) / 4)
    assert load_spread(counts) == pytest.approx((std / mean, 9 / mean))


# --- validation --------------------------------------------------------------------------------

GATE = _gate_logits(2, 6, 4, seed=0)
PROBS = torch.full((2, 3, 4), 0.25)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: load_balancing_loss_func(GATE[0], 4), TypeError, "gate_logits must be a tuple"),
        (lambda: load_balancing_loss_func((), 4), ValueError, "gate_logits must hold"),
        (
            lambda: load_balancing_loss_func((GATE[0], GATE[1][:3]), 4),
            ValueError,
            r"gate_logits\[1\]",
        ),
        (
            lambda: load_balancing_loss_func(GATE, 5),
            ValueError,
            r"gate_logits\[0\] must have shape",
        ),
        (lambda: load_balancing_loss_func(GATE, 4, 5), ValueError, "top_k must be at most"),
        (lambda: load_balancing_loss_func(GATE, 4, 0), ValueError, "top_k must be >= 1"),
        (lambda: load_balancing_loss_func(GATE, 4.0), TypeError, "num_experts must be an int"),
        (
            lambda: load_balancing_loss_func(GATE, 4, 2, torch.ones(2, 2)),
            ValueError,
            "attention_mask",
        ),
        (
            lambda: load_balancing_loss_func(GATE, 4, 2, torch.full((2, 3), 2)),
            ValueError,
            "only 0 and 1",
        ),
        (lambda: load_balancing_loss_func(GATE, 4, 2, [[1] * 3] * 2), TypeError, "attention_mask"),
        (lambda: switch_load_balancing_loss(PROBS[0], torch.zeros(3)), ValueError, "router_probs"),
        (lambda: switch_load_balancing_loss(PROBS, torch.zeros(2, 3)), TypeError, "expert_indices"),
        (
            lambda: switch_load_balancing_loss(PROBS, torch.full((2, 3), 4)),
            ValueError,
            "expert_indices",
        ),
        (
            lambda: switch_load_balancing_loss(PROBS, torch.zeros(2, 4, dtype=torch.long)),
            ValueError,
            "expert_indices",
        ),
        (lambda: router_z_loss_func(PROBS[0]), ValueError, "router_logits"),
        (lambda: router_z_loss_func(PROBS, torch.zeros(2, 3)), ValueError, "at least one token"),
        (lambda: expert_counts(torch.tensor([[0, 4]]), 4), ValueError, "expert_indices"),
        (lambda: load_spread(torch.zeros(4)), ValueError, "counts"),
        (lambda: load_spread(torch.tensor([1, 2])), TypeError, "counts"),
        (lambda: update_expert_bias(torch.zeros(4), torch.ones(3)), ValueError, "bias and counts"),
        (lambda: update_expert_bias(torch.zeros(4), torch.ones(4), step=0), ValueError, "step"),
        (lambda: select_experts(PROBS, 2, torch.zeros(3)), ValueError, "bias"),
        (
            lambda: sequence_aux_loss(PROBS - 1, torch.zeros(2, 3, 1, dtype=torch.long)),
            ValueError,
            "scores",
        ),
        (
            lambda: sequence_aux_loss(PROBS, torch.zeros(2, 3, dtype=torch.long)),
            ValueError,
            "expert_indices",
        ),
        (
            lambda: batch_aux_loss(PROBS, torch.zeros(2, 3, 1, dtype=torch.long), alpha=-1),
            ValueError,
            "alpha",
        ),
    ],
)
def test_bad_input_names_the_argument(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
