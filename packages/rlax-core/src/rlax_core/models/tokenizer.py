"""Tokenizers from a checkpoint directory: ``tokenizer.json`` plus the chat template.

Encoding uses the ``tokenizers`` library on the same ``tokenizer.json`` that
``transformers`` reads; the chat template in ``tokenizer_config.json`` is rendered with
the same sandboxed Jinja settings ``transformers`` uses, so both give identical ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rlax_core.models.safetensors_file import CheckpointError
from rlax_core.storage import AnyPath, storage_path

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


class Tokenizer:
    """Text ↔ token ids, special tokens and the chat template of a Qwen-family model."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        chat_template: str | None = None,
        eos_token: str | None = None,
        pad_token: str | None = None,
    ) -> None:
        self.backend = backend
        self.chat_template = chat_template
        self.eos_token = eos_token
        self.pad_token = pad_token or eos_token

    @classmethod
    def from_dir(cls, path: str | AnyPath) -> Tokenizer:
        """Loads ``tokenizer.json`` and, if present, ``tokenizer_config.json``, from a
        local folder or one in a bucket (see :mod:`rlax_core.storage`).

        Raises:
            CheckpointError: a file is missing or unreadable.
        """
        path = storage_path(path) if isinstance(path, str) else path
        try:
            backend = tokenizers.Tokenizer.from_str((path / TOKENIZER_FILE).read_text())
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise CheckpointError(f"{path / TOKENIZER_FILE}: cannot load: {exc}") from None
        config: dict[str, Any] = {}
        config_path = path / TOKENIZER_CONFIG_FILE
        if config_path.exists():
            try:
                config = json.loads(config_path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise CheckpointError(f"{config_path}: unreadable: {exc}") from None
        return cls(
            backend,
            chat_template=config.get("chat_template"),
            eos_token=_token_text(config.get("eos_token")),
            pad_token=_token_text(config.get("pad_token")),
        )

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int:
        """The id of a (special) token; raises ``KeyError`` if it is not in the vocabulary."""
        token_id = self.backend.token_to_id(token)
        if token_id is None:
            raise KeyError(f"token {token!r} is not in the vocabulary")
        return token_id

    @property
    def eos_token_id(self) -> int | None:
        """Id of the end-of-sequence token, if the tokenizer has one."""
        return None if self.eos_token is None else self.token_id(self.eos_token)

    @property
    def pad_token_id(self) -> int | None:
        """Id of the padding token (the EOS token when none is set)."""
        return None if self.pad_token is None else self.token_id(self.pad_token)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (Qwen adds no BOS; special tokens in the text are kept)."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of token ids."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> str:
        """The chat template applied to ``messages`` (``[{"role": ..., "content": ...}]``),
        and ``tools`` (OpenAI's function format) where the template lists them.

        Raises:
            ValueError: the tokenizer has no chat template, or the template refused the
                messages.
        """
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat_template in tokenizer_config.json")
        try:
            return _compile(self.chat_template).render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                tools=list(tools) if tools else None,
                eos_token=self.eos_token,
                pad_token=self.pad_token,
            )
        except jinja2.TemplateError as exc:
            raise ValueError(f"the chat template failed: {exc}") from None

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Token ids of the rendered chat (what the model is prompted with)."""
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        return self.encode(text)


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens as strings or as {"content": ...}.
    if isinstance(value, dict):
        return value.get("content")
    return value


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _compile(template: str) -> jinja2.Template:
    # The settings transformers uses for chat templates.
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = _raise
    return env.from_string(template)
