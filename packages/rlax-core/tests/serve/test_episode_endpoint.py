"""A worker's endpoint for client episodes, served for real and spoken to with the
official ``openai`` client: a request waits in its episode's inbox and gets the answer
the episode gives it, in OpenAI's shape with the turn's tokens; what it cannot serve is
refused with OpenAI's error shape."""

from __future__ import annotations

import threading
from pathlib import Path

import openai
import pytest

from rlax_core.contracts import Turn
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.serve.episode_api import EpisodeEndpoint, chat_completion
from rlax_core.serve.openai_api import tool_calls_of

TOKENIZER = Path(__file__).resolve().parents[4] / "examples" / "quickstart" / "tokenizer"
ADD = {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}}}}  # fmt: skip


@pytest.fixture(scope="module")
def endpoint():
    endpoint = EpisodeEndpoint()
    yield endpoint
    endpoint.close()


def _ask(base_url: str, result: dict, **request) -> threading.Thread:
    def ask() -> None:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        try:
            result["response"] = client.chat.completions.create(model="policy", **request)
        except openai.APIStatusError as exc:
            result["error"] = exc

    thread = threading.Thread(target=ask)
    thread.start()
    return thread


def test_a_request_is_answered_with_the_episodes_turn(endpoint: EpisodeEndpoint) -> None:
    tokenizer = Tokenizer.from_dir(TOKENIZER)
    episode, inbox = endpoint.open()
    result: dict = {}
    parts = [{"type": "text", "text": "Add 2."}]
    thread = _ask(endpoint.base_url(episode), result, tools=[ADD], logprobs=True,
                  messages=[{"role": "user", "content": parts}])  # fmt: skip
    call = inbox.get(timeout=30)
    assert call.messages == [{"role": "user", "content": "Add 2."}] and call.tools == [ADD]
    text = 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call>'
    tokens = tuple(tokenizer.encode(text))
    turn = Turn(text=text, token_ids=tokens, context_ids=(1, 2, 3),
                logprobs=(-0.5,) * len(tokens), versions=(4,) * len(tokens))  # fmt: skip
    calls = tool_calls_of(text)
    message = {"role": "assistant", "content": "Sure.", "tool_calls": calls}
    endpoint.answer(call, chat_completion(call, message, "tool_calls", turn, tokenizer.decode))
    thread.join(30)
    response = result["response"]
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
    assert choice.message.tool_calls[0].function.name == "add"
    assert choice.message.tool_calls[0].function.arguments == '{"a": 2}'
    assert choice.model_extra["token_ids"] == list(tokens)
    assert choice.model_extra["rlax"]["policy_versions"] == [4] * len(tokens)
    assert response.model_extra["prompt_token_ids"] == [1, 2, 3]
    assert [t.logprob for t in choice.logprobs.content] == [-0.5] * len(tokens)
    assert "".join(t.token for t in choice.logprobs.content) == text
    assert response.usage.prompt_tokens == 3 and response.usage.completion_tokens == len(tokens)


def test_what_an_episode_cannot_serve_is_refused(endpoint: EpisodeEndpoint) -> None:
    episode, inbox = endpoint.open()
    client = openai.OpenAI(base_url=endpoint.base_url(episode), api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="samples_per_prompt"):
        client.chat.completions.create(model="policy", messages=messages, n=2)
    with pytest.raises(openai.BadRequestError, match="chat completions only"):
        client.completions.create(model="policy", prompt="hi")
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="policy", messages=[])
    assert inbox.empty()
    endpoint.close_episode(episode)
    with pytest.raises(openai.NotFoundError, match="no such episode"):
        client.chat.completions.create(model="policy", messages=messages)
    gone = openai.OpenAI(base_url=endpoint.base_url("nobody"), api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        gone.chat.completions.create(model="policy", messages=messages)
    assert [m.id for m in client.models.list()] == ["policy"]
