r"""``reasoning_gym``: a completion's answer scored by the reasoning-gym task's own ``score_answer``.

reasoning-gym (``pip install reasoning-gym``) has about a hundred procedural tasks, each with a scorer
written by its authors: exact match for most, several valid answers for some (a Sudoku, a path), partial
credit for others. This reward reads the final answer (the last ``<answer>`` block or ``\boxed{}``, or "the answer is ...") and
asks that scorer, so each task is verified as its authors meant.

The rows come from the ``reasoning_gym`` generator (``grpo_recipes.tasks.reasoning_gym``), whose columns
the reward reads: ``solution`` (the gold answer, ``""`` where a task has none), ``metadata`` (the entry's
metadata as :mod:`rewards.tagged_json`), and optionally ``task`` (else the metadata's
``source_dataset``), ``task_config`` (JSON of the task's settings, default ``{}``) and ``question``.

Scorers run in a worker process (``rewards/_reasoning_gym_worker.py``), never in the trainer's: each
answer gets ``timeout_seconds`` and is cut at ``max_answer_chars``; a scorer that raises gives 0.0; model
output is never executed (see the worker). Importing this module imports neither reasoning-gym nor
torch; the worker imports reasoning-gym on first use, and is stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from rewards import tagged_json
from rewards.base import LogExtra, Reward, Sample
from rewards.extract import extract_answer
from rewards.registry import invalid, register
from rewards.worker_pool import STARTUP_TIMEOUT_SECONDS, _Worker

WORKER_SCRIPT = Path(__file__).with_name("_reasoning_gym_worker.py")


class _ScorerWorker:
    """One reasoning-gym worker process per trainer process, shared by every instance of the reward."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._prepared: dict[str, bool] = {}
        self.counters = {"worker_starts": 0, "requests": 0, "timeouts": 0}

    def _live(self) -> _Worker:
        if self._worker is None or not self._worker.alive:
            if self._worker is not None:
                self._worker.kill()
            self._worker = _Worker(WORKER_SCRIPT)
            self._prepared = {}
            self.counters["worker_starts"] += 1
        if not self._worker.wait_ready():  # raises WorkerUnavailableError when reasoning-gym is missing
            self._worker.kill()
            self._worker = None
            raise TimeoutError("the reasoning-gym worker did not start")
        return self._worker

    def warmup(self) -> None:
        with self._lock:
            self._live()

    def _prepare(self, worker: _Worker, task: str, config: dict) -> bool:
        """Whether the task's scorer can be built with this config (built once per worker)."""
        key = json.dumps([task, config], sort_keys=True)
        if key not in self._prepared:
            reply = worker.request({"op": "prepare", "task": task, "config": config}, STARTUP_TIMEOUT_SECONDS)
            if reply is None:
                worker.kill()
                raise TimeoutError(f"building the scorer of {task!r} did not finish")
            self._prepared[key] = bool(reply.get("ok"))
        return self._prepared[key]

    def score(self, task: str, config: dict, entry: dict, answer: str, timeout: float) -> float | str | None:
        """The scorer's verdict; ``"timeout"`` past ``timeout`` seconds, ``"error"`` when it raised, None
        when the task cannot be scored at all (unknown task, bad config)."""
        with self._lock:
            for attempt in range(2):  # a worker found dead (not late) is replaced and asked again, once
                try:
                    worker = self._live()
                    if not self._prepare(worker, task, config):
                        return None
                except TimeoutError:
                    return "error"
                self.counters["requests"] += 1
                started = time.monotonic()
                request = {"op": "score", "task": task, "config": config, "entry": entry, "answer": answer}
                reply = worker.request({**request, "soft_timeout": 0.9 * timeout}, timeout)
                if reply is not None:
                    break
                late = time.monotonic() - started >= timeout
                self.counters["timeouts"] += late
                worker.kill()
                self._worker = None
                if late or attempt:
                    return "timeout" if late else "error"
            if reply.get("timeout"):
                self.counters["timeouts"] += 1
                return "timeout"
            if "score" in reply:
                return float(reply["score"])
            return "error"

    def shutdown(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None


#: The process-wide worker (module-level, so reward instances stay small and picklable).
WORKER = _ScorerWorker()
# Stopped at exit, not left running to the garbage collector (a no-op when no worker ever started).
atexit.register(WORKER.shutdown)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


@register("reasoning_gym")
class ReasoningGymScore(Reward):
    r"""The task's own ``score_answer(answer, entry)`` for the completion's final answer, in [0, 1].

    No answer in the completion scores 0.0, as does an answer longer than ``max_answer_chars``, a scorer
    that raises, and one that overruns ``timeout_seconds``. A row whose task cannot be scored (unknown
    task, bad ``task_config``) scores None.

    Params:
        answer_format: the last ``<answer>...</answer>`` block (``"answer_tag"``), the last ``\boxed{}``
            (``"boxed"``), or, for small models that write neither, the phrase after the last "the answer
            is" / "Answer:" up to the end of its sentence (``"answer_is"``: one-line answers only);
            stripped of surrounding white space.
        partial_credit: keep the scorer's partial credit (some give 0.01-0.1 to a well-formed wrong
            answer, a share of the right cells, ...); false: 1.0 for full marks, else 0.0.
        timeout_seconds: hard limit per answer on the scorer (its worker process is killed and replaced).
        max_answer_chars: longer answers score 0.0 unread.

    Columns: ``solution`` and ``metadata``; ``task``, ``task_config`` and ``question`` when present.

    >>> from rewards import tagged_json
    >>> row = {"task": "leg_counting", "solution": "8", "metadata": tagged_json.encode({"source_dataset": "leg_counting"})}
    >>> completions = ["Two spiders: <answer>16</answer>", "<answer> 8 </answer>", "8", "<answer>8 legs</answer>"]
    >>> columns = {key: [value] * len(completions) for key, value in row.items()}
    >>> ReasoningGymScore()(completions, **columns)  # leg_counting's scorer: a share for "8" inside the answer
    [0.0, 1.0, 0.0, 0.16666666666666666]
    >>> ReasoningGymScore(partial_credit=False)(completions, **columns)
    [0.0, 1.0, 0.0, 0.0]
    """

    required_columns = ("solution", "metadata")
    is_accuracy = True

    def __init__(
        self,
        *,
        answer_format: Literal["answer_tag", "boxed", "answer_is"] = "answer_tag",
        partial_credit: bool = True,
        timeout_seconds: float = 5.0,
        max_answer_chars: int = 10_000,
    ) -> None:
        if not timeout_seconds > 0:
            raise invalid("reasoning_gym", f"timeout_seconds must be > 0, got {timeout_seconds!r}")
        if not 1 <= max_answer_chars <= 1_000_000:
            raise invalid(
                "reasoning_gym", f"max_answer_chars must be in 1..1000000, got {max_answer_chars!r}"
            )
        self.answer_format = answer_format
        self.partial_credit = partial_credit
        self.timeout_seconds = float(timeout_seconds)
        self.max_answer_chars = max_answer_chars

    def warmup(self) -> None:
        WORKER.warmup()

    reads_answers = True

    def answer(self, text: str) -> str | None:
        """The completion's final answer per ``answer_format``, or None."""
        return extract_answer(text, self.answer_format)

    def final_answer(self, text: str) -> str | None:
        """The answer, stripped (evaluation's majority vote groups identical answers)."""
        found = self.answer(text)
        return found.strip() if found and found.strip() else None

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        scores: list[float | None] = []
        answers: list[str] = []
        seen: dict[tuple, float | None] = {}  # a group's completions often give the same answer
        for sample in samples:
            answer = self.answer(sample.text)
            answers.append("[no answer]" if answer is None else answer[:200])
            if answer is None or len(answer) > self.max_answer_chars:
                scores.append(0.0)
                continue
            columns = sample.columns
            key = tuple(_text(columns.get(name)) for name in ("task", "task_config", "metadata", "solution"))
            key += (answer,)
            if key not in seen:
                seen[key] = self._score_one(columns, answer)
                if seen[key] == "timeout":
                    answers[-1] = "[timeout] " + answers[-1]
            verdict = seen[key]
            scores.append(verdict if verdict is None else _final(verdict, self.partial_credit))
        if log_extra is not None:
            log_extra(f"{self.name}/answer", answers)
        return scores

    def _score_one(self, columns: Mapping[str, Any], answer: str) -> float | str | None:
        metadata = _text(columns.get("metadata"))
        task = _text(columns.get("task"))
        try:
            if not task:
                task = _text(tagged_json.decode(metadata).get("source_dataset"))
            config = json.loads(_text(columns.get("task_config")) or "{}")
        except (ValueError, AttributeError):
            return None
        if not task or not isinstance(config, dict):
            return None
        solution = _text(columns.get("solution"))
        entry = {"question": _text(columns.get("question")), "answer": solution or None, "metadata": metadata}
        return WORKER.score(task, config, entry, answer, self.timeout_seconds)


def _final(verdict: float | str, partial_credit: bool) -> float:
    """A score in [0, 1] from the worker's verdict (a timeout or an error is 0.0)."""
    if isinstance(verdict, str):
        return 0.0
    score = min(max(verdict, 0.0), 1.0)
    return score if partial_credit else float(score >= 1.0)
