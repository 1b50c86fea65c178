"""What the object and array rules (objects.py, arrays.py) call back on the schema converter
(json_schema.Converter): declared here so that they need not import the module that imports them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class SchemaVisitor(Protocol):
    document: Any
    w: str          # " ws" where rules take optional whitespace, else ""

    def reserve(self, hint: str) -> str: ...

    def define(self, name: str, body: str) -> None: ...

    def named(self, hint: str, body: str) -> str: ...

    def check(self, pending: int = 0) -> None: ...

    def key(self, name: str) -> str: ...

    def visit(self, schema: Any, hint: str, path: str, depth: int = 0) -> str: ...

    @staticmethod
    def bounds(schema: Mapping[str, Any], lo_key: str, hi_key: str, path: str) -> tuple[int, int | None]: ...
