"""vLLM's CPU LoRA ops, one product per adapter: the same outputs as vLLM's own, on the shapes vLLM passes."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from grpo_recipes.launch import vllm_cpu_lora
from grpo_recipes.launch.preflight import _installed_version

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


# The plugin acts on vLLM's CPU platform only, which a CUDA build does not become without a GPU.
needs_vllm_cpu = pytest.mark.skipif(
    _installed_version("vllm-cpu") is None, reason="vLLM's CPU build is not installed"
)


def vllms_own_ops():
    """A fresh copy of vLLM's torch LoRA ops module, whatever `install()` has rebound in this process."""
    from vllm.lora.ops.torch_ops import lora_ops

    spec = importlib.util.spec_from_file_location("vllm_lora_ops_as_shipped", lora_ops.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_both(name, inputs, weights, start, indices, *rest):
    """vLLM's op `name` and the project's, each into its own copy of `start`: (vLLM's output, the project's)."""
    expected, got = start.clone(), start.clone()
    getattr(vllms_own_ops(), name)(inputs, weights, expected, indices, *rest)
    getattr(vllm_cpu_lora, name)(inputs, weights, got, indices, *rest)
    return expected, got


INDICES = {
    "one adapter": [2, 2, 2, 2, 2, 2, 2],
    "two adapters and none (-1)": [0, 0, 1, -1, 1, 0, -1],
    "one token": [1],
}


def weights_and_inputs(indices, out_dim, in_dim, stacked_4d, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shape = (3, 1, out_dim, in_dim) if stacked_4d else (3, out_dim, in_dim)
    weights = torch.randn(shape, generator=generator)
    inputs = torch.randn(len(indices), in_dim, generator=generator)
    return weights, inputs, torch.tensor(indices)


@needs_vllm
@pytest.mark.parametrize("stacked_4d", [False, True])
@pytest.mark.parametrize("case", sorted(INDICES))
def test_shrink_matches_vllms(case, stacked_4d):
    weights, inputs, indices = weights_and_inputs(INDICES[case], out_dim=8, in_dim=24, stacked_4d=stacked_4d)
    start = torch.full((len(indices), 16), 7.0)  # wider than the rank: the columns past it stay as they were
    expected, got = run_both("bgmv_shrink", inputs, weights, start, indices, 0.25)
    torch.testing.assert_close(got, expected)
    assert (got[:, 8:] == 7.0).all()


@needs_vllm
@pytest.mark.parametrize("add_inputs", [False, True])
@pytest.mark.parametrize("output_width", [20, 24, 30])  # adapter and model padded differently, or alike
@pytest.mark.parametrize("case", sorted(INDICES))
def test_expand_matches_vllms(case, output_width, add_inputs):
    weights, inputs, indices = weights_and_inputs(INDICES[case], out_dim=24, in_dim=8, stacked_4d=False)
    start = torch.randn(len(indices), output_width, generator=torch.Generator().manual_seed(1))
    expected, got = run_both("bgmv_expand", inputs, weights, start, indices, add_inputs)
    torch.testing.assert_close(got, expected)


@needs_vllm
def test_expand_broadcasts_one_row_as_vllms_does():
    weights, inputs, indices = weights_and_inputs([1], out_dim=6, in_dim=4, stacked_4d=False)
    expected, got = run_both("bgmv_expand", inputs, weights, torch.zeros(5, 6), indices, True)
    torch.testing.assert_close(got, expected)
    assert (got != 0).all()  # every row received the one product


@needs_vllm
@pytest.mark.parametrize("add_inputs", [False, True])
@pytest.mark.parametrize("case", sorted(INDICES))
def test_expand_slice_matches_vllms(case, add_inputs):
    weights, inputs, indices = weights_and_inputs(INDICES[case], out_dim=10, in_dim=8, stacked_4d=True)
    start = torch.randn(len(indices), 40, generator=torch.Generator().manual_seed(2))
    expected, got = run_both("bgmv_expand_slice", inputs, weights, start, indices, 12, 10, add_inputs)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got[:, :12], start[:, :12])  # outside the slice, untouched
    torch.testing.assert_close(got[:, 22:], start[:, 22:])


@needs_vllm
def test_half_precision_output_keeps_vllms_dtype_handling():
    weights, inputs, indices = weights_and_inputs(INDICES["two adapters and none (-1)"], 8, 24, False)
    start = torch.zeros(len(indices), 8, dtype=torch.bfloat16)
    expected, got = run_both("bgmv_shrink", inputs, weights, start, indices, 1.0)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0.02)


