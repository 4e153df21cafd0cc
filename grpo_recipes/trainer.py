"""The trainer: TRL's GRPOTrainer, with vLLM generation that also works when the policy trains on a CPU.

On a GPU this is GRPOTrainer as it is. When `use_vllm` is on and the policy is on a CPU (tests, `make smoke`,
small local runs), TRL's vLLM back-end is swapped for `vllm_cpu.CPUVLLMGeneration` while the trainer builds it.
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

    def __init__(self, *args: Any, **kwargs: Any):
        config = kwargs["args"]
        if config.use_vllm and policy_on_cpu(config):
            from .vllm_cpu import CPUVLLMGeneration, replaced

            with replaced(grpo_trainer, "VLLMGeneration", CPUVLLMGeneration):
                super().__init__(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)

    @property
    def generation_backend(self) -> str:
        """What generates the completions: `transformers`, `vllm-colocate` or `vllm-server`."""
        return f"vllm-{self.vllm_mode}" if self.use_vllm else "transformers"
