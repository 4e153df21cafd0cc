"""Model, tokenizer and LoRA loading from a recipe's `model` section."""

from __future__ import annotations

from typing import Any

from .recipe import ModelSpec


def resolve_dtype(name: str) -> Any:
    """`auto` is bfloat16 on a GPU that supports it and float32 elsewhere (CPU training wants float32)."""
    import torch

    if name == "auto":
        return (
            torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
        )
    return getattr(torch, name)


def load_tokenizer(spec: ModelSpec):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        spec.name_or_path, revision=spec.revision, trust_remote_code=spec.trust_remote_code
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # The recipe's chat template (model.chat_template), with TRL's tool-call parser where it has one.
    from .agents.templates import apply_chat_template_choice

    return apply_chat_template_choice(tokenizer, spec.chat_template)


def load_model(spec: ModelSpec):
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": resolve_dtype(spec.dtype), "revision": spec.revision}
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    return AutoModelForCausalLM.from_pretrained(
        spec.name_or_path, trust_remote_code=spec.trust_remote_code, **kwargs
    )


def lora_config(spec: ModelSpec):
    """The PEFT config for GRPOTrainer's `peft_config`, or None to train all weights."""
    if spec.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=spec.lora.r,
        lora_alpha=spec.lora.alpha,
        lora_dropout=spec.lora.dropout,
        target_modules=spec.lora.target_modules,
        task_type="CAUSAL_LM",
    )


def add_adapter(model, peft_config, zero3: bool = False, seed: int = 0):
    """`model` with a fresh LoRA adapter, as GRPOTrainer adds one from `peft_config`: for a warm-up that trains
    the adapter before the trainer exists (the trainer then takes the wrapped model and no `peft_config`).

    `zero3`: keep the adapter in the model's dtype, as the trainer does under ZeRO-3 (mixed dtypes break its
    gather). `seed` seeds the adapter's initialisation, so that every process starts from the same one.
    """
    import torch
    from peft import get_peft_model

    torch.manual_seed(seed)
    return get_peft_model(model, peft_config, **({"autocast_adapter_dtype": False} if zero3 else {}))
