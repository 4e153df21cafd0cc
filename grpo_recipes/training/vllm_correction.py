"""vLLM's sampling correction, weighed from the loss's own forward pass instead of an extra one.

vLLM samples with its own kernels (bfloat16 on a CPU), so its probability of a sampled token is not quite the
policy's. TRL corrects for that (`vllm_importance_sampling_correction`, on by default): each token's loss is
weighed by the ratio of the policy's probability to vLLM's. To get the policy's, TRL scores the whole batch once
more, without gradients, right after generating it (`old_per_token_logps`). When the batch is trained on within
the optimizer step that generated it (one update per batch, TRL's own condition for skipping
`old_per_token_logps` without vLLM), the policy has not moved by the time the loss runs, and the loss's forward
pass computes exactly those log-probabilities. The trainer then skips the extra pass and weighs each token with
the loss's detached log-probabilities: the same ratio, the same gradient, one forward pass fewer a step (a
quarter of a LoRA step's compute on the CPU). Elsewhere (`num_iterations` above 1, a batch spread over optimizer
steps, the vespo loss, which reads the ratio in its own way) TRL's pass runs as before.

`importance_sampling_ratio` is TRL's formula, for each of its four modes; `tests/launch/test_vllm_correction.py`
checks it against TRL's pass on a real vLLM run.

Example, two completions of three tokens, the last token of the second one padding::

    >>> import torch
    >>> policy = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -9.0]])
    >>> sampler = torch.tensor([[-1.1, -2.0, -0.4], [-3.0, -1.0, 0.0]])
    >>> mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    >>> importance_sampling_ratio(policy, sampler, mask, "token_truncate", None, 3.0)
    tensor([[1.1052, 1.0000, 0.9048],
            [3.0000, 1.0000, 1.0000]])
    >>> importance_sampling_ratio(policy, sampler, mask, "sequence_mask", 0.5, 3.0)
    tensor([[1.],
            [0.]])
"""

from __future__ import annotations

from typing import Any

import torch

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def importance_sampling_ratio(
    policy_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """The policy's probability of each sampled token over vLLM's, as TRL weighs the loss with it.

    `mode` is TRL's `vllm_importance_sampling_mode`: per token or per sequence (the sum of the tokens' log
    ratios), and out-of-range ratios clipped to [`clip_min`, `clip_max`] (truncate) or set to 0 (mask). Tokens
    outside `mask`, and tokens vLLM gave no log-probability (NaN), have ratio 1 before clipping. Shape (B, T) per
    token, (B, 1) per sequence."""
    if mode not in MODES:
        raise ValueError(f"vllm_importance_sampling_mode must be one of {', '.join(MODES)}; got {mode!r}")
    difference = torch.nan_to_num((policy_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        difference = difference.sum(dim=-1, keepdim=True)
    ratio = torch.exp(difference)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = clip_min if clip_min is not None else -float("inf")
    high = clip_max if clip_max is not None else float("inf")
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def applies(trainer: Any) -> bool:
    """Whether the trainer can weigh vLLM's correction from the loss's forward pass (see the module docstring)."""
    args = trainer.args
    generate_every = args.steps_per_generation * trainer.num_iterations
    return bool(
        trainer.use_vllm
        and trainer.vllm_importance_sampling_correction
        and trainer.loss_type != "vespo"
        and args.gradient_accumulation_steps % generate_every == 0
    )


def log_correction(
    trainer: Any,
    policy_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    ratio: torch.Tensor,
    per_sequence: bool,
) -> None:
    """TRL's five `sampling/...` metrics of the correction, from the loss's pass (gathered over processes)."""
    gather = trainer.accelerator.gather
    zero = torch.tensor(0.0, device=policy_logps.device)
    mask = mask.bool()
    delta = torch.abs(policy_logps - sampling_logps)
    delta = delta[mask & ~torch.isnan(delta)]
    flat = ratio.flatten() if per_sequence else ratio[mask]
    metrics = trainer._metrics["train" if trainer.model.training else "eval"]

    def reduce(values: torch.Tensor, how: str) -> torch.Tensor:
        return getattr(values, how)() if values.numel() else zero

    metrics["sampling/sampling_logp_difference/mean"].append(gather(reduce(delta, "mean")).mean().item())
    metrics["sampling/sampling_logp_difference/max"].append(gather(reduce(delta, "max")).max().item())
    metrics["sampling/importance_sampling_ratio/min"].append(gather(reduce(flat, "min")).min().item())
    metrics["sampling/importance_sampling_ratio/mean"].append(gather(reduce(flat, "mean")).mean().item())
    metrics["sampling/importance_sampling_ratio/max"].append(gather(reduce(flat, "max")).max().item())
