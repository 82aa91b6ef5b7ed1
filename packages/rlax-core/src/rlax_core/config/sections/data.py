"""Config sections of the prompt data: the datasets of the training mixture and the held-out set."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlax_core.config.sections.base import Section


class DatasetConfig(Section):
    """One prompt dataset: a JSONL or Parquet file, how to render its prompts and judge
    them; or a prompt source plugin that makes its examples (``source``)."""

    path: str | None = Field(
        default=None,
        min_length=1,
        description="JSONL or Parquet file; a relative path is relative to the run config's "
        "directory.",
    )
    source: dict[str, Any] | None = Field(
        default=None,
        description="Instead of a file: a prompt source plugin that makes the examples, "
        "{type: NAME, ...its settings}, e.g. {type: reasoning_gym, task: basic_arithmetic, "
        "size: 1000, seed: 0} (see `rlax plugins`).",
    )
    format: Literal["auto", "jsonl", "parquet"] = Field(
        default="auto",
        description="File format; auto: by extension (.jsonl/.ndjson, .parquet/.pq).",
    )
    name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Name of the dataset, the first part of its example ids "
        "(default: the file name without extension).",
    )
    weight: float = Field(
        default=1.0,
        gt=0.0,
        allow_inf_nan=False,
        description="Relative share of the training mixture's draws (any positive number).",
    )
    prompt_template: str | None = Field(
        default=None,
        min_length=1,
        description="Python str.format template over the row's fields, e.g. "
        "'Q: {question}\\nA:'; write literal braces as {{ and }}. With a source: optional, "
        "over {prompt}, the source's prompt.",
    )
    answer_field: str | None = Field(
        default=None,
        description="Field holding the reference answer; the problem is "
        "{kind: math, answer: <its value as text>}.",
    )
    problem_field: str | None = Field(
        default=None,
        description="Field holding the judge's problem itself: a mapping or a JSON object "
        "string (e.g. a code problem with tests).",
    )
    id_field: str | None = Field(
        default=None,
        description="Field holding each row's unique id (default: the row's index from 0).",
    )
    limit: int | None = Field(
        default=None, ge=1, description="Use only the first this many rows (default: all)."
    )

    @property
    def dataset_name(self) -> str:
        """The name used in example ids: ``name``, the file name without extension, or the
        source's type."""
        if self.name is not None:
            return self.name
        if self.path is None:
            return str((self.source or {}).get("type", "source"))
        return Path(self.path).stem

    @field_validator("prompt_template")
    @classmethod
    def _template_names_fields(cls, template: str | None) -> str | None:
        if template is None:
            return template
        for field in template_fields(template):
            if not field or field.isdigit():
                raise ValueError(
                    f"uses a positional field {{{field}}}; name a field of the row "
                    "instead, e.g. {question}"
                )
        return template

    @model_validator(mode="after")
    def _one_problem_source(self) -> DatasetConfig:
        if (self.path is None) == (self.source is None):
            raise ValueError(
                "give exactly one of path (a data file) and source (a prompt source plugin, "
                "{type: NAME, ...})"
            )
        if self.source is not None:
            if not isinstance(self.source.get("type"), str):
                raise ValueError("source names its plugin: {type: NAME, ...its settings}")
            given = [f for f in ("answer_field", "problem_field", "id_field")
                     if getattr(self, f) is not None]  # fmt: skip
            if given:
                raise ValueError(f"{', '.join(given)} apply to data files; a source makes "
                                 "its own problems and ids")  # fmt: skip
            if self.prompt_template is not None and set(template_fields(self.prompt_template)) != {
                "prompt"
            }:
                raise ValueError("with a source, prompt_template fills in {prompt} only")
            return self
        if self.prompt_template is None:
            raise ValueError(f"dataset {self.path!r} needs a prompt_template")
        if (self.answer_field is None) == (self.problem_field is None):
            given = "both are set" if self.answer_field is not None else "neither is set"
            raise ValueError(
                f"give exactly one of answer_field (a math answer) and problem_field (a whole "
                f"problem) for dataset {self.path!r}; {given}"
            )
        return self


def template_fields(template: str) -> list[str]:
    """The row fields a str.format template reads, in order (``{a.b}`` and ``{a[0]}`` read a).

    Raises:
        ValueError: the template is not a valid format string (e.g. a single brace).
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(
            f"is not a valid str.format template ({exc}); write literal braces as {{{{ and }}}}"
        ) from None
    fields: list[str] = []
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        fields.append(field.split(".", 1)[0].split("[", 1)[0])
        if spec:  # a spec may hold fields of its own: {value:{width}}
            fields.extend(template_fields(spec))
    return fields


class DataSection(Section):
    """The prompts of the run: a weighted mixture of training datasets and a held-out set."""

    train: list[DatasetConfig] = Field(
        min_length=1,
        description="Training datasets; each draw picks one with probability proportional "
        "to its weight.",
    )
    eval: DatasetConfig | None = Field(
        default=None, description="Held-out prompts for periodic evaluation (pass@k)."
    )
    shuffle: bool = Field(
        default=True,
        description="Shuffle each training dataset every epoch (seeded by run.seed); "
        "false keeps file order.",
    )

    @model_validator(mode="after")
    def _names_differ(self) -> DataSection:
        first: dict[str, int] = {}
        for index, dataset in enumerate(self.train):
            name = dataset.dataset_name
            if name in first:
                raise ValueError(
                    f"data.train[{first[name]}] and data.train[{index}] are both named "
                    f"{name!r}, so their example ids would clash; set a different name: on "
                    "one of them"
                )
            first[name] = index
        return self
