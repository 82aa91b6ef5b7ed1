"""Prompt datasets: real JSONL and Parquet files are read, rendered and checked whole."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlax_core.config.sections import DatasetConfig
from rlax_core.data import PromptDataset, PromptExample
from rlax_core.errors import ConfigError

ROWS = [
    {"question": "1 + 1", "answer": 2, "uid": "p-a"},
    {"question": "2 * 3", "answer": 6, "uid": "p-b"},
    {"question": "10 / 5", "answer": 2, "uid": "p-c"},
]
CODE_PROBLEM = {
    "kind": "code",
    "language": "python",
    "tests": {"type": "assert", "code": "assert f(1) == 2"},
}


def _config(path: str, **fields: Any) -> DatasetConfig:
    fields.setdefault("prompt_template", "Q: {question}\nA:")
    if "problem_field" not in fields:
        fields.setdefault("answer_field", "answer")
    return DatasetConfig(path=path, **fields)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_jsonl_rows_become_math_examples(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "arith.jsonl", ROWS)
    dataset = PromptDataset.load(_config("arith.jsonl"), tmp_path)
    assert (dataset.name, len(dataset)) == ("arith", 3)
    assert dataset[0] == PromptExample(
        example_id="arith/0", prompt="Q: 1 + 1\nA:", problem={"kind": "math", "answer": "2"}
    )
    assert [e.problem["answer"] for e in dataset] == ["2", "6", "2"]
    assert [e.example_id for e in dataset] == ["arith/0", "arith/1", "arith/2"]


def test_parquet_reads_the_same_examples_as_jsonl(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "arith.jsonl", ROWS)
    _write_parquet(tmp_path / "arith.parquet", ROWS)
    from_jsonl = PromptDataset.load(_config("arith.jsonl"), tmp_path)
    from_parquet = PromptDataset.load(_config("arith.parquet"), tmp_path)
    assert list(from_parquet) == list(from_jsonl)
    limited = PromptDataset.load(_config("arith.parquet", limit=2), tmp_path)
    assert list(limited) == list(from_jsonl)[:2]


def test_ids_names_limits_and_templates(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "arith.jsonl"
    path.parent.mkdir()
    _write_jsonl(path, ROWS)
    config = _config(
        "sub/arith.jsonl",
        name="math-v1",
        id_field="uid",
        limit=2,
        prompt_template="[{uid}] {question:>6} = ? {{answer}}",
    )
    dataset = PromptDataset.load(config, tmp_path)
    assert [e.example_id for e in dataset] == ["math-v1/p-a", "math-v1/p-b"]
    assert dataset[1].prompt == "[p-b]  2 * 3 = ? {answer}"
    absolute = PromptDataset.load(_config(str(path)), Path("/nonexistent"))
    assert len(absolute) == 3


def test_blank_lines_are_not_rows_and_a_bom_is_ignored(tmp_path: Path) -> None:
    lines = [json.dumps(row) for row in ROWS]
    text = "\ufeff" + lines[0] + "\n\n  \n" + lines[1] + "\r\n" + lines[2]  # no final newline
    (tmp_path / "gaps.jsonl").write_text(text, encoding="utf-8")
    dataset = PromptDataset.load(_config("gaps.jsonl"), tmp_path)
    assert [e.example_id for e in dataset] == ["gaps/0", "gaps/1", "gaps/2"]


def test_problem_field_takes_mappings_and_json_text(tmp_path: Path) -> None:
    rows = [
        {"prompt": "write f", "problem": CODE_PROBLEM},
        {"prompt": "write f again", "problem": json.dumps(CODE_PROBLEM)},
    ]
    _write_jsonl(tmp_path / "code.jsonl", rows)
    _write_parquet(tmp_path / "code.parquet", [rows[0], rows[0]])  # a struct column
    _write_parquet(tmp_path / "text.parquet", [rows[1]])  # a string column
    for name in ("code.jsonl", "code.parquet", "text.parquet"):
        config = _config(name, prompt_template="{prompt}", problem_field="problem")
        dataset = PromptDataset.load(config, tmp_path)
        assert all(example.problem == CODE_PROBLEM for example in dataset), name


def test_explicit_format_overrides_the_extension(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "rows.txt", ROWS)
    _write_parquet(tmp_path / "rows.bin", ROWS)
    assert len(PromptDataset.load(_config("rows.txt", format="jsonl"), tmp_path)) == 3
    assert len(PromptDataset.load(_config("rows.bin", format="parquet"), tmp_path)) == 3


def _bad_line(text: str) -> str:
    good = json.dumps(ROWS[0])
    return f"{good}\n{good}\n{text}\n{good}\n"


# name: (file name, file content, config fields, fragments of the message)
BAD_DATASETS: dict[str, tuple[str, str | bytes, dict[str, Any], list[str]]] = {
    "missing file": ("absent.jsonl", "", {}, ["absent.jsonl: no such file"]),
    "unknown extension": ("rows.csv", "a,b\n", {}, ["extension '.csv'", "format: jsonl"]),
    "binary data": ("rows.jsonl", _bad_line("\0\1\2"), {}, ["line 3: contains binary data"]),
    "not utf-8": ("rows.jsonl", _bad_line("caf\xe9").encode("latin-1"), {}, ["line 3", "UTF-8"]),
    "bad json line": ("rows.jsonl", _bad_line('{"question": '), {}, ["line 3: not valid JSON"]),
    "line is not an object": (
        "rows.jsonl",
        _bad_line("[1, 2]"),
        {},
        ["line 3: is a JSON array, not an object"],
    ),
    "empty file": ("rows.jsonl", "\n\n", {}, ["rows.jsonl: has no rows"]),
    "template field missing": (
        "rows.jsonl",
        _bad_line(json.dumps({"q": "x", "answer": 1})),
        {},
        ["line 3: has no field 'question', which prompt_template uses", "fields: 'q', 'answer'"],
    ),
    "template cannot be filled": (
        "rows.jsonl",
        _bad_line(json.dumps({"question": [], "answer": 1})),
        {"prompt_template": "{question[0]}"},
        ["line 3: prompt_template cannot be filled in (IndexError"],
    ),
    "answer field missing": (
        "rows.jsonl",
        _bad_line(json.dumps({"question": "x"})),
        {},
        ["line 3: has no field 'answer' (answer_field)"],
    ),
    "answer is null": (
        "rows.jsonl",
        _bad_line(json.dumps({"question": "x", "answer": None})),
        {},
        ["line 3: field 'answer' (answer_field) is null"],
    ),
    "problem is a number": (
        "rows.jsonl",
        _bad_line(json.dumps({"question": "x", "answer": 3})),
        {"problem_field": "answer"},
        ["line 1: field 'answer' (problem_field) holds 2, which is not a mapping"],
    ),
    "problem is a json list": (
        "rows.jsonl",
        json.dumps({"question": "x", "answer": "[1]"}),
        {"problem_field": "answer"},
        ["line 1: field 'answer' (problem_field) holds [1], which is not a mapping"],
    ),
    "problem is bad json text": (
        "rows.jsonl",
        json.dumps({"question": "x", "answer": "{oops"}),
        {"problem_field": "answer"},
        ["line 1: field 'answer' (problem_field) is text but not JSON"],
    ),
    "duplicate ids": (
        "rows.jsonl",
        _bad_line(json.dumps(ROWS[0])),
        {"id_field": "question"},
        ["line 1 and line 2 have the same id 'rows/1 + 1'", "leave id_field out"],
    ),
    "parquet read as jsonl": ("rows.jsonl", b"PAR1\0\0", {}, ["is a Parquet file, not JSON Lines"]),
    "jsonl read as parquet": (
        "rows.parquet",
        _bad_line("{}"),
        {},
        ["rows.parquet: is not a readable Parquet file", "format: jsonl"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
def test_bad_dataset_is_one_clear_error(case: str, tmp_path: Path) -> None:
    name, content, fields, fragments = BAD_DATASETS[case]
    if content:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError) as raised:
        PromptDataset.load(_config(name, **fields), tmp_path)
    message = str(raised.value)
    assert str(tmp_path / name) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        PromptDataset.load(_config("rows.jsonl"), tmp_path)


def test_parquet_without_pyarrow_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_parquet(tmp_path / "rows.parquet", ROWS)
    _write_jsonl(tmp_path / "rows.jsonl", ROWS)
    # A None entry in sys.modules makes `import pyarrow` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError, match=r"pip install rlax-core\[parquet\]"):
        PromptDataset.load(_config("rows.parquet"), tmp_path)
    assert len(PromptDataset.load(_config("rows.jsonl"), tmp_path)) == 3  # JSONL needs none


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"path": "a.jsonl", "source": {"type": "x"}, "prompt_template": "{q}",
          "answer_field": "a"}, "exactly one of path"),
        ({"prompt_template": "{q}"}, "exactly one of path"),
        ({"source": {"task": "x"}}, "source names its plugin"),
        ({"source": {"type": "x"}, "answer_field": "a"}, "answer_field apply to data files"),
        ({"source": {"type": "x"}, "prompt_template": "{question}"}, "fills in {prompt} only"),
        ({"path": "a.jsonl", "answer_field": "a"}, "needs a prompt_template"),
    ],
)  # fmt: skip
def test_a_dataset_is_a_file_or_a_prompt_source(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        DatasetConfig(**fields)
    assert DatasetConfig(source={"type": "x"}).dataset_name == "x"
    assert DatasetConfig(source={"type": "x"}, name="mine").dataset_name == "mine"
