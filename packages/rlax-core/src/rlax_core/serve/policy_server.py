"""``rlax serve policy``: a checkpoint directory served over the OpenAI API.

The model and its tokenizer load from the directory (``config.json``, safetensors,
``tokenizer.json``); the rollout engine generates (continuous batching over a paged KV
cache), :class:`~rlax_core.serve.policy_service.PolicyService` drives it from one
thread, and aiohttp serves :class:`~rlax_core.serve.openai_api.OpenAIServer`'s routes.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path

from rlax_core.errors import ConfigError
from rlax_core.models.tokenizer import Tokenizer


@dataclass(frozen=True)
class EngineShape:
    """The serving engine's static shape."""

    slots: int = 16
    max_sequence_tokens: int = 4096
    top_logprobs: int = 20
    block_size: int = 16
    prefill_chunk: int = 128


class PolicyServer:
    """A served policy: :meth:`start` returns once it listens; :meth:`stop` ends it.

    Args:
        model_dir: a checkpoint directory with its tokenizer.
        host / port: where to listen (port 0: any free one; see :attr:`port`).
        model_name: the ``model`` of requests and responses (default: the directory's name).
        shape: the engine's slots, longest sequence and top log-probabilities.

    Raises:
        ConfigError: the directory is no checkpoint, or aiohttp is not installed.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        model_name: str | None = None,
        shape: EngineShape | None = None,
    ) -> None:
        try:
            from aiohttp import web  # noqa: F401  (the serve extra)
        except ImportError:
            raise ConfigError(
                "serving the policy needs aiohttp: pip install 'rlax-core[serve]'"
            ) from None
        from rlax_core.generate.paged import Engine
        from rlax_core.models import load_pretrained
        from rlax_core.rl.roles.components import stop_token_ids
        from rlax_core.serve.openai_api import OpenAIServer
        from rlax_core.serve.policy_service import PolicyService

        model_dir = Path(model_dir)
        shape = shape or EngineShape()
        model = load_pretrained(model_dir)
        self.tokenizer = Tokenizer.from_dir(model_dir)
        engine = Engine(
            model, slots=shape.slots, block_size=shape.block_size,
            max_sequence_tokens=shape.max_sequence_tokens, prefill_chunk=shape.prefill_chunk,
            pad_token_id=self.tokenizer.pad_token_id or 0, top_logprobs=shape.top_logprobs,
        )  # fmt: skip
        self.service = PolicyService(engine, self.tokenizer)
        self.api = OpenAIServer(
            self.service, self.tokenizer, model_name=model_name or model_dir.resolve().name,
            stop_token_ids=stop_token_ids(self.tokenizer),
        )  # fmt: skip
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        """The API's base URL (what an OpenAI client takes as ``base_url``)."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> None:
        """Serves from a thread of its own; returns once the port listens.

        Raises:
            ConfigError: the port cannot be listened on.
        """
        self._thread = threading.Thread(target=self._serve, name="policy-http", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise ConfigError(
                f"cannot serve at {self.host}:{self.port}: {self._failure}"
            ) from self._failure

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.service.close()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _serve(self) -> None:
        from aiohttp import web

        loop = self._loop = asyncio.new_event_loop()
        # A handler is cancelled when its client disconnects: its generation is dropped.
        runner = web.AppRunner(self.api.app, access_log=None, handler_cancellation=True)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # the port bound (for 0)
        except BaseException as exc:
            self._failure = exc
            self._started.set()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()
