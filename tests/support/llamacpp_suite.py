"""The cases of llama.cpp's own JSON-schema converter test-suite, read from the vendored tree.

Each case of ``tests/test-json-schema-to-grammar.cpp`` is a ``test({...})`` call with a status
(SUCCESS or FAILURE: llama.cpp's verdict on the schema), a name, the schema as a C++ raw string
and the grammar llama.cpp writes for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from helpers import REPO_ROOT

SUITE = REPO_ROOT / "vendor/llama.cpp/tests/test-json-schema-to-grammar.cpp"
_CASE = re.compile(
    r'test\(\{\s*(SUCCESS|FAILURE),\s*"((?:[^"\\]|\\.)*)",\s*(?:R"""\((.*?)\)"""|"((?:[^"\\]|\\.)*)")\s*,',
    re.S)


@dataclass(frozen=True)
class Case:
    name: str
    accepted: bool          # llama.cpp's verdict
    schema: object


def cases(path: Path = SUITE) -> list[Case]:
    text = path.read_text()
    found = []
    for m in _CASE.finditer(text):
        raw = m[3] if m[3] is not None else json.loads(f'"{m[4]}"')
        found.append(Case(json.loads(f'"{m[2]}"'), m[1] == "SUCCESS", json.loads(raw)))
    return found
