"""The chat template of a tool recipe, and the check that TRL can parse the model's tool calls with it.

TRL parses tool calls only for chat templates it knows exactly (it compares the template's text: Qwen2.5/
Qwen3, Llama 3.1/3.2, Gemma 4, GPT-OSS, ...). A model whose own template has no tool support, such as
SmolLM2, can use one of TRL's templates with the same special tokens: ``model.chat_template: qwen2_5`` puts
TRL's Qwen2.5 template (ChatML, as SmolLM2's tokens are) on the tokenizer. That template writes "You are Qwen,
created by Alibaba Cloud" into a prompt without a system message, so a recipe that picks it sets
``prompt.system``.

``model.chat_template`` is the name of a template TRL ships (``trl/chat_templates/<name>.jinja``) or the path of
a ``.jinja`` file; unset, the tokenizer's own template is used.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

#: Templates that write a default system message when the conversation has none.
ADDS_DEFAULT_SYSTEM = ("qwen2_5",)


def trl_templates_dir() -> Path:
    import trl

    return Path(trl.__file__).parent / "chat_templates"


@functools.cache
def shipped_templates() -> tuple[str, ...]:
    """The names of the chat templates TRL ships (without ``_training`` variants)."""
    return tuple(
        sorted(p.stem for p in trl_templates_dir().glob("*.jinja") if not p.stem.endswith("_training"))
    )


def template_text(name_or_path: str) -> str:
    """The text of a template TRL ships, by name, or of a ``.jinja`` file; ValueError when there is none."""
    if name_or_path.endswith(".jinja"):
        path = Path(name_or_path)
        if not path.is_file():
            raise ValueError(f"no such template file: {name_or_path}")
        return path.read_text(encoding="utf-8")
    path = trl_templates_dir() / f"{name_or_path}.jinja"
    if not path.is_file():
        raise ValueError(
            f"unknown chat template '{name_or_path}'. TRL ships: {', '.join(shipped_templates())}; or give a .jinja file."
        )
    return path.read_text(encoding="utf-8")


def parses_tool_calls(text: str) -> bool:
    """Whether TRL recognises the template `text` and so can parse tool calls written with it."""
    from trl.chat_template_utils import add_response_schema

    try:
        add_response_schema(SimpleNamespace(chat_template=text))
    except ValueError:
        return False
    return True


@functools.cache
def tool_templates() -> tuple[str, ...]:
    """The templates TRL ships whose tool calls it parses: the values a tool recipe may choose."""
    return tuple(name for name in shipped_templates() if parses_tool_calls(template_text(name)))


def template_problem(name_or_path: str | None, tokenizer=None) -> str | None:
    """Why a tool recipe cannot use this template (None when it can). Unset means the tokenizer's own,
    which needs the `tokenizer` to check."""
    if name_or_path is None:
        if tokenizer is None:
            return None
        text = tokenizer.chat_template
        if isinstance(text, str) and parses_tool_calls(text):
            return None
        return (
            "the model's own chat template is not one TRL can parse tool calls with; set model.chat_template to "
            f"one it can ({', '.join(tool_templates())}), e.g. qwen2_5 for a ChatML model such as SmolLM2."
        )
    try:
        text = template_text(name_or_path)
    except ValueError as err:
        return str(err)
    if not parses_tool_calls(text):
        return f"TRL cannot parse tool calls written with '{name_or_path}'; choose one of {', '.join(tool_templates())}."
    return None


def apply_chat_template_choice(tokenizer, name_or_path: str | None):
    """Put the chosen template on `tokenizer` (in place; returns it) and the matching response parser,
    so that ``tokenizer.parse_response`` reads tool calls in evaluation as in training."""
    if name_or_path is not None:
        tokenizer.chat_template = template_text(name_or_path)
    if isinstance(tokenizer.chat_template, str) and parses_tool_calls(tokenizer.chat_template):
        from trl.chat_template_utils import add_response_schema

        add_response_schema(tokenizer)
    return tokenizer
