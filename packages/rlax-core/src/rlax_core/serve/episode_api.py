"""A worker's OpenAI-compatible endpoint for the episodes it runs (aiohttp).

An environment written against an OpenAI client (:class:`~rlax_core.environments.
ClientEnvironment`) talks to the worker through this endpoint: each episode has its own
base URL, ``http://127.0.0.1:PORT/episodes/<id>/v1``, and ``POST
…/chat/completions`` on it is not generated here but handed to the episode, which answers
it with the model turn the worker sampled (the worker's engine, its sampling settings,
its token budgets). The response has OpenAI's shape, the same as ``rlax serve policy``'s,
with the token ids the model read (``prompt_token_ids``) and wrote (``token_ids``), and
RLAX's per-token record (``rlax``: ``behaviour_logprobs``, ``policy_versions``): tokens,
log-probabilities and versions are captured server-side, so the rollout trains exactly
as a native environment's does.

The server runs on its own thread's event loop, where the episodes' client programs run
too (:meth:`EpisodeEndpoint.run`); it listens on the loopback interface only.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rlax_core.serve.messages import BadRequestError, template_message
from rlax_core.serve.openai_api import error_response, read_body, send_event


@dataclass(eq=False)
class Call:
    """One chat request of an episode's client, waiting for its answer.

    Attributes:
        messages: its messages as the chat template reads them.
        tools: the tools it offers (OpenAI's function format), or None.
        body: the whole request.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    body: dict[str, Any]
    answer: asyncio.Future = field(repr=False, default=None)  # type: ignore[assignment]


@dataclass
class Refusal:
    """A call's answer that is an error: its status and message."""

    status: int
    message: str


class EpisodeEndpoint:
    """The HTTP endpoint of one worker's client episodes, on a thread of its own.

    :meth:`open` gives an episode a base URL and an inbox, where each of its requests
    arrives as a :class:`Call`; :meth:`answer` sends a call its response (any thread).
    """

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self._inboxes: dict[str, queue.Queue] = {}
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, args=(host,), name="episode-endpoint",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        self.url = f"http://{host}:{self.port}"

    # -- for the episodes --

    def open(self) -> tuple[str, queue.Queue]:
        """A new episode's id and inbox."""
        episode_id = uuid.uuid4().hex
        self._inboxes[episode_id] = queue.Queue()
        return episode_id, self._inboxes[episode_id]

    def base_url(self, episode_id: str) -> str:
        """The OpenAI base URL of an episode."""
        return f"{self.url}/episodes/{episode_id}/v1"

    def close_episode(self, episode_id: str) -> None:
        """Forgets an episode: its later requests get 404."""
        self._inboxes.pop(episode_id, None)

    def answer(self, call: Call, response: dict[str, Any] | Refusal) -> None:
        """Sends ``call`` its response (from any thread; a call whose client went away
        is left alone)."""

        def settle() -> None:
            if not call.answer.done():
                call.answer.set_result(response)

        self._loop.call_soon_threadsafe(settle)

    def run(self, program: Coroutine[Any, Any, Any]) -> Future:
        """Runs a client program on the endpoint's loop."""
        return asyncio.run_coroutine_threadsafe(program, self._loop)

    def cancel(self, program: Future, *, after: float) -> None:
        """Cancels a client program ``after`` seconds from now, if it is still running (it
        has that long to read its last answer and end on its own)."""
        self._loop.call_soon_threadsafe(self._loop.call_later, after, program.cancel)

    def close(self) -> None:
        """Stops the server and its loop (programs still running are cancelled)."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    # -- the server --

    def _serve(self, host: str) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            app = web.Application(client_max_size=64 << 20)
            app.add_routes([
                web.get("/episodes/{episode}/v1/models", self._models),
                web.post("/episodes/{episode}/v1/chat/completions", self._chat),
                web.post("/episodes/{episode}/v1/completions", self._completions),
            ])  # fmt: skip
            self._runner = web.AppRunner(app, handler_cancellation=True)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, host, 0)
            self._loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
        except BaseException as exc:  # reported to the constructor's thread
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.close()

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": "policy", "object": "model", "created": int(time.time()), "owned_by": "rlax"}
        return web.json_response({"object": "list", "data": [card]})

    async def _completions(self, request: web.Request) -> web.Response:
        return error_response(400, "an episode's endpoint serves chat completions only "
                              "(POST …/chat/completions)", None)  # fmt: skip

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        inbox = self._inboxes.get(request.match_info["episode"])
        if inbox is None:
            return error_response(404, "no such episode (it ended, or never began)", None)
        try:
            call = _call(await read_body(request))
        except BadRequestError as exc:
            return error_response(400, str(exc), exc.param)
        call.answer = self._loop.create_future()
        inbox.put(call)
        response = await call.answer
        if isinstance(response, Refusal):
            return error_response(response.status, response.message, "messages")
        if call.body.get("stream"):
            usage = bool((call.body.get("stream_options") or {}).get("include_usage"))
            return await _stream(request, response, usage=usage)
        return web.json_response(response)


def _call(body: dict[str, Any]) -> Call:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("messages must be a non-empty list", "messages")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise BadRequestError("an episode's request has one choice (n: 1); the worker "
                              "samples the group (rollout.samples_per_prompt)", "n")  # fmt: skip
    tools = body.get("tools") or None
    if tools is not None and not isinstance(tools, list):
        raise BadRequestError("tools must be a list", "tools")
    if body.get("tool_choice") == "none":
        tools = None
    return Call([template_message(m) for m in messages], tools, body)


async def _stream(
    request: web.Request, whole: dict[str, Any], *, usage: bool
) -> web.StreamResponse:
    """A whole response as one server-sent chunk (the turn is already sampled)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})  # fmt: skip
    await response.prepare(request)
    choice = whole["choices"][0]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    chunk = {key: whole[key] for key in ("id", "created", "model", "prompt_token_ids")}
    chunk["object"] = "chat.completion.chunk"
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"],
                         "logprobs": choice["logprobs"], "token_ids": choice["token_ids"],
                         "rlax": choice["rlax"]}]  # fmt: skip
    await send_event(response, chunk)
    if usage:
        await send_event(response, {**chunk, "choices": [], "usage": whole["usage"]})
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def chat_completion(call: Call, message: dict[str, Any], finish_reason: str, turn: Any,
                    decode) -> dict[str, Any]:  # fmt: skip
    """The OpenAI response to ``call``: ``message`` (the model's turn), with the turn's
    tokens, and their log-probabilities when the call asked for them (behaviour
    log-probabilities: the distribution each token was drawn from)."""
    logprobs = None
    if call.body.get("logprobs"):
        logprobs = {"content": [
            {"token": text, "logprob": value, "bytes": list(text.encode()), "top_logprobs": []}
            for text, value in ((decode([t]), v) for t, v in
                                zip(turn.token_ids, turn.logprobs, strict=True))
        ]}  # fmt: skip
    prompt, completion = len(turn.context_ids), len(turn.token_ids)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": call.body.get("model") or "policy",
        "choices": [{
            "index": 0, "message": message, "finish_reason": finish_reason,
            "logprobs": logprobs, "token_ids": list(turn.token_ids),
            "rlax": {"behaviour_logprobs": list(turn.logprobs),
                     "policy_versions": list(turn.versions)},
        }],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
        "prompt_token_ids": list(turn.context_ids),
    }  # fmt: skip
