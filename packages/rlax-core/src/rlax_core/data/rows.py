"""Reading the rows of a prompt dataset file: JSON Lines or Parquet.

Every failure is a :class:`ConfigError` naming the file (and the line, for JSONL) and
what to do: a missing file, a directory, binary data where text was expected, a line
that is not a JSON object, a file that is not Parquet, or pyarrow not being installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlax_core.errors import ConfigError

FileFormat = Literal["jsonl", "parquet"]

_EXTENSIONS: dict[str, FileFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class SourceRow:
    """One row of a dataset file.

    Attributes:
        index: position among the file's rows, from 0 (blank JSONL lines are not rows).
        where: where the row is, for messages: ``line 7`` (JSONL) or ``row 6`` (Parquet).
        fields: the row's fields by name.
    """

    index: int
    where: str
    fields: dict[str, Any]


def file_format(path: Path, declared: str) -> FileFormat:
    """The format to read ``path`` as: ``declared``, or for ``auto`` the one its extension names.

    Raises:
        ConfigError: ``auto`` and the extension names no known format.
    """
    if declared in ("jsonl", "parquet"):
        return declared  # type: ignore[return-value]
    found = _EXTENSIONS.get(path.suffix.lower())
    if found is None:
        known = ", ".join(_EXTENSIONS)
        raise ConfigError(
            f"{path}: cannot tell the dataset format from the extension {path.suffix!r} "
            f"(known: {known}); set format: jsonl or format: parquet"
        )
    return found


def read_rows(path: Path, declared_format: str, limit: int | None = None) -> list[SourceRow]:
    """Reads the first ``limit`` rows (default: all) of a JSONL or Parquet file.

    Raises:
        ConfigError: the file is missing or unreadable, or is not valid for its format.
    """
    if not path.exists():
        raise ConfigError(f"{path}: no such file; check the dataset's path")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; a dataset path names a JSONL or Parquet file")
    if file_format(path, declared_format) == "parquet":
        return _read_parquet(path, limit)
    return _read_jsonl(path, limit)


def _read_jsonl(path: Path, limit: int | None) -> list[SourceRow]:
    """Reads line by line, so a file in a bucket streams and ``limit`` stops the read."""
    rows: list[SourceRow] = []
    try:
        with path.open("rb") as handle:
            # Split on "\n" only (a binary file's lines): str.splitlines would also split
            # at U+2028 inside JSON strings.
            for number, raw in enumerate(handle, start=1):
                if limit is not None and len(rows) >= limit:
                    break
                if number == 1:
                    if raw.startswith(_PARQUET_MAGIC):
                        raise ConfigError(
                            f"{path}: is a Parquet file, not JSON Lines; set format: parquet"
                        )
                    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
                row = _jsonl_row(path, number, raw, len(rows))
                if row is not None:
                    rows.append(row)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return rows


def _jsonl_row(path: Path, number: int, raw: bytes, index: int) -> SourceRow | None:
    """Line ``number`` as a row; None for a blank line."""
    if b"\0" in raw:
        raise ConfigError(
            f"{path}: line {number}: contains binary data (NUL bytes); a JSONL dataset is "
            "text, one JSON object per line"
        )
    try:
        line_text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: line {number}: is not UTF-8 text (bad byte at column {exc.start + 1}); "
            "save the file as UTF-8"
        ) from None
    if not line_text.strip():
        return None
    try:
        value = json.loads(line_text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: line {number}: not valid JSON ({exc.msg}, column {exc.colno}); "
            "each line of a JSONL file is one JSON object"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{path}: line {number}: is a JSON {_json_kind(value)}, not an object; "
            'each line of a JSONL file is one object such as {"question": ..., "answer": ...}'
        )
    return SourceRow(index=index, where=f"line {number}", fields=value)


def _read_parquet(path: Path, limit: int | None) -> list[SourceRow]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            f"{path}: reading Parquet needs pyarrow, which is not installed; "
            "pip install rlax-core[parquet]"
        ) from None
    try:
        with path.open("rb") as handle:  # a local file or an object (ranged reads)
            table = pq.read_table(handle)
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(
            f"{path}: is not a readable Parquet file ({exc}); if it is JSON Lines, set "
            "format: jsonl"
        ) from None
    if limit is not None:
        table = table.slice(0, limit)
    return [
        SourceRow(index=index, where=f"row {index}", fields=fields)
        for index, fields in enumerate(table.to_pylist())
    ]


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"
