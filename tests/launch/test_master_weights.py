"""All weights trained for 20 steps at a small learning rate move by what Adam allows, under every launcher.

Pre-flight refuses all weights in bfloat16 without a float32 copy (`_master_weights_problem` in
grpo_recipes/launch/preflight.py; its cases are unit-tested in test_preflight.py). This is the training side of
that rule: a tiny random model, all weights trained (no LoRA), `STEPS` optimizer steps at `LEARNING_RATE` (the
full fine-tuning recipes' 1e-6, held constant), the saved model's weights compared with the initial ones in
float32. Under one process, 2-process DDP on gloo, and 2-process DeepSpeed ZeRO-2 and ZeRO-3 on gloo, the weights
- moved: nearly every weight of every tensor changed, and the median one by more than 2 steps can move it (a
  launcher that never stepped the optimizer, or stepped it once, or updates rounded away, fail here);
- moved about STEPS x LEARNING_RATE, and no more: an Adam step moves a weight by at most about the learning rate
  whatever its gradient (`adam_bound`), so no weight may move more than 1.06 x STEPS x LEARNING_RATE, and one
  whose gradient kept its sign moves nearly that much (a learning rate doubled, or halved by the number of
  processes, fails here).
The negative control is the defect the refusal guards against: the same run with the model loaded in bfloat16,
refused by scripts/train.py and then forced past pre-flight, leaves nearly every weight where it was.

Every step needs a gradient: GRPO's advantage is zero in a group of equal rewards, and the tiny model's answers
are all wrong. The reward here, a completion's mean token id, differs within every group of random
completions. The 2-process runs are the smoke tier's (DeepSpeed comes with `make setup-cpu-dist`); the one-process
and bfloat16 runs, half a minute and a minute, the long tier's.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import (
    accelerate_launcher,
    run_in_own_group,
    run_script,
    tiny_recipe,
    two_process_launcher,
    write_recipe,
)

STEPS = 20
LEARNING_RATE = 1.0e-6
#: torch's AdamW defaults, which GRPOConfig keeps (DeepSpeed steps the trainer's own optimizer).
BETAS = (0.9, 0.999)
#: The training process, as `run_script` starts it, in the probe too; no GPU: gloo.
ENV = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "CUDA_VISIBLE_DEVICES": "",
}
PROBE = Path(__file__).with_name("master_weights_probe.py")

REWARD_MODULE = '''"""A reward that gives GRPO a gradient at every step of a tiny random model."""


def high_tokens(completion_ids, **kwargs):
    """A completion's mean token id, over the tiny model's vocabulary: random completions never tie."""
    return [sum(ids) / max(1, len(ids)) / 49152 for ids in completion_ids]
'''


def adam_bound(steps: int, betas: tuple[float, float] = BETAS) -> float:
    """The most Adam can move one weight in `steps` steps, in learning rates, whatever the gradients.

    Step t moves a weight by m_t / sqrt(v_t) (the bias-corrected moments of its gradients g_1..g_t), which by
    Cauchy-Schwarz is at most (1 - b1) / (1 - b1^t) * sqrt(sum_k<t (b1^2 / b2)^k) * sqrt((1 - b2^t) / (1 - b2)):
    exactly 1 at the first step, 1.16 at the 20th. Epsilon only makes a step smaller; weight decay is 0.

    >>> adam_bound(1), round(adam_bound(20), 2)
    (1.0, 21.17)
    """
    b1, b2 = betas
    total = 0.0
    for t in range(1, steps + 1):
        momentum = sum((b1 * b1 / b2) ** k for k in range(t))
        total += (1 - b1) / (1 - b1**t) * math.sqrt(momentum) * math.sqrt((1 - b2**t) / (1 - b2))
    return total


@dataclass
class Moves:
    """How far the weights moved (the tied embedding and output layer counted once), |final - initial| in units
    of STEPS x LEARNING_RATE."""

    weights: int
    changed: float  # the share of all weights that changed at all
    least_changed: tuple[str, float]  # the tensor with the smallest such share, and its share
    median: float
    max: float
    over_bound: int  # weights that moved more than Adam allows, rounding to the saved dtype allowed for

    def __str__(self) -> str:
        name, share = self.least_changed
        return (
            f"{self.weights} weights, {100 * self.changed:.1f} % changed (least: {name}, {100 * share:.1f} %); "
            f"|delta| median {self.median:.3f}, max {self.max:.3f} x STEPS x lr; {self.over_bound} beyond "
            f"Adam's bound of {adam_bound(STEPS) / STEPS:.3f}"
        )


def weight_moves(initial: Path, final: Path, dtype=None) -> Moves:
    """Compare two safetensors files tensor by tensor in float32. `dtype`: round the initial weights to it first
    (what a model loaded in that dtype started from)."""
    import torch
    from safetensors.torch import load_file

    before, after = load_file(initial), load_file(final)
    missing = set(before) - set(after)
    assert not missing, f"{final} lacks {sorted(missing)[:5]}"
    deltas, shares, over = [], {}, 0
    for name, start in before.items():
        end = after[name]
        assert end.shape == start.shape, name
        start = start.to(dtype or start.dtype).to(end.dtype)  # as the run started
        delta = (end.float() - start.float()).abs()
        # Each step may round a weight to the saved dtype by up to half its spacing there.
        spacing = (
            torch.nextafter(start.abs(), torch.tensor(math.inf, dtype=end.dtype)) - start.abs()
        ).float()
        over += int((delta > adam_bound(STEPS) * LEARNING_RATE + STEPS * spacing).sum())
        shares[name] = float((delta > 0).float().mean())
        deltas.append(delta.flatten())
    delta = torch.cat(deltas)
    unit = STEPS * LEARNING_RATE
    return Moves(
        weights=delta.numel(),
        changed=float((delta > 0).float().mean()),
        least_changed=min(shares.items(), key=lambda item: item[1]),
        median=float(delta.median()) / unit,
        max=float(delta.max()) / unit,
        over_bound=over,
    )


def full_weights_recipe(tmp_path: Path, model: Path, processes: int) -> Path:
    """The tiny recipe on all weights for STEPS steps at a constant LEARNING_RATE (no weight decay, TRL's
    default), one group of 4 a step over all processes, rewarded by `high_tokens` (a module beside the recipe,
    found there as a user's own reward is); no evaluation, no checkpoint: the saved model is all that is read."""
    (tmp_path / "high_reward.py").write_text(REWARD_MODULE)
    data = tiny_recipe(
        model,
        tmp_path / "out",
        per_device_train_batch_size=4 // processes,
        max_steps=STEPS,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        save_strategy="no",
    )
    data["rewards"] = [{"name": "high_reward:high_tokens"}]
    data["evaluation"]["enabled"] = False
    return write_recipe(tmp_path / "full.yaml", data)


def check_every_step_had_a_gradient(out: Path) -> None:
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert [h["step"] for h in history] == list(range(1, STEPS + 1))
    assert all(h["reward_std"] > 0 and h["grad_norm"] > 0 for h in history), history


# launcher, processes, what run_info.json says of it (accelerate's distributed type, the ZeRO stage)
LAUNCHERS = {
    "one-process": (lambda: [sys.executable], 1, ("NO", None)),
    "ddp": (two_process_launcher, 2, ("MULTI_CPU", None)),
    "zero2": (lambda: accelerate_launcher("zero2.yaml"), 2, ("DEEPSPEED", 2)),
    "zero3": (lambda: accelerate_launcher("zero3.yaml"), 2, ("DEEPSPEED", 3)),
}


@pytest.mark.parametrize(
    "launch",
    [
        pytest.param("one-process", marks=pytest.mark.long),
        pytest.param("ddp", marks=pytest.mark.smoke),
        pytest.param("zero2", marks=pytest.mark.smoke),
        pytest.param("zero3", marks=pytest.mark.smoke),
    ],
)
def test_all_weights_move_by_what_adam_allows(tiny_model, tmp_path, launch):
    launcher, processes, (distributed_type, zero_stage) = LAUNCHERS[launch]
    if zero_stage is not None:
        pytest.importorskip("deepspeed", reason="DeepSpeed is not installed here (make setup-cpu-dist)")
    recipe = full_weights_recipe(tmp_path, tiny_model, processes)
    result = run_script("train.py", "--config", str(recipe), launcher=launcher(), extra_env=ENV)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    out = tmp_path / "out"
    info = json.loads((out / "run_info.json").read_text())
    ran = (info["world_size"], info["distributed_type"], info["zero_stage"], info["global_step"])
    assert ran == (processes, distributed_type, zero_stage, STEPS)
    check_every_step_had_a_gradient(out)

    moves = weight_moves(tiny_model / "model.safetensors", out / "model.safetensors")
    print(f"{launch}: {moves}")
    # Moved: every tensor nearly whole, the median weight by more than 2 of the 20 steps could move it.
    assert moves.changed > 0.9 and moves.least_changed[1] > 0.9, moves
    assert moves.median > adam_bound(2) / STEPS, moves
    # By about a learning rate a step: some weight kept its gradient's sign (0.86-0.89 here; at half the learning
    # rate none could pass 0.53), and none moved more than Adam allows.
    assert moves.max > 0.6 and moves.over_bound == 0, moves


@pytest.mark.long
def test_bfloat16_weights_without_a_float32_copy_hardly_move(tiny_model, tmp_path):
    """The negative control: what pre-flight refuses, trained anyway (the probe skips pre-flight), one process."""
    import torch

    recipe = full_weights_recipe(tmp_path, tiny_model, 1)
    refused = run_script("train.py", "--config", str(recipe), "model.dtype=bfloat16", extra_env=ENV)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1, refused.stderr[-2000:]
    assert "model.dtype: bfloat16 with all weights trained" in errors[0]
    assert not (tmp_path / "out").exists()

    command = [sys.executable, str(PROBE), str(recipe), "model.dtype=bfloat16"]
    status, stdout, stderr = run_in_own_group(command, {**os.environ, **ENV}, timeout=600)
    assert status == 0, (stdout + stderr)[-4000:]
    out = tmp_path / "out"
    assert json.loads((out / "run_info.json").read_text())["global_step"] == STEPS
    check_every_step_had_a_gradient(out)
    # Gradients like the float32 run's, stepped in bfloat16: a weight of 0.02 has a spacing of 1.2e-4
    # there, and an update of 1e-6 rounds away; only weights within about 3e-4 of zero (1-2 % of them) move.
    moves = weight_moves(tiny_model / "model.safetensors", out / "model.safetensors", dtype=torch.bfloat16)
    print(f"bfloat16: {moves}")
    assert moves.changed < 0.05 and moves.median == 0, moves
