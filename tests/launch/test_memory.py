"""Memory per GPU from a model's shapes: the counts against real models, the arithmetic against a hand
computation, and every GPU recipe's header against the helper."""

from __future__ import annotations

import pytest
from support import REPO

from grpo_recipes.launch.memory import (
    HEADER,
    estimate,
    header_line,
    lora_parameter_count,
    model_shape,
    parameter_count,
)
from grpo_recipes.recipe import load_recipe


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_parameter_count_is_the_real_models(tmp_path, model_type):
    """Built from a config (Qwen2 with its q/k/v biases, Llama without; tied and untied heads)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    for tied in (True, False):
        config = AutoConfig.for_model(
            model_type, vocab_size=500, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
        )  # fmt: skip
        folder = tmp_path / f"{model_type}-{tied}"
        model = AutoModelForCausalLM.from_config(config)
        model.save_pretrained(folder)
        shape = model_shape(str(folder))
        assert parameter_count(shape) == sum(p.numel() for p in model.parameters())
        adapted = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"))
        trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
        assert lora_parameter_count(shape, 8) == trainable


def test_qwen2_5_1_5b_by_hand():
    shape = model_shape("Qwen/Qwen2.5-1.5B-Instruct")
    # Embeddings 151,936 x 1,536 (tied to the head); a layer: q 1536x1536+1536, k and v 1536x256+256 each,
    # o 1536x1536, gate/up/down 3 x 1536x8960, two norms 1,536 each: 46,797,824; 28 layers; the final norm.
    assert parameter_count(shape) == 151_936 * 1_536 + 28 * 46_797_824 + 1_536 == 1_543_714_304
    # LoRA r=16 on the seven projections: 16 x (in + out) each, 659,456 a layer.
    assert lora_parameter_count(shape, 16) == 28 * 659_456
    full = estimate(shape, gpus=8, gpu_gb=80, zero_stage=2, vllm_share=0.3)
    assert round(full.weights, 3) == 3.087  # 2 bytes x P, whole on every GPU under ZeRO-2
    assert round(full.gradients, 3) == 0.386  # 2 bytes x P / 8
    assert round(full.optimizer, 3) == 2.316  # 12 bytes x P / 8: two moments and the float32 master copy
    assert full.vllm == 24.0 and round(full.total, 1) == 29.8
    sharded = estimate(shape, gpus=8, gpu_gb=80, zero_stage=3)
    assert round(sharded.weights, 3) == 0.386 and sharded.vllm == 0.0


def test_every_gpu_recipe_states_its_memory_as_the_helper_computes_it():
    stated = {}
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        text = path.read_text()
        match = HEADER.search(text)
        if match is None:
            assert "models/SmolLM2-135M-Instruct" in text, (
                f"{path.name}: a GPU recipe without its memory line"
            )
            continue
        gpus, gpu_gb, stage = int(match[1]), int(match[2]), int(match[3])
        recipe = load_recipe(path, check_trainer=False)
        assert match[0] == header_line(recipe, gpus, gpu_gb, stage), path.name
        assert recipe_total(match[4]) < gpu_gb, path.name
        stated[path.stem] = match[4]
    assert {"gsm8k", "math", "code", "countdown", "distill-qwen", "gsm8k-lora"} <= set(stated)


def recipe_total(line: str) -> float:
    return float(line.split()[1])


def test_make_check_states_the_header_and_names_a_stale_one(tmp_path):
    """A recipe copied and pointed at another model keeps the old figure: check says so, with the new line."""
    from grpo_recipes.training.train import check

    source = (REPO / "recipes" / "gsm8k.yaml").read_text()
    stated = HEADER.search(source)
    lines = []
    check(
        load_recipe(REPO / "recipes" / "gsm8k.yaml", check_trainer=False), load_data=False, log=lines.append
    )
    assert f"memory per GPU on {stated[1]} x {stated[2]} GB, ZeRO-{stated[3]}: {stated[4]}" in lines

    copied = tmp_path / "gsm8k-7b.yaml"
    copied.write_text(source.replace("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"))
    recipe = load_recipe(copied, check_trainer=False)
    lines = []
    check(recipe, load_data=False, log=lines.append)
    (warning,) = [line for line in lines if "memory header" in line]
    assert f"says '{stated[4]}'" in warning
    assert warning.endswith(f"update the line to: {header_line(recipe, 8, 80, int(stated[3]))}")
    assert header_line(recipe, 8, 80, int(stated[3])) != stated[0]

    # The same change as an override: the file's line is right for the file, so no advice to rewrite it.
    recipe = load_recipe(
        REPO / "recipes" / "gsm8k.yaml", ["model.name_or_path=Qwen/Qwen2.5-7B-Instruct"], False
    )
    lines = []
    check(recipe, load_data=False, log=lines.append)
    (line,) = [line for line in lines if "memory per GPU" in line]
    assert (
        line.startswith("memory per GPU with these overrides: about")
        and f"without them: {stated[4]})" in line
    )
