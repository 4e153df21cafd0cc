"""vLLM's sampling correction, weighed from the loss's own forward pass instead of an extra one.

vLLM samples with its own kernels (bfloat16 on a CPU), so its probability of a sampled token is not quite the
policy's. TRL corrects for that (`vllm_importance_sampling_correction`, on by default): each token's loss is
weighed by the ratio of the policy's probability to vLLM's. To get the policy's, TRL scores the whole batch once
more, without gradients, right after generating it (`old_per_token_logps`). When every slice of the batch is
trained on within the optimizer step that generated it (TRL's own condition for skipping `old_per_token_logps`
without vLLM: `gradient_accumulation_steps` a multiple of `steps_per_generation x num_iterations`), the policy
has not moved by the time the loss runs, and the loss's forward pass computes exactly those log-probabilities.
The trainer then skips the extra pass and weighs each token with the loss's detached log-probabilities: the same
ratio, loss and gradient, one forward pass of the batch fewer a step. Otherwise (a batch spread over optimizer
steps, or the vespo loss, which reads the ratio in its own way) TRL's pass runs as before.

Two differences, both of a pass that TRL does not repeat: with dropout on (LoRA's `dropout` above 0), TRL's pass
draws its own dropout mask, and here the ratio is taken at the loss's mask, as TRL itself takes the policy ratio
without vLLM; under mixed precision TRL's pass runs outside the loss's autocast, so the two agree to its rounding.

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


class CorrectionStats:
    """TRL's five `sampling/...` metrics of the correction, summed over the slices of one generated batch.

    TRL logs them once for each generated batch, from its extra pass over the whole batch; the loss sees the
    batch one slice (micro-batch) at a time. Each slice is `add`ed, and `log` gathers the batch's figures over
    processes as TRL does (each process's token mean, then their mean; the extremes of all) and appends them
    to the trainer's metrics once."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.difference_sum, self.difference_count, self.difference_max = 0.0, 0, 0.0
        self.ratio_sum, self.ratio_count = 0.0, 0
        self.ratio_min, self.ratio_max = float("inf"), -float("inf")

    def add(
        self,
        policy_logps: torch.Tensor,
        sampling_logps: torch.Tensor,
        mask: torch.Tensor,
        ratio: torch.Tensor,
        per_sequence: bool,
    ) -> None:
        """One slice: its tokens' |policy - vLLM| log-probability gaps (where vLLM gave one) and its ratios."""
        mask = mask.bool()
        difference = torch.abs(policy_logps - sampling_logps)
        difference = difference[mask & ~torch.isnan(difference)]
        if difference.numel():
            self.difference_sum += difference.sum().item()
            self.difference_count += difference.numel()
            self.difference_max = max(self.difference_max, difference.max().item())
        ratios = ratio.flatten() if per_sequence else ratio[mask]
        if ratios.numel():
            self.ratio_sum += ratios.sum().item()
            self.ratio_count += ratios.numel()
            self.ratio_min = min(self.ratio_min, ratios.min().item())
            self.ratio_max = max(self.ratio_max, ratios.max().item())

    def log(self, accelerator: Any, metrics: dict[str, list[float]]) -> None:
        """Gather the batch's figures over processes (a collective) into `metrics`, then start a new batch.
        A process with no tokens counts 0, as in TRL."""
        difference_mean = self.difference_sum / self.difference_count if self.difference_count else 0.0
        ratio_mean = self.ratio_sum / self.ratio_count if self.ratio_count else 0.0
        ratio_min = self.ratio_min if self.ratio_count else 0.0
        ratio_max = self.ratio_max if self.ratio_count else 0.0
        local = torch.tensor(
            [[difference_mean, self.difference_max, ratio_min, ratio_mean, ratio_max]],
            dtype=torch.float32,
            device=accelerator.device,
        )
        gathered = accelerator.gather(local).view(-1, 5)
        metrics["sampling/sampling_logp_difference/mean"].append(gathered[:, 0].mean().item())
        metrics["sampling/sampling_logp_difference/max"].append(gathered[:, 1].max().item())
        metrics["sampling/importance_sampling_ratio/min"].append(gathered[:, 2].min().item())
        metrics["sampling/importance_sampling_ratio/mean"].append(gathered[:, 3].mean().item())
        metrics["sampling/importance_sampling_ratio/max"].append(gathered[:, 4].max().item())
        self.reset()
