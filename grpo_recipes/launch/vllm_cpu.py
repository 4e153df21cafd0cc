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
compiling the model costs minutes on a CPU, and LoRA ops that do not copy the adapter per token:
`vllm_cpu_lora`) and `sync_weights`; it reuses TRL's `_iter_named_params`, which merges LoRA adapters and
gathers ZeRO-3 shards. `tests/launch/test_vllm_cpu.py` fails if a TRL or vLLM upgrade
moves any of the names used here.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


class CPUVLLMGeneration(RecipeVLLMGeneration):
    """TRL's vLLM back-end, with weight syncs that vLLM's CPU build accepts (see the module docstring)."""

    def _init_vllm(self) -> None:
        if self.mode == "colocate":
            vllm_cpu_lora.install()  # the adapter sync's LoRA, one product per adapter instead of per token
            eager_llm = functools.partial(vllm_generation.LLM, enforce_eager=True)
            with replaced(vllm_generation, "LLM", eager_llm):
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
