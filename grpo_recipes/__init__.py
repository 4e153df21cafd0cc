"""grpo-recipes: the small library under the recipes (recipe loading, prompts, models, training, evaluation).

Imports are kept light here; torch, transformers and trl load only when a model is actually needed.
"""

__version__ = "0.1.0"
