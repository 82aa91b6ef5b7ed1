"""Prompt datasets: rows of a JSONL or Parquet file rendered into prompts and judge problems.

A dataset is read and checked whole when it is loaded, so a bad row stops the run before
anything starts, with a message naming the file, the row and the field, never midway
through training.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rlax_core.config.sections import DatasetConfig, template_fields
from rlax_core.contracts.prompts import PromptExample
from rlax_core.data.rows import SourceRow, read_rows
from rlax_core.errors import ConfigError
from rlax_core.storage import storage_path


class PromptDataset:
    """An immutable, indexable sequence of :class:`PromptExample` in file order."""

    def __init__(self, name: str, examples: Sequence[PromptExample]) -> None:
        """Wraps examples already rendered; :meth:`load` is the usual way to get one.

        Raises:
            ValueError: ``examples`` is empty.
        """
        if not examples:
            raise ValueError(f"dataset {name!r} has no examples")
        self.name = name
        self._examples = tuple(examples)

    @classmethod
    def load(cls, config: DatasetConfig, base_dir: Path) -> PromptDataset:
        """Reads, renders and checks every row of the dataset file.

        Args:
            config: the dataset's config section.
            base_dir: the directory a relative ``config.path`` is relative to (the run
                config file's directory).

        Raises:
            ConfigError: the file is missing, unreadable or malformed, has no rows, or a row
                lacks a field the template or the problem needs, or two rows share an id;
                or the prompt source cannot make its examples.
        """
        if config.source is not None:
            return cls._from_source(config)
        assert config.path is not None and config.prompt_template is not None
        path = storage_path(config.path, base_dir)
        rows = read_rows(path, config.format, config.limit)
        if not rows:
            raise ConfigError(f"{path}: has no rows; a dataset needs at least one prompt")
        renderer = _RowRenderer(config, path)
        examples = [renderer.render(row) for row in rows]
        _check_unique_ids(examples, rows, path, config.id_field)
        return cls(config.dataset_name, examples)

    @classmethod
    def _from_source(cls, config: DatasetConfig) -> PromptDataset:
        """The examples a prompt source plugin makes (``source: {type: NAME, ...}``), each
        prompt put through ``prompt_template``'s ``{prompt}`` when one is given."""
        from rlax_core.plugins import BuildContext, load_registry

        registry = load_registry()
        spec = registry.plugin_config("prompt_source", config.source or {})
        source = registry.build("prompt_source", spec, BuildContext(registry))
        kind: str = spec.type  # type: ignore[attr-defined]
        name = config.name or kind
        examples = list(source.examples(name))[: config.limit]
        if not examples:
            raise ConfigError(f"the prompt source {kind!r} made no examples")
        if config.prompt_template is not None:
            examples = [
                dataclasses.replace(e, prompt=config.prompt_template.format(prompt=e.prompt))
                for e in examples
            ]
        ids = [e.example_id for e in examples]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"the prompt source {kind!r} made two examples of one id")
        return cls(name, examples)

    def __len__(self) -> int:
        """The number of examples."""
        return len(self._examples)

    def __getitem__(self, index: int) -> PromptExample:
        """The example at ``index`` in file order."""
        return self._examples[index]

    def __iter__(self) -> Iterator[PromptExample]:
        """The examples in file order."""
        return iter(self._examples)

    def __repr__(self) -> str:
        return f"PromptDataset({self.name!r}, {len(self)} examples)"


class _RowRenderer:
    """Turns rows of one file into examples, naming the file and row in every error."""

    def __init__(self, config: DatasetConfig, path: Path) -> None:
        self.config = config
        self.path = path
        self.template_fields = tuple(dict.fromkeys(template_fields(config.prompt_template)))

    def render(self, row: SourceRow) -> PromptExample:
        return PromptExample(
            example_id=f"{self.config.dataset_name}/{self._id(row)}",
            prompt=self._prompt(row),
            problem=self._problem(row),
        )

    def _prompt(self, row: SourceRow) -> str:
        for field in self.template_fields:
            if field not in row.fields:
                raise self._error(row, f"has no field {field!r}, which prompt_template uses")
        try:
            return self.config.prompt_template.format_map(row.fields)
        except (KeyError, IndexError, AttributeError, ValueError, TypeError) as exc:
            raise self._error(
                row, f"prompt_template cannot be filled in ({type(exc).__name__}: {exc})"
            ) from None

    def _problem(self, row: SourceRow) -> dict[str, Any]:
        if self.config.answer_field is not None:
            return {"kind": "math", "answer": str(self._value(row, "answer_field"))}
        value = self._value(row, "problem_field")
        field = self.config.problem_field
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise self._error(
                    row, f"field {field!r} (problem_field) is text but not JSON ({exc.msg})"
                ) from None
        if not isinstance(value, dict):
            raise self._error(
                row,
                f"field {field!r} (problem_field) holds {value!r:.80}, which is not a mapping "
                'or a JSON object such as {"kind": "code", ...}',
            )
        return dict(value)

    def _id(self, row: SourceRow) -> str:
        if self.config.id_field is None:
            return str(row.index)
        return str(self._value(row, "id_field"))

    def _value(self, row: SourceRow, setting: str) -> Any:
        """The value of the field that config ``setting`` names; it must be present and set."""
        field = getattr(self.config, setting)
        if field not in row.fields:
            raise self._error(row, f"has no field {field!r} ({setting})")
        value = row.fields[field]
        if value is None:
            raise self._error(row, f"field {field!r} ({setting}) is null")
        return value

    def _error(self, row: SourceRow, problem: str) -> ConfigError:
        fields = ", ".join(map(repr, row.fields)) or "none"
        return ConfigError(f"{self.path}: {row.where}: {problem}; the row's fields: {fields}")


def _check_unique_ids(
    examples: Sequence[PromptExample], rows: Sequence[SourceRow], path: Path, id_field: str | None
) -> None:
    first: dict[str, SourceRow] = {}
    for example, row in zip(examples, rows, strict=True):
        seen = first.setdefault(example.example_id, row)
        if seen is not row:
            raise ConfigError(
                f"{path}: {seen.where} and {row.where} have the same id "
                f"{example.example_id!r} (id_field {id_field!r}); ids must be unique: fix the "
                "data, or leave id_field out to number the rows"
            )
