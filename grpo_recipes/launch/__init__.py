"""Launching: what runs around a training process rather than inside the loss.

- ``preflight``: checks before any model loads (vLLM and DeepSpeed installed, bf16 on a CPU, a server
  that answers), each one line with its fix.
- ``smoke``: ``make smoke``, a recipe for 2 steps under 2 real processes with a tiny model of its kind.
- ``serve``: the vLLM server for ``vllm_mode: server`` (``make serve``).
- ``vllm_sync``: the weight sync into vLLM with a LoRA adapter merged out of place (the base never written).
- ``vllm_cpu``: weight syncs into vLLM when the policy is on a CPU.
- ``memory``: memory per GPU estimated from a model's shapes (the line in each GPU recipe's header).
- ``gpu_check``: ``make gpu-wheels`` and ``make gpu-check``, the CUDA paths proven on one GPU, offline.

May import the shared modules of ``grpo_recipes``; never ``training`` (smoke runs start
``scripts/train.py`` as processes of their own) or ``evaluation``.
"""
