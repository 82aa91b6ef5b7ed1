"""The base of every record that crosses a process boundary.

Records are frozen pydantic models serialised as JSON, explicitly: ``to_bytes`` on one
side, ``from_bytes`` on the other. Nothing in RLAX pickles data between processes.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A frozen, strictly validated data record with explicit JSON serialisation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_bytes(self) -> bytes:
        """Serialises the record as UTF-8 JSON."""
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parses a record written by :meth:`to_bytes`; raises ``ValidationError`` if invalid."""
        if isinstance(data, memoryview):
            data = bytes(data)
        return cls.model_validate_json(data)
