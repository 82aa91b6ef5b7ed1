"""``rlax verify``: JSONL in, verdicts out in input order; invalid lines are IE, named, and
stop the command unless --keep-going."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlax_core.cli.main import main

DOUBLE = {
    "kind": "code",
    "language": "python",
    "tests": {"type": "stdin_stdout", "cases": [{"input": "2\n", "output": "4\n"}]},
}


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_verify_judges_every_line_in_order(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = _write(
        tmp_path / "in.jsonl",
        [
            {"id": "a", "problem": DOUBLE, "completion": "```python\nprint(int(input()) * 2)\n```"},
            {"id": "b", "problem": {"kind": "math", "answer": "1/2"}, "completion": "\\boxed{0.5}"},
            "{not json",
            {"id": "d", "problem": {"kind": "poetry"}, "completion": "roses"},
            {"id": "e", "problem": {"kind": "code", "tests": {"type": "nope"}}, "completion": "x"},
            {"id": "f", "problem": DOUBLE, "completion": "print(5)"},
            {"id": "g", "problem": DOUBLE},
            [1, 2],
        ],
    )
    out = tmp_path / "out.jsonl"
    command = ["verify", "--backend", "local", "--workers", "2", str(source), "--out", str(out)]
    # Without --keep-going, invalid lines stop the command before anything is judged.
    assert main(command) == 2
    refused = capsys.readouterr().err
    assert "4 of 8 lines are invalid" in refused and "--keep-going" in refused
    assert "invalid: line 3: not JSON" in refused
    assert not out.exists()
    assert main([*command, "--keep-going"]) == 2  # judged, and still says the input was bad
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["verdict"], r["reward"]) for r in rows] == [
        ("a", "AC", 1.0),
        ("b", "AC", 1.0),
        (None, "IE", None),
        ("d", "IE", None),
        ("e", "IE", None),
        ("f", "WA", 0.0),
        ("g", "IE", None),
        (None, "IE", None),
    ]
    assert rows[0]["tests"][0]["verdict"] == "AC" and rows[0]["tests"][0]["time_s"] > 0
    assert rows[0]["tests"][0]["memory_mb"] > 0
    assert "line 3: not JSON" in rows[2]["message"]
    assert "no judge for problem kind 'poetry'" in rows[3]["message"]
    assert "not a valid code problem" in rows[4]["message"]
    assert "'completion' must be a string" in rows[6]["message"]
    assert "judged 8 completions: 2 AC, 5 IE, 1 WA" in capsys.readouterr().err


def test_verify_writes_stdout_and_refuses_bad_arguments(tmp_path: Path) -> None:
    source = _write(tmp_path / "in.jsonl", [{"id": 1, "problem": DOUBLE, "completion": "print(4)"}])
    command = [sys.executable, "-m", "rlax_core.cli", "verify"]
    done = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "AC"
    missing = subprocess.run(
        [*command, str(tmp_path / "nope.jsonl")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    unknown = subprocess.run(
        [*command, "--backend", "nope", str(source)], capture_output=True, text=True
    )
    assert unknown.returncode == 2 and "no sandbox named 'nope'" in unknown.stderr
    assert "Traceback" not in missing.stderr + unknown.stderr


def test_one_pathological_answer_costs_its_own_line_only(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    lines = [
        {"id": i, "problem": {"kind": "math", "answer": str(i)}, "completion": f"\\boxed{{{i}}}"}
        for i in range(9)
    ]
    lines.insert(4, {"id": "big", "problem": {"kind": "math", "answer": "1"},
                     "completion": "\\boxed{1e999999}"})  # fmt: skip
    out = tmp_path / "out.jsonl"
    assert main(["verify", str(_write(tmp_path / "in.jsonl", lines)), "--out", str(out)]) == 0
    rows = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert [rows[i]["verdict"] for i in range(9)] == ["AC"] * 9
    assert rows["big"]["verdict"] == "WA"
    assert "judged 10 completions: 9 AC, 1 WA" in capsys.readouterr().err
