"""Fixtures for the agents tests: SmolLM2's real tokenizer, as it ships and with TRL's Qwen2.5 template."""

from __future__ import annotations

import pytest
from support import REPO

from grpo_recipes.agents.templates import apply_chat_template_choice

#: Where `make model` puts SmolLM2-135M-Instruct (its tokenizer is all these tests need).
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"


def _load(request):
    from transformers import AutoTokenizer

    source = SMOLLM2 if (SMOLLM2 / "tokenizer.json").is_file() else request.getfixturevalue("tiny_model")
    return AutoTokenizer.from_pretrained(source)


@pytest.fixture(scope="session")
def smollm2_tokenizer(request):
    """SmolLM2's tokenizer with its own chat template (which has no tool support). Do not modify."""
    return _load(request)


@pytest.fixture(scope="session")
def qwen_tokenizer(request):
    """SmolLM2's tokenizer with TRL's Qwen2.5 template and response parser, as `model.chat_template: qwen2_5`
    sets them up. Do not modify."""
    return apply_chat_template_choice(_load(request), "qwen2_5")
