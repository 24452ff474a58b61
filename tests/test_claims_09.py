"""Behaviour tests of the claims lesson 09 (packing, boundaries, perplexity) and its quiz make
about transformers.

Each ``test_claim_09_*`` / ``test_claim_quiz_09_*`` checks its entry of ``docs/claims.md``
(and those that name it) against the installed library: tiny models built from configs, seeded,
nothing downloaded.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DataCollatorWithFlattening, GPT2LMHeadModel
from transformers.masking_utils import create_causal_mask
from transformers.trainer_pt_utils import get_length_grouped_indices

from tests._tiny import gpt2_config, seeded

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DOCS = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]  # 4 + 2 + 3 tokens


def _flattened(**options) -> dict[str, torch.Tensor]:
    return DataCollatorWithFlattening(**options)([{"input_ids": d} for d in DOCS], "pt")


def _gpt2(attn: str = "eager") -> GPT2LMHeadModel:
    """A tiny GPT-2 without dropout, so that train mode gives the same logits twice."""
    config = gpt2_config(attn_implementation=attn, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return seeded(GPT2LMHeadModel, config)


def _leaks(model: GPT2LMHeadModel, **inputs) -> bool:
    """Whether some token of the flattened row gets other logits than its document alone."""
    batch = _flattened()
    with torch.no_grad():
        alone = torch.cat([model(input_ids=torch.tensor([d])).logits[0] for d in DOCS])
        packed = model(input_ids=batch["input_ids"], **inputs).logits[0]
    diff = (packed - alone).abs().max().item()
    assert diff < 1e-4 or diff > 1e-2, diff
    return diff > 1e-2


def _mask(
    position_ids: torch.Tensor, attention_mask=None, cache=None, attn="eager"
) -> torch.Tensor:
    """transformers' mask for a row of ``position_ids`` as a bool ``(N, N)``: True = attended."""
    config = gpt2_config(attn_implementation=attn)
    n = position_ids.shape[-1]
    mask = create_causal_mask(
        config=config,
        inputs_embeds=torch.zeros(1, n, config.n_embd),
        attention_mask=attention_mask,
        past_key_values=cache,
        position_ids=position_ids,
    )
    if mask is None:  # sdpa's "plain causal" shortcut (is_causal=True)
        return torch.ones(n, n, dtype=torch.bool).tril()
    return mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] == 0


def _block_diagonal(n_per_doc: list[int]) -> torch.Tensor:
    blocks = [torch.ones(n, n, dtype=torch.bool).tril() for n in n_per_doc]
    return torch.block_diag(*blocks)


def test_claim_09_collator_flattening() -> None:
    batch = _flattened()
    n = sum(map(len, DOCS))
    assert batch["input_ids"].tolist() == [[t for d in DOCS for t in d]]  # no padding, no separator
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 0, 1, 2]]
    assert batch["labels"].tolist() == [[-100, 6, 7, 8, -100, 10, -100, 12, 13]]
    assert all(v.shape == (1, n) for v in batch.values())


# ---------------------------------------------------------------------------------- lesson 09


def test_claim_09_collator_no_attention_mask() -> None:
    assert set(_flattened()) == {"input_ids", "labels", "position_ids"}


def test_claim_09_exercise_collator_separator() -> None:
    batch = _flattened(separator_id=3)
    assert batch["labels"].tolist() == [[3, 6, 7, 8, 3, 10, 3, 12, 13]]
    assert batch["position_ids"].tolist() == _flattened()["position_ids"].tolist()


def test_claim_09_mask_block_diagonal() -> None:
    positions = _flattened()["position_ids"]
    for attn in ("eager", "sdpa"):
        assert torch.equal(_mask(positions, attn=attn), _block_diagonal([4, 2, 3]))
    assert torch.equal(_mask(torch.arange(9)[None]), torch.ones(9, 9, dtype=torch.bool).tril())


def test_claim_09_packed_search_conditions() -> None:
    from transformers import DynamicCache

    positions = _flattened()["position_ids"]
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    assert torch.equal(_mask(positions), _block_diagonal([4, 2, 3]))  # no mask, no cache
    assert torch.equal(_mask(positions, attention_mask=torch.ones(1, 9, dtype=torch.long)), causal)
    assert torch.equal(_mask(positions, cache=DynamicCache(config=gpt2_config())), causal)


def test_claim_09_whatif_mask_disables() -> None:
    assert _leaks(
        _gpt2(),
        position_ids=_flattened()["position_ids"],
        use_cache=False,
        attention_mask=torch.ones(1, 9, dtype=torch.long),
    )


