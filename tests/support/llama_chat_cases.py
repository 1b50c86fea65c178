"""The parser cases of llama.cpp's tests/test-chat.cpp (test_template_output_peg_parsers), read from the
vendored source so that they follow llama.cpp when the pin moves.

Each case is a chain in the C++ test: `tst.test("<model output>").tools({...}).reasoning_format(...)
.expect(...).run();` for a tester bound to one of llama.cpp's templates. This module reads those
chains with a small reader of the C++ expressions they use (string literals, raw strings, the named
tools and messages the file defines, braces, the simple_assist_msg family of helpers, enum names), and
gives each as a ChatCase. A chain that uses anything else (a local variable, a lambda) is listed in
`skipped` with the reason, so the port's coverage is counted, not guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import REPO_ROOT

SOURCE = REPO_ROOT / "vendor" / "llama.cpp" / "tests" / "test-chat.cpp"
TEMPLATES = REPO_ROOT / "vendor" / "llama.cpp"

_TOKEN = re.compile(r'''
    (?P<raw>R"(?P<delim>[^(\s]*)\((?P<body>.*?)\)(?P=delim)")
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<chr>'(?:[^'\\\n]|\\.)+')
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<num>-?\d+(?:\.\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_:]*)
  | (?P<punct>[{}()\[\],;.=<>&*+\-!|?:])
  | (?P<space>\s+)
''', re.S | re.X)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0", "?": "?"}


class Unsupported(Exception):
    """A C++ expression this reader does not evaluate."""


def _unescape(literal: str) -> str:
    """A C++ string literal's text: the file is UTF-8, and its hex escapes are bytes of it."""
    out, i = bytearray(), 0
    body = literal[1:-1]
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:])
            assert digits
            out.append(int(digits.group(), 16))
            i += 2 + len(digits.group())
        elif nxt == "u":
            out += chr(int(body[i + 2:i + 6], 16)).encode()
            i += 6
        else:
            out += _ESCAPES[nxt].encode()
            i += 2
    try:
        return out.decode()
    except UnicodeDecodeError:
        return out.decode(errors="surrogateescape")      # a case about broken UTF-8: skipped when used


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup not in ("delim", "body") else "raw"
        if m.group("raw"):
            tokens.append(("str", m.group("body")))
        elif m.group("str"):
            tokens.append(("str", _unescape(m.group("str"))))
        elif kind in ("space", "comment"):
            continue
        elif m.group("chr"):
            tokens.append(("chr", m.group("chr")))
        elif m.group("num"):
            tokens.append(("num", m.group("num")))
        elif m.group("name"):
            tokens.append(("name", m.group("name")))
        else:
            tokens.append(("punct", m.group()))
    return tokens


def _msg(content: str = "", reasoning: str = "", name: str = "", arguments: str = "", id_: str = "") -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": []}
    if name or id_:
        msg["tool_calls"].append({"name": name, "arguments": arguments, "id": id_})
    return msg


def _msg_calls(reasoning: str, content: str, calls: list) -> dict:
    msg = _msg(content, reasoning)
    msg["tool_calls"] = [{"name": n, "arguments": a, "id": ""} for n, a in calls]
    return msg


HELPERS = {
    "simple_assist_msg": _msg,
    "message_with_tool_calls": lambda name, args: _msg("", "", name, args),
    "message_with_tool_calls_and_reasoning": lambda name, args, reasoning: _msg("", reasoning, name, args),
    "message_with_reasoning_content_and_multiple_tool_calls": _msg_calls,
    "message_with_content_and_tool_call": lambda content, name, args: _msg(content, "", name, args),
    "message_with_reasoning_and_tool_call": lambda reasoning, name, args: _msg("", reasoning, name, args),
}


