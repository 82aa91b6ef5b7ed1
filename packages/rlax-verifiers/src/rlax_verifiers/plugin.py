"""The rlax-verifiers plugin module, loaded through its ``rlax`` entry point."""

from __future__ import annotations

from rlax_core.hookspecs import Register, hookimpl
from rlax_verifiers.code.judge import CodeJudgeConfig, make_code_judge
from rlax_verifiers.math.judge import MathJudgeConfig, make_math_judge
from rlax_verifiers.prime.environment import (
    VerifiersEnvironmentConfig,
    make_verifiers_environment,
)
from rlax_verifiers.prime.source import VerifiersSourceConfig, make_verifiers_source
from rlax_verifiers.reasoning_gym.judge import ReasoningGymJudgeConfig, make_reasoning_gym_judge
from rlax_verifiers.reasoning_gym.source import (
    ReasoningGymSourceConfig,
    make_reasoning_gym_source,
)
from rlax_verifiers.sandbox.aws_lambda.client import LambdaSandboxConfig, make_lambda_sandbox
from rlax_verifiers.sandbox.docker.backend import DockerSandboxConfig, make_docker_sandbox
from rlax_verifiers.sandbox.local import LocalSandboxConfig, make_local_sandbox
from rlax_verifiers.tools import PythonToolConfig, make_python_tool


@hookimpl
def register_judges(register: Register) -> None:
    """Registers the ``math``, ``code`` and ``reasoning_gym`` judges."""
    register("math", make_math_judge, MathJudgeConfig)
    register("code", make_code_judge, CodeJudgeConfig)
    register("reasoning_gym", make_reasoning_gym_judge, ReasoningGymJudgeConfig)


@hookimpl
def register_prompt_sources(register: Register) -> None:
    """Registers the ``reasoning_gym`` prompt source (the reasoning-gym extra) and the
    ``verifiers`` one (the prime extra)."""
    register("reasoning_gym", make_reasoning_gym_source, ReasoningGymSourceConfig)
    register("verifiers", make_verifiers_source, VerifiersSourceConfig)


@hookimpl
def register_environments(register: Register) -> None:
    """Registers the ``verifiers`` environment (the prime extra)."""
    register("verifiers", make_verifiers_environment, VerifiersEnvironmentConfig)


@hookimpl
def register_sandboxes(register: Register) -> None:
    """Registers the ``local``, ``docker`` and ``lambda`` sandboxes."""
    register("local", make_local_sandbox, LocalSandboxConfig)
    register("docker", make_docker_sandbox, DockerSandboxConfig)
    register("lambda", make_lambda_sandbox, LambdaSandboxConfig)


@hookimpl
def register_tools(register: Register) -> None:
    """Registers the ``python`` tool (its calls run in the configured sandbox)."""
    register("python", make_python_tool, PythonToolConfig)
