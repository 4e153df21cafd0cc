"""The ``reasoning_gym`` generator: train and held-out rows from any reasoning-gym task, or a weighted mix.

A recipe names it like the built-in tasks::

    dataset:
      generator:
        name: reasoning_gym
        train_size: 1000
        eval_size: 200
        params: {task: leg_counting, min_animals: 1, max_animals: 3}    # one task and its settings
        # or several, with weights (a weight, or a mapping of weight and settings):
        # params: {tasks: {leg_counting: 1, basic_arithmetic: {weight: 2, max_terms: 3}}}

The settings are the fields of the task's config dataclass in reasoning-gym (``seed`` and ``size`` are
the generator's own: ``dataset.generator.seed`` and the split sizes). They are checked before anything
loads: an unknown task or setting is one line naming the key and the closest name, and a value the
task's own ``validate()`` rejects is reported with its message.

Each row has the columns in :data:`COLUMNS`: ``question``, ``answer`` (the gold answer, ``""`` for the
tasks that have none and accept any valid solution), ``task``, ``task_config`` (the settings, JSON) and
``metadata`` (the entry's metadata, :mod:`rewards.tagged_json`): what the ``reasoning_gym`` reward needs
to call the task's own ``score_answer``.

Splits: questions are distinct within a split and the held-out split shares none with the training one.
Seeds alone do not ensure that (reasoning-gym seeds item ``i`` of seed ``s`` with ``s + i``, and a small
task, like a coin flip's few settings, repeats itself), so questions are deduplicated; a task that cannot
give enough distinct questions is an error that says how many it gave. A mix draws each row's task by
weight, from a stream of that task's questions; an exhausted task drops out of the draw.

reasoning-gym is imported only when the generator is used (``pip install -e '.[reasoning-gym]'``).

Example (needs reasoning-gym):
    >>> train, held_out = GENERATOR.splits(3, 2, seed=0, task="basic_arithmetic", max_terms=2, max_digits=1)
    >>> sorted(train[0]), train[0]["task"]
    (['answer', 'metadata', 'question', 'task', 'task_config'], 'basic_arithmetic')
    >>> {row["question"] for row in train} & {row["question"] for row in held_out}
    set()
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from typing import Any

from rewards import tagged_json
from rewards.typecheck import FieldError, check_mapping, check_value, dataclass_fields, join_key, suggest

COLUMNS = ("question", "answer", "task", "task_config", "metadata")
#: Settings the generator sets itself, per task.
_OWN_SETTINGS = {"seed": "dataset.generator.seed", "size": "train_size and eval_size"}
#: Items drawn from a task's stream per distinct question asked for, before it counts as exhausted.
DRAWS_PER_ROW = 10
#: Offset of the held-out split's seed, far beyond any stream's length.
HELD_OUT_SEED_OFFSET = 1_000_003


def _datasets() -> dict[str, tuple[type, type]]:
    """reasoning-gym's task registry: name -> (dataset class, config class)."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise FieldError(
            "",
            "the reasoning_gym generator needs the reasoning-gym package: pip install -e '.[reasoning-gym]'.",
        ) from None
    return {name: classes for name, classes in DATASETS.items() if name != "composite"}


def _check_task(name: Any, settings: Mapping[str, Any], key: str, name_key: str) -> dict[str, Any]:
    """``settings`` (at ``key``) checked against task ``name``'s (at ``name_key``) config dataclass and its
    ``validate()``."""
    tasks = _datasets()
    if not isinstance(name, str) or name not in tasks:
        hint = suggest(str(name), tasks) or f" See reasoning_gym.factory.DATASETS ({len(tasks)} tasks)."
        composite = " (for a mix, use tasks: {name: weight, ...})" if name == "composite" else ""
        raise FieldError(name_key, f"unknown reasoning-gym task '{name}'{composite}.{hint}")
    config_cls = tasks[name][1]
    fields, _ = dataclass_fields(config_cls)
    for own, where in _OWN_SETTINGS.items():
        if own in settings:
            raise FieldError(join_key(key, own), f"set by the generator ({where}); remove it here.")
    fields = {field: annotation for field, annotation in fields.items() if field not in _OWN_SETTINGS}
    checked = check_mapping(settings, fields, key)
    try:
        config = config_cls(**checked)
        if hasattr(config, "validate"):
            config.validate()
    except Exception as err:  # reasoning-gym's checks are asserts and ValueErrors
        raise FieldError(
            key, f"reasoning-gym's {name} rejects these settings: {err or type(err).__name__}."
        ) from None
    return checked


def _task_specs(params: Mapping[str, Any]) -> dict[str, tuple[float, dict[str, Any]]]:
    """``{task: (weight, settings)}`` from checked params, one task or a mix."""
    if "tasks" in params:
        specs = {}
        for name, spec in params["tasks"].items():
            if isinstance(spec, Mapping):
                settings = {key: value for key, value in spec.items() if key != "weight"}
                specs[name] = (float(spec.get("weight", 1.0)), settings)
            else:
                specs[name] = (float(spec), {})
        return specs
    settings = {key: value for key, value in params.items() if key != "task"}
    return {params["task"]: (1.0, settings)}


