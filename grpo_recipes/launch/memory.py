"""Memory per GPU of a recipe, estimated from its model's shapes: the line each GPU recipe's header states.

Counted, in GB (1e9 bytes), for training in bfloat16 under DeepSpeed ZeRO (or one process, for LoRA):

- weights: 2 bytes a parameter; ZeRO-3 divides them over the GPUs;
- gradients: 2 bytes a trained parameter; ZeRO-2 and 3 divide them;
- optimizer: AdamW's two moments and DeepSpeed's float32 master copy, 12 bytes a trained parameter, divided by
  every ZeRO stage; a LoRA adapter is float32 and undivided (16 bytes a parameter with its gradient);
- a teacher (distillation) in bfloat16, 2 bytes a parameter: whole on every GPU under ZeRO-2 (TRL prepares it
  at stage 0), divided under ZeRO-3;
- vLLM colocated: the share `trainer.vllm_gpu_memory_utilization` of the GPU, which it reserves whole (its own
  copy of the weights, then the KV cache).

Not counted: activations, which grow with the batch and the sequence length (gradient checkpointing keeps
them small), and the CUDA context (about 0.5 GB). The figure is a floor to plan with, not a measurement.

Example (Qwen2.5-1.5B, 1,543,714,304 parameters, all trained under ZeRO-2 on 8 GPUs of 80 GB, vLLM at 0.3):
    >>> shape = model_shape("Qwen/Qwen2.5-1.5B-Instruct")
    >>> parameter_count(shape)
    1543714304
    >>> estimate(shape, gpus=8, gpu_gb=80, zero_stage=2, vllm_share=0.3).line()
    'about 29.8 GB of 80 per GPU (weights 3.1, gradients 0.4, optimizer 2.3, vLLM 24.0)'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The shapes of the Hub models the GPU recipes name, from their public config.json, so that the estimate
#: needs no download. A local folder or another Hub id is read from its own config.
MODEL_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": dict(
        vocab_size=151936, hidden_size=896, num_hidden_layers=24, intermediate_size=4864,
        num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True,
    ),
    "Qwen/Qwen2.5-1.5B-Instruct": dict(
        vocab_size=151936, hidden_size=1536, num_hidden_layers=28, intermediate_size=8960,
        num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True,
    ),
    "Qwen/Qwen2.5-3B": dict(
        vocab_size=151936, hidden_size=2048, num_hidden_layers=36, intermediate_size=11008,
        num_attention_heads=16, num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True,
    ),
    "Qwen/Qwen2.5-7B-Instruct": dict(
        vocab_size=152064, hidden_size=3584, num_hidden_layers=28, intermediate_size=18944,
        num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False, attention_bias=True,
    ),
}  # fmt: skip
MODEL_SHAPES["Qwen/Qwen2.5-Coder-1.5B-Instruct"] = MODEL_SHAPES["Qwen/Qwen2.5-1.5B-Instruct"]
MODEL_SHAPES["Qwen/Qwen2.5-3B-Instruct"] = MODEL_SHAPES["Qwen/Qwen2.5-3B"]

GB = 1e9


def model_shape(name_or_path: str) -> dict[str, Any]:
    """The shape fields of a model: its local config.json, else `MODEL_SHAPES`, else its Hub config."""
    config = Path(name_or_path) / "config.json"
    if config.is_file():
        data = json.loads(config.read_text())
    elif name_or_path in MODEL_SHAPES:
        return dict(MODEL_SHAPES[name_or_path])
    else:
        from transformers import AutoConfig

        data = AutoConfig.from_pretrained(name_or_path).get_text_config().to_dict()
    keys = (*MODEL_SHAPES["Qwen/Qwen2.5-0.5B-Instruct"], "head_dim")
    shape = {key: data[key] for key in keys if key in data}
    shape.setdefault("attention_bias", data.get("model_type") == "qwen2")  # Qwen2 has q/k/v biases
    shape.setdefault("tie_word_embeddings", False)
    return shape


def _projections(shape: dict[str, Any]) -> list[tuple[int, int]]:
    """(in, out) of each linear layer of one decoder layer: q, k, v, o, gate, up, down."""
    hidden, inner = shape["hidden_size"], shape["intermediate_size"]
    head_dim = shape.get("head_dim") or hidden // shape["num_attention_heads"]
    heads, kv = shape["num_attention_heads"] * head_dim, shape["num_key_value_heads"] * head_dim
    return [(hidden, heads), (hidden, kv), (hidden, kv), (heads, hidden), (hidden, inner), (hidden, inner), (inner, hidden)]  # fmt: skip


def parameter_count(shape: dict[str, Any]) -> int:
    """Parameters of a Llama-style decoder (Llama, Qwen2, SmolLM2): embeddings, layers, norms, head."""
    hidden = shape["hidden_size"]
    layer = sum(i * o for i, o in _projections(shape)) + 2 * hidden  # linear layers, two RMSNorms
    if shape.get("attention_bias"):
        layer += sum(o for _, o in _projections(shape)[:3])  # q, k and v biases
    embeddings = shape["vocab_size"] * hidden
    head = 0 if shape.get("tie_word_embeddings") else embeddings
    return embeddings + shape["num_hidden_layers"] * layer + hidden + head


def lora_parameter_count(shape: dict[str, Any], rank: int) -> int:
    """Parameters of a LoRA adapter of `rank` on every linear layer of the decoder (`all-linear`)."""
    return shape["num_hidden_layers"] * sum(rank * (i + o) for i, o in _projections(shape))


@dataclass
class MemoryEstimate:
    weights: float
    gradients: float
    optimizer: float
    teacher: float
    vllm: float
    gpu_gb: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.teacher + self.vllm

    def line(self) -> str:
        parts = [("weights", self.weights), ("gradients", self.gradients), ("optimizer", self.optimizer)]
        parts += [("teacher", self.teacher)] * bool(self.teacher) + [("vLLM", self.vllm)] * bool(self.vllm)
        detail = ", ".join(f"{name} {value:.1f}" for name, value in parts)
        return f"about {self.total:.1f} GB of {self.gpu_gb:g} per GPU ({detail})"


def estimate(
    shape: dict[str, Any],
    gpus: int,
    gpu_gb: float,
    zero_stage: int,
    vllm_share: float = 0.0,
    lora_rank: int | None = None,
    teacher: dict[str, Any] | None = None,
) -> MemoryEstimate:
    """Memory per GPU (see the module docstring) of training `shape` on `gpus` GPUs of `gpu_gb` under ZeRO
    `zero_stage` (0: no sharding, one process or DDP)."""
    params = parameter_count(shape)
    weights = 2 * params / (gpus if zero_stage == 3 else 1)
    if lora_rank:
        adapter = lora_parameter_count(shape, lora_rank)
        gradients, optimizer = 4 * adapter, 12 * adapter  # float32 adapter: its gradient, moments and itself
    else:
        gradients = 2 * params / (gpus if zero_stage >= 2 else 1)
        optimizer = 12 * params / (gpus if zero_stage >= 1 else 1)
    teacher_bytes = 0.0
    if teacher is not None:
        teacher_bytes = 2 * parameter_count(teacher) / (gpus if zero_stage == 3 else 1)
    return MemoryEstimate(
        weights / GB, gradients / GB, optimizer / GB, teacher_bytes / GB, vllm_share * gpu_gb, gpu_gb
    )


#: How a recipe's header states its hardware and the estimate: "# Memory per GPU on 8 x 80 GB, ZeRO-2: about ..."
HEADER = re.compile(r"^# Memory per GPU on (\d+) x (\d+) GB, ZeRO-(\d): (about .*)$", re.M)


def recipe_estimate(recipe, gpus: int, gpu_gb: float, zero_stage: int) -> MemoryEstimate:
    """`estimate` for a recipe's model, LoRA rank, teacher and colocated vLLM share."""
    trainer = recipe.trainer
    colocated = trainer.get("use_vllm") and trainer.get("vllm_mode", "colocate") == "colocate"
    return estimate(
        model_shape(recipe.model.name_or_path),
        gpus,
        gpu_gb,
        zero_stage,
        vllm_share=float(trainer.get("vllm_gpu_memory_utilization", 0.3)) if colocated else 0.0,
        lora_rank=recipe.model.lora.r if recipe.model.lora else None,
        teacher=model_shape(recipe.teacher.name_or_path) if recipe.teacher else None,
    )


