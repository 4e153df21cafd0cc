"""Run by tests/training/test_tool_rounds.py under `accelerate launch` (2 processes): GRPO with the calculator
recipe's tool, where the processes make different numbers of tool rounds in the same step.

python tests/training/tool_rounds_probe.py MODEL_DIR OUT_DIR [--plain] [--gen hf|vllm-colocate|vllm-server]
    [--port N]

A tiny random model never calls a tool by itself. So each generation runs for real (the forward passes, the
ZeRO-3 gathers, the vLLM engine or server) and its completions are then replaced by scripted ones
(`calls_tool`): process 0 calls the calculator in both steps, its first completion twice and its second once;
process 1 never calls it in step 1, and once for its first completion in step 2. Where the completions are
replaced: the model's `generate` (transformers), each process's vLLM back-end (colocate), or the client on the
main process (server mode: there the gathered batch holds every process's prompts, in process order, and each
process gets its slice back). The final answer names the process the script wrote it for, so a process that
got another's completions shows it.

`--plain` trains with TRL's own GRPOTrainer instead of RecipeGRPOTrainer (with the CPU vLLM back-end where
vLLM generates): the same run without the rounds that every process joins.

Each process writes OUT_DIR/rank<r>.json: each generation call (step, how many prompts, how many tool
results each prompt holds), the completions the reward saw and the tool calls of each step; the main process
also writes OUT_DIR/log_history.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call><|im_end|>'
TOOL_RESULT = "<tool_response>"  # how the qwen2_5 template opens each tool result in the prompt


def answer(rank: int) -> str:
    return f"Process {rank} says: the answer is 3.<|im_end|>"


def calls_tool(rank: int, step: int, round_: int, position: int) -> bool:
    """Whether the completion at `position` of `rank`'s batch calls the tool, in generation round `round_`
    (0: the first generation; n: after n tool results) of optimizer step `step` (0-based)."""
    if rank == 0:
        return round_ == 0 or (round_ == 1 and position == 0)
    return step == 1 and round_ == 0 and position == 0


class Script:
    """The scripted completions, and the record of what each process generated and was rewarded for."""

    def __init__(self, tokenizer, rank: int, processes: int):
        self.tokenizer, self.rank, self.processes = tokenizer, rank, processes
        self.trainer = None
        self.record: dict[str, list] = {"generations": [], "completions": [], "tool_calls": []}

    @property
    def step(self) -> int:
        return self.trainer.state.global_step

    def completion(self, prompt_ids, rank: int, position: int) -> list[int]:
        round_ = self.tokenizer.decode(prompt_ids).count(TOOL_RESULT)
        text = TOOL_CALL if calls_tool(rank, self.step, round_, position) else answer(rank)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def note(self, prompts) -> None:
        rounds = [self.tokenizer.decode(ids).count(TOOL_RESULT) for ids in prompts]
        self.record["generations"].append({"step": self.step, "prompts": len(prompts), "rounds": rounds})

    # --- where the completions are replaced --------------------------------------------------------------

    def patch_model(self, model) -> None:
        """transformers: the model's own `generate` runs (a few tokens), then its output is replaced."""
        import torch

        original = model.generate

        def generate(*args, input_ids, **kwargs):
            original(*args, input_ids=input_ids, **{**kwargs, "max_new_tokens": 4})
            rows = [
                ids[mask.bool()].tolist()
                for ids, mask in zip(input_ids, kwargs["attention_mask"], strict=True)
            ]
            self.note(rows)
            completions = [self.completion(row, self.rank, i) for i, row in enumerate(rows)]
            width = max(map(len, completions))
            pad = self.tokenizer.pad_token_id
            tail = torch.tensor([c + [pad] * (width - len(c)) for c in completions], device=input_ids.device)
            return torch.cat([input_ids, tail], dim=1)

        model.generate = generate

    def patch_colocate(self, generation) -> None:
        """vLLM in each process: the engine generates, then each row's completion is replaced."""
        original = generation.generate

        def generate(prompts, images, num_generations, profiler=None):
            prompt_ids, _, _, _ = original(prompts, images, num_generations, profiler)
            self.note(prompts)
            completions = [self.completion(row, self.rank, i) for i, row in enumerate(prompt_ids)]
            return prompt_ids, completions, *fake_logprobs(completions)

        generation.generate = generate

    def patch_server_client(self, client) -> None:
        """vLLM server: the main process's client sends the gathered batch; the answer is replaced there,
        each completion as the script has it for the process whose slice it falls in."""
        original = client.generate

        def generate(prompts, n=1, **kwargs):
            output = original(prompts=prompts, n=n, **kwargs)
            per_process = len(output["completion_ids"]) // self.processes
            completions = [
                self.completion(prompts[j // n], j // per_process, j % per_process)
                for j in range(len(output["completion_ids"]))
            ]
            logprobs, token_ids = fake_logprobs(completions)
            return {
                **output,
                "completion_ids": completions,
                "logprobs": logprobs,
                "logprob_token_ids": token_ids,
            }

        client.generate = generate

    def patch_server_calls(self, generation) -> None:
        """Server mode, every process: what each one asked for in each round."""
        original = generation.generate

        def generate(prompts, images, num_generations, profiler=None):
            self.note(prompts)
            return original(prompts, images, num_generations, profiler)

        generation.generate = generate

    # --- what the processes saw ------------------------------------------------------------------------

    def reward(self, completions, **kwargs) -> list[float]:
        rows = [
            {
                "tool_results": [m["content"] for m in c if m["role"] == "tool"],
                "last": c[-1].get("content", ""),
            }
            for c in completions
        ]
        self.record["completions"].append({"step": self.step, "rows": rows})
        return [float(len(c)) for c in completions]  # more turns, more reward: groups are not all equal


def fake_logprobs(completions):
    """vLLM's per-token top-1 log-probabilities and their token ids, for replaced completions."""
    return [[[-1.0] for _ in c] for c in completions], [[[t] for t in c] for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--plain", action="store_true", help="TRL's GRPOTrainer instead of RecipeGRPOTrainer")
    parser.add_argument("--gen", choices=("hf", "vllm-colocate", "vllm-server"), default="hf")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()

    import datasets
    from accelerate import PartialState
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer import grpo_trainer

    from grpo_recipes.cli import leave_process_group
    from grpo_recipes.launch.vllm_cpu import CPUVLLMGeneration, replaced
    from grpo_recipes.models import load_tokenizer
    from grpo_recipes.recipe import load_recipe
    from grpo_recipes.toolset import Toolset
    from grpo_recipes.training.trainer import RecipeGRPOTrainer

    recipe = load_recipe(
        REPO / "recipes" / "calculator-cpu.yaml", [f"model.name_or_path={args.model}"], check_trainer=False
    )
    vllm = {}
    if args.gen != "hf":
        vllm = {"use_vllm": True, "vllm_mode": args.gen.removeprefix("vllm-"), "vllm_max_model_length": 1024}
        if args.gen == "vllm-colocate":
            vllm["vllm_gpu_memory_utilization"] = 0.15
        else:
            vllm.update(vllm_server_host="127.0.0.1", vllm_server_port=args.port)
    config = GRPOConfig(
        output_dir=str(args.out),
        per_device_train_batch_size=2,  # one prompt's group of 4 per step, 2 completions on each process
        num_generations=4,
        max_completion_length=128,  # room for two calls, their results and the answer
        max_tool_calling_iterations=2,
        max_steps=2,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        seed=0,
        **vllm,
    )
    state = PartialState()  # after the config, which sets up the processes (use_cpu: one gloo group)
    rank = state.process_index
    tokenizer = load_tokenizer(recipe.model)  # the qwen2_5 template, with TRL's tool-call parser
    toolset = Toolset.for_recipe(recipe)
    script = Script(tokenizer, rank, state.num_processes)
    model = AutoModelForCausalLM.from_pretrained(args.model)  # after the config: ZeRO-3 partitions it
    if args.gen == "hf":
        script.patch_model(model)
    rows = [
        {
            "prompt": [
                {"role": "system", "content": recipe.prompt.system},
                {"role": "user", "content": f"What is {i} + 2?"},
            ]
        }
        for i in range(8)
    ]

    class CountToolCalls(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            script.record["tool_calls"].append(toolset.stats.as_dict()["calls"])

    common = {
        "model": model,
        "reward_funcs": [script.reward],
        "args": config,
        "train_dataset": datasets.Dataset.from_list(rows),
        "processing_class": tokenizer,
        "tools": toolset.tools,
        "callbacks": [CountToolCalls()],
    }
    if args.plain:
        with replaced(grpo_trainer, "VLLMGeneration", CPUVLLMGeneration):
            trainer = GRPOTrainer(**common)
    else:
        trainer = RecipeGRPOTrainer(**common, tool_stats=toolset.stats)
    script.trainer = trainer
    if args.gen == "vllm-colocate":
        script.patch_colocate(trainer.vllm_generation)
    elif args.gen == "vllm-server":
        script.patch_server_calls(trainer.vllm_generation)
        if state.is_main_process:
            script.patch_server_client(trainer.vllm_generation.vllm_client)
    print(f"[rank {rank}] {type(trainer).__name__}, {args.gen}, {state.distributed_type}", flush=True)
    trainer.train()

    args.out.mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "trainer": type(trainer).__name__, **script.record}
    (args.out / f"rank{rank}.json").write_text(json.dumps(record, indent=1) + "\n")
    if state.is_main_process:
        (args.out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")
    leave_process_group()  # as the CLI does (its barrier included): a gloo group left to teardown can abort
    print(f"[rank {rank}] done", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
