"""The LoRA weight sync to vLLM merges out of place: the base weights stay bit for bit as loaded."""

from __future__ import annotations

import pytest
import torch


def _lora_model(tiny_model, dtype):
    """The tiny model in `dtype` with a LoRA adapter whose B matrices are not zero (as after training)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=dtype)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.01)
    return model


def _generation(model, cls):
    """A vLLM back-end object with only what its weight iteration reads (no engine is started)."""
    from accelerate import Accelerator
    from trl.distributed import DistributedBackend

    generation = cls.__new__(cls)
    generation.model = model
    generation._dist = DistributedBackend(Accelerator(cpu=True))
    return generation


def _base_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def test_two_hundred_syncs_leave_a_bfloat16_base_as_it_was_loaded(tiny_model):
    from trl.generation.vllm_generation import VLLMGeneration

    from grpo_recipes.launch.vllm_sync import RecipeVLLMGeneration

    model = _lora_model(tiny_model, torch.bfloat16)
    loaded = _base_weights(model)
    ours, trls = _generation(model, RecipeVLLMGeneration), _generation(model, VLLMGeneration)

    # What vLLM receives is what TRL's in-place merge gives at the first sync (names and values alike)...
    first = {name: tensor.clone() for name, tensor in ours._iter_named_params()}
    reference = {name: tensor.clone() for name, tensor in trls._iter_named_params()}
    assert first.keys() == reference.keys() and not any("lora_" in name for name in first)
    as_vllm = {
        name.removeprefix("base_model.model.").replace(".base_layer", ""): t for name, t in loaded.items()
    }
    assert as_vllm.keys() == first.keys()
    adapted = [name for name in first if not torch.equal(first[name], as_vllm[name])]
    assert adapted, "the adapter changed no weight"
    for name in first:
        assert torch.allclose(first[name].float(), reference[name].float(), atol=1e-2), name
    # ... and TRL's in-place merge and unmerge moved the base it should have left alone.
    drifted = _base_weights(model)
    assert any(not torch.equal(drifted[name], loaded[name]) for name in loaded)

    # 200 syncs of ours: every base weight bit for bit as it was, and each sync sends the same weights.
    model = _lora_model(tiny_model, torch.bfloat16)
    loaded = _base_weights(model)
    ours = _generation(model, RecipeVLLMGeneration)
    first = {name: tensor.clone() for name, tensor in ours._iter_named_params()}
    for _ in range(199):
        for name, tensor in ours._iter_named_params():
            assert torch.equal(tensor, first[name])
    after = _base_weights(model)
    assert all(torch.equal(after[name], loaded[name]) for name in loaded)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_sent_weights_are_base_plus_the_adapters_delta(tiny_model, dtype):
    from grpo_recipes.launch.vllm_sync import merged_lora_weights

    model = _lora_model(tiny_model, dtype)
    merged = merged_lora_weights(model)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    name = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    expected = layer.base_layer.weight.float() + layer.get_delta_weight("default").float()
    assert merged[name].dtype == dtype and torch.allclose(
        merged[name].float(), expected, atol=1e-2 if dtype == torch.bfloat16 else 1e-6
    )


def test_embedding_lora_is_merged_and_dora_keeps_trls_merge(tiny_model):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_recipes.launch.vllm_sync import merged_lora_weights, out_of_place_mergeable

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["embed_tokens", "q_proj"]))
    for name, param in model.named_parameters():
        if "lora_embedding_A" in name or "lora_B" in name:
            param.data.normal_(0, 0.05)  # both zero-initialised by PEFT on one side
    assert out_of_place_mergeable(model)
    merged = merged_lora_weights(model)
    embed = model.base_model.model.model.embed_tokens
    name = "base_model.model.model.embed_tokens.base_layer.weight"
    assert torch.allclose(
        merged[name], embed.base_layer.weight + embed.get_delta_weight("default"), atol=1e-6
    )
    assert not torch.equal(merged[name], embed.base_layer.weight)  # the embedding's adapter is in it

    dora = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, use_dora=True))
    assert not out_of_place_mergeable(dora)  # its magnitude vector merges otherwise: TRL's merge does it
