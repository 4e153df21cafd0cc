"""Run by tests/launch/test_vllm_cpu.py in a process of its own: weight syncs into a colocated vLLM engine on a CPU.

python tests/launch/vllm_sync_probe.py MODEL_DIR OUT_DIR [--lora]
Prints one JSON line: vLLM's log-probabilities of a fixed text's tokens with the original weights, with
perturbed ones (all weights, or the LoRA B matrices), and with the original ones put back, each after a sync.
"""

import json
import sys


def colocate_trainer(model_path: str, out: str, lora: bool, reward_funcs, **settings):
    """A RecipeGRPOTrainer on the CPU with vLLM colocated (one step of one group of 4 on 8 arithmetic
    prompts); `settings`: GRPOConfig fields (`vllm_mode="server"` and its URL for a server instead), and
    `adapter_sync` for the trainer. Shared by the sync probes."""
    import datasets
    from trl import GRPOConfig

    from grpo_recipes.models import lora_config
    from grpo_recipes.recipe import LoraSpec, ModelSpec
    from grpo_recipes.training.trainer import RecipeGRPOTrainer

    adapter_sync = settings.pop("adapter_sync", False)
    rows = [{"prompt": [{"role": "user", "content": f"Calculate {i} + 1."}]} for i in range(8)]
    args = GRPOConfig(
        **{
            "output_dir": out,
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_steps": 1,
            "use_cpu": True,
            "bf16": False,
            "report_to": "none",
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.15,
            "vllm_max_model_length": 256,
            **settings,
        }
    )
    spec = ModelSpec(name_or_path=model_path, lora=LoraSpec(r=4, alpha=8, dropout=0.0) if lora else None)
    return RecipeGRPOTrainer(
        model=model_path,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        peft_config=lora_config(spec),
        adapter_sync=adapter_sync,
    )


def adapter_sync_trainer(model_path: str, out: str, **settings):
    """`colocate_trainer` with a LoRA adapter synced as the adapter, learning rate 1e-2 and seed 0, and rewards
    that differ within each group, so that an optimizer step has a gradient. Shared by the adapter probes."""
    return colocate_trainer(
        model_path,
        out,
        True,
        lambda completions, **kw: [float(len(str(c)) % 3) for c in completions],
        learning_rate=1e-2,
        seed=0,
        adapter_sync=True,
        **settings,
    )


def main(model_path: str, out: str, lora: bool) -> dict:
    import torch
    from vllm import SamplingParams

    from grpo_recipes.training.trainer import generation_backend

    trainer = colocate_trainer(model_path, out, lora, lambda completions, **kw: [0.0] * len(completions))
    generation = trainer.vllm_generation
    # The log-probabilities of a fixed text's own tokens: no argmax decides which token is scored, so a
    # near-tie in the random model's logits cannot swap the sequence when the weights move by a few ulps.
    scoring = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)

    def served() -> list[float]:
        generation.sync_weights()
        output = generation.llm.generate(["Calculate 2 + 2. The answer is 4."], scoring, use_tqdm=False)[0]
        return [
            step[token].logprob
            for token, step in zip(output.prompt_token_ids[1:], output.prompt_logprobs[1:], strict=True)
        ]

    original = served()
    # LoRA: the B matrices start at zero, so moving them is what changes the merged weights.
    moved = [p for name, p in trainer.model.named_parameters() if not lora or "lora_B" in name]
    saved = [p.detach().clone() for p in moved]
    torch.manual_seed(0)
    with torch.no_grad():
        for p in moved:
            p.add_(torch.randn_like(p) * 0.5)
    perturbed = served()
    with torch.no_grad():
        for p, value in zip(moved, saved, strict=True):
            p.copy_(value)
    restored = served()
    from grpo_recipes.launch.vllm_cpu import kv_cache_bytes

    cache = generation.llm.llm_engine.vllm_config.cache_config
    return {
        "generation": type(generation).__name__,
        "backend": generation_backend(trainer),
        # The KV cache vLLM was given and the blocks it made of it, and what the run's sequences take.
        "kv_cache_bytes": cache.kv_cache_memory_bytes,
        "kv_cache_blocks": cache.num_gpu_blocks,
        "kv_cache_needed": kv_cache_bytes(
            trainer.model.config, generation.max_num_seqs, generation.max_model_length
        ),
        "kv_cache_sequence_blocks": -(-generation.max_model_length // cache.block_size),
        "max_num_seqs": generation.max_num_seqs,
        "original": original,
        "perturbed": perturbed,
        "restored": restored,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], "--lora" in sys.argv[3:])), flush=True)
