"""The ``python`` tool: the model's code runs in the configured sandbox backend.

Each call is one program run in a fresh sandbox (``verifier.sandbox``: local, docker or
lambda; the local one when none is set), with the tool's time, memory and output
limits; the model reads back what it printed, its error, or which limit it hit. Nothing
carries over between calls, as in a sandbox that starts clean every time. The sandbox
is built on the first call, so a process that only lists the tool (the trainer, which
shows it in prompts) never starts one.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, Field

from rlax_core.contracts import Program, SandboxBackend, Tool
from rlax_core.plugins import BuildContext
from rlax_core.types.verdict import ExecutionResult
from rlax_verifiers.sandbox import SandboxUnavailableError
from rlax_verifiers.sandbox.configured import configured_sandbox


class PythonToolConfig(BaseModel):
    """Settings of the ``python`` tool."""

    time_limit_s: float = Field(default=5.0, gt=0, description="Wall-clock limit per call.")
    memory_limit_mb: int = Field(default=256, gt=0, description="Memory limit per call.")
    output_limit_bytes: int = Field(
        default=4096, gt=0, description="Most bytes of stdout (and of stderr) shown back."
    )


class PythonTool(Tool):
    """Runs Python code in a sandbox; answers with what it printed."""

    name = "python"
    description = (
        "Runs a Python 3 program in a fresh sandbox and returns what it printed to stdout "
        "(and stderr if it failed). Nothing is kept between calls: print what you need."
    )

    class Arguments(BaseModel):
        code: str = Field(description="The program; print the results you want to see.")

    def __init__(self, context: BuildContext, config: PythonToolConfig) -> None:
        self._context = context
        self._config = config
        self._sandbox: SandboxBackend | None = None
        self._lock = threading.Lock()

    def call(self, arguments: PythonTool.Arguments) -> str:
        program = Program(
            language="python", source=arguments.code, time_limit_s=self._config.time_limit_s,
            memory_limit_mb=self._config.memory_limit_mb,
            output_limit_bytes=self._config.output_limit_bytes,
        )  # fmt: skip
        (result,) = self._backend().run(program, [""])
        return _observed(result, self._config)

    def _backend(self) -> SandboxBackend:
        with self._lock:  # episodes call from several threads
            if self._sandbox is None:
                self._sandbox = configured_sandbox(self._context)
            return self._sandbox

    def close(self) -> None:
        with self._lock:
            if self._sandbox is not None:
                self._sandbox.close()
                self._sandbox = None


def _observed(result: ExecutionResult, config: PythonToolConfig) -> str:
    """What the model reads back from a run."""
    if result.sandbox_error:  # not the model's fault: the rollout ends unjudged
        raise SandboxUnavailableError(f"the python tool's sandbox failed: {result.sandbox_error}")
    out = result.stdout.rstrip("\n") + ("\n[stdout truncated]" if result.stdout_truncated else "")
    if result.timed_out:
        problem = f"Error: the program ran past {config.time_limit_s:g} s and was stopped"
    elif result.exit_code == 0:
        return out if out.strip() else "(the program printed nothing)"
    else:
        how = (
            f"exit code {result.exit_code}" if result.signal is None else f"signal {result.signal}"
        )
        problem = f"Error ({how}):\n{result.stderr.strip()}"
    return f"{out}\n{problem}" if out else problem


def make_python_tool(config: PythonToolConfig, context: BuildContext) -> PythonTool:
    """Builds the python tool; its sandbox is built on its first call."""
    return PythonTool(context, config)
