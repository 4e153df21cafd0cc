"""Shared fixtures: a tiny random model with SmolLM2's real tokenizer, a 2-step training run of it, and that
tokenizer on its own (as it ships, and with TRL's Qwen2.5 template for the tool tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO, run_script, tiny_recipe, write_recipe

#: Where `make model` puts SmolLM2-135M-Instruct (its tokenizer is all the tokenizer fixtures need).
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer randomly initialised Llama (seconds to train) with the SmolLM2 tokenizer and chat template."""
    from grpo_recipes.local_model import make_tiny_model, smollm2_gguf_path

    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny", gguf)


@pytest.fixture(scope="session")
def tiny_run(tiny_model, tmp_path_factory):
    """A real 2-step GRPO run of the tiny model, as a user runs it (TensorBoard on, the learning rate given as an
    override), shared by the tests that read what a run writes: (its recipe, its output folder, the finished
    process)."""
    tmp = tmp_path_factory.mktemp("tiny-run")
    out = tmp / "run"
    recipe = write_recipe(tmp / "tiny.yaml", tiny_recipe(tiny_model, out, report_to="tensorboard"))
    result = run_script("train.py", "--config", str(recipe), "trainer.learning_rate=5e-5")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return recipe, out, result


def _load_smollm2_tokenizer(request):
    from transformers import AutoTokenizer

    source = SMOLLM2 if (SMOLLM2 / "tokenizer.json").is_file() else request.getfixturevalue("tiny_model")
    return AutoTokenizer.from_pretrained(source)


@pytest.fixture(scope="session")
def smollm2_tokenizer(request):
    """SmolLM2's tokenizer with its own chat template (which has no tool support). Do not modify."""
    return _load_smollm2_tokenizer(request)


@pytest.fixture(scope="session")
def qwen_tokenizer(request):
    """SmolLM2's tokenizer with TRL's Qwen2.5 template and response parser, as `model.chat_template: qwen2_5`
    sets them up. Do not modify."""
    from grpo_recipes.agents.templates import apply_chat_template_choice

    return apply_chat_template_choice(_load_smollm2_tokenizer(request), "qwen2_5")
