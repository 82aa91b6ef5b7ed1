"""An OpenAI-compatible HTTP API over the policy service (aiohttp).

``POST /v1/chat/completions`` and ``POST /v1/completions``, streamed (server-sent events)
or not, with ``temperature``, ``top_p``, ``max_tokens`` (``max_completion_tokens``),
``stop``, ``seed``, ``n``, ``logprobs``/``top_logprobs``, ``tools`` (the model's
``<tool_call>`` blocks come back in OpenAI's ``tool_calls`` shape); ``GET /v1/models``.

Beside OpenAI's fields, as vLLM offers them, every response carries the token ids:
``prompt_token_ids`` and, per choice, ``token_ids``; and RLAX's own per-token record
under ``rlax``: ``behaviour_logprobs`` (the distribution the token was drawn from),
``policy_logprobs`` (the untruncated policy at the temperature) and ``policy_versions``.
An RL client needs nothing else, and never re-tokenizes. ``logprobs`` report the policy
log-probabilities (temperature applied, before top-p).

aiohttp serves HTTP (the maintained server we already depend on through the object
stores' clients); this module only maps OpenAI's request and response shapes.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rlax_core.environments.tool_calls import OPEN
from rlax_core.generate.next_token import SamplingParams
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.serve.messages import BadRequestError, template_message, tool_calls_of
from rlax_core.serve.policy_service import Generation, Piece, PolicyService

MAX_TOP_LOGPROBS = 20
_UNREAD = object()  # a choice whose tool calls are not read yet


@dataclass
class _Choice:
    """One choice's pieces, gathered."""

    tokens: list[int] = field(default_factory=list)
    text: str = ""
    behaviour: list[float] = field(default_factory=list)
    policy: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    top: list[tuple[list[int], list[float]]] = field(default_factory=list)
    finish_reason: str | None = None
    calls: Any = None  # its tool calls once read (see _Reply._calls); _UNREAD before

    def __post_init__(self) -> None:
        self.calls = _UNREAD

    def add(self, piece: Piece) -> None:
        self.tokens += piece.tokens
        self.text += piece.text
        self.behaviour += piece.behaviour_logprobs
        self.policy += piece.policy_logprobs
        self.versions += piece.versions
        self.top += piece.top_logprobs
        self.finish_reason = piece.finish_reason or self.finish_reason


