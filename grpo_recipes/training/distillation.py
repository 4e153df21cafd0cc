"""On-policy distillation: TRL's DistillationTrainer for a recipe with a `teacher:` section.

The student samples one completion a prompt; the teacher reads the same token ids and the loss is, at each
position of the sample, a divergence between the two next-token distributions summed over the whole
vocabulary (TRL's generalized JSD: `trainer.beta` 0 forward KL, 1 reverse KL, 0.5 JSD). Every sampled token
carries a signal, where GRPO gets one reward a completion.

What this module adds to TRL's trainer:

* `check_teacher_vocabulary`: the teacher's tokenizer and config against the student's, before any model loads
  (TRL compares the configs' vocab_size only once both models are in memory).
* `load_teacher`: a Hub id, a model folder, or a LoRA adapter folder merged into its base (a run of this
  repository saves an adapter). A teacher whose output layer only has more padding rows than the student's
  (Qwen2.5-7B's 152,064 against 1.5B's 151,936, one tokenizer) is cut to the student's size: TRL's trainer
  refuses the pair as it is.
* `RecipeDistillationTrainer`: vLLM generation on a CPU as for GRPO (`grpo_recipes.launch.vllm_cpu`), and the
  recipe's rewards scored on every sample and logged as `reward`. They train nothing; they make a distillation
  run's step line, curves and report read like a GRPO run's, so that the two compare on the same task. Three
  variants for comparison (`TeacherSpec.samples`, `TeacherSpec.estimator`): the teacher writes the samples
  (off-policy distillation); the loss reads only the sampled token's log-ratio (a per-token advantage); or the
  teacher's sampled tokens are one-hot targets (supervised fine-tuning on the teacher's text).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trl import DistillationTrainer
from trl.trainer import distillation_trainer

from ..recipe import Recipe, RecipeError
from .trainer import log_syncs, vllm_generation_class


def teacher_model_spec(recipe: Recipe):
    """The teacher as a `ModelSpec` (the student's, with the teacher's path, revision, dtype and trust)."""
    teacher = recipe.teacher
    assert teacher is not None
    return replace(
        recipe.model,
        name_or_path=teacher.name_or_path,
        revision=teacher.revision,
        dtype=teacher.dtype,
        trust_remote_code=teacher.trust_remote_code,
        lora=None,
        chat_template=None,
    )


def _tokenizer_and_vocab_size(spec) -> tuple[Any, int | None]:
    """The tokenizer of a model or adapter folder (an adapter's own, else its base's), and its config's
    vocab_size (the base's for an adapter); no weights are read."""

    from transformers import AutoConfig, AutoTokenizer

    from ..evaluation.generate import adapter_base, tokenizer_source

    folder = spec.name_or_path
    kwargs = {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source(folder), **kwargs)
    config = AutoConfig.from_pretrained(adapter_base(folder) or folder, **kwargs)
    return tokenizer, getattr(config.get_text_config(), "vocab_size", None)


def check_teacher_vocabulary(recipe: Recipe) -> str:
    """Refuse a teacher whose tokenizer maps any token to another id than the student's, or whose output layer
    is smaller than the student's: the loss compares the two distributions id by id. Returns what was compared.

    A teacher whose output layer is larger (Qwen2.5-7B pads its 151,665 tokens to 152,064 rows, 1.5B to
    151,936) is accepted when the rows beyond the student's are ones no token id reaches: `load_teacher` drops
    them (TRL's trainer refuses any difference in size). Raises `RecipeError` naming `teacher.name_or_path`;
    reads tokenizers and configs only.
    """
    student, student_size = _tokenizer_and_vocab_size(recipe.model)
    teacher, teacher_size = _tokenizer_and_vocab_size(teacher_model_spec(recipe))
    student_vocab, teacher_vocab = student.get_vocab(), teacher.get_vocab()
    if student_vocab != teacher_vocab:
        differing = sorted(set(student_vocab.items()) ^ set(teacher_vocab.items()), key=lambda item: item[1])
        token, index = differing[0]
        raise RecipeError(
            recipe.source,
            "teacher.name_or_path",
            f"the teacher's tokenizer differs from the student's ({len(teacher_vocab)} tokens against "
            f"{len(student_vocab)}; first difference: {token!r} at id {index}). Distillation compares the two "
            "next-token distributions id by id: pick a teacher of the student's model family.",
        )
    line = f"teacher {recipe.teacher.name_or_path}: the student's vocabulary ({len(student_vocab)} tokens)"
    if student_size is None or teacher_size is None or student_size == teacher_size:
        return line
    if teacher_size < student_size:
        raise RecipeError(
            recipe.source,
            "teacher.name_or_path",
            f"the teacher's output layer has {teacher_size} rows, fewer than the student's {student_size}: "
            "the same tokenizer, but the student's distribution has ids the teacher's lacks.",
        )
    return line + (
        f"; its output layer's {teacher_size - student_size} padding rows beyond the student's {student_size} "
        "are dropped (no token id reaches them)"
    )


def load_teacher(recipe: Recipe, student_vocab_size: int | None = None):
    """The teacher model in its dtype, on the CPU (the trainer places it): an adapter folder merged into its
    base model; output rows beyond `student_vocab_size` (padding, see `check_teacher_vocabulary`) dropped."""
    from transformers.integrations import deepspeed as hf_deepspeed

    from ..evaluation.generate import load_eval_model

    # Under ZeRO-3, transformers would load it already partitioned (zero.Init), and an adapter cannot be merged
    # into partitioned weights: it loads whole, and the trainer's DeepSpeed preparation partitions it.
    zero3_config = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        _, model = load_eval_model(recipe.teacher.name_or_path, teacher_model_spec(recipe))
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = zero3_config
    size = model.config.get_text_config().vocab_size
    if student_vocab_size is not None and size > student_vocab_size:
        model.resize_token_embeddings(student_vocab_size)
    model.eval()
    return model


class RecipeDistillationTrainer(DistillationTrainer):
    """DistillationTrainer whose vLLM back-end suits the device the student trains on, and which logs the
    recipe's rewards of the student's samples (`reward`, `rewards/<name>/mean`) without training on them."""

    def __init__(
        self,
        *args: Any,
        reward_functions: list[Any] = (),
        reward_weights: list[float] = (),
        samples: str = "student",
        estimator: str = "full_vocabulary",
        adapter_sync: bool = False,
        **kwargs,
    ):
        self.reward_functions, self.reward_weights = list(reward_functions), list(reward_weights)
        self.samples, self.estimator = samples, estimator
        from ..launch.vllm_cpu import replaced

        with replaced(
            distillation_trainer, "VLLMGeneration", vllm_generation_class(kwargs["args"], adapter_sync)
        ):
            super().__init__(*args, **kwargs)
        if (
            samples == "teacher"
            and self.is_deepspeed_enabled
            and self.accelerator.state.deepspeed_plugin.zero_stage == 3
        ):
            # TRL's generation context would gather and unhook the teacher's engine as if it trained.
            raise ValueError(
                "teacher.samples: teacher is not supported under ZeRO-3; launch with ZeRO-2 or DDP"
            )
        if estimator != "full_vocabulary":
            for model in (self.model, self.teacher_model):
                config = self.accelerator.unwrap_model(model).config.get_text_config()
                if any(
                    getattr(config, key, None)
                    for key in ("logit_scale", "final_logit_softcapping", "logits_scaling")
                ):
                    raise ValueError(
                        f"teacher.estimator: {estimator} reads logits from the output layer alone; "
                        f"{config.model_type} scales or caps them (use full_vocabulary)"
                    )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and "eval_loss" not in logs:  # the loss is the divergence: named so in the report
            logs["divergence"] = logs["loss"]
            for estimate in ("sampled_reverse_kl", "sampled_forward_kl"):
                sampled = self._metrics["train"].pop(estimate, None)
                if sampled:  # the loss is a surrogate or a cross-entropy: log its estimate of the KL instead
                    logs["divergence"] = sum(sampled) / len(sampled)
        super().log(logs, start_time)

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        """The student's samples (on-policy), or the teacher's: TRL's generation, run on the teacher's model."""
        if self.samples != "teacher":
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        student = self.model_wrapped
        self.model_wrapped = self.teacher_model
        try:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        finally:
            self.model_wrapped = student

    def _compute_loss(self, unwrapped_student, inputs, num_items_in_batch):
        if self.estimator == "full_vocabulary":
            return super()._compute_loss(unwrapped_student, inputs, num_items_in_batch)
        if self.estimator == "one_hot":
            return self._one_hot_loss(unwrapped_student, inputs, num_items_in_batch)
        return self._sampled_token_loss(unwrapped_student, inputs, num_items_in_batch)

    def _drawn_token_log_probs(self, unwrapped_student, inputs):
        """At each completion position: the student's logits, and the teacher's log-probability of the drawn
        token at `temperature` (no gradient); with the completion mask (tool results left out)."""
        import torch

        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        tokens = inputs["completion_ids"]
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        mask = mask.float()
        keep = tokens.size(1)
        hidden = self._get_last_hidden_state(unwrapped_student, input_ids, attention_mask, keep)
        self.teacher_model.eval()
        unwrapped_teacher = self.accelerator.unwrap_model(self.teacher_model)
        with torch.no_grad():
            teacher_hidden = self._forward_redirection(
                self.teacher_model,
                unwrapped_teacher,
                self._get_last_hidden_state,
                unwrapped_teacher,
                input_ids,
                attention_mask,
                keep,
            )
            teacher_logits = unwrapped_teacher.get_output_embeddings()(teacher_hidden).float()
            teacher_logp = torch.log_softmax(teacher_logits / self.temperature, dim=-1)
            teacher_token = teacher_logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        logits = unwrapped_student.get_output_embeddings()(hidden).float()
        return logits, teacher_token, tokens, mask

    def _sampled_token_loss(self, unwrapped_student, inputs, num_items_in_batch):
        """The sampled-token estimator: at each position only the token the student drew, y, with the per-token
        advantage A = log teacher(y) - log student(y) (held constant) in the loss -A * log student(y). Its
        gradient is, in expectation over the student's samples, the reverse KL's per-position gradient (the
        sampled-token form published on-policy distillation work calls unstable). Returns (loss, entropy sum,
        valid tokens), as TRL's `_compute_loss` does; the k1 estimate of the reverse KL is logged."""
        import torch

        logits, teacher_token, tokens, mask = self._drawn_token_log_probs(unwrapped_student, inputs)
        student_logp = torch.log_softmax(logits / self.temperature, dim=-1)
        student_token = student_logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        advantage = (teacher_token - student_token).detach()
        total = -(advantage * student_token * mask).sum()
        valid = mask.sum()
        loss = total / (num_items_in_batch if num_items_in_batch is not None else valid.clamp(min=1.0))
        with torch.no_grad():
            entropy = -(student_logp.exp() * student_logp).sum(-1)
            self._metrics["train" if self.model.training else "eval"]["sampled_reverse_kl"].append(
                (-(advantage * mask).sum() / valid.clamp(min=1.0)).item()
            )
        return loss, (entropy * mask).sum(), valid

    def _one_hot_loss(self, unwrapped_student, inputs, num_items_in_batch):
        """Supervised fine-tuning on the teacher's text: the cross-entropy of the teacher's sampled tokens under
        the student (at temperature 1, one-hot targets, as a supervised step on written answers trains), with
        the teacher writing the samples (`samples: teacher`). The teacher's distribution is not read for the
        loss; its log-probabilities give the logged estimate of the forward KL along its own samples, mean
        log teacher(y) - log student(y) at `temperature`, the quantity the other variants log."""
        import torch

        logits, teacher_token, tokens, mask = self._drawn_token_log_probs(unwrapped_student, inputs)
        student_token = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        valid = mask.sum()
        total = -(student_token * mask).sum()
        loss = total / (num_items_in_batch if num_items_in_batch is not None else valid.clamp(min=1.0))
        with torch.no_grad():
            softened = torch.log_softmax(logits / self.temperature, dim=-1)
            entropy = -(softened.exp() * softened).sum(-1)
            drawn = softened.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            self._metrics["train" if self.model.training else "eval"]["sampled_forward_kl"].append(
                (((teacher_token - drawn) * mask).sum() / valid.clamp(min=1.0)).item()
            )
        return loss, (entropy * mask).sum(), valid

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.model.training and self.reward_functions:
            self._log_rewards(inputs, output)
        log_syncs(self)
        return output

    def _log_rewards(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> None:
        """Score this process's samples with the recipe's rewards and log their means over every process, under
        GRPO's metric names (the step line, the report and the sweeps read these; TRL logs the lengths)."""
        import torch

        texts = self.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
        # Token counts as GRPO passes them (length rewards count tokens, not estimate them from characters).
        completion_ids = [
            ids[mask.bool()].tolist()
            for ids, mask in zip(output["completion_ids"], output["completion_mask"], strict=True)
        ]
        conversational = isinstance(inputs[0]["prompt"], list)
        completions = (
            [[{"role": "assistant", "content": text}] for text in texts] if conversational else texts
        )
        columns = {key: [row[key] for row in inputs] for key in inputs[0] if key != "prompt"}
        prompts = [row["prompt"] for row in inputs]
        total = torch.zeros(len(texts))
        metrics = self._metrics["train"]
        for function, weight in zip(self.reward_functions, self.reward_weights, strict=True):
            scores = function(
                prompts=prompts,
                completions=completions,
                completion_ids=completion_ids,
                trainer_state=self.state,
                **columns,
            )
            values = torch.tensor([float("nan") if s is None else float(s) for s in scores])
            gathered = self.accelerator.gather(values.to(self.accelerator.device)).cpu()
            metrics[f"rewards/{function.__name__}/mean"].append(torch.nanmean(gathered).item())
            total += weight * torch.nan_to_num(values)
        metrics["reward"].append(self.accelerator.gather(total.to(self.accelerator.device)).mean().item())
