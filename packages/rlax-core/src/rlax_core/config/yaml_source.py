"""Reading a YAML config file strictly, keeping where each value was written.

Every failure is a :class:`ConfigError` that names the file (and line, where there is
one) and says what to do: a missing file, a directory, an empty file, binary data, a
syntax error, a duplicate key, several documents, or a top level that is not a mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlax_core.errors import ConfigError

_EXAMPLE = "run:\n  name: my-run\nrollout:\n  prompts_per_step: 8"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} "
                    f"(first written on line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML mapping and the node tree it came from.

    Attributes:
        path: the file it was read from.
        data: the parsed mapping.
        root: the composed node tree, for line numbers.
    """

    path: Path
    data: dict[str, Any]
    root: yaml.Node

    def line_of(self, keys: tuple[str | int, ...]) -> int | None:
        """1-based line of the value (or, if absent, the deepest parent) at ``keys``."""
        node = self.root
        line = None
        for key in keys:
            child = None
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == key:
                        line, child = key_node.start_mark.line + 1, value_node
                        break
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(key, int)
                and 0 <= key < len(node.value)
            ):
                child = node.value[key]
                line = child.start_mark.line + 1
            if child is None:
                break
            node = child
        return line


def read_yaml_mapping(path: str | Path) -> YamlDocument:
    """Reads a YAML file whose top level is a mapping.

    Raises:
        ConfigError: the file is missing, unreadable, empty, binary, not valid YAML,
            has duplicate keys or several documents, or is not a mapping at the top.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file; check the path (it is relative to {Path.cwd()})")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give the YAML run config file inside it")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    if b"\0" in raw:
        raise ConfigError(f"{path}: contains binary data (NUL bytes); a run config is YAML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: is not UTF-8 text (bad byte at offset {exc.start}); a run config is YAML text"
        ) from None
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        raise ConfigError(
            f"{path}: is empty; a run config is a YAML mapping, for example:\n{_EXAMPLE}"
        )
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.composer.ComposerError as exc:
        if "single document" not in f"{exc.context} {exc.problem}":
            raise ConfigError(f"{path}{_where(exc)}: YAML error: {exc.problem}") from None
        raise ConfigError(
            f"{path}: holds several YAML documents ('---'); a run config is one mapping"
            + _where(exc)
        ) from None
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or str(exc)
        if "'\\t'" in problem:
            problem += " (YAML indents with spaces, never tabs)"
        if exc.context and exc.context_mark is not None:
            problem += f" ({exc.context}, which began on line {exc.context_mark.line + 1})"
        raise ConfigError(f"{path}{_where(exc)}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {exc}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"{path}: the top level is {kind}, but a run config is a mapping of sections, "
            f"for example:\n{_EXAMPLE}"
        )
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(f"{path}: top-level keys must be section names, got {bad_keys!r}")
    return YamlDocument(path=path, data=data, root=root)


def _where(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark  # where the parser gave up
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
