"""lmlessons.course.checkpoints: the shipped models load, match their config and reproduce their
recorded held-out metrics; saving writes only where asked; nothing is ever unpickled. The two
MoE checkpoints (stored in float16) route as recorded, and ``"moe-bias"`` with its trained bias."""

from __future__ import annotations

import json
import math

import pytest
import torch
from _tiny import SMALL_GPT2
from safetensors import safe_open

from lmlessons import checkpoint_metrics, heldout_metrics, load_checkpoint, load_corpus, tiny_gpt2
from lmlessons.course.checkpoints import (
    CHECKPOINT_DIR,
    CHECKPOINT_NAMES,
    EVAL_MAX_LENGTH,
    WARM_START_CURVES_FILE,
    save_checkpoint,
)
from lmlessons.course.models import tiny_mixtral
from lmlessons.course.moe_runs import (
    MOE_CHECKPOINTS,
    MOE_SETTINGS,
    BiasedRouter,
    heldout_batch,
    measure_routing,
    route_sentence,
    routers,
    routing_margins,
    use_biased_routers,
)
from tools.pretrain import RECIPES

EXPECTED_CLASSES = {
    "bert": "BertForPreTraining",
    "bert-causal": "BertLMHeadModel",
    "gpt2": "GPT2LMHeadModel",
    "moe": "MixtralForCausalLM",
    "moe-bias": "MixtralForCausalLM",
}
STORED_DTYPES = {"moe": "F16", "moe-bias": "F16"}  # the others: F32
SMALL_MIXTRAL = dict(
    hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def corpus():
    return load_corpus("course")


def test_shipped_files_are_small_and_pickle_free() -> None:
    files = sorted(p.name for p in CHECKPOINT_DIR.iterdir() if not p.name.startswith("."))
    expected = sorted(
        f"{n}{ext}"
        for n in CHECKPOINT_NAMES
        for ext in (".safetensors", ".config.json", ".metrics.json")
    )
    expected = sorted([*expected, WARM_START_CURVES_FILE])  # lesson 02's recorded probes
    assert files == expected  # no .bin / .pt / .pkl next to them
    total = sum(p.stat().st_size for p in CHECKPOINT_DIR.iterdir())
    assert total <= 12_000_000, f"{total / 1e6:.2f} MB"
    for name in CHECKPOINT_NAMES:
        with safe_open(str(CHECKPOINT_DIR / f"{name}.safetensors"), framework="pt") as f:
            assert f.metadata()["lmlessons_checkpoint"] == name
            names = f.keys()
            dtype = STORED_DTYPES.get(name, "F32")
            assert names and all(f.get_slice(k).get_dtype() == dtype for k in names)


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKPOINT_NAMES)
def test_checkpoint_loads_matches_config_and_metrics(name: str, tok, corpus) -> None:
    model = load_checkpoint(name)
    assert type(model).__name__ == EXPECTED_CLASSES[name]
    assert not model.training
    stored = json.loads((CHECKPOINT_DIR / f"{name}.config.json").read_text())
    loaded = json.loads(model.config.to_json_string(use_diff=False))
    stored.pop("transformers_version", None), loaded.pop("transformers_version", None)
    assert loaded == stored
    assert model.config.vocab_size == len(tok) and model.config.pad_token_id == tok.pad_token_id
    if name == "bert-causal":
        assert model.config.is_decoder is True

    recorded = checkpoint_metrics(name)
    assert recorded["name"] == name and recorded["architecture"] == EXPECTED_CLASSES[name]
    if name in RECIPES:
        assert recorded["max_length"] == EVAL_MAX_LENGTH[name] == RECIPES[name].max_length
    else:
        assert recorded["settings"]["max_length"] == EVAL_MAX_LENGTH[name]
    measured = heldout_metrics(model, name=name, corpus=corpus, tokenizer=tok)
    for key, value in recorded["heldout"].items():
        if key.startswith("num_"):
            assert measured[key] == value, key
        elif "accuracy" in key:
            assert measured[key] == pytest.approx(value, abs=2e-3), key  # a near-tie may flip
        else:
            assert measured[key] == pytest.approx(value, rel=1e-4), key


