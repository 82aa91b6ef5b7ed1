"""The policy's OpenAI-compatible endpoint, served for real and spoken to with the
official ``openai`` client: shapes, determinism, streaming, stop strings, log-probabilities
equal to the trainer's, token ids, tool calls, errors, and ``rlax serve policy``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import openai
import pytest

from rlax_core.generate import Sampler
from rlax_core.models import QwenConfig, init_model, save_pretrained
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.serve.openai_api import _Choice, _Reply
from rlax_core.serve.policy_server import EngineShape, PolicyServer
from rlax_core.serve.policy_service import Piece

TOKENIZER = Path(__file__).resolve().parents[4] / "examples" / "quickstart" / "tokenizer"
MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]
INTEGER = {"type": "integer"}
ADD = {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {
    "type": "object", "properties": {"a": INTEGER, "b": INTEGER}}}}  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "tiny-policy"
    tokenizer = Tokenizer.from_dir(TOKENIZER)
    save_pretrained(init_model(QwenConfig.tiny(vocab_size=tokenizer.vocab_size), seed=2), path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, path / name)
    return path


@pytest.fixture(scope="module")
def server(model_dir: Path):
    shape = EngineShape(slots=4, max_sequence_tokens=1024, top_logprobs=5)
    server = PolicyServer(model_dir, port=0, shape=shape)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server: PolicyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def _extra(obj, name: str):
    return (obj.model_extra or {})[name]


def test_models_lists_the_served_policy(client: openai.OpenAI) -> None:
    (model,) = client.models.list().data
    assert model.id == "tiny-policy" and model.owned_by == "rlax"


def test_a_chat_completion_carries_tokens_and_the_trainers_logprobs(
    client: openai.OpenAI, server: PolicyServer, model_dir: Path
) -> None:
    """n samples of one prompt, reproducible by seed; the prompt's and each choice's token
    ids; log-probabilities (and RLAX's per-token record) equal to the trainer's
    teacher-forced ones within 1e-5."""
    ask = dict(model="tiny-policy", messages=MESSAGES, n=3, seed=7, max_tokens=12,
               temperature=0.9, logprobs=True, top_logprobs=3)  # fmt: skip
    first, again = client.chat.completions.create(**ask), client.chat.completions.create(**ask)
    prompt = _extra(first, "prompt_token_ids")
    assert prompt == server.tokenizer.apply_chat_template(MESSAGES)
    assert len(first.choices) == 3 and first.usage.prompt_tokens == len(prompt)
    tokens = [_extra(c, "token_ids") for c in first.choices]
    assert tokens == [_extra(c, "token_ids") for c in again.choices]
    assert len({tuple(t) for t in tokens}) > 1  # the samples differ
    assert first.usage.completion_tokens == sum(map(len, tokens))
    policy = Sampler(_load(model_dir)).score([prompt] * 3, tokens, 0.9)
    for choice, ids, teacher in zip(first.choices, tokens, policy, strict=True):
        assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
        assert choice.message.content == server.tokenizer.decode(ids, skip_special_tokens=True)
        content = choice.logprobs.content
        assert len(content) == len(ids) and all(len(c.top_logprobs) == 3 for c in content)
        reported = [c.logprob for c in content]
        np.testing.assert_allclose(reported, teacher, rtol=0, atol=1e-5)
        record = _extra(choice, "rlax")
        np.testing.assert_allclose(record["policy_logprobs"], teacher, rtol=0, atol=1e-5)
        assert record["policy_versions"] == [0] * len(ids)
        assert len(record["behaviour_logprobs"]) == len(ids)


def _load(model_dir: Path):
    from rlax_core.models import load_pretrained

    return load_pretrained(model_dir)


def test_a_stream_says_what_the_whole_response_says(client: openai.OpenAI) -> None:
    ask = dict(model="tiny-policy", messages=MESSAGES, n=2, seed=3, max_tokens=16)
    whole = client.chat.completions.create(**ask)
    texts, ids, finish = ["", ""], [[], []], [None, None]
    stream = client.chat.completions.create(**ask, stream=True,
                                            stream_options={"include_usage": True})  # fmt: skip
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            ids[choice.index] += _extra(choice, "token_ids")
            finish[choice.index] = choice.finish_reason or finish[choice.index]
    assert texts == [c.message.content for c in whole.choices]
    assert ids == [_extra(c, "token_ids") for c in whole.choices]
    assert finish == [c.finish_reason for c in whole.choices]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_completions_take_a_prompt_string_or_token_ids(client: openai.OpenAI, server) -> None:
    text = client.completions.create(model="tiny-policy", prompt="The answer is", seed=1,
                                     max_tokens=10, logprobs=2)  # fmt: skip
    prompt = _extra(text, "prompt_token_ids")
    assert prompt == server.tokenizer.encode("The answer is")
    ids = client.completions.create(model="tiny-policy", prompt=prompt, seed=1, max_tokens=10)
    (a,), (b,) = text.choices, ids.choices
    assert a.text == b.text and _extra(a, "token_ids") == _extra(b, "token_ids")
    assert len(a.logprobs.tokens) == len(_extra(a, "token_ids")) == len(a.logprobs.top_logprobs)
    assert all(len(top) <= 2 for top in a.logprobs.top_logprobs)
    chunks = client.completions.create(model="tiny-policy", prompt="The answer is", seed=1,
                                       max_tokens=10, stream=True)  # fmt: skip
    streamed = "".join(c.choices[0].text for c in chunks)
    assert streamed == a.text


def test_a_stop_string_ends_the_text_before_it(client: openai.OpenAI) -> None:
    free = client.completions.create(model="tiny-policy", prompt="Count:", seed=5, max_tokens=40)
    text = free.choices[0].text
    assert len(text) > 6, "the sample is too short to cut"
    stop = text[4:6]
    cut = client.completions.create(model="tiny-policy", prompt="Count:", seed=5,
                                    max_tokens=40, stop=[stop])  # fmt: skip
    (choice,) = cut.choices
    assert choice.text == text[: text.index(stop)] and choice.finish_reason == "stop"
    assert len(_extra(choice, "token_ids")) < len(_extra(free.choices[0], "token_ids"))


def test_tools_are_listed_and_a_tool_conversation_renders(client, server) -> None:
    history = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]  # fmt: skip
    response = client.chat.completions.create(model="tiny-policy", messages=history,
                                              tools=[ADD], max_tokens=4, seed=0)  # fmt: skip
    expected = server.tokenizer.apply_chat_template(
        [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
         {"role": "tool", "content": "5"}], tools=[ADD])  # fmt: skip
    assert _extra(response, "prompt_token_ids") == expected
    text = server.tokenizer.decode(expected)
    assert "<tools>" in text and "<tool_response>\n5\n</tool_response>" in text


def test_a_tool_call_in_the_text_comes_back_as_tool_calls(server: PolicyServer) -> None:
    """What the model writes as a <tool_call> block is returned in OpenAI's shape, whole
    or streamed; a malformed block stays content."""
    text = 'Adding.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'

    def reply(body_text: str, *, stream: bool = False):
        queue: asyncio.Queue = asyncio.Queue()
        queue.put_nowait(Piece(0, (1, 2), body_text, (0.0,) * 2, (0.0,) * 2, (0,) * 2,
                               finish_reason="stop"))  # fmt: skip
        return _Reply(server.api, {}, (1,), 1, 0, chat=True, tools=True), queue

    answer, queue = reply(text)
    (choice,) = asyncio.run(answer.whole(queue))["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Adding."
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "add"
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    broken, queue = reply("<tool_call>\n{oops}\n</tool_call>")
    (choice,) = asyncio.run(broken.whole(queue))["choices"]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    streamed, _ = reply(text)
    delta, done = streamed._delta(_Choice(text=text, finish_reason="stop"),
                                  [0], 0, [False])  # fmt: skip
    assert done and delta["content"] == "Adding." and delta["tool_calls"][0]["index"] == 0


@pytest.mark.parametrize(
    ("ask", "error", "message"),
    [
        ({"model": "gpt-5"}, openai.NotFoundError, "does not exist"),
        ({"temperature": 5}, openai.BadRequestError, "temperature must be in [0.0, 2.0]"),
        ({"logprobs": True, "top_logprobs": 9}, openai.BadRequestError, "at most 5"),
        ({"max_tokens": 100_000}, openai.BadRequestError, "max_tokens must be in"),
        ({"n": 0}, openai.BadRequestError, "n must be in"),
        ({"stop": [""]}, openai.BadRequestError, "stop is a string"),
        ({"messages": []}, openai.BadRequestError, "messages must be a non-empty list"),
    ],
)
def test_bad_requests_get_openai_errors(client: openai.OpenAI, ask, error, message) -> None:
    request = {"model": "tiny-policy", "messages": MESSAGES, "max_tokens": 4, **ask}
    with pytest.raises(error, match=re.escape(message)):
        client.chat.completions.create(**request)


def test_a_prompt_longer_than_the_engine_holds_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="holds 1024 in all"):
        client.completions.create(model="tiny-policy", prompt=list(range(1, 200)) * 6)


def test_rlax_serve_policy_serves_until_signalled(model_dir: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "rlax_core.cli", "serve", "policy", "--model", str(model_dir),
         "--port", "0", "--slots", "2", "--max-sequence-tokens", "256", "--top-logprobs", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    try:
        line = process.stdout.readline()
        assert line.startswith("serving policy at http://127.0.0.1:"), process.stderr.read()
        client = openai.OpenAI(base_url=line.split(" at ")[1].strip(), api_key="x", max_retries=0)
        response = client.chat.completions.create(model="tiny-policy", messages=MESSAGES,
                                                  max_tokens=5, seed=1)  # fmt: skip
        assert response.choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.BadRequestError, match="at most 0"):
            client.chat.completions.create(model="tiny-policy", messages=MESSAGES, max_tokens=2,
                                           logprobs=True, top_logprobs=1)  # fmt: skip
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_a_client_that_goes_away_stops_its_generation(server: PolicyServer) -> None:
    """A stream closed after its first chunk: the engine drops the request at once
    instead of sampling its whole budget."""
    import time

    import httpx

    stats = server.service.engine.scheduler.stats
    before = stats.decoded_tokens
    # 16 samples on 4 slots: about 4,000 tokens to their stop tokens (one in 259 at random).
    body = {"model": "tiny-policy", "messages": MESSAGES, "n": 16, "max_tokens": 900,
            "stream": True, "seed": 1}  # fmt: skip
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_lines())  # the first event, then the client hangs up
    deadline = time.monotonic() + 60
    while not server.service.engine.scheduler.idle:
        assert time.monotonic() < deadline, "the engine kept sampling for a client that left"
        time.sleep(0.05)
    assert stats.decoded_tokens - before < 1000
    again = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    assert again.chat.completions.create(model="tiny-policy", messages=MESSAGES, max_tokens=3)
