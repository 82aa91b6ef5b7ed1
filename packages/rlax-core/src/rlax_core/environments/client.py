"""Environments written against an OpenAI client, trained token-exactly.

Much of the ecosystem's environments are programs that call a chat-completions API:
prime's ``verifiers``, agent harnesses, a user's own loop. A :class:`ClientEnvironment`
runs such a program per episode, with an ``openai.AsyncOpenAI`` client whose base URL is
the episode's own on the worker's endpoint (:mod:`rlax_core.serve.episode_api`). Control
is turned inside out: the program's request does not generate anything; it waits for
the model turn the worker samples for that episode, on the worker's engine, and gets it
as the response. Each later request must repeat the conversation it was answered and
add user or tool messages; those become the environment's reply, tokenized once and
appended to the live sequence. The history is never re-rendered, so the rollout is the
token sequence the model read and wrote, whatever the program does with text.

Checks keep that promise honest, each a clear refusal (HTTP 400 to the program) that
ends the rollout unjudged, never a silent drift:

- the first request, rendered with the chat template and its tools, must be the prompt
  the worker sampled from, token for token (give the run the environment's own prompts:
  a prompt source with ``messages``);
- a later request may not change what came before (an edited or dropped message);
- it may only add user and tool messages.

The program's return value is the episode's reward (None: the configured judge decides).
Sampling settings in the requests are not followed: the run's are, since they are what
the trainer's importance ratios assume; a request's answer is the worker's turn, with its
budget (``rollout.turns.turn_tokens``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlax_core.contracts.environment import Environment, EnvStep, Episode, Message, Tool, Turn
from rlax_core.environments.tool_calls import OPEN
from rlax_core.errors import ConfigError

_CLOSED = object()  # an episode's inbox: the worker closed it
CLOSING_GRACE_S = 5.0  # a closed episode's program has this long to end on its own


@dataclass
class _Finished:
    reward: float | None


@dataclass
class _Failed:
    error: BaseException


class EnvironmentProtocolError(Exception):
    """An episode's program broke the endpoint's rules (see the module docstring)."""


class ListedTool(Tool):
    """A tool shown to the model whose calls its environment runs itself (a client
    environment's tools: the program executes them)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        function = schema.get("function", schema)
        self.name = function["name"]
        self.description = function.get("description", "")
        self._schema = {"type": "function", "function": dict(function)}

    def call(self, arguments: Any) -> str:
        raise NotImplementedError(f"the environment runs {self.name} itself")

    def schema(self) -> dict[str, Any]:
        return self._schema


class ClientEnvironment(Environment):
    """An environment that is a program calling an OpenAI client; subclass it with
    :meth:`run` (and ``tools``, the schemas its requests offer, as :class:`ListedTool`)::

        class Echo(ClientEnvironment):
            async def run(self, client, model, problem):
                messages = [{"role": "user", "content": problem["question"]}]
                reply = await client.chat.completions.create(model=model, messages=messages)
                messages += [reply.choices[0].message.model_dump(exclude_none=True),
                             {"role": "user", "content": "Are you sure?"}]
                final = await client.chat.completions.create(model=model, messages=messages)
                return float(problem["answer"] in final.choices[0].message.content)

    Needs rlax-core's ``serve`` extra (aiohttp) and ``openai``.
    """

    model_name = "policy"

    def __init__(self) -> None:
        self._endpoint: Any = None
        self._tokenizer: Any = None

    @abstractmethod
    async def run(self, client: Any, model: str, problem: Mapping[str, Any]) -> float | None:
        """One episode: the conversation through ``client`` (an ``openai.AsyncOpenAI``
        on the episode's endpoint, calls answered with ``model``); returns its reward,
        or None for the configured judge to decide on the last turn."""

    def bind(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def start(self, problem: Mapping[str, Any]) -> Episode:
        if self._tokenizer is None:
            raise ConfigError("a client environment renders chats: the worker binds it to "
                              "the run's tokenizer before its first episode")  # fmt: skip
        endpoint = self._serve()
        episode = _ClientEpisode(self, endpoint, self._tokenizer)
        episode.task = endpoint.run(episode.program(self, problem))
        return episode

    def client(self, base_url: str) -> Any:
        """The OpenAI client of one episode."""
        try:
            import openai
        except ImportError:
            raise ConfigError("this environment talks to the policy through the OpenAI "
                              "client: pip install openai") from None  # fmt: skip
        return openai.AsyncOpenAI(base_url=base_url, api_key="rlax", max_retries=0, timeout=None)

    def close(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()
            self._endpoint = None

    def _serve(self) -> Any:
        if self._endpoint is None:
            try:
                from rlax_core.serve.episode_api import EpisodeEndpoint
            except ImportError:
                raise ConfigError("a client environment is served over HTTP: pip install "
                                  "'rlax-core[serve]'") from None  # fmt: skip
            self._endpoint = EpisodeEndpoint()
        return self._endpoint


class _ClientEpisode(Episode):
    """One program's conversation; its requests arrive in the inbox as calls."""

    def __init__(self, environment: ClientEnvironment, endpoint: Any, tokenizer: Any) -> None:
        self._endpoint, self._tokenizer = endpoint, tokenizer
        self.id, self._inbox = endpoint.open()
        self._call: Any = None  # the request the next turn answers
        self._history: list[dict[str, Any]] = []  # the conversation, as the template reads it
        self.task: Any = None

    async def program(self, environment: ClientEnvironment, problem: Mapping[str, Any]) -> None:
        client = environment.client(self._endpoint.base_url(self.id))
        try:
            reward = await environment.run(client, environment.model_name, problem)
            self._inbox.put(_Finished(None if reward is None else float(reward)))
        except BaseException as exc:  # cancelled, or the program's bug: the episode ends
            self._inbox.put(_Failed(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            await client.close()

    def step(self, turn: str) -> EnvStep:
        return self.take(Turn(text=turn))

    def take(self, turn: Turn) -> EnvStep:
        if self._call is None:  # the turn answers the program's first request
            event = self._next()
            if not _is_call(event):
                return self._ended(event)
            self._open(event, turn)
        self._answer(turn)
        event = self._next()
        if not _is_call(event):
            return self._ended(event)
        self._call = event
        return EnvStep(messages=self._grown(event))

    def close(self) -> None:
        self._endpoint.close_episode(self.id)
        if self._call is not None:
            self._refuse(self._call, 409, "the rollout ended (a worker limit, or the run "
                                          "gave the group back)")  # fmt: skip
        self._inbox.put(_CLOSED)
        if self.task is not None:
            self._endpoint.cancel(self.task, after=CLOSING_GRACE_S)

    # -- the conversation --

    def _next(self) -> Any:
        return self._inbox.get()

    def _ended(self, event: Any) -> EnvStep:
        if isinstance(event, _Finished):
            return EnvStep(done=True, reward=event.reward)
        if isinstance(event, _Failed):
            error = event.error
            reason = f"the environment's program failed: {type(error).__name__}: {error}"
            raise EnvironmentProtocolError(reason) from error
        raise EnvironmentProtocolError("the episode was closed")

    def _open(self, call: Any, turn: Turn) -> None:
        """Takes the first request: it must render to the prompt the turn was sampled from."""
        if turn.context_ids:
            try:
                rendered = self._tokenizer.apply_chat_template(call.messages, tools=call.tools)
            except ValueError as exc:
                self._refuse(call, 400, f"the messages cannot be rendered: {exc}")
                raise EnvironmentProtocolError(str(exc)) from None
            if tuple(rendered) != turn.context_ids:
                pairs = enumerate(zip(rendered, turn.context_ids, strict=False))
                shorter = min(len(rendered), len(turn.context_ids))
                at = next((i for i, (a, b) in pairs if a != b), shorter)
                self._refuse(call, 400, (
                    f"the first request renders to {len(rendered)} tokens, which differ from "
                    f"the {len(turn.context_ids)} of the prompt the worker sampled from, at "
                    f"token {at}: the run's prompts must be the environment's own (its "
                    "system prompt and tools included)"
                ))  # fmt: skip
                raise EnvironmentProtocolError("the environment's first request is not the "
                                               "prompt the model was given")  # fmt: skip
        self._call, self._history = call, list(call.messages)

    def _answer(self, turn: Turn) -> None:
        """Answers the waiting request with the turn."""
        # Imported here: rlax_core.serve imports this package (its tool-call parser).
        from rlax_core.serve.episode_api import chat_completion
        from rlax_core.serve.messages import template_message, tool_calls_of

        call, self._call = self._call, None
        calls = tool_calls_of(turn.text) if call.tools else None
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if calls:
            message["content"] = turn.text[: turn.text.index(OPEN)].rstrip() or None
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else "stop" if turn.stopped else "length"
        self._history.append(template_message(message))
        self._endpoint.answer(call, chat_completion(call, message, finish, turn,
                                                    self._tokenizer.decode))  # fmt: skip

    def _grown(self, call: Any) -> tuple[Message, ...]:
        """The messages a request adds to the conversation (refused if it changed it)."""
        known = len(self._history)
        for i, (sent, kept) in enumerate(zip(call.messages, self._history, strict=False)):
            if sent != kept:
                self._refuse(call, 400, f"message {i} differs from the conversation so far: "
                             "a request repeats the history it was answered, then adds user "
                             "or tool messages")  # fmt: skip
                raise EnvironmentProtocolError(f"the environment changed message {i} of "
                                               "its conversation")  # fmt: skip
        added = call.messages[known:]
        if len(call.messages) < known or not added:
            self._refuse(call, 400, "a request after a model turn adds a user or tool message")
            raise EnvironmentProtocolError("the environment asked again without replying")
        if any(m["role"] not in ("user", "tool") for m in added):
            roles = [m["role"] for m in added]
            self._refuse(call, 400, f"a request may add user and tool messages only, not {roles}")
            raise EnvironmentProtocolError(f"the environment added messages of roles {roles}")
        self._history += added
        return tuple(Message(role=m["role"], content=m["content"]) for m in added)

    def _refuse(self, call: Any, status: int, message: str) -> None:
        from rlax_core.serve.episode_api import Refusal

        self._endpoint.answer(call, Refusal(status, message))


def _is_call(event: Any) -> bool:
    return event is not _CLOSED and not isinstance(event, _Finished | _Failed)
