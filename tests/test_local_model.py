"""The local SmolLM2 model: the GGUF file is checked by hash and converted into a normal model folder."""

from __future__ import annotations

import json

import pytest

from grpo_recipes.local_model import MARKER, SMOLLM2_SHA256, prepare_smollm2, smollm2_gguf_path


def test_a_file_with_the_wrong_hash_is_refused(tmp_path):
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"GGUF not really")
    with pytest.raises(ValueError, match="does not match"):
        prepare_smollm2(tmp_path / "model", gguf=fake)
    assert not (tmp_path / "model").exists()


# Long: `make model` (the set-up of make test-long and make test-smoke) runs the same conversion, and their runs
# load its model; the fake file above keeps the checksum check in make test.
@pytest.mark.slow
@pytest.mark.long
def test_gguf_converts_to_a_model_that_loads_and_answers(tmp_path):
    try:
        smollm2_gguf_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    dest = prepare_smollm2(tmp_path / "SmolLM2")
    assert json.loads((dest / MARKER).read_text())["sha256"] == SMOLLM2_SHA256
    assert not (tmp_path / "SmolLM2.partial").exists()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(dest)
    model = AutoModelForCausalLM.from_pretrained(dest)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids["input_ids"].shape[1] :])
    assert prepare_smollm2(dest) == dest  # second call: already converted, returns at once
