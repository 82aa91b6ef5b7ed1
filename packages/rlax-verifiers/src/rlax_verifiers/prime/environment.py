"""The ``verifiers`` environment: a ``verifiers`` environment's rollouts, rewarded by
its rubric."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from rlax_core.kit.environment import ClientEnvironment, ListedTool
from rlax_verifiers.prime.library import EnvironmentSpec, load, verifiers


class VerifiersEnvironmentConfig(EnvironmentSpec):
    """A ``verifiers`` environment (train on its dataset with the ``verifiers`` prompt
    source of the same settings)."""

    sampling_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to its rollouts (some environments read them); the model's "
        "turns are sampled with the run's rollout settings whatever they say.",
    )


class VerifiersEnvironment(ClientEnvironment):
    """Runs the environment's own rollout per episode; its rubric's reward is the
    episode's (None when it scored nothing: the judge decides)."""

    def __init__(self, config: VerifiersEnvironmentConfig) -> None:
        super().__init__()
        self.config = config
        self.environment = load(config)
        # What its requests offer, in the shape its OpenAI client sends them.
        self.tools = tuple(ListedTool(_openai_tool(t)) for t in self.environment.tool_defs or ())

    async def run(self, client: Any, model: str, problem: Mapping[str, Any]) -> float | None:
        vf = verifiers()
        output = await self.environment.run_rollout(
            input=dict(problem["input"]), client=vf.OpenAIChatCompletionsClient(client),
            model=model, sampling_args=dict(self.config.sampling_args),
        )  # fmt: skip
        if output.get("error"):
            raise RuntimeError(f"the rollout failed: {output['error']}")
        reward = output.get("reward")
        return None if reward is None else float(reward)


def _openai_tool(tool: Any) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def make_verifiers_environment(config: VerifiersEnvironmentConfig, context) -> VerifiersEnvironment:
    return VerifiersEnvironment(config)
