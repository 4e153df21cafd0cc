"""The trainer: TRL's GRPOTrainer, with dynamic sampling and vLLM generation that also works on a CPU.

TRL's vLLM back-end is built as `grpo_recipes.launch.vllm_sync.RecipeVLLMGeneration`, whose LoRA weight sync
leaves the base weights as loaded (TRL's merges and unmerges in place, which drifts in bfloat16). When
`use_vllm` is on and the policy is on a CPU (tests, `make smoke`,
small local runs), TRL's vLLM back-end is swapped for `vllm_cpu.CPUVLLMGeneration` while the trainer builds it.
Either is wrapped by `grpo_recipes.launch.vllm_adapter`: in colocate mode vLLM serves the LoRA adapter and each
sync sends the adapter alone (`model.lora.vllm_sync`), and every sync's seconds and bytes are logged.
With vLLM, TRL's correction for vLLM's sampling is weighed from the loss's own forward pass where the policy has
not moved since sampling, instead of an extra scoring pass (`grpo_recipes.training.vllm_correction`).
With `dynamic_sampling` (the recipe's `sampling.dynamic`), training batches hold informative groups only
(`grpo_recipes.training.dynamic_sampling`); it wraps TRL's `_generate_and_score_completions`
(tests/training/test_dynamic_sampling.py pins what it relies on).

With a `curriculum` (the recipe's `curriculum:`, `grpo_recipes.training.curriculum`), the training rows are
one pool per difficulty level, all of one size. TRL's repeat sampler runs over one pool's row numbers, and when
a batch is generated each row is swapped for the row at its place in the current level's pool: all copies of a
prompt, on every process, come from the level of that moment (accelerate fetches batches ahead, so the swap
waits for generation). TRL's `_calculate_rewards` returns the rewards of every process, so every process feeds
its controller the same pass rates and takes the same decision. With dynamic sampling, replacement prompts come
from the pool the step's batch was drawn from.

With tools, two things are added to TRL's tool loop (`_tool_call_loop`):

* Every process takes part in every generation round. TRL lets a process leave the loop when its own
  completions stop calling tools, but a round's generation is collective: under ZeRO-3 it gathers the
  sharded weights, and in vLLM server mode it gathers the prompts of all processes. A process that leaves
  early leaves the others waiting in that collective (the run dies or hangs). Here each round starts with the
  processes agreeing on the largest number of prompts any of them still has; a process with fewer pads its
  batch with a copy of one of its prompts, and one that is done joins with padding only, until none has
  prompts left. Server mode also needs the equal counts, as it splits the gathered results by position.
* The guarded tools' counts (`grpo_recipes.agents.ToolStats`) are logged for each step: `tools/failures`,
  `tools/timeouts` and `tools/truncated`, summed over processes, beside TRL's `tools/call_frequency`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from trl import GRPOTrainer
from trl.trainer import grpo_trainer

from . import vllm_correction
from .curriculum import Curriculum, group_pass_rates


def policy_on_cpu(args: Any) -> bool:
    """True when the trainer will place the policy on the CPU (no CUDA device, or `use_cpu`)."""
    import torch

    return bool(args.use_cpu) or not torch.cuda.is_available()


def vllm_generation_class(args: Any, adapter_sync: bool = False) -> type:
    """The vLLM back-end the trainer builds: TRL's, with LoRA merged out of place for each weight sync
    (`grpo_recipes.launch.vllm_sync`), and with syncs vLLM's CPU build accepts when the policy is on a CPU;
    with `adapter_sync`, vLLM serves the LoRA adapter instead where it can (`grpo_recipes.launch.vllm_adapter`)."""
    if args.use_vllm and policy_on_cpu(args):
        from ..launch.vllm_cpu import CPUVLLMGeneration as generation
    else:
        from ..launch.vllm_sync import RecipeVLLMGeneration as generation
    from ..launch.vllm_adapter import with_adapter_sync

    return with_adapter_sync(generation, adapter_sync)


def generation_backend(trainer: Any) -> str:
    """What generates a trainer's completions (GRPO's or distillation's): `transformers`, `vllm-colocate` or
    `vllm-server`."""
    return f"vllm-{trainer.vllm_mode}" if trainer.use_vllm else "transformers"


def vllm_sync_used(trainer: Any) -> str | None:
    """How the weights reach vLLM in this run: `adapter`, or `merged` with the reason; None without vLLM."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None:
        return None
    fallback = generation.adapter_sync_fallback
    return "adapter" if fallback is None else f"merged ({fallback})"