class OpenAIServer:
    """The HTTP app of one served policy.

    Args:
        service: generates.
        tokenizer: renders chats and decodes tokens.
        model_name: what ``model`` names in requests and responses.
        stop_token_ids: tokens that end a completion (the tokenizer's end of turn).
    """

    def __init__(
        self,
        service: PolicyService,
        tokenizer: Tokenizer,
        *,
        model_name: str,
        stop_token_ids: Sequence[int],
    ) -> None:
        self.service = service
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.stop_token_ids = frozenset(stop_token_ids)
        self.created = int(time.time())
        self.app = web.Application(client_max_size=64 << 20)
        self.app.add_routes([
            web.get("/v1/models", self._models),
            web.post("/v1/chat/completions", self._chat),
            web.post("/v1/completions", self._completions),
        ])  # fmt: skip

    # -- routes --

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": self.model_name, "object": "model", "created": self.created,
                "owned_by": "rlax", "rlax": {"policy_version": self.service.version}}  # fmt: skip
        return web.json_response({"object": "list", "data": [card]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=False)

    async def _answer(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await read_body(request)
            self._check_model(body)
            prompt, tools = self._prompt(body, chat=chat)
            generation, top = self._generation(body, prompt)
        except BadRequestError as exc:
            return error_response(400, str(exc), exc.param)
        except _NotFoundError as exc:
            return error_response(404, str(exc), "model")
        pieces: asyncio.Queue[Piece] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        generation.listener = lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece)
        try:
            self.service.submit(generation)
        except ValueError as exc:
            return error_response(400, str(exc), "messages" if chat else "prompt")
        reply = _Reply(self, body, prompt, generation.n, top, chat=chat, tools=tools)
        try:
            if body.get("stream"):
                return await reply.stream(request, pieces)
            return web.json_response(await reply.whole(pieces))
        except (asyncio.CancelledError, ConnectionResetError):  # the client went away
            self.service.cancel(generation)
            raise

    # -- requests --

    def _check_model(self, body: Mapping[str, Any]) -> None:
        model = body.get("model")
        if model not in (None, self.model_name):
            raise _NotFoundError(f"the model {model!r} does not exist; this server serves "
                            f"{self.model_name!r}")  # fmt: skip

    def _prompt(self, body: Mapping[str, Any], *, chat: bool) -> tuple[tuple[int, ...], bool]:
        """The prompt's token ids, and whether tools were offered."""
        if not chat:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return tuple(prompt), False
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str) or not prompt:
                raise BadRequestError("prompt must be a non-empty string or a list of token ids "
                                 "(one prompt per request)", "prompt")  # fmt: skip
            if body.get("echo"):
                raise BadRequestError("echo is not supported", "echo")
            return tuple(self.tokenizer.encode(prompt)), False
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequestError("messages must be a non-empty list", "messages")
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise BadRequestError("tools must be a list", "tools")
        if body.get("tool_choice") not in (None, "auto", "none"):
            raise BadRequestError("tool_choice may be auto or none", "tool_choice")
        if body.get("tool_choice") == "none":
            tools = None
        try:
            text = self.tokenizer.render_chat(
                [template_message(m) for m in messages], add_generation_prompt=True, tools=tools
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise BadRequestError(f"the messages cannot be rendered: {exc}", "messages") from None
        return tuple(self.tokenizer.encode(text)), bool(tools)

    def _generation(
        self, body: Mapping[str, Any], prompt: tuple[int, ...]
    ) -> tuple[Generation, int]:
        """The generation a request asks for, and how many top log-probabilities."""
        n = _number(body, "n", 1, int, low=1, high=128)
        temperature = _number(body, "temperature", 1.0, float, low=0.0, high=2.0)
        top_p = _number(body, "top_p", 1.0, float, low=0.0, high=1.0)
        if top_p == 0.0:
            raise BadRequestError("top_p must be greater than 0", "top_p")
        top_k = _number(body, "top_k", 0, int, low=0, high=1 << 20)  # vLLM's extra
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise BadRequestError("seed must be an integer", "seed")
        longest = self.service.longest(prompt)
        if longest < 1:
            raise BadRequestError(f"the prompt has {len(prompt)} tokens; this server holds "
                             f"{len(prompt) + longest} in all", "messages")  # fmt: skip
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        max_tokens = _number(body, key, longest, int, low=1, high=longest)
        stop = body.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        if len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
            raise BadRequestError("stop is a string or a list of up to 4 non-empty strings", "stop")
        top = self._top_logprobs(body)
        params = SamplingParams(max_new_tokens=max_tokens, temperature=temperature,
                                top_k=top_k, top_p=top_p)  # fmt: skip
        generation = Generation(prompt, params, listener=lambda piece: None, n=n, seed=seed,
                                stop_token_ids=self.stop_token_ids, stop=stop)  # fmt: skip
        return generation, top

    def _top_logprobs(self, body: Mapping[str, Any]) -> int:
        """How many alternatives per token to report (0: none); -1: logprobs without
        alternatives."""
        logprobs = body.get("logprobs")
        if isinstance(logprobs, int) and not isinstance(logprobs, bool):  # /v1/completions
            top = logprobs
        elif logprobs:
            top = body.get("top_logprobs") or 0
        else:
            if body.get("top_logprobs"):
                raise BadRequestError("top_logprobs needs logprobs: true", "top_logprobs")
            return 0
        if not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise BadRequestError(f"top_logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}]",
                             "top_logprobs")  # fmt: skip
        if top > self.service.engine.top_logprobs:
            raise BadRequestError(f"this server reports at most {self.service.engine.top_logprobs} "
                             "top log-probabilities per token", "top_logprobs")  # fmt: skip
        return top or -1


class _NotFoundError(Exception):
    """A request for a model this server does not serve: answered 404."""


class _Reply:
    """The response to one request: whole, or streamed as it is sampled."""

    def __init__(self, server: OpenAIServer, body, prompt, n, top, *, chat, tools) -> None:
        self.server, self.prompt, self.n, self.top = server, prompt, n, top
        self.chat, self.tools = chat, tools
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        options = body.get("stream_options") or {}
        self.usage_in_stream = bool(options.get("include_usage"))

    async def whole(self, pieces: asyncio.Queue[Piece]) -> dict[str, Any]:
        choices = [_Choice() for _ in range(self.n)]
        while sum(c.finish_reason is not None for c in choices) < self.n:
            piece = await pieces.get()
            choices[piece.index].add(piece)
        self._raise_if_failed(choices)
        body = self._envelope("chat.completion" if self.chat else "text_completion")
        body["choices"] = [self._choice(i, c) for i, c in enumerate(choices)]
        body["usage"] = self._usage(choices)
        body["prompt_token_ids"] = list(self.prompt)
        return body

    async def stream(
        self, request: web.Request, pieces: asyncio.Queue[Piece]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})  # fmt: skip
        await response.prepare(request)
        choices = [_Choice() for _ in range(self.n)]
        shown = [0] * self.n  # characters of each choice's text already sent
        started = [False] * self.n
        sent_prompt = False
        while sum(c.finish_reason is not None for c in choices) < self.n:
            piece = await pieces.get()
            choice = choices[piece.index]
            first = len(choice.tokens)
            choice.add(piece)
            if piece.finish_reason == "error":
                await send_event(
                    response, {"error": {"message": "the engine failed", "type": "server_error"}}
                )
                break
            delta, done = self._delta(choice, shown, piece.index, started)
            chunk = self._envelope("chat.completion.chunk" if self.chat else "text_completion")
            entry: dict[str, Any] = {"index": piece.index, "finish_reason": None}
            if self.chat:
                entry["delta"] = delta
            else:
                entry["text"] = delta.get("content", "")
            if self.top:
                entry["logprobs"] = self._logprobs(choice, first)
            entry["token_ids"] = list(piece.tokens)
            entry["rlax"] = _record(piece.behaviour_logprobs, piece.policy_logprobs, piece.versions)
            if done:
                entry["finish_reason"] = self._finish_reason(choice)
            chunk["choices"] = [entry]
            if not sent_prompt:
                chunk["prompt_token_ids"], sent_prompt = list(self.prompt), True
            await send_event(response, chunk)
        if self.usage_in_stream:
            chunk = self._envelope("chat.completion.chunk" if self.chat else "text_completion")
            chunk["choices"], chunk["usage"] = [], self._usage(choices)
            await send_event(response, chunk)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _delta(self, choice: _Choice, shown: list[int], index: int, started: list[bool]):
        """The text (and, at the end, tool calls) of a stream chunk; and whether the
        choice is done. Text from a ``<tool_call>`` on waits for the end, to be sent as
        tool calls."""
        done = choice.finish_reason is not None
        visible = choice.text
        if self.tools and OPEN in visible and not done:
            visible = visible[: visible.index(OPEN)]
        delta: dict[str, Any] = {}
        if self.chat and not started[index]:
            delta["role"] = "assistant"
            started[index] = True
        calls = self._calls(choice) if done else None
        if calls is not None:
            visible = choice.text[: choice.text.index(OPEN)].rstrip()
        if len(visible) > shown[index]:
            delta["content"] = visible[shown[index] :]
            shown[index] = len(visible)
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        return delta, done

    def _raise_if_failed(self, choices: list[_Choice]) -> None:
        if any(c.finish_reason == "error" for c in choices):
            raise web.HTTPInternalServerError(
                text=json.dumps(
                    {"error": {"message": "the engine failed", "type": "server_error"}}
                ),
                content_type="application/json",
            )

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created,
                "model": self.server.model_name}  # fmt: skip

    def _choice(self, index: int, choice: _Choice) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": index, "finish_reason": self._finish_reason(choice)}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": choice.text}
            calls = self._calls(choice)
            if calls:
                message["content"] = choice.text[: choice.text.index(OPEN)].rstrip() or None
                message["tool_calls"] = calls
            entry["message"] = message
        else:
            entry["text"] = choice.text
        entry["logprobs"] = self._logprobs(choice, 0) if self.top else None
        entry["token_ids"] = choice.tokens
        entry["rlax"] = _record(choice.behaviour, choice.policy, choice.versions)
        return entry

    def _calls(self, choice: _Choice) -> list[dict[str, Any]] | None:
        """A finished choice's tool calls (read once: each gets one id), when tools were
        offered."""
        if not self.tools:
            return None
        if choice.calls is _UNREAD:
            choice.calls = tool_calls_of(choice.text)
        return choice.calls

    def _finish_reason(self, choice: _Choice) -> str:
        if self._calls(choice):
            return "tool_calls"
        return choice.finish_reason or "stop"

    def _logprobs(self, choice: _Choice, first: int) -> dict[str, Any]:
        """OpenAI's logprobs of the choice's tokens from ``first`` on."""
        decode = self.server.tokenizer.decode
        k = max(0, self.top)
        tokens, values = choice.tokens[first:], choice.policy[first:]
        tops = choice.top[first:] or [([], [])] * len(tokens)
        if self.chat:

            def entry(token: int, value: float) -> dict[str, Any]:
                text = decode([token])
                return {"token": text, "logprob": value, "bytes": list(text.encode())}

            return {"content": [
                {**entry(t, lp), "top_logprobs": [entry(i, v) for i, v in
                                                  zip(ids[:k], vs[:k], strict=True)]}
                for t, lp, (ids, vs) in zip(tokens, values, tops, strict=True)
            ]}  # fmt: skip
        texts = [decode([t]) for t in tokens]
        offsets, at = [], len(decode(choice.tokens[:first])) if first else 0
        for text in texts:
            offsets.append(at)
            at += len(text)
        return {"tokens": texts, "token_logprobs": values, "text_offset": offsets,
                "top_logprobs": [{decode([i]): v for i, v in zip(ids[:k], vs[:k], strict=True)}
                                 for ids, vs in tops] if k else None}  # fmt: skip

    def _usage(self, choices: list[_Choice]) -> dict[str, int]:
        completion = sum(len(c.tokens) for c in choices)
        return {"prompt_tokens": len(self.prompt), "completion_tokens": completion,
                "total_tokens": len(self.prompt) + completion}  # fmt: skip


def _record(behaviour: Sequence[float], policy: Sequence[float], versions: Sequence[int]) -> dict:
    return {"behaviour_logprobs": list(behaviour), "policy_logprobs": list(policy),
            "policy_versions": list(versions)}  # fmt: skip


def _number(body: Mapping[str, Any], key: str, default, kind, *, low, high):
    value = body.get(key)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (kind is int and not isinstance(value, int))
    ):
        raise BadRequestError(f"{key} must be a{'n integer' if kind is int else ' number'}", key)
    if not low <= value <= high:
        raise BadRequestError(f"{key} must be in [{low}, {high}], got {value}", key)
    return kind(value)


async def read_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequestError("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequestError("the request body must be a JSON object")
    return body


async def send_event(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(data)}\n\n".encode())


def error_response(status: int, message: str, param: str | None) -> web.Response:
    code = "invalid_request_error" if status == 400 else "not_found_error"
    return web.json_response(
        {"error": {"message": message, "type": code, "param": param, "code": None}},
        status=status,
    )
