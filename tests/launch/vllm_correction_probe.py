"""Run by tests/launch/test_vllm_correction.py in a process of its own: vLLM's sampling correction weighed by
TRL's extra scoring pass against the loss's own pass (`grpo_recipes.training.vllm_correction`), on one batch.

python tests/launch/vllm_correction_probe.py MODEL_DIR OUT_DIR
Prints one JSON line: both ratios, losses and logged correction metrics, the LoRA gradients' largest
difference, how many forward passes scoring a batch took each way, the metrics of the batch handed to the loss
in two slices, and the step log of one real training step.
"""

import json
import sys

METRICS = [
    f"sampling/{name}"
    for name in (
        "sampling_logp_difference/mean",
        "sampling_logp_difference/max",
        "importance_sampling_ratio/min",
        "importance_sampling_ratio/mean",
        "importance_sampling_ratio/max",
    )
]


def main(model_path: str, out: str) -> dict:
    import torch
    from trl.trainer.utils import split_tensor_dict
    from vllm_sync_probe import adapter_sync_trainer  # beside this file: the same trainer setting

    from grpo_recipes.training import vllm_correction

    trainer = adapter_sync_trainer(model_path, out, logging_steps=1)
    applies = [vllm_correction.applies(trainer), trainer.correction_in_loss]  # as built, before any change
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by `train()`; the loss divides by it
    with torch.no_grad():  # an adapter that is not zero, so that its gradients are not trivially alike
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.1)
    rows = [{"prompt": [{"role": "user", "content": "Calculate 3 + 4."}]}] * 4
    passes = {"count": 0}
    score = trainer._get_per_token_logps_and_entropies

    def counted(*args, **kwargs):
        passes["count"] += 1
        return score(*args, **kwargs)

    trainer._get_per_token_logps_and_entropies = counted

    def scored(in_loss: bool) -> tuple[dict, int]:
        trainer.correction_in_loss = in_loss
        passes["count"] = 0
        output = trainer._generate_and_score_completions(rows)
        return output, passes["count"]

    def loss_and_grads(batch: dict) -> tuple[float, list]:
        trainer.model.zero_grad(set_to_none=True)
        loss = trainer._compute_loss(trainer.model, batch)
        loss.backward()
        grads = [p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None]
        return loss.item(), grads

    metrics = trainer._metrics["train"]

    def logged() -> dict:
        return {key: metrics[key][-1] for key in METRICS}

    batch, trl_passes = scored(False)  # TRL's way: the extra pass while scoring
    trl_metrics = logged()
    ours_batch, our_passes = scored(True)
    trl_ratio = batch["importance_sampling_ratio"]
    trl_loss, trl_grads = loss_and_grads(dict(batch))
    # The same batch the loss's way: without TRL's pass's outputs, as the trainer now produces it.
    unweighed = {
        k: v for k, v in batch.items() if k not in ("importance_sampling_ratio", "old_per_token_logps")
    }
    same = dict(unweighed)
    trainer.correction_in_loss = True
    entries = len(metrics[METRICS[0]])
    our_loss, our_grads = loss_and_grads(same)
    our_metrics, entries_per_batch = logged(), len(metrics[METRICS[0]]) - entries
    # The batch in two slices, as TRL hands a batch of `steps_per_generation` 2 to the loss: the metrics are
    # logged once, after the second, for the whole batch.
    trainer.args.steps_per_generation = 2
    entries = len(metrics[METRICS[0]])
    sliced_entries = []
    for step, part in enumerate(split_tensor_dict(unweighed, 2)):
        trainer._step = step
        with torch.no_grad():
            trainer._compute_loss(trainer.model, part)
        sliced_entries.append(len(metrics[METRICS[0]]) - entries)
    sliced_metrics = logged()
    trainer.args.steps_per_generation, trainer._step = 1, 0
    trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    return {
        "applies": applies,
        "trl_passes": trl_passes,
        "our_passes": our_passes,
        "our_batch_keys": sorted(ours_batch),
        "trl_ratio": trl_ratio.tolist(),
        "our_ratio": same["importance_sampling_ratio"].tolist(),
        "ratio_moves": (trl_ratio - 1).abs().max().item(),
        "trl_loss": trl_loss,
        "our_loss": our_loss,
        "grad_max": max(g.abs().max().item() for g in trl_grads),
        "grad_difference": max((a - b).abs().max().item() for a, b in zip(trl_grads, our_grads, strict=True)),
        "trl_metrics": trl_metrics,
        "our_metrics": our_metrics,
        "entries_per_batch": entries_per_batch,
        "sliced_entries": sliced_entries,
        "sliced_metrics": sliced_metrics,
        "step_log": history,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