def test_checkpoints_learned_something(tok) -> None:
    recorded = checkpoint_metrics("bert")
    assert recorded["causal_warm_start"]["steps"] == RECIPES["bert"].causal_warm_start_steps > 0
    bert = recorded["heldout"]
    assert bert["mlm_accuracy"] > 0.2 and bert["nsp_accuracy"] > 0.6
    assert bert["mlm_loss"] < 0.7 * math.log(len(tok))
    for name in ("bert-causal", "gpt2"):
        m = checkpoint_metrics(name)["heldout"]
        assert m["perplexity"] < len(tok) / 10  # 10x better than uniform guessing on unseen text
        assert m["next_token_accuracy"] > 0.1  # always guessing "the" scores 0.05


def test_bert_fills_the_blank_sensibly(tok) -> None:
    model = load_checkpoint("bert")
    batch = tok("The dog chased the [MASK].", return_tensors="pt")
    position = batch["input_ids"][0].tolist().index(tok.mask_token_id)
    with torch.no_grad():
        logits = model(**batch).prediction_logits[0, position]  # (V,)
    top5 = tok.convert_ids_to_tokens(logits.topk(5).indices.tolist())
    nouns = {
        "ball",
        "cat",
        "dog",
        "bird",
        "birds",
        "cats",
        "rabbit",
        "rabbits",
        "squirrel",
        "sheep",
        "stick",
        "fox",
        "mouse",
        "ducks",
        "boy",
        "girl",
        "car",
        "bus",
        "hen",
        "hens",
        "chickens",
        "kite",
        "cow",
        "cows",
    }
    assert nouns & set(top5), top5


def test_save_and_load_roundtrip(tmp_path, tok) -> None:
    model = tiny_gpt2(tok, seed=3, **SMALL_GPT2)
    written = save_checkpoint(model, "gpt2", tmp_path, metrics={"heldout": {"perplexity": 1.0}})
    assert [p.name for p in written] == [
        "gpt2.safetensors",
        "gpt2.config.json",
        "gpt2.metrics.json",
    ]
    loaded = load_checkpoint("gpt2", directory=tmp_path)
    assert type(loaded) is type(model) and not loaded.training
    assert loaded.config.to_dict() == model.config.to_dict()
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys()
    for k, v in saved.items():
        assert torch.equal(v, restored[k]), k
    assert checkpoint_metrics("gpt2", directory=tmp_path) == {"heldout": {"perplexity": 1.0}}


