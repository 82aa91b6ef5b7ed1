"""Importers: the test formats of public code datasets, as native problems.

``import_problem(record, source)`` takes one dataset record (a dict, as the dataset's
JSON or Hugging Face row gives it) and returns a native problem dict (see
:mod:`rlax_verifiers.code.problem`). Sources: ``apps`` / ``taco`` (``input_output``),
``livecodebench``, ``codecontests``, ``humaneval``, ``mbpp``. Nothing is ever
unpickled: LiveCodeBench's pickled private tests are refused with an error saying so.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Callable
from typing import Any

from rlax_verifiers.code.problem import ProblemError, parse_problem


def _json_field(record: dict[str, Any], key: str) -> Any:
    value = record.get(key)
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ProblemError(f"field {key!r} is not valid JSON: {exc}") from None
    return value


def _text(value: Any) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _limit(text: Any, unit: str, default: float) -> float:
    match = re.search(r"(\d+(?:\.\d+)?)", str(text or ""))
    return float(match.group(1)) if match and unit in str(text) else default


def from_apps(record: dict[str, Any], language: str = "python") -> dict[str, Any]:
    """APPS and TACO: ``input_output`` = {"inputs", "outputs", "fn_name"?}."""
    tests = _json_field(record, "input_output")
    if not tests or not tests.get("inputs"):
        raise ProblemError("the record has no tests in 'input_output'")
    inputs, outputs = tests["inputs"], tests.get("outputs") or []
    if len(inputs) != len(outputs):
        raise ProblemError(f"'input_output' has {len(inputs)} inputs but {len(outputs)} outputs")
    problem: dict[str, Any] = {
        "kind": "code",
        "language": language,
        "time_limit_s": _limit(record.get("time_limit"), "second", 2.0),
        "memory_limit_mb": int(_limit(record.get("memory_limit"), "mega", 256)),
    }
    if tests.get("fn_name"):
        # Call-based answers are stored as a one-element list around the return value.
        cases = [
            {"args": args if isinstance(args, list) else [args],
             "expected": out[0] if isinstance(out, list) and len(out) == 1 else out}
            for args, out in zip(inputs, outputs, strict=True)
        ]  # fmt: skip
        problem["tests"] = {"type": "function_call", "fn_name": tests["fn_name"], "cases": cases}
    else:
        cases = [
            {"input": _text(i), "output": _text(o)} for i, o in zip(inputs, outputs, strict=True)
        ]
        problem["tests"] = {"type": "stdin_stdout", "cases": cases}
    return problem


def _lcb_private(value: Any) -> list[dict[str, Any]]:
    if not value:
        return []
    if isinstance(value, list):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        raw = zlib.decompress(base64.b64decode(value, validate=False))
    except (binascii.Error, zlib.error, ValueError):
        raise ProblemError("'private_test_cases' is neither JSON nor a known encoding") from None
    if raw[:1] == b"\x80":
        raise ProblemError(
            "'private_test_cases' is a pickled payload; RLAX never unpickles (it can run "
            "arbitrary code): convert the dataset's tests to JSON with a trusted tool first"
        )
    try:
        return json.loads(raw)
    except ValueError:
        raise ProblemError("'private_test_cases' decodes to something that is not JSON") from None


def from_livecodebench(record: dict[str, Any], language: str = "python") -> dict[str, Any]:
    """LiveCodeBench code generation: public and private test cases, stdin or functional."""
    cases = (_json_field(record, "public_test_cases") or []) + _lcb_private(
        record.get("private_test_cases")
    )
    if not cases:
        raise ProblemError("the record has no test cases")
    metadata = _json_field(record, "metadata") or {}
    problem: dict[str, Any] = {"kind": "code", "language": language}
    if cases[0].get("testtype") == "functional":
        fn_name = metadata.get("func_name")
        if not fn_name:
            raise ProblemError("a functional LiveCodeBench record needs metadata.func_name")
        call_cases = [
            {"args": [json.loads(line) for line in c["input"].split("\n") if line.strip()],
             "expected": json.loads(c["output"])}
            for c in cases
        ]  # fmt: skip
        problem["tests"] = {"type": "function_call", "fn_name": fn_name, "cases": call_cases}
    else:
        stdio = [{"input": c["input"], "output": c["output"]} for c in cases]
        problem["tests"] = {"type": "stdin_stdout", "cases": stdio}
    return problem


def from_codecontests(record: dict[str, Any], language: str = "python") -> dict[str, Any]:
    """CodeContests: public, private and generated stdin/stdout tests, with its limits."""
    cases = []
    for key in ("public_tests", "private_tests", "generated_tests"):
        tests = record.get(key) or {}
        for i, o in zip(tests.get("input", []), tests.get("output", []), strict=True):
            cases.append({"input": i, "output": o})
    if not cases:
        raise ProblemError("the record has no tests")
    limit = record.get("time_limit") or {}
    seconds = float(limit.get("seconds") or 0) + float(limit.get("nanos") or 0) / 1e9
    memory = int(record.get("memory_limit_bytes") or 0) >> 20
    return {
        "kind": "code",
        "language": language,
        "tests": {"type": "stdin_stdout", "cases": cases},
        "time_limit_s": seconds or 2.0,
        "memory_limit_mb": memory or 256,
    }


def _imports_of(prompt: str) -> str:
    return "\n".join(line for line in prompt.splitlines() if re.match(r"^(import|from)\s+\w", line))


def from_humaneval(record: dict[str, Any]) -> dict[str, Any]:
    """HumanEval: the ``test`` (a ``check(candidate)`` function) called on the entry point."""
    for key in ("test", "entry_point"):
        if not record.get(key):
            raise ProblemError(f"the record has no {key!r}")
    return {
        "kind": "code",
        "language": "python",
        "tests": {"type": "assert", "code": f"{record['test']}\ncheck({record['entry_point']})\n"},
        "code_prefix": _imports_of(record.get("prompt", "")),
    }


def from_mbpp(record: dict[str, Any]) -> dict[str, Any]:
    """MBPP (original and sanitized): ``test_list`` asserts after the setup code."""
    asserts = record.get("test_list") or []
    if not asserts:
        raise ProblemError("the record has no 'test_list'")
    setup = [record.get("test_setup_code") or "", *(record.get("test_imports") or [])]
    code = "\n".join(line for line in [*setup, *asserts] if line.strip())
    return {"kind": "code", "language": "python", "tests": {"type": "assert", "code": code}}


IMPORTERS: dict[str, Callable[..., dict[str, Any]]] = {
    "apps": from_apps,
    "taco": from_apps,
    "livecodebench": from_livecodebench,
    "codecontests": from_codecontests,
    "humaneval": from_humaneval,
    "mbpp": from_mbpp,
}


def import_problem(record: dict[str, Any], source: str, **options: Any) -> dict[str, Any]:
    """A native problem from a dataset record; raises ProblemError naming what is wrong."""
    try:
        importer = IMPORTERS[source]
    except KeyError:
        raise ProblemError(f"unknown source {source!r}; known: {', '.join(IMPORTERS)}") from None
    try:
        problem = importer(record, **options)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProblemError(f"not a {source} record: {type(exc).__name__}: {exc}") from None
    parse_problem(problem)  # the importer's output is always valid native format
    return problem
