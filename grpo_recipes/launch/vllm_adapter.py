"""vLLM serves the LoRA adapter: each weight sync sends the adapter's megabytes, not the merged model.

TRL's sync pushes every weight of the model into vLLM before each generation (the adapter merged into the
base): for a 7B model about 15 GB a sync for an adapter of tens of megabytes, and on a CPU a reload of the
whole model every step. `AdapterSync`, mixed into the project's vLLM back-end in colocate mode, starts vLLM
with LoRA enabled on the base weights it loads once, and at each sync:

1. copies the adapter's tensors (gathering only them under ZeRO-3) into a new folder in RAM (`/dev/shm`
   where it exists), in PEFT's saved format;
2. registers the folder with vLLM as a new `LoRARequest` (`policy-v<N>`, id N: vLLM caches adapters by id,
   so a new id is what makes it read the new weights), then drops the previous one;
3. generates with that request.

vLLM applies the adapter unmerged (x A B scale), so the base weights are never rewritten, on either side.
Where vLLM cannot serve the adapter (`adapter_sync_problem`: DoRA, biases, `modules_to_save`, embedding or
output-layer targets, per-layer ranks, a rank above 512, sleep mode, tensor parallelism, server mode) the
merged sync runs instead, and `make check` says why (`sync_choice`).

Example (vLLM sizes its LoRA buffers by one of a few ranks):
    >>> round_lora_rank(16), round_lora_rank(20)
    (16, 32)
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

#: The ranks vLLM's `max_lora_rank` takes (vllm/config/lora.py's MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def round_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as `max_lora_rank` that holds an adapter of `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest, {VLLM_LORA_RANKS[-1]}")


def lora_config_problem(config: Any) -> str | None:
    """Why vLLM cannot serve an adapter with this PEFT `LoraConfig` (None: it can)."""
    if type(config).__name__ != "LoraConfig":
        return f"a {type(config).__name__} adapter, not LoRA"
    if getattr(config, "use_dora", False):
        return "DoRA"
    if getattr(config, "bias", "none") != "none" or getattr(config, "lora_bias", False):
        return "trained biases"
    if getattr(config, "modules_to_save", None):
        return f"modules_to_save ({', '.join(config.modules_to_save)})"
    if getattr(config, "rank_pattern", None) or getattr(config, "alpha_pattern", None):
        return "per-layer ranks or alphas (vLLM reads one r and one alpha)"
    if getattr(config, "target_parameters", None):
        return "target_parameters"
    targets = config.target_modules if isinstance(config.target_modules, (set, list, tuple)) else ()
    if {"embed_tokens", "lm_head"} & set(targets):
        return "an adapter on the embeddings or the output layer"
    if config.r > VLLM_LORA_RANKS[-1]:
        return f"rank {config.r} above vLLM's {VLLM_LORA_RANKS[-1]}"
    return None


def adapter_sync_problem(generation: Any) -> str | None:
    """Why this vLLM back-end must sync merged weights instead of the adapter (None: the adapter syncs)."""
    from accelerate.utils import is_peft_model

    model = generation.model
    if not is_peft_model(model):
        return "all weights are trained (no LoRA adapter)"
    if not generation.adapter_sync_requested:
        return "model.lora.vllm_sync: merged"
    if generation.mode != "colocate":
        return "vLLM server mode (the adapter sync runs in colocate mode)"
    if generation.enable_sleep_mode:
        return "vllm_enable_sleep_mode"
    if generation.tensor_parallel_size != 1:
        return "vllm_tensor_parallel_size above 1"
    if generation._dist.is_fsdp:
        return "FSDP"
    if len(model.active_adapters) != 1:
        return "more than one active adapter"
    return lora_config_problem(model.peft_config[model.active_adapters[0]])


def adapter_state(model: Any, gather_params: Any) -> dict[str, Any]:
    """The active adapter's tensors under PEFT's saved names (`base_model.model.<module>.lora_A.weight`), as
    CPU copies; under ZeRO-3 only these are gathered (collective: every process calls it)."""
    from peft.utils import get_peft_model_state_dict

    adapter = model.active_adapters[0]
    lora = [
        (name, param)
        for name, param in model.named_parameters()
        if f".{adapter}." in name and "lora_" in name
    ]
    with gather_params([param for _, param in lora]):
        state = {name: param.detach().to("cpu", copy=True).contiguous() for name, param in lora}
    return get_peft_model_state_dict(model, state_dict=state, adapter_name=adapter)


class AdapterSync:
    """Mixed in before a `VLLMGeneration` class: vLLM keeps its base weights and receives the adapter (see the
    module docstring). Falls back to the class's own merged sync where `adapter_sync_problem` says so. Either
    way each sync's seconds and bytes are kept in `syncs` (the trainer logs them as `vllm/sync_*`)."""

    adapter_sync_requested = True

    def _init_vllm(self) -> None:
        from trl.generation import vllm_generation

        from .vllm_cpu import replaced

        self.adapter_sync_fallback = adapter_sync_problem(self)
        self.sync_bytes = 0
        self.syncs: list[tuple[float, int]] = []
        if self.adapter_sync_fallback is not None:
            # What the merged sync sends: every weight in its dtype, the adapter merged into it (ZeRO-3's
            # partitioned parameters report their full size as ds_numel). The model's size does not change.
            self.sync_bytes = sum(
                getattr(p, "ds_numel", p.numel()) * p.element_size()
                for n, p in self.model.named_parameters()
                if "lora_" not in n
            )
            super()._init_vllm()
            return
        config = self.model.peft_config[self.model.active_adapters[0]]
        lora_llm = functools.partial(
            vllm_generation.LLM,
            enable_lora=True,
            max_lora_rank=round_lora_rank(config.r),
            max_loras=1,
            max_cpu_loras=2,
        )
        with replaced(vllm_generation, "LLM", lora_llm):
            super()._init_vllm()
        shm = Path("/dev/shm")
        self._adapter_root = Path(tempfile.mkdtemp(prefix="grpo-lora-", dir=shm if shm.is_dir() else None))
        atexit.register(shutil.rmtree, self._adapter_root, ignore_errors=True)
        self._lora_request = None
        self._adapter_version = 0

    def sync_weights(self) -> None:
        started = time.perf_counter()
        if self.adapter_sync_fallback is not None:
            super().sync_weights()
        else:
            self._sync_adapter()
        self.syncs.append((time.perf_counter() - started, self.sync_bytes))

    def _sync_adapter(self) -> None:
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        state = adapter_state(self.model, self._dist.gather_params)
        self._adapter_version += 1
        version = self._adapter_version
        folder = self._adapter_root / f"v{version}"
        partial = folder.with_name(folder.name + ".partial")
        partial.mkdir()
        save_file(state, str(partial / "adapter_model.safetensors"))
        self.model.peft_config[self.model.active_adapters[0]].save_pretrained(str(partial))
        partial.rename(folder)
        request = LoRARequest(f"policy-v{version}", version, str(folder))
        engine = self.llm.llm_engine
        engine.add_lora(request)  # loaded now: a broken adapter fails here, not inside generation
        previous = self._lora_request
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        self._lora_request = request
        self.sync_bytes = sum(t.numel() * t.element_size() for t in state.values())
        self.llm.reset_prefix_cache()

    def generate(self, *args: Any, **kwargs: Any):
        if self.adapter_sync_fallback is not None or self._lora_request is None:
            return super().generate(*args, **kwargs)
        from .vllm_cpu import replaced

        with replaced(
            self.llm, "generate", functools.partial(self.llm.generate, lora_request=self._lora_request)
        ):
            return super().generate(*args, **kwargs)