def log_syncs(trainer: Any) -> None:
    """The vLLM weight syncs since the last call, as `vllm/sync_seconds` and `vllm/sync_mb` (each sync's mean)."""
    syncs = getattr(getattr(trainer, "vllm_generation", None), "syncs", None)
    if not syncs:
        return
    metrics = trainer._metrics["train" if trainer.model.training else "eval"]
    metrics["vllm/sync_seconds"].append(sum(s for s, _ in syncs) / len(syncs))
    metrics["vllm/sync_mb"].append(sum(b for _, b in syncs) / len(syncs) / 1e6)
    syncs.clear()


class RecipeGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose vLLM back-end suits the device the policy trains on."""

    def __init__(
        self,
        *args: Any,
        dynamic_sampling: bool = False,
        max_rounds: int = 4,
        tool_stats: Any = None,
        curriculum: Curriculum | None = None,
        adapter_sync: bool = False,
        **kwargs: Any,
    ):
        self.dynamic_sampling, self.max_rounds = dynamic_sampling, max_rounds
        self.curriculum = curriculum
        self.tool_stats = tool_stats
        self._logged_tool_counts: dict[str, int] = tool_stats.as_dict() if tool_stats is not None else {}
        self._in_tool_loop = False
        self._padding_prompt: list[int] | None = None
        self._generation_seconds = 0.0  # this batch's, summed by `_generate`
        from ..launch.vllm_cpu import replaced

        with replaced(grpo_trainer, "VLLMGeneration", vllm_generation_class(kwargs["args"], adapter_sync)):
            super().__init__(*args, **kwargs)
        self.correction_in_loss = vllm_correction.applies(self)
        self._loss_inputs: dict[str, Any] | None = None  # set while `_compute_loss` runs the policy's pass
        self._correction_stats = vllm_correction.CorrectionStats()

    # --- tools: every process in every round; counts in the step log --------------------------------------

    def _tool_call_loop(self, prompts, prompt_ids, *args: Any, **kwargs: Any):
        self._padding_prompt = list(prompt_ids[0]) if prompt_ids else None
        self._in_tool_loop = self.accelerator.num_processes > 1
        try:
            result = super()._tool_call_loop(prompts, prompt_ids, *args, **kwargs)
        finally:
            self._in_tool_loop = False
        # Done here: join the rounds the other processes still need, with padding only.
        while self.accelerator.num_processes > 1 and (size := self._round_size(0)) > 0:
            self._padded_generation([], size)
        return result

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        if not self._in_tool_loop:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
            )
        size = self._round_size(len(prompt_ids))
        return self._padded_generation(
            prompt_ids, size, images, multimodal_fields, num_generations, *args, **kwargs
        )

    def _round_size(self, mine: int) -> int:
        """The largest number of prompts any process has for this round (a collective: every process calls it)."""
        import torch

        sizes = self.accelerator.gather(torch.tensor([mine], device=self.accelerator.device))
        return int(sizes.max().item())

    def _padded_generation(
        self, prompt_ids, size, images=None, multimodal_fields=None, num_generations=1, *args, **kwargs
    ):
        """Generate for `prompt_ids` padded to `size` prompts; the padding's completions are dropped."""
        real = len(prompt_ids)
        filler = list(prompt_ids[0]) if prompt_ids else self._padding_prompt
        padded = list(prompt_ids) + [filler] * (size - real)
        if images is not None and size > real:
            images = list(images) + [None] * (size - real)
        completion_ids, logprobs = GRPOTrainer._generate_single_turn(
            self, padded, images, multimodal_fields or {}, num_generations, *args, **kwargs
        )
        return completion_ids[:real], (logprobs[:real] if logprobs is not None else None)

    def _log_tool_counts(self, mode: str) -> None:
        if self.tool_stats is None:
            return
        import torch

        now = self.tool_stats.as_dict()
        change = [
            now[key] - self._logged_tool_counts.get(key, 0) for key in ("failures", "timeouts", "truncated")
        ]
        self._logged_tool_counts = now
        totals = (
            self.accelerator.gather(torch.tensor(change, device=self.accelerator.device)).view(-1, 3).sum(0)
        )
        for key, value in zip(("failures", "timeouts", "truncated"), totals.tolist(), strict=True):
            self._metrics[mode][f"tools/{key}"].append(float(value))

    def _generate(self, prompts: list):
        # Generation's share of a step: vLLM's weight sync and, with tools, the tool calls between rounds
        # included; rewards and log-probabilities not. Summed over a batch's rounds (dynamic sampling
        # generates several) and logged once a batch as `time/generation_seconds`.
        started = time.perf_counter()
        try:
            return super()._generate(prompts)
        finally:
            self._generation_seconds += time.perf_counter() - started

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.curriculum is not None and self.model.training:
            inputs = [self.curriculum.at_current_level(row, self.train_dataset) for row in inputs]
        self._generation_seconds = 0.0
        from ..launch.vllm_cpu import replaced

        # With the correction in the loss, TRL's extra scoring pass is skipped: the loss weighs it from its own.
        scoring = (
            replaced(self, "vllm_importance_sampling_correction", False)
            if self.correction_in_loss
            else contextlib.nullcontext()
        )
        with scoring:
            output = self._generate_and_score(inputs)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["time/generation_seconds"].append(self._generation_seconds)
        self._log_tool_counts(mode)
        log_syncs(self)
        return output

    def _generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not (self.dynamic_sampling and self.model.training):
            return super()._generate_and_score_completions(inputs)
        from .dynamic_sampling import generate_informative

        output, selection = generate_informative(
            self, inputs, super()._generate_and_score_completions, self.max_rounds, self._prompt_pool(inputs)
        )
        metrics = self._metrics["train"]
        metrics["groups_generated"].append(selection.groups_generated)
        metrics["groups_kept"].append(selection.groups_kept)
        metrics["extra_rounds"].append(selection.extra_rounds)
        metrics["zero_variance_groups"].append(selection.zero_variance_groups)
        return output

    # --- vLLM's sampling correction from the loss's own forward pass (`vllm_correction`) ------------------

    def _compute_loss(self, model, inputs):
        weighs = self.correction_in_loss and "importance_sampling_ratio" not in inputs
        if weighs:
            self._loss_inputs = inputs
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._loss_inputs = None
        training = self.model.training
        # The correction's metrics once a generated batch, as TRL logs them: after its last slice in training
        # (TRL hands the loss slice `_step % steps_per_generation`); each batch is one slice in evaluation.
        if weighs and (
            not training or self._step % self.args.steps_per_generation == self.args.steps_per_generation - 1
        ):
            self._correction_stats.log(self.accelerator, self._metrics["train" if training else "eval"])
        return loss

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        # The loss's pass is the one that asks for entropies: the policy as it sampled this batch.
        if self._loss_inputs is not None and kwargs.get("compute_entropy"):
            inputs, self._loss_inputs = self._loss_inputs, None
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            policy, sampler = result[0].detach(), inputs["sampling_per_token_logps"]
            mode = self.vllm_importance_sampling_mode
            ratio = vllm_correction.importance_sampling_ratio(
                policy,
                sampler,
                mask,
                mode,
                self.vllm_importance_sampling_clip_min,
                self.vllm_importance_sampling_clip_max,
            )
            self._correction_stats.add(policy, sampler, mask, ratio, mode.startswith("sequence"))
            inputs["importance_sampling_ratio"] = ratio  # read by TRL's loss after this pass
        return result

    # --- curriculum: generate from the current level's pool; judge each batch's groups ----------------------

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        if self.curriculum is None:
            return super()._get_train_sampler(dataset)
        first, end = self.curriculum.bounds[0]  # the first pool's rows, swapped for the level's at generation
        return super()._get_train_sampler(range(end - first))

    def _prompt_pool(self, inputs: list[dict[str, Any]]) -> Any:
        """The rows fresh prompts are drawn from: the pool of the batch's level, or all training rows."""
        if self.curriculum is None:
            return self.train_dataset
        first, end = self.curriculum.bounds[inputs[0]["curriculum_level"]]
        return self.train_dataset.select(range(first, end))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.curriculum is not None and self.model.training:
            self._judge_level(inputs[0]["curriculum_level"], rewards.tolist())
        return rewards

    def _judge_level(self, level: int, rewards: list[list[float]]) -> None:
        """Log the batch's level and the shares of its all-right and all-wrong groups; feed the controller
        when the batch was drawn at its current level. `rewards`: every process's, one row per completion."""
        rates = group_pass_rates(self.curriculum.right(rewards), self.num_generations)
        metrics = self._metrics["train"]
        metrics["curriculum/level"].append(float(level))
        metrics["curriculum/all_right"].append(sum(rate >= 1.0 for rate in rates) / len(rates))
        metrics["curriculum/all_wrong"].append(sum(rate <= 0.0 for rate in rates) / len(rates))
        if level == self.curriculum.controller.level:
            self.curriculum.controller.observe(rates)
