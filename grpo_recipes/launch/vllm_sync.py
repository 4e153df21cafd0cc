"""How a LoRA policy's weights reach vLLM: merged out of place, so the base weights are never written.

TRL's `VLLMGeneration._iter_named_params` merges the adapter into the base weights in place before each sync and
unmerges it after (`W += BA`, then `W -= BA`). In bfloat16 the two roundings do not cancel: over hundreds of
syncs the base drifts away from the weights loaded, and the policy trained is no longer "base + the saved
adapter" (what the run's output is, and what evaluation loads). `RecipeVLLMGeneration` yields each adapted
weight as `W + BA` computed in float32 and rounded once to W's dtype, a new tensor; W itself is only read.
Everything else (FSDP, models without an adapter, the transfer itself) is TRL's.

Plain LoRA on linear, embedding and convolution layers merges out of place; DoRA and other variants, `lora_bias`
and FSDP keep TRL's in-place merge (`out_of_place_mergeable`). `tests/launch/test_vllm_sync.py` syncs a
bfloat16 model 200 times and compares its base bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accelerate.utils import is_peft_model
from trl.generation import vllm_generation


def out_of_place_mergeable(model: Any) -> bool:
    """Whether every LoRA layer of `model` merges as `W + get_delta_weight` (linear, embedding and conv layers
    with plain LoRA). DoRA and other variants, `lora_bias` and attention layers merge otherwise: TRL's in-place
    merge handles them."""
    from peft.tuners.lora import LoraLayer

    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        if getattr(module, "lora_variant", None) or any(getattr(module, "lora_bias", {}).values()):
            return False
        if not hasattr(module.get_base_layer(), "weight"):
            return False
    return True


def merged_weight(module: Any) -> Any:
    """A LoRA layer's base weight plus its active adapters' deltas, in float32, rounded once to the weight's
    dtype: a new tensor; the layer is not modified."""
    import torch

    base = module.get_base_layer().weight
    merged = base.data.to(torch.float32)
    adapters = {**getattr(module, "lora_A", {}), **getattr(module, "lora_embedding_A", {})}
    for adapter in module.active_adapters:
        if adapter in adapters:
            merged = merged + module.get_delta_weight(adapter).to(torch.float32)
    return merged.to(base.dtype)


def merged_lora_weights(model: Any) -> dict[str, Any]:
    """`{name of a LoRA layer's base weight: `merged_weight`}` for the whole model (the sync computes each one
    as it sends it). Names are the PEFT model's (`....base_layer.weight`)."""
    from peft.tuners.lora import LoraLayer

    return {
        f"{name}.base_layer.weight": merged_weight(module)
        for name, module in model.named_modules()
        if isinstance(module, LoraLayer) and not module.disable_adapters
    }


class RecipeVLLMGeneration(vllm_generation.VLLMGeneration):
    """TRL's vLLM back-end whose LoRA sync leaves the base weights as they were loaded."""

    def _iter_named_params(self) -> Iterator[tuple[str, Any]]:
        model = self.model
        if not is_peft_model(model) or self._dist.is_fsdp or not out_of_place_mergeable(model):
            yield from super()._iter_named_params()
            return
        from peft.tuners.lora import LoraLayer

        layers = {
            f"{name}.base_layer.weight": module
            for name, module in model.named_modules()
            if isinstance(module, LoraLayer) and not module.disable_adapters
        }
        # Gathered at once under ZeRO-3, as TRL does: an adapted weight needs its base and its adapter together.
        # Each merged weight is made as it is sent: one extra weight in memory at a time.
        with self._dist.gather_params(list(model.parameters())):
            for name, param in model.named_parameters():
                if model.prefix in name or "original_module" in name:
                    continue  # the adapter's own weights, merged below; a module_to_save's frozen original
                data = merged_weight(layers[name]) if name in layers else param.data
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                yield self._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."]), data