@functools.cache
def with_adapter_sync(generation_class: type, requested: bool = True) -> type:
    """`generation_class` with `AdapterSync` mixed in; `requested` false (`model.lora.vllm_sync: merged`) keeps
    the merged sync and only measures it. One class per base and flag."""
    name = f"{'AdapterSync' if requested else 'MeasuredSync'}{generation_class.__name__}"
    return type(name, (AdapterSync, generation_class), {"adapter_sync_requested": requested})


def planned_sync(recipe: Any) -> str | None:
    """What `make check` says of a recipe's weight sync into vLLM, from the recipe alone (None without vLLM):
    the adapter, with its size against the model's where the shapes are known, or merged, and why."""
    trainer = recipe.trainer
    if not trainer.get("use_vllm"):
        return None
    lora = recipe.model.lora
    targets = (
        []
        if lora is None
        else [lora.target_modules]
        if isinstance(lora.target_modules, str)
        else list(lora.target_modules)
    )
    reasons = [
        (lora is None, "all weights are trained (no LoRA adapter)"),
        (lora is not None and lora.vllm_sync == "merged", "model.lora.vllm_sync: merged"),
        (trainer.get("vllm_mode", "colocate") != "colocate", "vLLM server mode (the adapter sync runs in colocate mode)"),
        (bool(trainer.get("vllm_enable_sleep_mode")), "vllm_enable_sleep_mode"),
        (int(trainer.get("vllm_tensor_parallel_size") or 1) != 1, "vllm_tensor_parallel_size above 1"),
        (bool({"embed_tokens", "lm_head"} & set(targets)), "an adapter on the embeddings or the output layer"),
        (lora is not None and lora.r > VLLM_LORA_RANKS[-1], f"rank above vLLM's {VLLM_LORA_RANKS[-1]}"),
    ]  # fmt: skip
    for applies, reason in reasons:
        if applies:
            return f"merged: every weight, each sync ({reason})"
    size = ""
    if targets == ["all-linear"]:
        from .memory import lora_parameter_count, model_shape, parameter_count

        try:
            shape = model_shape(recipe.model.name_or_path)
            adapter, model = lora_parameter_count(shape, lora.r), parameter_count(shape)
            size = f" ({adapter / 1e6:.1f} M parameters a sync instead of the model's {model / 1e6:.0f} M)"
        except Exception:  # a Hub model's config out of reach, or not a Llama-style decoder: no figures
            pass
    return f"adapter: vLLM keeps the base weights it loaded and receives the LoRA adapter{size}"
