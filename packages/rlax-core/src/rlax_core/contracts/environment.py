"""Environments: what answers a model's turns in a multi-turn rollout, and tools.

An :class:`Environment` starts an :class:`Episode` per sample from the problem of its
prompt. The worker samples the model's turn, decodes it and hands the text to
:meth:`Episode.step`, which answers with an :class:`EnvStep`: messages to show the model
(tool results, a user turn, feedback), whether the episode is done, and, when it
decides, the reward. The worker renders those messages with the chat template's turn
markers, tokenizes them once and appends them to the live sequence (never re-tokenizing
the history), so the rollout stays one token sequence: the model's tokens, trained, and
the environment's, masked out of the loss.

A reward left as None is the configured judge's to decide, on the model's last turn.
The single-turn path is the environment whose episodes end at the first turn.

A :class:`Tool` is one small class: a name, a description, a pydantic model of its
arguments and :meth:`Tool.call`. Tools are shown to the model in the system prompt and
called in Qwen's format (``<tool_call>{"name": …, "arguments": …}</tool_call>``,
answered by ``<tool_response>…</tool_response>``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from rlax_core.types.record import Record


class Message(Record):
    """One message an environment shows the model."""

    role: Literal["user", "tool"] = Field(
        description="user: a user turn or feedback; tool: a tool's result (Qwen renders "
        "consecutive tool messages as one user turn of <tool_response> blocks)."
    )
    content: str = Field(description="The message text.")


class EnvStep(Record):
    """An environment's answer to one model turn."""

    messages: tuple[Message, ...] = Field(
        default=(), description="What to show the model before its next turn."
    )
    done: bool = Field(default=False, description="The episode is over (no next turn).")
    reward: float | None = Field(
        default=None, description="The episode's reward (done only); None: the judge decides."
    )
    reason: str | None = Field(default=None, description="Why it ended, if not by design.")


@dataclass(frozen=True)
class Turn:
    """One model turn as the worker sampled it.

    Attributes:
        text: its text, special tokens removed.
        token_ids: its tokens, exactly as sampled (the end-of-turn token included).
        context_ids: the sequence before it: the prompt, earlier turns and the
            environment's replies, exactly as the model read them.
        logprobs: per token, its behaviour log-probability.
        versions: per token, the policy version that sampled it.
        stopped: it ended at an end-of-turn token (False: its token budget ran out).
    """

    text: str
    token_ids: tuple[int, ...] = ()
    context_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    versions: tuple[int, ...] = ()
    stopped: bool = True


class Episode(ABC):
    """One sample's conversation with an environment. Its methods may block (a tool in a
    sandbox); the worker runs them off its engine's thread, under a wall-time limit."""

    @abstractmethod
    def step(self, turn: str) -> EnvStep:
        """Answers the model's latest turn (its text, special tokens removed).

        An exception here is the environment's bug: the rollout ends with the error as
        its reason, and its neighbours go on.
        """

    def take(self, turn: Turn) -> EnvStep:
        """Answers the model's latest turn, with its tokens; what the worker calls. By
        default :meth:`step` on its text; an episode that needs the tokens (one that
        hands them to an OpenAI client) overrides this instead."""
        return self.step(turn.text)

    def close(self) -> None:  # noqa: B027  (optional hook with a default)
        """Releases what the episode holds; called once, however it ended."""


class Environment(ABC):
    """Starts episodes; one instance serves a worker's whole run.

    Attributes:
        multi_turn: False for an environment whose episodes never answer a turn (the
            single-turn path): its samples finish at their first turn.
        tools: the tools it offers, shown to the model in the system prompt.
    """

    multi_turn: bool = True
    tools: tuple[Tool, ...] = ()

    @abstractmethod
    def start(self, problem: Mapping[str, Any]) -> Episode:
        """A new episode for one sample of the prompt whose judge's problem is given."""

    def bind(self, tokenizer: Any) -> None:  # noqa: B027  (optional hook with a default)
        """Called with the run's :class:`~rlax_core.models.tokenizer.Tokenizer` before the
        first episode (by every worker or evaluator that runs this environment), for an
        environment that renders chats itself."""

    def close(self) -> None:  # noqa: B027  (optional hook with a default)
        """Releases shared resources (a sandbox pool); idempotent."""


class ToolError(Exception):
    """Raised by :meth:`Tool.call` for a call the model got wrong (bad arguments, a
    failed computation): its message is the error observation the model reads."""


class NoArguments(BaseModel):
    """The arguments of a tool that takes none."""


class Tool(ABC):
    """A function the model may call; a subclass is a few lines::

        class Add(Tool):
            name = "add"
            description = "Adds two integers."

            class Arguments(BaseModel):
                a: int
                b: int

            def call(self, arguments):
                return str(arguments.a + arguments.b)

    Attributes:
        name: what the model writes as ``"name"``.
        description: what it does, for the model.
        Arguments: the pydantic model of its ``arguments`` object: the model is shown its
            JSON schema, and a call whose arguments do not validate is answered with the
            validation error, never run.
    """

    name: str
    description: str
    Arguments: type[BaseModel] = NoArguments

    @abstractmethod
    def call(self, arguments: Any) -> str:
        """Runs the tool on validated ``arguments`` (an ``Arguments`` instance); returns
        its result as text.

        Raises:
            ToolError: the call was wrong; the message is shown to the model.
        """

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI's function format (what Qwen's chat template lists)."""
        parameters = self.Arguments.model_json_schema()
        parameters.pop("title", None)
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    def close(self) -> None:  # noqa: B027  (optional hook with a default)
        """Releases what the tool holds (a sandbox); idempotent."""