def test_claim_09_gpt2_use_cache_creates_cache() -> None:
    model = _gpt2()
    assert model.config.use_cache is True  # GPT2Config's default
    positions = _flattened()["position_ids"]
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([[5, 6, 7]]))
        assert out.past_key_values is not None  # a cache was created without being asked for
        assert _leaks(model, position_ids=positions)  # and the packed documents leak
        assert not _leaks(model, position_ids=positions, use_cache=False)


def test_claim_09_trainer_use_cache_false(tmp_path) -> None:
    from transformers import Trainer, TrainingArguments  # here: it takes seconds to import

    model = _gpt2()
    assert model.config.use_cache is True
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    assert args.use_cache is False
    Trainer(model=model, args=args)
    assert model.config.use_cache is False


def test_claim_09_flash_attn_kwargs() -> None:
    batch = _flattened(return_flash_attn_kwargs=True)
    assert batch["cu_seq_lens_q"].tolist() == batch["cu_seq_lens_k"].tolist() == [0, 4, 6, 9]
    assert batch["max_length_q"] == batch["max_length_k"] == 4


def test_claim_09_eager_sdpa_full_mask() -> None:
    positions = _flattened()["position_ids"]
    for attn in ("eager", "sdpa"):
        config = gpt2_config(attn_implementation=attn)
        mask = create_causal_mask(
            config=config,
            inputs_embeds=torch.zeros(1, 9, config.n_embd),
            attention_mask=None,
            past_key_values=None,
            position_ids=positions,
        )
        assert tuple(mask.shape) == (1, 1, 9, 9), attn  # one N x N matrix over the whole row


def test_claim_09_generate_position_ids() -> None:
    model = _gpt2()
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    seen = []
    model.transformer.wpe.register_forward_hook(lambda m, args, out: seen.append(args[0].clone()))
    model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=0
    )
    assert seen[0].tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]  # cumsum(mask) - 1, 0 on padding


def test_claim_09_group_by_length() -> None:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 100, (400,), generator=g).tolist()
    order = get_length_grouped_indices(
        lengths, batch_size=4, generator=torch.Generator().manual_seed(1)
    )
    assert sorted(order) == list(range(400))
    mega = 4 * min(400 // (4 * 4), 50)  # mega-batches of up to 50 batches
    groups = [order[i : i + mega] for i in range(0, 400, mega)]
    for k, group in enumerate(groups):
        tail = [lengths[i] for i in group[1:]]  # (the longest item of all is swapped to the front)
        assert tail == sorted(tail, reverse=True), k
    other = get_length_grouped_indices(
        lengths, batch_size=4, generator=torch.Generator().manual_seed(2)
    )
    assert other != order  # random groups


# ---------------------------------------------------------------------------------- quiz 09


def test_claim_quiz_09_use_cache() -> None:
    model = _gpt2()
    model.train()
    model.activation_checkpointing_enable()  # gradient checkpointing
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[5, 6, 7]]))
    assert out.past_key_values is None  # gradient checkpointing in training: no cache


def test_claim_09_sdpa_calls_torch_sdpa(monkeypatch) -> None:
    """attn_implementation="sdpa" calls torch's scaled_dot_product_attention once per layer and
    gives eager's logits; "eager" never calls it."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    eager, sdpa = _gpt2("eager").eval(), _gpt2("sdpa").eval()
    with torch.no_grad():
        eager_logits = eager(input_ids=ids).logits
        assert not calls
        sdpa_logits = sdpa(input_ids=ids).logits
    assert len(calls) == sdpa.config.n_layer
    assert torch.allclose(eager_logits, sdpa_logits, atol=1e-5)


def test_claim_09_wordpiece_loses_spacing() -> None:
    """The course's WordPiece tokenizer (BERT's BertTokenizerFast kind) gives the same tokens to
    "boy's" and "boy ' s", and decodes both to the spaced form: it is not lossless."""
    from lmlessons.course.tokenizer import load_tokenizer

    tok = load_tokenizer()
    tight, spaced = "the boy's dog.", "the boy ' s dog."
    assert tok(tight)["input_ids"] == tok(spaced)["input_ids"]
    assert tok.decode(tok(tight, add_special_tokens=False)["input_ids"]) == spaced
    assert tok.decode(tok("The Dog", add_special_tokens=False)["input_ids"]) == "the dog"