def header_line(recipe, gpus: int, gpu_gb: float, zero_stage: int) -> str:
    """The header line a GPU recipe carries (`HEADER`), computed here: `make check` (`header_report`) and a
    test compare."""
    line = recipe_estimate(recipe, gpus, gpu_gb, zero_stage).line()
    return f"# Memory per GPU on {gpus} x {gpu_gb:g} GB, ZeRO-{zero_stage}: {line}"


def header_report(recipe) -> str | None:
    """What `make check` says of the recipe file's memory header: the figure, or, where the recipe no longer
    matches it (a copied recipe with another model, an override), a warning with the line it should carry.
    None without a header, or where the model's shape cannot be read here."""
    if recipe.path is None:
        return None
    try:
        match = HEADER.search(Path(recipe.path).read_text())
    except OSError:
        return None
    if match is None:
        return None
    try:
        expected = header_line(recipe, int(match[1]), int(match[2]), int(match[3]))
    except (OSError, ValueError, KeyError):  # a Hub model out of reach, a config without the usual fields
        return None
    if expected == match[0]:
        return f"memory per GPU on {match[1]} x {match[2]} GB, ZeRO-{match[3]}: {match[4]}"
    now = expected.split(": ", 1)[1]
    if recipe.source != str(recipe.path):  # overrides changed it: the file's own line may still be right
        return f"memory per GPU with these overrides: {now} (the file's header, without them: {match[4]})"
    return (
        f"warning: {recipe.path}'s memory header says '{match[4]}', but for this recipe (model, LoRA rank, "
        f"teacher, vLLM share) it is '{now}'; update the line to: {expected}"
    )
