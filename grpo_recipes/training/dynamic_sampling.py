"""Dynamic sampling (DAPO, Yu et al. 2025, section 3.2): every optimizer step trains on informative groups only.

A group whose G completions all get the same total reward has zero advantage: it adds nothing to the
policy gradient and dilutes the loss of the groups that do. With ``sampling: {dynamic: true}`` the
trainer generates a batch as usual, drops the groups whose advantages are all zero, and generates
fresh prompts' groups (a whole batch per round, as DAPO over-samples) until the batch is full of
informative groups or ``max_rounds`` extra rounds are spent. When the bound is hit the step goes on,
topped up with uninformative groups: the batch shapes every process expects stay fixed, a step is
never lost, and the log says so (``zero_variance_groups`` above 0).

Under several processes a group's completions can sit on two processes, so the decision is made on
the gathered batch: every process gathers every round's tensors, picks the same groups, and keeps
its own slice of the result.

Example, the filter on hand-made advantages (two groups of G=3; the second has equal rewards)::

    >>> import torch
    >>> informative_groups(torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]), 3).tolist()
    [True, False]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

#: Advantages below this (in absolute value) count as zero: the mean of G equal floats can be off by an ulp.
ZERO_ADVANTAGE = 1e-6
#: Keys of TRL's generation output that are left-padded (prompts); every other 2-D tensor is right-padded.
LEFT_PADDED = ("prompt_ids", "prompt_mask")


def informative_groups(advantages: torch.Tensor, group_size: int) -> torch.Tensor:
    """One boolean per group of ``group_size`` consecutive completions: does any have a non-zero advantage?"""
    return (advantages.view(-1, group_size).abs() > ZERO_ADVANTAGE).any(dim=1)


def _pad_to(tensor: torch.Tensor, length: int, value: float, left: bool) -> torch.Tensor:
    missing = length - tensor.shape[1]
    if missing <= 0:
        return tensor
    filler = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([filler, tensor] if left else [tensor, filler], dim=1)


def pad_value(key: str, pad_token_id: int) -> float:
    """What pads ``key``'s rows: the pad token for token ids, 1 for the tool mask, else 0."""
    return pad_token_id if key.endswith("_ids") else 1 if key == "tool_mask" else 0


