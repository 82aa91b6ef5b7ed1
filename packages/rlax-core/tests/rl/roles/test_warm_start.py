"""The warm start's targets: a single-turn answer, or a multi-turn demonstration played
through the environment exactly as a rollout renders it, its replies out of the loss;
and the check that a tokenizer fits the model it feeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlax_core.contracts import Message
from rlax_core.environments import Calculator, ToolEnvironment, reply_text
from rlax_core.errors import ConfigError
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.components import check_vocabulary
from rlax_core.rl.roles.warm_start import demonstration, target

TOKENIZER = Path(__file__).resolve().parents[5] / "examples" / "quickstart" / "tokenizer"
CALL = (
    '<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}'
    "\n</tool_call>"
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(TOKENIZER)


def test_a_demonstration_is_the_rollout_the_environment_would_make(tokenizer) -> None:
    im_end = tokenizer.token_id("<|im_end|>")
    demonstrate = demonstration([CALL, "{answer}"], ToolEnvironment([Calculator()]), tokenizer,
                                im_end)  # fmt: skip
    tokens, taught = demonstrate({"expression": "4731+2958", "answer": "7689"})
    call = [*tokenizer.encode(CALL.format(expression="4731+2958")), im_end]
    reply = tokenizer.encode(reply_text((Message(role="tool", content="7689"),), turn_closed=True))
    answer = [*tokenizer.encode("7689"), im_end]
    assert tokens == call + reply + answer
    assert taught == [True] * len(call) + [False] * len(reply) + [True] * len(answer)


def test_a_demonstration_ends_where_its_episode_does(tokenizer) -> None:
    """A turn without a tool call is the model's answer: the tools environment ends the
    episode, and the demonstration with it."""
    demonstrate = demonstration(["{answer}", "never shown"], ToolEnvironment([Calculator()]),
                                tokenizer, 2)  # fmt: skip
    tokens, taught = demonstrate({"answer": "12"})
    assert tokens == [*tokenizer.encode("12"), 2] and all(taught)


def test_a_template_that_needs_a_missing_field_names_it(tokenizer) -> None:
    demonstrate = demonstration([CALL, "{answer}"], ToolEnvironment([Calculator()]), tokenizer, 2)
    with pytest.raises(ConfigError, match=r"warm_start.turns\[0\].*'expression'"):
        demonstrate({"answer": "3"})
    single = target("{answer}", tokenizer.encode, 2, field="warm_start.target_template")
    assert single({"answer": "3"}) == ([*tokenizer.encode("3"), 2], [True, True])
    with pytest.raises(ConfigError, match=r"warm_start.target_template.*'answer'"):
        single({})


def test_a_tokenizer_larger_than_the_model_vocabulary_is_refused(tokenizer) -> None:
    check_vocabulary(tokenizer.vocab_size, tokenizer)
    with pytest.raises(ConfigError, match=r"model.overrides.vocab_size to at least 259"):
        check_vocabulary(tokenizer.vocab_size - 3, tokenizer)