class ReasoningGymGenerator:
    """reasoning-gym's tasks as a generator of ``grpo_recipes.tasks.GENERATORS`` (same interface)."""

    columns = COLUMNS

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``{task: name, ...settings}`` or ``{tasks: {name: weight | {weight, ...settings}}}``, checked;
        raises FieldError keyed by the parameter.

        >>> GENERATOR.check_params({"task": "leg_countin"})
        Traceback (most recent call last):
        rewards.typecheck.FieldError: task: unknown reasoning-gym task 'leg_countin'. Did you mean 'leg_counting'?
        >>> GENERATOR.check_params({"tasks": {"leg_counting": {"weight": 2, "max_animals": 0}}})
        Traceback (most recent call last):
        rewards.typecheck.FieldError: tasks.leg_counting: reasoning-gym's leg_counting rejects these settings: max_animals must be >= min_animals.
        """
        if not isinstance(params, Mapping):
            raise FieldError("", f"expected a mapping, got {params!r}.")
        if ("task" in params) == ("tasks" in params):
            raise FieldError("", "give exactly one of 'task' (one task and its settings) or 'tasks' (a mix).")
        if "task" in params:
            settings = {key: value for key, value in params.items() if key != "task"}
            return {"task": params["task"], **_check_task(params["task"], settings, "", "task")}
        if set(params) != {"tasks"}:
            extra = sorted(set(params) - {"tasks"})
            raise FieldError(extra[0], "with 'tasks', settings go under each task: {name: {weight: 1, ...}}.")
        tasks = check_value(params["tasks"], dict[str, Any], "tasks")
        if not tasks:
            raise FieldError("tasks", "name at least one task.")
        checked: dict[str, Any] = {}
        for name, spec in tasks.items():
            key = join_key("tasks", name)
            if isinstance(spec, Mapping):
                settings = {k: v for k, v in spec.items() if k != "weight"}
                weight = check_value(spec.get("weight", 1.0), float, join_key(key, "weight"))
                checked[name] = {"weight": weight, **_check_task(name, settings, key, key)}
            else:
                weight = check_value(spec, float, key)
                _check_task(name, {}, key, key)
                checked[name] = weight
            if not weight > 0:
                raise FieldError(key, f"a weight must be > 0, got {weight!r}.")
        return {"tasks": checked}

    def with_defaults(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` as they are: a task's unset settings are left to reasoning-gym."""
        return dict(params)

    def capacity(self, **params: Any) -> int:
        """Not known ahead for reasoning-gym's tasks: generation says when a task runs out."""
        return 2**62

    def generate(
        self, n: int, seed: int, exclude: set[str] | None = None, **params: Any
    ) -> list[dict[str, Any]]:
        """``n`` rows with distinct questions, none in ``exclude``; tasks drawn by weight."""
        specs = _task_specs(params)
        rng = random.Random(seed)
        streams = {name: _stream(name, settings, seed, n) for name, (_, settings) in specs.items()}
        seen = set(exclude or ())
        rows: list[dict[str, Any]] = []
        while len(rows) < n and streams:
            names = list(streams)
            name = rng.choices(names, weights=[specs[task][0] for task in names])[0]
            row = next((row for row in streams[name] if row["question"] not in seen), None)
            if row is None:  # this task gave every distinct question it could
                del streams[name]
                continue
            seen.add(row["question"])
            rows.append(row)
        if len(rows) < n:
            raise ValueError(
                f"reasoning_gym: asked for {n} distinct questions of {', '.join(specs)}, but got only "
                f"{len(rows)} in {DRAWS_PER_ROW * n + 100} draws per task (and {len(exclude or ())} held "
                "out); these settings allow fewer. Lower train_size/eval_size or widen the settings."
            )
        return rows

    def splits(
        self, train_size: int, eval_size: int, seed: int, **params: Any
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A train split and a held-out split with no question in common."""
        eval_rows = self.generate(eval_size, seed=seed + HELD_OUT_SEED_OFFSET, **params)
        held_out = {row["question"] for row in eval_rows}
        return self.generate(train_size, seed=seed, exclude=held_out, **params), eval_rows


def _stream(task: str, settings: dict[str, Any], seed: int, n: int) -> Iterator[dict[str, Any]]:
    """Rows of one task, in reasoning-gym's order for ``seed``."""
    import reasoning_gym

    draws = DRAWS_PER_ROW * n + 100
    dataset = reasoning_gym.create_dataset(task, seed=seed, size=draws, **settings)
    task_config = json.dumps(settings, sort_keys=True)
    for index in range(draws):
        entry = dataset[index]
        answer = entry["answer"]
        yield {
            "question": entry["question"],
            "answer": "" if answer is None else str(answer),
            "task": task,
            "task_config": task_config,
            "metadata": tagged_json.encode(entry["metadata"]),
        }


GENERATOR = ReasoningGymGenerator()
