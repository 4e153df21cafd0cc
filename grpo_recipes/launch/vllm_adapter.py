"""vLLM serves the LoRA adapter: each weight sync sends the adapter's megabytes, not the merged model.

TRL's sync pushes every weight of the model into vLLM before each generation (the adapter merged into the
base): for a 7B model about 15 GB a sync for an adapter of tens of megabytes, and on a CPU a reload of the
whole model every step. `AdapterSync`, mixed into the project's vLLM back-end, leaves vLLM the base weights it
loaded once, with LoRA enabled, and at each sync:

1. copies the adapter's tensors (gathering only them under ZeRO-3) into a new folder, in PEFT's saved format;
2. colocate: registers the folder with vLLM as a new `LoRARequest` (`policy-v<N>`, id N: vLLM caches adapters
   by id, so a new id is what makes it read the new weights), drops the previous one, and generates with it;
   server: asks the server to load the folder under the name `policy-v<N>` (`/v1/load_lora_adapter`, which a
   server started with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1` offers, as `make serve` does), requests that
   model by that name from then on, and unloads the previous one.

The folder is in RAM (`/dev/shm` where it exists), or in `GRPO_VLLM_ADAPTER_DIR`: a server on another machine
reads it there, so that must be a folder both machines see. vLLM applies the adapter unmerged (x A B scale),
so the base weights are never rewritten, on either side. Where vLLM cannot serve the adapter
(`adapter_sync_problem`: DoRA, biases, `modules_to_save`, embedding or output-layer targets, per-layer ranks,
a rank above 512; colocated: sleep mode, tensor parallelism) the merged sync runs instead, and `make check`
says why (`planned_sync`).

Example (vLLM sizes its LoRA buffers by one of a few ranks):
    >>> round_lora_rank(16), round_lora_rank(20)
    (16, 32)
"""

from __future__ import annotations

import atexit
import functools
import os
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
    if generation.mode == "colocate" and generation.enable_sleep_mode:
        return "vllm_enable_sleep_mode"
    if generation.mode == "colocate" and generation.tensor_parallel_size != 1:
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
        if self.mode == "colocate":
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
        else:  # the server was started with LoRA enabled (make serve; pre-flight checks it)
            super()._init_vllm()
        # Server mode: the main process alone writes adapters (and talks to the server).
        self._adapter_root = (
            adapter_root() if self.mode == "colocate" or self.accelerator.is_main_process else None
        )
        self._lora_name: str | None = None
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
        state = adapter_state(self.model, self._dist.gather_params)  # every process: ZeRO-3 gathers
        self.sync_bytes = sum(t.numel() * t.element_size() for t in state.values())
        self._adapter_version += 1
        if self.mode == "colocate":
            self._load_colocated(self._save_adapter(state))
        else:
            if self.accelerator.is_main_process:  # the one process that talks to the server
                self._load_on_server(self._save_adapter(state))
            self.accelerator.wait_for_everyone()

    def _save_adapter(self, state: dict[str, Any]) -> Path:
        """The adapter in PEFT's saved format, in a new folder `v<N>` (written apart, then renamed: a reader
        never sees half of it)."""
        from safetensors.torch import save_file

        folder = self._adapter_root / f"v{self._adapter_version}"
        partial = folder.with_name(folder.name + ".partial")
        partial.mkdir()
        save_file(state, str(partial / "adapter_model.safetensors"))
        self.model.peft_config[self.model.active_adapters[0]].save_pretrained(str(partial))
        partial.rename(folder)
        return folder

    def _load_colocated(self, folder: Path) -> None:
        from vllm.lora.request import LoRARequest

        request = LoRARequest(f"policy-v{self._adapter_version}", self._adapter_version, str(folder))
        engine = self.llm.llm_engine
        engine.add_lora(request)  # loaded now: a broken adapter fails here, not inside generation
        previous = self._lora_request
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        self._lora_request = request
        self.llm.reset_prefix_cache()

    def _load_on_server(self, folder: Path) -> None:
        client = self.vllm_client
        name = f"policy-v{self._adapter_version}"
        response = client.session.post(
            f"{client.base_url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)}
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"the vLLM server at {client.base_url} did not load the LoRA adapter from {folder} (HTTP "
                f"{response.status_code}: {response.text[:500]}); a server on another machine reads the adapter "
                "from that folder: set GRPO_VLLM_ADAPTER_DIR to a folder both machines see, or add the override "
                "model.lora.vllm_sync=merged"
            )
        client.model = name  # TRL's client names this model in every generation request
        previous, self._lora_name = self._lora_name, name
        if previous is not None:
            client.session.post(f"{client.base_url}/v1/unload_lora_adapter", json={"lora_name": previous})
            shutil.rmtree(self._adapter_root / f"v{self._adapter_version - 1}", ignore_errors=True)

    def generate(self, *args: Any, **kwargs: Any):
        if self.mode != "colocate" or self.adapter_sync_fallback is not None or self._lora_request is None:
            return super().generate(*args, **kwargs)  # server: the client already names the adapter
        from .vllm_cpu import replaced

        with replaced(
            self.llm, "generate", functools.partial(self.llm.generate, lora_request=self._lora_request)
        ):
            return super().generate(*args, **kwargs)


