"""vLLM's CPU LoRA kernels without the per-token copy of the adapter: one matrix product per adapter in use.

vLLM's CPU build applies a LoRA adapter with plain torch ops (`vllm/lora/ops/torch_ops/lora_ops.py`): for each
of the batch's tokens it gathers that token's adapter matrices (`weights[token_indices]`, a `[tokens, out, in]`
copy) and multiplies token by token with `einsum`. A prompt of a few hundred tokens copies the adapter a few
hundred times in every adapted layer, which made vLLM with the adapter sync slower than with the merged
model on a CPU (13.7 against 10.2 s a step for the default recipe). During training every token of a batch
uses the same adapter, the policy's, so the same product is one `x @ A.T` per adapter in the batch:
`install()` rebinds vLLM's three token-level ops (the sequence-level ones call them) to versions that do
that. They return what vLLM's return, to float rounding: each adapter index selects its slot exactly as
indexing does (index -1 included), and the outputs are written into the same columns.

Colocate mode calls `install()` itself (`vllm_cpu.CPUVLLMGeneration`). A server (`make serve`, `trl vllm-serve`)
runs the model in processes of its own, so the project registers `plugin()` as a vLLM general plugin
(`vllm.general_plugins` in pyproject.toml), which vLLM loads in every process it starts: a server on a CPU
uses these ops as well. Off the CPU the plugin does nothing.

Example (two tokens on adapter slot 0, one on slot 1; shrink multiplies by the scale):
    >>> import torch
    >>> weights = torch.stack([torch.eye(2), 2 * torch.eye(2)])        # [adapters, out, in]
    >>> out = torch.zeros(3, 2)
    >>> bgmv_shrink(torch.ones(3, 2), weights, out, torch.tensor([0, 0, 1]), scaling=0.5)
    >>> out.tolist()
    [[0.5, 0.5], [0.5, 0.5], [1.0, 1.0]]
"""

from __future__ import annotations

import torch


def per_adapter_product(
    inputs: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor, dtype: torch.dtype
):
    """Row t of the result is `inputs[t] @ weights[indices[t]].T`, computed with one product per distinct
    index. `weights` is `[adapters, out, in]` or `[adapters, 1, out, in]` (vLLM stacks both ways)."""
    if weights.dim() == 4:
        weights = weights.squeeze(1)
    inputs = inputs.to(dtype)
    if indices.shape[0] != inputs.shape[0]:  # not one index a row: vLLM's own gather, with its broadcasting
        return torch.einsum("bi, boi -> bo", inputs, weights[indices].to(dtype))
    if indices.numel() == 0:
        return inputs.new_zeros(0, weights.shape[1])
    if bool((indices == indices[0]).all()):
        return inputs @ weights[indices[0]].to(dtype).T
    out = inputs.new_empty(inputs.shape[0], weights.shape[1])
    for index in indices.unique():
        rows = indices == index
        out[rows] = inputs[rows] @ weights[index].to(dtype).T
    return out


def bgmv_shrink(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    scaling: float = 1.0,
) -> None:
    """vLLM's `bgmv_shrink`: `output[:, :rank] = scaling * x A.T`, each token with its adapter."""
    outputs = per_adapter_product(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs


def bgmv_expand(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    add_inputs: bool = True,
) -> None:
    """vLLM's `bgmv_expand`: `output (+)= h B.T` over the columns both have, each token with its adapter."""
    outputs = per_adapter_product(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    # As vLLM's: one output row is broadcast over a larger output; adapter and model may pad differently.
    limit = 1 if outputs.shape[0] == 1 and output_tensor.shape[0] != 1 else output_tensor.shape[0]
    common = min(outputs.shape[1], output_tensor.shape[1])
    if add_inputs:
        output_tensor[:, :common] += outputs[:limit, :common]
    else:
        output_tensor[:, :common] = outputs[:limit, :common]


def bgmv_expand_slice(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    slice_offset: int,
    slice_size: int,
    add_inputs: bool = True,
) -> None:
    """vLLM's `bgmv_expand_slice`: `bgmv_expand` into the columns `slice_offset:slice_offset + slice_size`."""
    outputs = per_adapter_product(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset : slice_offset + slice_size] += outputs
    else:
        output_tensor[:, slice_offset : slice_offset + slice_size] = outputs


REPLACEMENTS = {
    "bgmv_shrink": bgmv_shrink,
    "bgmv_expand": bgmv_expand,
    "bgmv_expand_slice": bgmv_expand_slice,
}


def install() -> None:
    """Rebind vLLM's CPU LoRA ops to the ones above, where vLLM looks them up: the ops module (its sequence-level
    ops call these by name) and the CPU punica wrapper (which imported them). Idempotent; raises if a vLLM
    upgrade moved a name, rather than silently running the slow path."""
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    for module in (lora_ops, punica_cpu):
        for name, replacement in REPLACEMENTS.items():
            if not hasattr(module, name):
                raise RuntimeError(
                    f"{module.__name__} has no {name}: this vLLM release is not supported by "
                    "grpo_recipes.launch.vllm_cpu_lora (see pyproject.toml for the tested range)."
                )
            setattr(module, name, replacement)


def plugin() -> None:
    """vLLM's general-plugin hook (pyproject.toml): `install()` in each vLLM process on a CPU, with one line on
    stderr that says so (vLLM's own log level may hide its logger's lines); on any other platform nothing.
    vLLM calls its plugins unguarded, so nothing here may raise: where a vLLM upgrade moved a name it says so and
    leaves vLLM's own ops (a server must still start), where colocate mode's `install()` raises.
    `VLLM_PLUGINS` (vLLM's list of plugins to load) can leave it out."""
    import sys

    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        install()
    except Exception as err:  # noqa: BLE001 - a plugin that raises stops every vLLM process
        print(
            f"grpo-recipes: vLLM's own CPU LoRA ops stay ({type(err).__name__}: {err})",
            file=sys.stderr,
            flush=True,
        )
        return
    print(
        "grpo-recipes: CPU LoRA ops installed (one product per adapter, not per token)",
        file=sys.stderr,
        flush=True,
    )
