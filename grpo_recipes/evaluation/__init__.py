"""Evaluation: generate on held-out problems, score with the recipe's own rewards, and report.

- ``generate``: sampling settings and generation through vLLM (a child process) or transformers.
- ``evaluate``: a model on a recipe's problems (greedy or k samples), samples files, paired comparison.
- ``metrics``: pure functions: pass@k, maj@k, Wilson and paired intervals, per-problem summaries.
- ``report``: a run folder's report.md and report.png, from its files alone.
- ``audit``: the reward audit (ideal and corrupted completions on gold answers).
- ``ablation``: sweeps (``make ablate``): a recipe trained per value and seed, run folders compared paired.

May import the shared modules of ``grpo_recipes`` (recipe, data, models, reward stack, ports); never
``training`` or ``launch``.
"""