def concat_rows(parts: list[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Stack the rows of several batches of the same keys, padding sequences to the longest (prompts on the left)."""
    merged = {}
    for key in parts[0]:
        tensors = [part[key] for part in parts]
        if tensors[0].dim() == 2:
            length = max(t.shape[1] for t in tensors)
            value = pad_value(key, pad_token_id)
            tensors = [_pad_to(t, length, value, key in LEFT_PADDED) for t in tensors]
        merged[key] = torch.cat(tensors, dim=0)
    return merged


@dataclass
class Selection:
    """Which groups of which round make the batch, and the counts the log reports."""

    picks: list[tuple[int, list[int]]]
    """(round, group indices of that round), in batch order."""
    groups_generated: int
    groups_kept: int
    extra_rounds: int
    zero_variance_groups: float = 0.0
    """Share of the trained batch's groups whose advantages are all zero, measured on the batch itself
    (0 unless the bound was hit)."""


def select_groups(rounds: list[torch.Tensor], groups_needed: int) -> Selection:
    """Informative groups first, in order of generation, topped up with uninformative ones if too few.

    >>> import torch
    >>> selection = select_groups([torch.tensor([True, False]), torch.tensor([False, True])], 2)
    >>> selection.picks, selection.groups_generated, selection.groups_kept, selection.extra_rounds
    ([(0, [0]), (1, [1])], 4, 2, 1)
    >>> select_groups([torch.tensor([False, False, True])], 2).picks  # the bound was hit: topped up
    [(0, [0, 2])]
    """
    picks: dict[int, list[int]] = {}
    count = kept = 0
    for informative_first in (True, False):
        for index, informative in enumerate(rounds):
            for group, flag in enumerate(informative.tolist()):
                if count < groups_needed and flag is informative_first:
                    picks.setdefault(index, []).append(group)
                    count += 1
                    kept += flag
    ordered = [(index, sorted(groups)) for index, groups in sorted(picks.items())]
    return Selection(
        picks=ordered,
        groups_generated=sum(len(informative) for informative in rounds),
        groups_kept=kept,
        extra_rounds=len(rounds) - 1,
    )


def gather_batch(accelerator: Any, output: dict[str, Any], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Every process's rows of a generation output, in process order (sequences padded across processes)."""
    full = {}
    for key, value in output.items():
        if key == "num_items_in_batch":
            continue  # recomputed for the batch that is kept
        if not isinstance(value, torch.Tensor) or value.dim() not in (1, 2):
            raise NotImplementedError(
                f"dynamic sampling supports text-only batches; the generation output has {key!r}"
            )
        if value.dim() == 2:
            value = accelerator.pad_across_processes(
                value, dim=1, pad_index=pad_value(key, pad_token_id), pad_first=key in LEFT_PADDED
            )
        full[key] = accelerator.gather(value)
    return full


def fresh_inputs(
    dataset: Any, groups: int, group_size: int, seed: int, rank: int, local_size: int
) -> list[dict]:
    """A new batch of prompts, each repeated ``group_size`` times, and this process's slice of it.

    Every process draws the same prompts (same ``seed``), so together they hold whole groups, laid out as
    TRL's repeat sampler lays them out.
    """
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randint(len(dataset), (groups,), generator=generator).tolist()
    rows = [dataset[index] for index in indices for _ in range(group_size)]
    return rows[rank * local_size : (rank + 1) * local_size]


def generate_informative(
    trainer: Any,
    inputs: list[dict],
    generate: Callable[[list[dict]], dict[str, Any]],
    max_rounds: int,
    pool: Any = None,
) -> tuple[dict[str, Any], Selection]:
    """TRL's generation output for ``inputs``, with uninformative groups replaced by fresh prompts' groups,
    drawn from ``pool`` (default: the trainer's training rows; a curriculum passes the level's pool)."""
    pool = trainer.train_dataset if pool is None else pool
    accelerator = trainer.accelerator
    group_size = trainer.num_generations
    pad_token_id = trainer.processing_class.pad_token_id
    if pad_token_id is None:
        pad_token_id = 0
    local_size = len(inputs)
    groups_needed = local_size * accelerator.num_processes // group_size
    batches: list[dict[str, torch.Tensor]] = []
    rounds: list[torch.Tensor] = []
    while True:
        output = generate(inputs)
        full = gather_batch(accelerator, output, pad_token_id)
        batches.append(full)
        rounds.append(informative_groups(full["advantages"], group_size).cpu())
        if sum(int(r.sum()) for r in rounds) >= groups_needed or len(rounds) > max_rounds:
            break
        seed = trainer.args.seed * 1_000_003 + trainer.state.global_step * 1_009 + len(rounds)
        inputs = fresh_inputs(pool, groups_needed, group_size, seed, accelerator.process_index, local_size)
    selection = select_groups(rounds, groups_needed)
    parts = []
    for index, groups in selection.picks:
        rows = torch.tensor(
            [group * group_size + k for group in groups for k in range(group_size)],
            device=batches[index]["advantages"].device,
        )
        parts.append({key: tensor[rows] for key, tensor in batches[index].items()})
    merged = concat_rows(parts, pad_token_id)
    mine = slice(accelerator.process_index * local_size, (accelerator.process_index + 1) * local_size)
    result: dict[str, Any] = {key: tensor[mine] for key, tensor in merged.items()}
    loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
    result["num_items_in_batch"] = loss_mask.sum()
    selection.zero_variance_groups = (
        1.0 - informative_groups(merged["advantages"], group_size).float().mean().item()
    )
    return result, selection
