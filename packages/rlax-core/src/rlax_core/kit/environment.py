"""Building blocks of an environment plugin.

- :class:`ClientEnvironment`: the base of an environment that is a program calling an
  OpenAI client, answered with the worker's turns through its episode endpoint (needs
  the ``serve`` extra), with :class:`ListedTool` for the tools such a program runs
  itself and :class:`EnvironmentProtocolError` for a program that breaks the endpoint's
  rules.
- :func:`template_message`: an OpenAI chat message as the chat template reads it (what a
  prompt source whose dataset holds OpenAI messages gives as ``PromptExample.messages``),
  raising :class:`BadRequestError` for one it cannot read.
"""

from rlax_core.environments.client import ClientEnvironment, EnvironmentProtocolError, ListedTool
from rlax_core.serve.messages import BadRequestError, template_message

__all__ = [
    "BadRequestError",
    "ClientEnvironment",
    "EnvironmentProtocolError",
    "ListedTool",
    "template_message",
]
