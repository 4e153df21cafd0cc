"""vLLM generation for a policy that trains on the CPU: TRL's `VLLMGeneration` with a weight sync that works there.

On a GPU, TRL pushes the policy's weights into vLLM itself (NCCL to a server, `load_weights` in colocate mode)
and none of this module runs. On a CPU both of TRL's paths break:

- colocate: vLLM's CPU backend repacks each linear layer's weight into a kernel handle and leaves an empty
  parameter behind, so `model.load_weights` fails (`'Parameter' object has no attribute 'weight_loader'`).
  The model runner's `reload_weights(weights_iterator=...)` re-runs the loading and the repacking, so it works.
- server: TRL's client syncs over NCCL, which needs CUDA. Here the main process writes the weights to a
  safetensors folder and asks the server (started with `VLLM_SERVER_DEV_MODE=1`, as `trl vllm-serve` and
  `make serve` do) to `reload_weights` from it through `/collective_rpc`. Trainer and server share a disk.

`CPUVLLMGeneration` overrides only `_init_vllm` (server mode: no NCCL communicator; colocate: eager mode, as
compiling the model costs minutes on a CPU, LoRA ops that do not copy the adapter per token: `vllm_cpu_lora`,
and a KV cache of the size the run can use: `kv_cache_bytes`) and `sync_weights`; it reuses TRL's `_iter_named_params`, which merges LoRA adapters and
gathers ZeRO-3 shards. `tests/launch/test_vllm_cpu.py` fails if a TRL or vLLM upgrade
moves any of the names used here.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from trl.generation import vllm_generation
from trl.generation.vllm_client import VLLMClient

from . import vllm_cpu_lora
from .vllm_sync import RecipeVLLMGeneration


@contextlib.contextmanager
def replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Rebind `owner.name` to `value` for the duration of the block (and fail loudly if it does not exist)."""
    if not hasattr(owner, name):
        raise RuntimeError(
            f"{getattr(owner, '__name__', owner)} has no attribute {name!r}: this TRL release is not supported "
            "by grpo_recipes.launch.vllm_cpu (see pyproject.toml for the tested range)."
        )
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


#: vLLM's own setting of its CPU KV cache, in GiB; where it is set, it wins over `kv_cache_bytes`.
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"

#: Tokens in a block of vLLM's CPU KV cache (its CPU platform's block size): the cache is counted in blocks.
KV_BLOCK_TOKENS = 128


def kv_cache_bytes(config: Any, sequences: int, tokens: int) -> int:
    """Bytes of KV cache that hold `sequences` sequences of `tokens` tokens each in a model of HF `config`:
    whole blocks of `KV_BLOCK_TOKENS` tokens per sequence, plus the one block vLLM keeps apart, in float32
    (vLLM's CPU cache is float32 or bfloat16: this is the larger).

    On a CPU, `vllm_gpu_memory_utilization` is the share of host memory vLLM may use, the trainer's own memory
    included, and vLLM makes all of the share the trainer leaves into cache: 0.3 of 24 GiB gave the default
    recipe's 135M model about 4.7 GiB, where its 16 sequences of 512 tokens take 366 MiB. A colocated engine
    holds at most `max_num_seqs` sequences of `max_model_len` tokens at once, so that is the cache it is given.

    >>> from transformers import LlamaConfig
    >>> config = LlamaConfig(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)
    >>> kv_cache_bytes(config, sequences=16, tokens=512) / 2**20  # SmolLM2-135M: 45 KiB a token, 65 blocks
    365.625
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    per_token = 2 * text.num_hidden_layers * kv_heads * head_dim * 4  # keys and values, float32
    blocks = sequences * -(-tokens // KV_BLOCK_TOKENS) + 1
    return blocks * KV_BLOCK_TOKENS * per_token


class CPUVLLMGeneration(RecipeVLLMGeneration):
    """TRL's vLLM back-end, with weight syncs that vLLM's CPU build accepts (see the module docstring)."""

    def _init_vllm(self) -> None:
        if self.mode == "colocate":
            vllm_cpu_lora.install()  # the adapter sync's LoRA, one product per adapter instead of per token
            settings: dict[str, Any] = {"enforce_eager": True}
            kv_bytes = self.colocated_kv_cache_bytes()
            if kv_bytes is not None:
                settings["kv_cache_memory_bytes"] = kv_bytes
            with replaced(vllm_generation, "LLM", functools.partial(vllm_generation.LLM, **settings)):
                super()._init_vllm()
            return
        if self.mode != "server":
            super()._init_vllm()  # TRL's own error for an unknown mode
            return
        if self.accelerator.is_main_process:
            base_url = self.server_base_url or f"http://{self.server_host}:{self.server_port}"
            # No `init_communicator`: the weights travel through `_sync_dir` instead of NCCL.
            self.vllm_client = VLLMClient(base_url=base_url, connection_timeout=self.server_timeout)
            self._sync_dir = Path(tempfile.mkdtemp(prefix="grpo-vllm-weights-"))
            atexit.register(shutil.rmtree, self._sync_dir, ignore_errors=True)
        self.accelerator.wait_for_everyone()

    def colocated_kv_cache_bytes(self) -> int | None:
        """The colocated engine's KV cache: what `max_num_seqs` sequences of `vllm_max_model_length` tokens take
        (`kv_cache_bytes`), and never more than the share would leave it. None, and vLLM sizes it from the share
        as before, where `VLLM_CPU_KVCACHE_SPACE` is set, where no `vllm_max_model_length` is (vLLM derives the
        model's length itself), or where the share leaves less than one such sequence (vLLM then says so)."""
        if os.environ.get(KV_CACHE_ENV) or not self.max_model_length:
            return None
        config = self.model.config
        needed = kv_cache_bytes(config, self.max_num_seqs, self.max_model_length)
        # vLLM's own cap measures the process after loading its weights, so it is a little smaller than this.
        share = int(self.gpu_memory_utilization * psutil.virtual_memory().total)
        share -= psutil.Process().memory_info().rss
        if share < kv_cache_bytes(config, 1, self.max_model_length):
            return None
        return min(needed, share)  # a smaller share holds fewer sequences at once, as it did

    def sync_weights(self) -> None:
        if self.mode == "colocate":
            # Lazily: each tensor is read (merged, gathered) as the loader asks for it.
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": self._iter_named_params()})
            self.llm.reset_prefix_cache()
            return
        # Server: every process walks the parameters (gathering shards is collective); the main one saves them.
        from safetensors.torch import save_file

        main = self.accelerator.is_main_process
        tensors = {}
        for name, param in self._iter_named_params():
            if main:
                tensors[name] = param.detach().to("cpu").contiguous().clone()
        if main:
            partial = self._sync_dir / "model.safetensors.partial"
            save_file(tensors, str(partial))
            partial.replace(self._sync_dir / "model.safetensors")
            self.vllm_client._post(
                f"{self.vllm_client.base_url}/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(self._sync_dir)}},
            )
            self.vllm_client.reset_prefix_cache()
        self.accelerator.wait_for_everyone()