def adapter_root() -> Path:
    """A new folder for this run's adapters: in `GRPO_VLLM_ADAPTER_DIR` when set (a vLLM server on another
    machine reads the adapter there), else in RAM (`/dev/shm`) where it exists; removed at exit."""
    shared = os.environ.get("GRPO_VLLM_ADAPTER_DIR")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        parent = Path(shared).resolve()
    else:
        shm = Path("/dev/shm")
        parent = shm if shm.is_dir() else None
    # Absolute: vLLM takes a relative path that does not exist for a Hub id.
    root = Path(tempfile.mkdtemp(prefix="grpo-lora-", dir=parent)).resolve()
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@functools.cache
def with_adapter_sync(generation_class: type, requested: bool = True) -> type:
    """`generation_class` with `AdapterSync` mixed in; `requested` false (`model.lora.vllm_sync: merged`) keeps
    the merged sync and only measures it. One class per base and flag."""
    name = f"{'AdapterSync' if requested else 'MeasuredSync'}{generation_class.__name__}"
    return type(name, (AdapterSync, generation_class), {"adapter_sync_requested": requested})


def merged_sync_reason(recipe: Any, colocate: bool) -> str | None:
    """Why a recipe's weights would reach vLLM merged rather than as the LoRA adapter, read from the recipe
    alone (None: the adapter syncs)."""
    trainer, lora = recipe.trainer, recipe.model.lora
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
        (colocate and bool(trainer.get("vllm_enable_sleep_mode")), "vllm_enable_sleep_mode"),
        (colocate and int(trainer.get("vllm_tensor_parallel_size") or 1) != 1, "vllm_tensor_parallel_size above 1"),
        (bool({"embed_tokens", "lm_head"} & set(targets)), "an adapter on the embeddings or the output layer"),
        (lora is not None and lora.r > VLLM_LORA_RANKS[-1], f"rank above vLLM's {VLLM_LORA_RANKS[-1]}"),
    ]  # fmt: skip
    return next((reason for applies, reason in reasons if applies), None)


def planned_sync(recipe: Any) -> str | None:
    """What `make check` says of a recipe's weight sync into vLLM, from the recipe alone (None without vLLM):
    the adapter, with its size against the model's where the shapes are known, or merged, and why."""
    trainer = recipe.trainer
    if not trainer.get("use_vllm"):
        return None
    colocate = trainer.get("vllm_mode", "colocate") == "colocate"
    reason = merged_sync_reason(recipe, colocate)
    if reason is not None:
        return f"merged: every weight, each sync ({reason})"
    lora = recipe.model.lora
    size = ""
    if lora.target_modules == "all-linear" or list(lora.target_modules) == ["all-linear"]:
        from .memory import lora_parameter_count, model_shape, parameter_count

        try:
            shape = model_shape(recipe.model.name_or_path)
            adapter, model = lora_parameter_count(shape, lora.r), parameter_count(shape)
            size = f" ({adapter / 1e6:.1f} M parameters a sync instead of the model's {model / 1e6:.0f} M)"
        except Exception:  # a Hub model's config out of reach, or not a Llama-style decoder: no figures
            pass
    served = "" if colocate else "; the server loads it from a folder, which make serve starts it to do"
    return f"adapter: vLLM keeps the base weights it loaded and receives the LoRA adapter{size}{served}"


def server_lora_flags(recipe: Any) -> list[str]:
    """The flags that let a vLLM server take this recipe's adapter at each sync (with
    `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1` in its environment); none where its weights sync merged.

    Example (no LoRA adapter: nothing to add):
        >>> from types import SimpleNamespace
        >>> server_lora_flags(SimpleNamespace(trainer={}, model=SimpleNamespace(lora=None)))
        []
    """
    if merged_sync_reason(recipe, colocate=False) is not None:
        return []
    rank = round_lora_rank(recipe.model.lora.r)
    # One adapter serves at a time; two fit in the cache, so loading the next never evicts the one in use.
    return ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", "1", "--max-cpu-loras", "2"]
