"""Tools whose calls run in a sandbox: ``python``."""

from rlax_verifiers.tools.python import PythonTool, PythonToolConfig, make_python_tool

__all__ = ["PythonTool", "PythonToolConfig", "make_python_tool"]
