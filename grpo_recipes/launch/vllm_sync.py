"""How a LoRA policy's weights reach vLLM: merged out of place, so the base weights are never written.

TRL's `VLLMGeneration._iter_named_params` merges the adapter into the base weights in place before each sync and
unmerges it after (`W += BA`, then `W -= BA`). In bfloat16 the two roundings do not cancel: over hundreds of
syncs the base drifts away from the weights loaded, and the policy trained is no longer "base + the saved
adapter" (what the run's output is, and what evaluation loads). `RecipeVLLMGeneration` yields each adapted
weight as `W + BA` computed in float32 and rounded once to W's dtype, a new tensor; W itself is only read.
Everything else (FSDP, models without an adapter, the transfer itself) is TRL's.

`merged_lora_weights` is the out-of-place merge on its own; `tests/launch/test_vllm_sync.py` syncs a bfloat16
model 200 times and compares its base bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accelerate.utils import is_peft_model
from trl.generation import vllm_generation


def merged_lora_weights(model: Any) -> dict[str, Any]:
    """`{name of a LoRA layer's base weight: that weight + its active adapters' delta}`, new tensors in the base
    weight's dtype; the model is not modified. Names are the PEFT model's (`....base_layer.weight`)."""
    import torch
    from peft.tuners.lora import LoraLayer

    merged = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or module.disable_adapters:
            continue
        base = module.get_base_layer().weight
        delta = torch.zeros_like(base, dtype=torch.float32)
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                delta += module.get_delta_weight(adapter).to(torch.float32)
        merged[f"{module_name}.base_layer.weight"] = (base.data.to(torch.float32) + delta).to(base.dtype)
    return merged


class RecipeVLLMGeneration(vllm_generation.VLLMGeneration):
    """TRL's vLLM back-end whose LoRA sync leaves the base weights as they were loaded."""

    def _iter_named_params(self) -> Iterator[tuple[str, Any]]:
        model = self.model
        if not is_peft_model(model) or self._dist.is_fsdp:
            yield from super()._iter_named_params()
            return
        # Gathered at once under ZeRO-3, as TRL does: an adapted weight needs its base and its adapter together.
        with self._dist.gather_params(list(model.parameters())):
            merged = merged_lora_weights(model)
            for name, param in model.named_parameters():
                if model.prefix in name or "original_module" in name:
                    continue  # the adapter's own weights, merged below; a module_to_save's frozen original
                data = merged.get(name, param.data)
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                yield self._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."]), data
