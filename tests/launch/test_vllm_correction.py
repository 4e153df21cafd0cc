"""vLLM's sampling correction weighed from the loss's own forward pass (grpo_recipes.training.vllm_correction):
the same ratio and gradient as TRL's extra scoring pass, with one pass fewer; where it applies."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from support import run_probe

from grpo_recipes.training.vllm_correction import applies, importance_sampling_ratio

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


def _trainer(**changes):
    settings = dict(
        use_vllm=True,
        vllm_importance_sampling_correction=True,
        loss_type="dapo",
        num_iterations=1,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
    )
    settings.update(changes)
    args = SimpleNamespace(
        **{k: settings.pop(k) for k in ("steps_per_generation", "gradient_accumulation_steps")}
    )
    return SimpleNamespace(args=args, **settings)


def test_the_correction_moves_into_the_loss_only_where_the_policy_has_not_moved():
    assert applies(_trainer())
    # Every slice of a batch in one optimizer step: two slices of one batch, or one batch's two updates.
    assert applies(_trainer(steps_per_generation=2, gradient_accumulation_steps=4))
    assert applies(_trainer(num_iterations=2, gradient_accumulation_steps=2))
    for change in (
        {"use_vllm": False},
        {"vllm_importance_sampling_correction": False},
        {"loss_type": "vespo"},  # reads the ratio its own way
        {
            "num_iterations": 2
        },  # the second update, a step later, trains on samples of a policy that has moved
        {"steps_per_generation": 4, "gradient_accumulation_steps": 2},  # a batch spread over optimizer steps
    ):
        assert not applies(_trainer(**change)), change


def test_importance_sampling_ratio_follows_trls_four_modes():
    policy = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, float("nan")]])
    sampler = torch.tensor([[-2.0, -2.0, -0.5], [-1.0, -3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    e = torch.e
    token = importance_sampling_ratio(policy, sampler, mask, "token_truncate", None, 2.0)
    torch.testing.assert_close(token, torch.tensor([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0]]))  # e and e**2 clipped
    token = importance_sampling_ratio(policy, sampler, mask, "token_mask", 0.5, 3.0)
    torch.testing.assert_close(token, torch.tensor([[e, 1.0, 1.0], [1.0, 0.0, 1.0]]))  # NaN, padding: 1
    sequence = importance_sampling_ratio(policy, sampler, mask, "sequence_truncate", None, 5.0)
    torch.testing.assert_close(sequence, torch.tensor([[e], [5.0]]))
    sequence = importance_sampling_ratio(policy, sampler, mask, "sequence_mask", None, 5.0)
    torch.testing.assert_close(sequence, torch.tensor([[e], [0.0]]))
    with pytest.raises(ValueError, match="token_truncate, token_mask"):
        importance_sampling_ratio(policy, sampler, mask, "token", None, 2.0)


@needs_vllm
@pytest.mark.smoke
def test_the_loss_weighs_vllms_correction_as_trls_extra_pass_does(tiny_model, tmp_path):
    """One batch sampled by a colocated vLLM engine (LoRA, adapter sync): TRL's way scores it twice (the extra
    pass, then the loss), the trainer's way once; the importance-sampling ratio, the loss and the LoRA gradients
    are the same either way, and a real training step logs TRL's correction metrics."""
    probe = run_probe(Path(__file__).with_name("vllm_correction_probe.py"), str(tiny_model), str(tmp_path))
    assert probe["applies"] == [True, True]
    assert (probe["trl_passes"], probe["our_passes"]) == (1, 0)
    assert "importance_sampling_ratio" not in probe["our_batch_keys"]
    assert "sampling_per_token_logps" in probe["our_batch_keys"]
    # vLLM samples in bfloat16: the ratio is not 1, so weighing it wrongly would show.
    assert probe["ratio_moves"] > 1e-3
    torch.testing.assert_close(torch.tensor(probe["our_ratio"]), torch.tensor(probe["trl_ratio"]))
    assert probe["our_loss"] == pytest.approx(probe["trl_loss"], rel=1e-5, abs=1e-7)
    assert probe["grad_max"] > 0 and probe["grad_difference"] <= 1e-5 * probe["grad_max"]
    # TRL's five metrics, the same figures, once a batch: whole, or handed to the loss in two slices.
    assert probe["entries_per_batch"] == 1 and probe["sliced_entries"] == [0, 1]
    for metrics in (probe["our_metrics"], probe["sliced_metrics"]):
        assert metrics == pytest.approx(probe["trl_metrics"], rel=1e-5, abs=1e-7)
    assert probe["trl_metrics"]["sampling/sampling_logp_difference/max"] > 0
    (step,) = probe["step_log"]
    assert set(probe["trl_metrics"]) <= set(step), sorted(step)
