"""The trainer: TRL's GRPOTrainer, with dynamic sampling and vLLM generation that also works on a CPU.

On a GPU this is GRPOTrainer as it is. When `use_vllm` is on and the policy is on a CPU (tests, `make smoke`,
small local runs), TRL's vLLM back-end is swapped for `vllm_cpu.CPUVLLMGeneration` while the trainer builds it.
With `dynamic_sampling` (the recipe's `sampling.dynamic`), training batches hold informative groups only
(`grpo_recipes.training.dynamic_sampling`); it wraps TRL's `_generate_and_score_completions`, the one method it
overrides (tests/training/test_dynamic_sampling.py pins what it relies on).
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer
from trl.trainer import grpo_trainer


def policy_on_cpu(args: Any) -> bool:
    """True when the trainer will place the policy on the CPU (no CUDA device, or `use_cpu`)."""
    import torch

    return bool(args.use_cpu) or not torch.cuda.is_available()


class RecipeGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose vLLM back-end suits the device the policy trains on."""

    def __init__(self, *args: Any, dynamic_sampling: bool = False, max_rounds: int = 4, **kwargs: Any):
        self.dynamic_sampling, self.max_rounds = dynamic_sampling, max_rounds
        config = kwargs["args"]
        if config.use_vllm and policy_on_cpu(config):
            from ..launch.vllm_cpu import CPUVLLMGeneration, replaced

            with replaced(grpo_trainer, "VLLMGeneration", CPUVLLMGeneration):
                super().__init__(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)

    @property
    def generation_backend(self) -> str:
        """What generates the completions: `transformers`, `vllm-colocate` or `vllm-server`."""
        return f"vllm-{self.vllm_mode}" if self.use_vllm else "transformers"

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not (self.dynamic_sampling and self.model.training):
            return super()._generate_and_score_completions(inputs)
        from .dynamic_sampling import generate_informative

        output, selection = generate_informative(
            self, inputs, super()._generate_and_score_completions, self.max_rounds
        )
        metrics = self._metrics["train"]
        metrics["groups_generated"].append(selection.groups_generated)
        metrics["groups_kept"].append(selection.groups_kept)
        metrics["extra_rounds"].append(selection.extra_rounds)
        metrics["zero_variance_groups"].append(selection.zero_variance_groups)
        return output
