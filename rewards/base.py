"""What a reward is: the :class:`Reward` base class and the :class:`Sample` it scores.

TRL calls a reward function as ``fn(prompts=..., completions=..., completion_ids=..., **columns,
trainer_state=..., log_extra=..., log_metric=...)`` and expects one ``float`` (or ``None``, "cannot be
scored") per completion. :meth:`Reward.__call__` implements that convention once: it turns each
completion into a :class:`Sample` (the completion's text, its prompt, its token ids and that row's
dataset columns) and hands the list to :meth:`Reward.score_batch`. A subclass only writes
:meth:`Reward.score` (one sample) or, when scoring benefits from seeing the whole batch (caching a
gold shared by a group), :meth:`Reward.score_batch`.

Rewards are instances of module-level classes holding plain parameters, so they pickle (TRL may ship
reward functions to another process) and ``reward.__name__`` is the registered name (TRL names the
reward's log column after ``__name__``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rewards.typecheck import parameters

logger = logging.getLogger(__name__)

#: Keyword arguments TRL passes that are not per-completion dataset columns.
TRAINER_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)

LogExtra = Callable[[str, list], None]


def completion_text(completion: Any) -> str:
    """The text of one completion, whatever shape it arrives in; never raises.

    Accepts a string, a conversation (``[{"role": "assistant", "content": ...}]``: its last assistant
    message, which after tool calls and their results holds the answer; else its first message), a single
    message dict, content given as a list of parts (``[{"type": "text", "text": ...}]``), bytes (decoded as
    UTF-8 with replacement) or ``None`` (empty text).

    >>> completion_text([{"role": "assistant", "content": "4"}]), completion_text("4"), completion_text(None)
    ('4', '4', '')
    >>> completion_text([{"role": "assistant", "content": "", "tool_calls": []},
    ...                  {"role": "tool", "content": "12"}, {"role": "assistant", "content": "It is 12."}])
    'It is 12.'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)):
        if not completion:
            return ""
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                return completion_text(message)
        return completion_text(completion[0])
    if isinstance(completion, Mapping):
        content = completion.get("content")
        if isinstance(content, (list, tuple)):  # multimodal-style content parts
            return "".join(part.get("text") or "" for part in content if isinstance(part, Mapping))
        return completion_text(content) if content is not None else ""
    if isinstance(completion, (bytes, bytearray)):
        return bytes(completion).decode("utf-8", errors="replace")
    return ""


def prompt_text(prompt: Any) -> str:
    """The end of a prompt as text: a string prompt, or the last message of a conversation."""
    if isinstance(prompt, (list, tuple)):
        return completion_text(prompt[-1]) if prompt else ""
    return completion_text(prompt)


@dataclass(frozen=True)
class Sample:
    """One completion to score, with the row of data it belongs to."""

    text: str
    """The completion's text (see :func:`completion_text`)."""
    prompt: str = ""
    """The prompt's text, or its last message for a conversation ("" when not given)."""
    completion_ids: Sequence[int] | None = None
    """The completion's token ids when the trainer passes them."""
    columns: Mapping[str, Any] = field(default_factory=dict)
    """This row's dataset columns (``solution``, ``numbers``, ...)."""


def _column(kwargs: Mapping[str, Any], name: str, size: int, reward: str) -> Sequence[Any] | None:
    """A per-completion list from the keyword arguments, checked against the batch size."""
    values = kwargs.get(name)
    if values is None:
        return None
    if not _is_sequence(values):
        raise ValueError(
            f"reward {reward!r}: keyword {name!r} must be a list with one value per completion, "
            f"got {type(values).__name__}"
        )
    if len(values) != size:
        raise ValueError(f"reward {reward!r}: {len(values)} values for {name!r} but {size} completions")
    return values


