"""The native problem format and the dataset importers (pure: no sandbox)."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import pytest

from rlax_verifiers.code.importers import import_problem
from rlax_verifiers.code.problem import ProblemError, parse_problem


def test_native_problems_validate_with_readable_errors() -> None:
    problem = parse_problem({"kind": "code", "tests": {"type": "assert", "code": "assert 1"}})
    assert problem.language == "python" and problem.time_limit_s == 2.0
    with pytest.raises(ProblemError, match=r"tests\.stdin_stdout\.cases: Field required"):
        parse_problem({"kind": "code", "tests": {"type": "stdin_stdout"}})
    with pytest.raises(ProblemError, match="function_call tests need language 'python'"):
        parse_problem(
            {
                "kind": "code",
                "language": "cpp",
                "tests": {
                    "type": "function_call",
                    "fn_name": "f",
                    "cases": [{"args": [], "expected": 1}],
                },
            }
        )
    with pytest.raises(ProblemError, match="time_limit_s"):
        parse_problem(
            {"kind": "code", "time_limit_s": -1, "tests": {"type": "assert", "code": "assert 1"}}
        )


def test_apps_and_taco_stdio_and_call_based() -> None:
    stdio = import_problem(
        {"input_output": json.dumps({"inputs": ["1 2\n", ["3", "4"]], "outputs": ["3\n", ["7"]]})},
        "apps",
    )
    assert stdio["tests"] == {
        "type": "stdin_stdout",
        "cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "3\n4", "output": "7"}],
    }
    call = import_problem(
        {
            "input_output": json.dumps(
                {"fn_name": "add", "inputs": [[1, 2], [[1], [2]]], "outputs": [[3], [[1, 2]]]}
            ),
            "time_limit": "4 seconds",
            "memory_limit": "512 megabytes",
        },
        "taco",
    )
    assert call["tests"]["cases"] == [
        {"args": [1, 2], "expected": 3},
        {"args": [[1], [2]], "expected": [1, 2]},
    ]
    assert (call["time_limit_s"], call["memory_limit_mb"]) == (4.0, 512)
    with pytest.raises(ProblemError, match="no tests"):
        import_problem({"input_output": ""}, "apps")


def test_livecodebench_json_tests_and_refused_pickles() -> None:
    public = [{"input": "[1, 2]\n3", "output": "[4]", "testtype": "functional"}]
    record = {
        "public_test_cases": json.dumps(public),
        "private_test_cases": "",
        "metadata": json.dumps({"func_name": "f"}),
    }
    problem = import_problem(record, "livecodebench")
    assert problem["tests"] == {
        "type": "function_call",
        "fn_name": "f",
        "cases": [{"args": [[1, 2], 3], "expected": [4]}],
    }
    stdio = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    encoded = base64.b64encode(zlib.compress(json.dumps(stdio).encode())).decode()
    assert import_problem(
        {"public_test_cases": "[]", "private_test_cases": encoded}, "livecodebench"
    )["tests"]["cases"] == [{"input": "1\n", "output": "2\n"}]
    pickled = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(stdio)))).decode()
    with pytest.raises(ProblemError, match="pickled payload; RLAX never unpickles"):
        import_problem({"public_test_cases": "[]", "private_test_cases": pickled}, "livecodebench")


def test_codecontests_humaneval_mbpp() -> None:
    cc = import_problem(
        {
            "public_tests": {"input": ["1\n"], "output": ["1\n"]},
            "private_tests": {"input": ["2\n"], "output": ["4\n"]},
            "generated_tests": {"input": [], "output": []},
            "time_limit": {"seconds": 1, "nanos": 500_000_000},
            "memory_limit_bytes": 64 << 20,
        },
        "codecontests",
        language="cpp",
    )
    assert len(cc["tests"]["cases"]) == 2 and cc["language"] == "cpp"
    assert (cc["time_limit_s"], cc["memory_limit_mb"]) == (1.5, 64)
    he = import_problem(
        {
            "prompt": "from typing import List\n\ndef f(x: List[int]) -> int:\n",
            "test": "def check(candidate):\n    assert candidate([1]) == 1\n",
            "entry_point": "f",
        },
        "humaneval",
    )
    assert he["code_prefix"] == "from typing import List"
    assert he["tests"]["code"].endswith("check(f)\n")
    mbpp = import_problem(
        {"test_list": ["assert f(1) == 2"], "test_setup_code": "import math"}, "mbpp"
    )
    assert mbpp["tests"]["code"] == "import math\nassert f(1) == 2"
    with pytest.raises(ProblemError, match="unknown source 'kaggle'"):
        import_problem({}, "kaggle")
    with pytest.raises(ProblemError, match="no 'test_list'"):
        import_problem({}, "mbpp")
