"""A recipe's tools and environment, built once and shared by training, its warm-up and evaluation.

Example:
    >>> from grpo_recipes.recipe import load_recipe
    >>> toolset = Toolset.for_recipe(load_recipe("recipes/calculator-cpu.yaml", check_trainer=False))
    >>> [tool.__name__ for tool in toolset.tools], toolset.environment_factory is None
    (['calculator'], True)
    >>> toolset.tools[0](expression="123 * 45")
    '5535'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .agents.environments import get_environment_class, guarded_factory
from .agents.tools import ToolStats, build_tool, guard
from .recipe import Recipe, RecipeError


def check_tool_template(recipe: Recipe, tokenizer) -> None:
    """A tool recipe's tokenizer (its chat template applied) must be one TRL parses tool calls with."""
    if not recipe.uses_tools or recipe.model.chat_template is not None:
        return  # a named template was checked when the recipe loaded
    from .agents.templates import template_problem

    problem = template_problem(None, tokenizer)
    if problem:
        raise RecipeError(recipe.source, "model.chat_template", problem)


@dataclass
class Toolset:
    """Guarded tools and an environment factory (TRL's `tools=` and `environment_factory=`), one ToolStats."""

    tools: list[Callable[..., Any]] = field(default_factory=list)
    environment_factory: Callable[[], Any] | None = None
    stats: ToolStats = field(default_factory=ToolStats)

    @property
    def enabled(self) -> bool:
        return bool(self.tools) or self.environment_factory is not None

    def by_name(self) -> dict[str, Callable[..., Any]]:
        return {tool.__name__: tool for tool in self.tools}

    @classmethod
    def for_recipe(cls, recipe: Recipe) -> Toolset:
        stats = ToolStats()
        search = recipe.search_dirs
        tools = []
        for spec in recipe.tools:
            tool = build_tool(spec.name, spec.params, search=search)  # checked by the recipe loader already
            tools.append(
                guard(
                    tool,
                    timeout_seconds=spec.timeout_seconds,
                    max_result_chars=spec.max_result_chars,
                    stats=stats,
                )
            )
        factory = None
        if recipe.environment is not None:
            spec = recipe.environment
            env_class, params = get_environment_class(spec.name, spec.params, search=search)
            factory = guarded_factory(
                env_class,
                params,
                timeout_seconds=spec.timeout_seconds,
                max_result_chars=spec.max_result_chars,
                stats=stats,
            )
        return cls(tools, factory, stats)
