"""Prove the CUDA paths on a GPU machine in minutes, with nothing to download.

python scripts/gpu_check.py prepare    # make gpu-wheels: on a machine with the package index, fill gpu-pack/
python scripts/gpu_check.py            # make gpu-check: on the GPU machine (one line and exit 0 without one)
python scripts/gpu_check.py memory --lora 16 --json out.json   # one of its steps, in a process of its own

What each step runs and checks: grpo_recipes/launch/gpu_check.py.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Runs from the source tree on a GPU machine where the project is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_recipes.launch import gpu_check  # noqa: E402  (stdlib only at import: no torch yet)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("command", nargs="?", default="check", choices=["check", "prepare", "memory"])
    parser.add_argument("--lora", type=int, default=16, help="memory: LoRA rank (0: all weights trained)")
    parser.add_argument("--json", type=Path, help="memory: where to write the figures")
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)  # kept across the switch to the venv
    args = parser.parse_args(argv)
    if args.command == "prepare":
        try:
            gpu_check.prepare_pack()
        except RuntimeError as err:
            print(f"gpu-wheels: {err}", file=sys.stderr)
            return 1
        return 0
    if args.command == "memory":
        figures = gpu_check.measure_memory(lora_rank=args.lora or None)
        print(json.dumps(figures))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    environment = gpu_check.cuda_environment()
    if environment is None:
        print(
            "gpu-check: no CUDA device here, nothing checked (on a GPU machine: docs/distributed.md, 'GPU check')"
        )
        return 0
    started = args.started or time.time()
    in_venv = Path(sys.prefix).resolve() == gpu_check.VENV.resolve()
    if (gpu_check.PACK / "manifest.json").is_file() and not in_venv:
        try:
            python = gpu_check.install_pack()
        except RuntimeError as err:
            print(f"gpu-check: {err}", file=sys.stderr)
            return 1
        os.execv(python, [str(python), __file__, "check", "--started", str(started)])
    if not in_venv:
        print(f"gpu-check: no {gpu_check.PACK}/ (make gpu-wheels): using this Python's own packages")
    return gpu_check.run_check(started=started)


if __name__ == "__main__":
    sys.exit(main())
