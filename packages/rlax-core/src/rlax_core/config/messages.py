"""Turning pydantic validation errors into messages a user can act on.

Each problem becomes one line: ``FILE:LINE: field.path: what is wrong; what is allowed``.
Plugin union tags are left out of the path (users write ``transport.url``, not
``transport.nats.url``), and unknown keys list the allowed ones.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from rlax_core.config.run_config import PLUGIN_KIND_KEY
from rlax_core.config.yaml_source import YamlDocument

_MAX_VALUE_REPR = 80


def describe_validation_error(
    exc: ValidationError, model: type[BaseModel], data: Any, doc: YamlDocument | None
) -> str:
    """One line per problem, ordered by line number, prefixed with the file name."""
    lines: list[tuple[int, str]] = []
    for error in exc.errors():
        path, parent, field = _resolve(model, data, error["loc"])
        if error["type"] == "union_tag_invalid":
            path.append("type")
        where = str(doc.path) if doc else "<config>"
        line = doc.line_of(tuple(path)) if doc else None
        if line is not None:
            where += f":{line}"
        dotted = ".".join(str(p) for p in path) or "(top level)"
        lines.append((line or 0, f"  {where}: {dotted}: {_explain(error, parent, field)}"))
    return "\n".join(text for _, text in sorted(lines, key=lambda item: item[0]))


def _explain(error: dict[str, Any], parent: type[BaseModel] | None, field: FieldInfo | None) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    plugin_kind = _plugin_kind(field)
    if kind == "missing":
        return "required, but missing" + _describe(field)
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        allowed = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key {key!r}{hint}; allowed here: {', '.join(allowed)}"
    if kind == "union_tag_invalid":
        what = f"an installed {plugin_kind}" if plugin_kind else "a known type"
        return (
            f"type {ctx.get('tag')!r} is not {what}; installed: {ctx.get('expected_tags')} "
            "(see `rlax plugins`)"
        )
    if kind == "union_tag_not_found":
        what = f"which {plugin_kind} to use" if plugin_kind else "which type to use"
        names = _union_tags(field)
        return f"needs a 'type' key saying {what}" + (f": one of {names}" if names else "")
    if kind == "value_error":
        return str(ctx.get("error") or error["msg"]).removeprefix("Value error, ")
    value = repr(error.get("input"))
    if len(value) > _MAX_VALUE_REPR:
        value = value[: _MAX_VALUE_REPR - 3] + "..."
    return f"{error['msg']}; got {value}" + _describe(field)


def _describe(field: FieldInfo | None) -> str:
    return f" ({field.description})" if field is not None and field.description else ""


def _plugin_kind(field: FieldInfo | None) -> str | None:
    extra = field.json_schema_extra if field is not None else None
    return extra.get(PLUGIN_KIND_KEY) if isinstance(extra, dict) else None  # type: ignore[return-value]


def _union_tags(field: FieldInfo | None) -> str:
    if field is None:
        return ""
    tags = [_type_tag(m) for m in _models_in(field.annotation)]
    return ", ".join(repr(t) for t in tags if t)


def _resolve(
    model: type[BaseModel], data: Any, loc: tuple[str | int, ...]
) -> tuple[list[str | int], type[BaseModel] | None, FieldInfo | None]:
    """Walks ``loc`` through the input and the model together.

    Returns the path as the user wrote it (without union tags), the model that holds the
    last key, and that key's field info.
    """
    path: list[str | int] = []
    current_cls: type[BaseModel] | None = model
    parent: type[BaseModel] | None = model
    field: FieldInfo | None = None
    value = data
    for elem in loc:
        if isinstance(value, dict) and elem not in value and value.get("type") == elem:
            continue  # a discriminated-union tag, not something the user wrote as a key
        path.append(elem)
        if isinstance(value, list) and isinstance(elem, int):
            value = value[elem] if elem < len(value) else None
            continue
        parent = current_cls
        field = current_cls.model_fields.get(str(elem)) if current_cls else None
        value = value.get(elem) if isinstance(value, dict) else None
        current_cls = _model_for(field.annotation, value) if field else None
    return path, parent, field


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is Annotated:
        return _models_in(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    if origin is list:  # a list of sections: errors inside an item resolve to its model
        return _models_in(get_args(annotation)[0])
    return []


def _type_tag(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("type")
    return field.default if field is not None and isinstance(field.default, str) else None


def _model_for(annotation: Any, value: Any) -> type[BaseModel] | None:
    models = _models_in(annotation)
    if len(models) == 1:
        return models[0]
    tag = value.get("type") if isinstance(value, dict) else None
    return next((m for m in models if _type_tag(m) == tag), None)
