"""An RLAX environment plugin: ``guess_number``, and a ``reverse`` tool."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from rlax_core.contracts import Environment, EnvStep, Episode, Message, Tool
from rlax_core.hookspecs import hookimpl


class GuessNumberConfig(BaseModel):
    """The model guesses the problem's number; it is told higher or lower."""

    reward: float = Field(default=1.0, description="The reward of a right guess.")


class GuessNumber(Environment):
    def __init__(self, config: GuessNumberConfig) -> None:
        self.config = config

    def start(self, problem):
        return _Game(int(problem["number"]), self.config.reward)


class _Game(Episode):
    def __init__(self, number: int, reward: float) -> None:
        self.number, self.reward = number, reward

    def step(self, turn: str) -> EnvStep:
        guesses = re.findall(r"-?\d+", turn)
        if not guesses:
            return EnvStep(messages=(Message(role="user", content="Guess a number."),))
        guess = int(guesses[-1])
        if guess == self.number:
            return EnvStep(done=True, reward=self.reward)
        hint = "higher" if guess < self.number else "lower"
        return EnvStep(messages=(Message(role="user", content=f"No: {hint}."),))


class ReverseConfig(BaseModel):
    """Reverses text (no settings)."""


class Reverse(Tool):
    name = "reverse"
    description = "Reverses a string."

    class Arguments(BaseModel):
        text: str = Field(description="The text to reverse.")

    def call(self, arguments: Reverse.Arguments) -> str:
        return arguments.text[::-1]


@hookimpl
def register_environments(register):
    register("guess_number", lambda config, context: GuessNumber(config), GuessNumberConfig)


@hookimpl
def register_tools(register):
    register("reverse", lambda config, context: Reverse(), ReverseConfig)