@needs_vllm
def test_install_rebinds_where_vllm_looks_the_ops_up():
    """The CPU punica wrapper calls its imported names; the sequence-level ops call the module's. Both must
    reach the replacements, and the sequence-level op then still gives vLLM's answer."""
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    shipped = vllms_own_ops()
    vllm_cpu_lora.install()
    vllm_cpu_lora.install()  # idempotent
    for name, replacement in vllm_cpu_lora.REPLACEMENTS.items():
        assert getattr(lora_ops, name) is replacement
        assert getattr(punica_cpu, name) is replacement

    # A prefill of two sequences (4 and 3 tokens) on adapters 0 and 1, through the sequence-level op.
    weights, inputs, _ = weights_and_inputs([0] * 7, out_dim=8, in_dim=24, stacked_4d=False)
    metadata = (torch.tensor([0, 4]), torch.tensor([4, 3]), torch.tensor([0, 1]), 2, 4, 7)
    expected, got = torch.zeros(7, 8), torch.zeros(7, 8)
    shipped.sgmv_shrink(inputs, weights, expected, *metadata, 0.5)
    lora_ops.sgmv_shrink(inputs, weights, got, *metadata, 0.5)
    torch.testing.assert_close(got, expected)


@needs_vllm_cpu
def test_vllm_loads_the_plugin_that_installs_the_ops_in_every_process_it_starts():
    """A server runs the model in processes of its own, which colocate mode's `install()` never reaches: vLLM's
    plugin loader, which each of its processes runs, finds the project's entry point and rebinds the ops."""
    import os
    import subprocess
    import sys

    script = (
        "from vllm.plugins import load_general_plugins\n"
        "from vllm.lora.punica_wrapper import punica_cpu\n"
        "from grpo_recipes.launch import vllm_cpu_lora\n"
        "before = punica_cpu.bgmv_shrink is vllm_cpu_lora.bgmv_shrink\n"
        "load_general_plugins()\n"
        "print('rebound', before, punica_cpu.bgmv_shrink is vllm_cpu_lora.bgmv_shrink)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rebound False True" in result.stdout, result.stdout[-2000:]
    assert "grpo-recipes: CPU LoRA ops installed" in result.stdout + result.stderr
    assert "CPU LoRA ops stay" not in result.stdout + result.stderr


@needs_vllm_cpu
def test_the_plugin_rebinds_on_a_cpu_and_leaves_vllms_ops_alone_elsewhere(monkeypatch):
    from vllm.lora.punica_wrapper import punica_cpu
    from vllm.platforms import current_platform

    def untouched(*args, **kwargs):
        raise AssertionError("not called")

    monkeypatch.setattr(punica_cpu, "bgmv_shrink", untouched)
    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: False)
    vllm_cpu_lora.plugin()
    assert punica_cpu.bgmv_shrink is untouched
    monkeypatch.undo()
    monkeypatch.setattr(punica_cpu, "bgmv_shrink", untouched)
    vllm_cpu_lora.plugin()  # on this CPU it does rebind
    assert punica_cpu.bgmv_shrink is vllm_cpu_lora.bgmv_shrink


def test_each_row_is_multiplied_by_its_own_adapter():
    weights = torch.randn(2, 5, 3)
    inputs = torch.randn(4, 3)
    product = vllm_cpu_lora.per_adapter_product(inputs, weights, torch.tensor([1, 1, 1, 1]), torch.float32)
    torch.testing.assert_close(product, inputs @ weights[1].T)
    mixed = vllm_cpu_lora.per_adapter_product(inputs, weights, torch.tensor([1, 0, 1, 0]), torch.float32)
    torch.testing.assert_close(mixed[0::2], inputs[0::2] @ weights[1].T)
    torch.testing.assert_close(mixed[1::2], inputs[1::2] @ weights[0].T)
    empty = vllm_cpu_lora.per_adapter_product(
        inputs[:0], weights, torch.tensor([], dtype=torch.long), torch.float32
    )
    assert empty.shape == (0, 5)


@needs_vllm
def test_one_input_row_for_several_tokens_is_vllms_broadcast():
    """Not one adapter index a row (vLLM's einsum broadcasts a single row): the ops do what vLLM's do."""
    weights, _, indices = weights_and_inputs([0, 1, 1], out_dim=6, in_dim=4, stacked_4d=False)
    one_row = torch.randn(1, 4, generator=torch.Generator().manual_seed(3))
    expected, got = run_both("bgmv_shrink", one_row, weights, torch.zeros(3, 6), indices, 1.0)
    torch.testing.assert_close(got, expected)