class Reader:
    """Evaluates the C++ expressions of the test file over tokens, with named values."""

    def __init__(self, tokens: list[tuple[str, str]], names: dict[str, Any]) -> None:
        self.tokens, self.pos, self.names = tokens, 0, names

    def peek(self, offset: int = 0) -> tuple[str, str]:
        return self.tokens[self.pos + offset] if self.pos + offset < len(self.tokens) else ("eof", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if value is not None and token[1] != value:
            raise Unsupported(f"expected {value!r}, found {token[1]!r}")
        self.pos += 1
        return token

    def value(self) -> Any:
        kind, text = self.peek()
        if kind == "str":
            parts = []
            while self.peek()[0] == "str":
                parts.append(self.take()[1])
            return "".join(parts)
        if kind == "num":
            self.take()
            return float(text) if "." in text else int(text)
        if text == "{":
            self.take()
            items = []
            while self.peek()[1] != "}":
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
            return items
        if kind == "name":
            self.take()
            if text in ("true", "false"):
                return text == "true"
            if text.startswith(("COMMON_REASONING_FORMAT_", "COMMON_CHAT_TOOL_CHOICE_", "COMMON_CHAT_CONTINUATION_")):
                return ("enum", text)
            if text in ("std::string", "std::vector", "json::parse") or text in HELPERS:
                return self._call(text)
            if text in self.names:
                return self.names[text]
            raise Unsupported(f"the name {text}")
        raise Unsupported(f"the token {text!r}")

    def _call(self, name: str) -> Any:
        if self.peek()[1] == "<":             # std::vector<...>{...}
            while self.take()[1] != ">":
                pass
        opening = self.take()[1]
        closing = {"(": ")", "{": "}"}.get(opening)
        if closing is None:
            raise Unsupported(f"{name} without arguments")
        args = []
        while self.peek()[1] != closing:
            args.append(self.value())
            if self.peek()[1] == ",":
                self.take()
        self.take(closing)
        if name in HELPERS:
            return HELPERS[name](*args)
        if name == "json::parse":
            return json.loads(args[0])
        return args[0] if name == "std::string" else args


@dataclass
class ChatCase:
    """One parser case: the template, llama.cpp's inputs, the model's output and the message expected."""

    template: Path
    line: int
    output: str
    params: dict[str, Any] = field(default_factory=dict)
    expect: dict[str, Any] = field(default_factory=lambda: _msg())
    is_partial: bool = False

    @property
    def id(self) -> str:
        return f"{self.template.stem}:{self.line}"


def _tool(fields: list) -> dict[str, Any]:
    """A common_chat_tool {name, description, parameters} as an OpenAI tool."""
    name, description, parameters = fields
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": json.loads(parameters)}}


def _named_values(tokens: list[tuple[str, str]]) -> dict[str, Any]:
    """The file's named tools (common_chat_tool NAME{...}) and messages (common_chat_msg NAME = ...)."""
    names: dict[str, Any] = {}
    for i, (_, text) in enumerate(tokens):
        if text not in ("common_chat_tool", "common_chat_msg") or i + 2 >= len(tokens):
            continue
        name, after = tokens[i + 1], tokens[i + 2]
        if name[0] != "name" or after[1] not in ("{", "="):
            continue
        reader = Reader(tokens, names)
        reader.pos = i + 3 if after[1] == "=" else i + 2
        try:
            value = reader.value()
        except Unsupported:
            continue
        if text == "common_chat_tool":
            names[name[1]] = _tool(value)
        elif isinstance(value, dict):
            names[name[1]] = value
        elif isinstance(value, list) and len(value) >= 2 and isinstance(value[0], str):     # message_user{...}
            names[name[1]] = {"role": value[0], "content": value[1], "reasoning_content": "", "tool_calls": []}
    return names


def _line_of(text: str, token_index: int, offsets: list[int]) -> int:
    return text.count("\n", 0, offsets[token_index]) + 1


def read_cases(source: Path = SOURCE) -> tuple[list[ChatCase], list[tuple[int, str]]]:
    """The cases of test_template_output_peg_parsers, and (line, reason) for each chain not read."""
    text = source.read_text(encoding="utf-8")
    start = text.index("static void test_template_output_peg_parsers(")
    end = text.index("\nstatic void ", start + 1)
    names = _named_values(tokenize(text[:start]))
    body = text[start:end]
    matches = [m for m in _TOKEN.finditer(body) if m.lastgroup not in ("space", "comment")]
    tokens = tokenize(body)
    offsets = [m.start() for m in matches]
    assert len(offsets) == len(tokens)
    testers: dict[str, list[Path]] = {}
    loops: dict[str, list[str]] = {}       # for (const auto & NAME : { "a", "b" }): the values of NAME
    local = dict(names)
    cases: list[ChatCase] = []
    skipped: list[tuple[int, str]] = []
    i = 0
    while i < len(tokens):
        kind, word = tokens[i]
        if word == "for" and [t[1] for t in tokens[i + 1:i + 5]] == ["(", "const", "auto", "&"]:
            if tokens[i + 6][1] == ":" and tokens[i + 7][1] == "{":
                values = Reader(tokens, {})
                values.pos = i + 7
                try:
                    loops[tokens[i + 5][1]] = values.value()
                except Unsupported:
                    pass
        elif word == "peg_tester" and tokens[i - 1][1] == "=" and tokens[i + 1][1] == "(":
            kind_arg, arg = tokens[i + 2]
            paths = [arg] if kind_arg == "str" else loops.get(arg, [])
            testers[tokens[i - 2][1]] = [TEMPLATES / path for path in paths]
        elif kind == "name" and word == "char" and tokens[i + 1][1] == "*":        # const char * NAME = R"(...)";
            j = i + 2 + (tokens[i + 2][1] == "const")
            if tokens[j + 1][1] == "=" and tokens[j + 2][0] == "str":
                local[tokens[j][1]] = tokens[j + 2][1]
        elif word in testers and tokens[i + 1][1] == "." and tokens[i + 2][1] == "test":
            line = _line_of(body, i, offsets) + text.count("\n", 0, start)
            reader = Reader(tokens, local)
            reader.pos = i + 3
            start_pos = reader.pos
            for template in testers[word] or [None]:
                reader.pos = start_pos
                try:
                    if template is None:
                        raise Unsupported("a tester whose template is not a literal")
                    cases.append(_chain(reader, template, line))
                except (Unsupported, ValueError, KeyError, TypeError) as exc:
                    skipped.append((line, str(exc)))
            while reader.pos < len(tokens) and tokens[reader.pos][1] != ";":
                reader.pos += 1
            i = max(i + 1, reader.pos)
            continue
        i += 1
    return cases, skipped


def _chain(reader: Reader, template: Path, line: int) -> ChatCase:
    reader.take("(")
    case = ChatCase(template, line, reader.value())
    reader.take(")")
    while reader.peek()[1] == ".":
        reader.take(".")
        method = reader.take()[1]
        reader.take("(")
        arg = None if reader.peek()[1] == ")" else reader.value()
        reader.take(")")
        if method == "run":
            return case
        _apply(case, method, arg)
    raise Unsupported("a chain that does not end in run()")


def _enum(value: Any, prefix: str) -> str:
    if not (isinstance(value, tuple) and value[1].startswith(prefix)):
        raise Unsupported(f"{value!r} for {prefix}")
    return value[1][len(prefix):].lower()


def _apply(case: ChatCase, method: str, arg: Any) -> None:
    p = case.params
    if method == "reasoning_format":
        p["reasoning_format"] = _enum(arg, "COMMON_REASONING_FORMAT_").replace("_", "-")
    elif method == "tools":
        p["tools"] = [_tool(t) if isinstance(t, list) else t for t in arg]
    elif method in ("enable_thinking", "parallel_tool_calls", "add_generation_prompt"):
        p[method] = arg
    elif method == "tool_choice":
        p["tool_choice"] = _enum(arg, "COMMON_CHAT_TOOL_CHOICE_")
    elif method == "continue_final_message":
        p["continue_final_message"] = {"none": None, "auto": True, "reasoning": "reasoning_content",
                                       "content": "content"}[_enum(arg, "COMMON_CHAT_CONTINUATION_")]
    elif method == "json_schema":
        p["json_schema"] = json.loads(arg) if isinstance(arg, str) else arg
    elif method == "messages":
        p["messages"] = arg
    elif method == "is_partial":
        case.is_partial = bool(arg)
    elif method == "expect":
        case.expect = json.loads(json.dumps(arg))
    elif method == "expect_content":
        case.expect["content"] = arg
    elif method == "expect_reasoning":
        case.expect["reasoning_content"] = arg
    elif method == "expect_tool_calls":
        case.expect["tool_calls"] = [{"name": c[0], "arguments": c[1], "id": c[2] if isinstance(c[2], str) else ""}
                                     for c in arg]
    elif method == "expect_reconstruction":
        pass                    # llama.cpp's check that a message renders back to the same text
    else:
        raise Unsupported(f"the method {method}")


__all__ = ["ChatCase", "read_cases"]