class Reward:
    """Base class of every registered reward. Subclasses implement :meth:`score` or :meth:`score_batch`.

    Conventions a subclass follows:

    * its ``__init__`` takes keyword-only parameters, each with a default (or
      :data:`rewards.registry.REQUIRED`) and a type annotation; the registry reads them to validate
      recipe params and to report them (:func:`rewards.reward_params`);
    * each parameter is stored under its own name (``self.strict = strict``), so :attr:`params` and
      ``repr()`` can show them;
    * construction is cheap and starts nothing (validators build rewards before any model loads);
    * :attr:`required_columns` names the dataset columns it reads.
    """

    name: ClassVar[str] = ""
    """The registered name; set by :func:`rewards.register`."""
    required_columns: ClassVar[tuple[str, ...]] = ()
    """Dataset columns that must be passed as keyword arguments (one value per completion)."""
    is_accuracy: ClassVar[bool] = False
    """Whether a score of 1.0 means "correct" (so :class:`CosineLength` may use it)."""
    origin: str = ""
    """The file a user's reward (named by import path) came from; "" for a shipped one."""
    max_score: ClassVar[float] = 1.0
    """The best score a completion can get: 1.0 for accuracy and format rewards, 0.0 for penalties
    (the reward audit's "full marks")."""

    @property
    def __name__(self) -> str:  # TRL names the reward (its log column) after __name__
        return self.name

    @classmethod
    def signature(cls) -> dict[str, tuple[Any, Any]]:
        """``{param: (default, annotation)}`` from ``__init__``'s parameters, which must all be keyword-only
        with a default (``REQUIRED`` when there is none): what the registry checks a recipe's params against."""
        cached = cls.__dict__.get("_signature_cache")
        if cached is not None:
            return cached
        params: dict[str, tuple[Any, Any]] = {}
        if cls.__init__ is not object.__init__:
            for param in parameters(cls.__init__).values():
                if param.kind is not param.KEYWORD_ONLY or param.default is param.empty:
                    raise TypeError(
                        f"{cls.__qualname__}.__init__: parameter {param.name!r} must be keyword-only with a "
                        "default (use REQUIRED when there is none)"
                    )
                params[param.name] = (param.default, param.annotation)
        cls._signature_cache = params
        return params

    @property
    def params(self) -> dict[str, Any]:
        """This reward's parameter values, by name."""
        return {key: getattr(self, key) for key in self.signature()}

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self.params.items())
        return f"get_reward({self.name!r}{', ' if args else ''}{args})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score ``completions`` (TRL's calling convention); dataset columns arrive as keyword arguments.

        Raises ``ValueError`` only for caller mistakes (a missing column, columns of the wrong
        length); whatever the completions contain, each gets a score.
        """
        samples = self.samples(completions, kwargs)
        log_extra = kwargs.get("log_extra")
        log_extra = log_extra if callable(log_extra) else None
        try:
            scores = self.score_batch(samples, log_extra)
        except RewardSetupError:
            raise
        except Exception:
            # A bug tripped by some completion: score the batch one by one so only that one gets 0.
            self._warn_once()
            scores = [self._score_alone(sample) for sample in samples]
        return [_clean(score) for score in scores]

    def samples(self, completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Sample]:
        """One :class:`Sample` per completion, with its prompt, token ids and dataset columns."""
        size = len(completions)
        self.check_columns(kwargs)
        prompts = _column(kwargs, "prompts", size, self.name)
        ids = _column(kwargs, "completion_ids", size, self.name)
        columns = {
            key: _column(kwargs, key, size, self.name)
            for key, value in kwargs.items()
            if key not in TRAINER_KWARGS and (key in self.required_columns or _is_column(value, size))
        }
        return [
            Sample(
                text=completion_text(completion),
                prompt=prompt_text(prompts[i]) if prompts is not None else "",
                completion_ids=ids[i] if ids is not None else None,
                columns={key: values[i] for key, values in columns.items()},
            )
            for i, completion in enumerate(completions)
        ]

    def check_columns(self, kwargs: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` when a column of :attr:`required_columns` is not among the keyword arguments."""
        for column in self.required_columns:
            if kwargs.get(column) is None:
                where = f" ({self.origin})" if self.origin else ""
                raise ValueError(
                    f"reward {self.name!r}{where} needs the dataset column {column!r} (passed as keyword "
                    f"argument {column}=[one value per completion]); got keywords {sorted(kwargs)}"
                )

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        """Score a batch; ``log_extra(column, values)`` may add columns to TRL's completions table.

        The default scores each sample with :meth:`score`.
        """
        return [self.score(sample) for sample in samples]

    def score(self, sample: Sample) -> float | None:
        """Score one sample."""
        raise NotImplementedError(f"{type(self).__name__} must implement score() or score_batch()")

    def warmup(self) -> None:
        """Start whatever the reward needs (worker processes) now rather than on the first call."""

    reads_answers: ClassVar[bool] = False
    """Whether :meth:`final_answer` reads an answer (accuracy rewards); evaluation's majority vote needs it."""

    def final_answer(self, text: str) -> str | None:
        """The one final answer this reward reads in ``text``, as it reads it; None when there is not one.

        Evaluation votes with it (maj@k) and writes it to ``samples.jsonl``. Rewards that read no answer
        (format, length) return None.
        """
        return None

    def same_answers(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """For each pair of answers from :meth:`final_answer`: whether this reward counts them as one answer.

        The default compares the strings; a reward with its own notion of equivalence (``1/2`` and
        ``0.5``) overrides it, so that equivalent answers vote together.

        >>> Reward().same_answers([("7", "7"), ("7", "8")])
        [True, False]
        """
        return [a == b for a, b in pairs]

    _warned: ClassVar[set[str]] = set()

    def _score_alone(self, sample: Sample) -> float | None:
        try:
            return self.score_batch([sample], None)[0]
        except RewardSetupError:
            raise
        except Exception:
            return 0.0

    def _warn_once(self) -> None:
        if self.name not in Reward._warned:
            Reward._warned.add(self.name)
            logger.exception("reward %r failed on a completion; scoring that completion 0.0", self.name)


class RewardSetupError(RuntimeError):
    """The reward cannot run at all (e.g. math-verify is missing): raised, never scored as 0."""


def _is_sequence(value: Any) -> bool:
    """A list, tuple, datasets Column, numpy array...: indexable and sized, but not a string or a dict."""
    return (
        hasattr(value, "__len__")
        and hasattr(value, "__getitem__")
        and not isinstance(value, (str, bytes, Mapping))
    )


def _is_column(value: Any, size: int) -> bool:
    return _is_sequence(value) and len(value) == size


def _clean(score: Any) -> float | None:
    """Make sure TRL gets a finite float or None."""
    if score is None:
        return None
    score = float(score)
    return score if math.isfinite(score) else 0.0