def test_errors(tmp_path, tok) -> None:
    with pytest.raises(ValueError, match="unknown checkpoint 'roberta'"):
        load_checkpoint("roberta")
    with pytest.raises(FileNotFoundError, match=r"python -m tools\.pretrain gpt2"):
        load_checkpoint("gpt2", directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="no metrics for checkpoint 'gpt2'"):
        checkpoint_metrics("gpt2", directory=tmp_path)
    model = tiny_gpt2(tok, **SMALL_GPT2)
    with pytest.raises(TypeError, match="holds a BertForPreTraining, got a GPT2LMHeadModel"):
        save_checkpoint(model, "bert", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written by the refused calls


def test_a_file_that_is_not_safetensors_is_refused(tmp_path, tok) -> None:
    """A pickle (or anything else) in place of the weights is never unpickled: safetensors
    refuses to parse it."""
    (tmp_path / "gpt2.safetensors").write_bytes(b"\x80\x04not a safetensors file")
    (tmp_path / "gpt2.config.json").write_text(tiny_gpt2(tok, **SMALL_GPT2).config.to_json_string())
    with pytest.raises(ValueError, match=r"'gpt2'.* is not a readable safetensors file"):
        load_checkpoint("gpt2", directory=tmp_path)


# --- the MoE checkpoints of lesson 14 ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MOE_CHECKPOINTS))
def test_a_moe_checkpoint_routes_as_recorded(name: str, tok) -> None:
    """The reloaded model sends the recorded sentence's tokens where the file says, far from any
    tie, and the held-out batch's tokens as recorded (a near-tie among its 8,000 choices may
    flip on another CPU)."""
    model, recorded = load_checkpoint(name), checkpoint_metrics(name)
    assert recorded["method"] == MOE_CHECKPOINTS[name] and recorded["dtype"] == "float16"
    sentence = recorded["sentence"]
    routed = route_sentence(model, tok, sentence["text"])
    assert routed["tokens"] == sentence["tokens"]
    for layer, stored in zip(routed["layers"], sentence["layers"], strict=True):
        assert layer["experts"] == stored["experts"] and layer["load"] == stored["load"]
        for got, want in zip(layer["weights"], stored["weights"]):
            assert got == pytest.approx(want, abs=2e-4)
    margins = routing_margins(model, tok, sentence["text"])
    assert min(margins.values()) >= 1e-4  # what lesson 14 asserts before its widget
    assert margins == pytest.approx(recorded["sentence_margins"], abs=1e-5)
    measured = measure_routing(model, heldout_batch())
    counts = torch.tensor(measured["counts"])  # (L, E)
    stored_counts = torch.tensor(recorded["heldout_routing"]["counts"])  # (L, E)
    assert bool((counts - stored_counts).abs().le(8).all()), (counts, stored_counts)
    assert measured["loss"] == pytest.approx(recorded["heldout_routing"]["loss"], abs=1e-3)


def test_the_bias_checkpoint_routes_with_its_trained_bias(tok) -> None:
    plain, biased = load_checkpoint("moe"), load_checkpoint("moe-bias")
    assert not any(isinstance(r, BiasedRouter) for r in routers(plain))
    found = routers(biased)
    assert found and all(isinstance(r, BiasedRouter) for r in found)
    trained = torch.tensor(checkpoint_metrics("moe-bias")["run"]["expert_bias"])  # (L, E)
    loaded = torch.stack([r.expert_bias for r in found])  # (L, E)
    torch.testing.assert_close(loaded, trained, atol=1e-3, rtol=0)  # float16, then 4 decimals
    assert bool(loaded.abs().gt(0.01).any())
    batch = heldout_batch()
    with_bias = measure_routing(biased, batch)
    for r in found:
        r.expert_bias = torch.zeros_like(r.expert_bias)
    without = measure_routing(biased, batch)
    assert with_bias["counts"] != without["counts"]
    assert max(with_bias["cv"]) < max(without["cv"])  # the bias is what keeps it balanced
    assert max(with_bias["cv"]) < max(measure_routing(plain, batch)["cv"])


def test_a_moe_roundtrip_in_float16_keeps_the_bias(tmp_path, tok) -> None:
    model = tiny_mixtral(tok, seed=5, **SMALL_MIXTRAL)
    for router in use_biased_routers(model):
        router.expert_bias = torch.tensor([0.1234, -0.05, 0.0, 0.3])
    save_checkpoint(model, "moe-bias", tmp_path, dtype=torch.float16)
    loaded = load_checkpoint("moe-bias", directory=tmp_path)
    assert next(loaded.parameters()).dtype == torch.float32 and not loaded.training
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys() and any(k.endswith("expert_bias") for k in saved)
    for k, v in saved.items():
        assert torch.equal(v.half().float(), restored[k]), k
    assert not torch.equal(saved["lm_head.weight"], restored["lm_head.weight"])  # it was rounded
    again = tmp_path / "again"
    save_checkpoint(loaded, "moe-bias", again, dtype=torch.float16)
    for k, v in load_checkpoint("moe-bias", directory=again).state_dict().items():
        assert torch.equal(v, restored[k]), k  # saving the loaded model again changes nothing


def test_moe_checkpoints_refuse_the_wrong_routers_and_dtypes(tmp_path, tok) -> None:
    plain = tiny_mixtral(tok, **SMALL_MIXTRAL)
    with pytest.raises(TypeError, match=r"'moe-bias'.*BiasedRouter"):
        save_checkpoint(plain, "moe-bias", tmp_path)
    with pytest.raises(ValueError, match="dtype"):
        save_checkpoint(plain, "moe", tmp_path, dtype=torch.int8)
    use_biased_routers(plain)
    with pytest.raises(TypeError, match=r"'moe'.*MixtralTopKRouter"):
        save_checkpoint(plain, "moe", tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert MOE_SETTINGS["max_length"] == EVAL_MAX_LENGTH["moe"] == EVAL_MAX_LENGTH["moe-bias"]
