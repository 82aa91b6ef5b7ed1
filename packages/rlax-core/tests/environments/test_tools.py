"""Tool calls read from model turns, the tool environment's answers, the calculator,
and replies rendered exactly as Qwen's chat template renders the conversation."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from rlax_core.contracts import Message, Tool, ToolError
from rlax_core.environments import (
    Calculator,
    ToolEnvironment,
    parse_tool_calls,
    reply_text,
)
from rlax_core.errors import RlaxError
from rlax_core.models.tokenizer import _compile
from rlax_core.models.tokenizer_build import QWEN_CHAT_TEMPLATE


class Add(Tool):
    name = "add"
    description = "Adds two integers."

    class Arguments(BaseModel):
        a: int
        b: int

    def call(self, arguments: Add.Arguments) -> str:
        if arguments.a < 0:
            raise ToolError("a must not be negative")
        return str(arguments.a + arguments.b)


class Broken(Tool):
    name = "broken"
    description = "Always fails."

    def call(self, arguments: BaseModel) -> str:
        raise RuntimeError("disk on fire")


def _call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _answers(turn: str) -> list[str]:
    environment = ToolEnvironment([Add(), Broken(), Calculator()], max_calls_per_turn=3)
    step = environment.start({}).step(turn)
    assert not step.done and all(m.role == "tool" for m in step.messages)
    return [m.content for m in step.messages]


def test_a_turn_without_a_tool_call_is_the_answer() -> None:
    environment = ToolEnvironment([Add()])
    step = environment.start({}).step("The answer is 4.")
    assert step.done and step.reward is None and not step.messages  # the judge decides


def test_each_call_is_answered_in_order() -> None:
    turn = f"Let me add. {_call('add', a=2, b=3)} and {_call('calculator', expression='7*6')}"
    assert _answers(turn) == ["5", "42"]


@pytest.mark.parametrize(
    ("turn", "error"),
    [
        ("<tool_call>\n{not json}\n</tool_call>", "not valid JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', '"name"'),
        ('<tool_call>\n{"name": "add", "arguments": [1]}\n</tool_call>', "must be an object"),
        ('<tool_call>\n{"name": "add", "arguments": {"a": 1}', "not closed"),
        (_call("multiply", a=1, b=2), "no tool named 'multiply' (tools: add, broken, calculator)"),
        (_call("add", a="one", b=2), "wrong arguments for add: a: Input should be a valid integer"),
        (_call("add", a=1), "b: Field required"),
        (_call("add", a=-1, b=2), "a must not be negative"),
        (_call("broken"), "the tool broken failed (RuntimeError: disk on fire)"),
        (_call("calculator", expression="__import__('os')"), "only numbers"),
    ],
)
def test_a_malformed_call_gets_an_error_the_model_can_read(turn: str, error: str) -> None:
    (answer,) = _answers(turn)
    assert answer.startswith("Error: ") and error in answer


def test_calls_past_the_limit_get_an_error() -> None:
    answers = _answers("".join(_call("add", a=i, b=1) for i in range(5)))
    assert answers[:3] == ["1", "2", "3"]
    assert answers[3:] == ["Error: at most 3 tool calls a turn"] * 2


def test_arguments_written_as_a_json_string_are_read() -> None:
    turn = '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 4, \\"b\\": 5}"}\n</tool_call>'
    assert _answers(turn) == ["9"]
    assert parse_tool_calls("no call here") == []


def test_the_calculator_is_exact_and_bounded() -> None:
    calculator = Calculator(max_digits=50)
    run = lambda e: calculator.call(Calculator.Arguments(expression=e))  # noqa: E731
    assert run("123456789123456789 * 987654321987654321") == str(
        123456789123456789 * 987654321987654321
    )
    assert (run("7 / 2"), run("2 ** -2"), run("-(3 + 4) % 5"), run("10 // 3")) == (
        "3.5", "0.25", "3", "3",
    )  # fmt: skip
    for bad, message in [("10 ** 60", "more than 50 digits"), ("2 ** 100000", "too large"),
                         ("1 / 0", "division by zero"), ("x + 1", "only numbers"),
                         ("1 +", "cannot read")]:  # fmt: skip
        with pytest.raises(ToolError, match=message):
            run(bad)


def test_two_tools_may_not_share_a_name() -> None:
    with pytest.raises(ValueError, match="share a name"):
        ToolEnvironment([Add(), Add()])


def test_the_schema_is_openai_function_format() -> None:
    schema = Add().schema()
    assert schema["type"] == "function" and schema["function"]["name"] == "add"
    parameters = schema["function"]["parameters"]
    assert (
        parameters["required"] == ["a", "b"] and parameters["properties"]["a"]["type"] == "integer"
    )


@pytest.mark.parametrize("closed", [True, False])
def test_replies_continue_the_conversation_as_the_chat_template_renders_it(closed: bool) -> None:
    """Prompt, then each model turn as sampled, then each reply: the same text as the
    chat template renders for the whole conversation (tools listed, tool results grouped
    in one user turn), so nothing is re-tokenized and nothing drifts."""
    template = _compile(QWEN_CHAT_TEMPLATE)
    tools = [Add().schema(), Calculator().schema()]
    conversation = [{"role": "user", "content": "What is 2 + 3, and 7 * 6?"}]
    text = template.render(messages=conversation, tools=tools, add_generation_prompt=True)
    turns = [
        (f"I will use tools.\n{_call('add', a=2, b=3)}\n{_call('calculator', expression='7*6')}",
         [Message(role="tool", content="5"), Message(role="tool", content="42")]),
        ("Let me check with you.", [Message(role="user", content="Go on.")]),
    ]  # fmt: skip
    for turn, messages in turns:
        # The model's turn ends with <|im_end|> (closed) or is cut off (closed: False).
        text += turn + ("<|im_end|>" if closed else "") + reply_text(messages, turn_closed=closed)
        conversation.append({"role": "assistant", "content": turn})
        conversation += [{"role": m.role, "content": m.content} for m in messages]
    expected = template.render(messages=conversation, tools=tools, add_generation_prompt=True)
    assert text == expected


def test_an_infrastructure_failure_is_no_answer() -> None:
    """A tool whose sandbox cannot be reached raises an RlaxError: the step raises (the
    worker ends the rollout unjudged) rather than telling the model its call failed."""

    class Unreachable(Tool):
        name = "remote"
        description = "Needs a service."

        def call(self, arguments: BaseModel) -> str:
            raise RlaxError("the sandbox cannot be reached")

    episode = ToolEnvironment([Unreachable()]).start({})
    with pytest.raises(RlaxError, match="cannot be reached"):
        episode.step(_call("remote"))
