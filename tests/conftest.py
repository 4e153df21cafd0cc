"""Shared fixtures: a tiny random model with SmolLM2's real tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer randomly initialised Llama (seconds to train) with the SmolLM2 tokenizer and chat template."""
    from grpo_recipes.local_model import make_tiny_model, smollm2_gguf_path

    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny", gguf)
