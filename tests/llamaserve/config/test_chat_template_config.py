"""Chat templates in a config: chat_template_file, no environment interpolation inside a template, the
`$${` escape, and a template that does not compile refused before serving with its file, line and column."""

from __future__ import annotations

import pytest
from helpers import REPO_ROOT, problems, write, yaml_config

from llamaserve.cli import main
from llamaserve.config.parse import load_config

# a template with ${...} of its own
FUNCTIONARY = REPO_ROOT / "vendor" / "llama.cpp" / "models" / "templates" / "meetkai-functionary-medium-v3.2.jinja"


def test_a_template_file_is_read_verbatim(work):
    path = yaml_config(work, f"models:\n  - {{alias: m, model: models/model.gguf, "
                             f"chat_template_file: {FUNCTIONARY}}}\n")
    (entry,) = load_config(path).models
    assert entry.chat_template == FUNCTIONARY.read_text() and entry.chat_template_file == FUNCTIONARY
    assert "${" in entry.chat_template


def test_a_relative_template_file_resolves_against_the_config_folder(work):
    write(work, "templates/t.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}")
    path = yaml_config(work, "models:\n  - {model: models/model.gguf, chat_template_file: templates/t.jinja}\n")
    assert load_config(path).models[0].chat_template_file == work / "templates" / "t.jinja"


def test_inline_templates_are_never_interpolated_and_other_strings_take_the_escape(work, monkeypatch):
    monkeypatch.delenv("recipient", raising=False)
    monkeypatch.setenv("LS_KEY", "k")
    path = yaml_config(work, """
api_key: "$${LS_KEY}-${LS_KEY}"
defaults: {chat_template: "to ${recipient} {{ messages[0].content }}"}
models: [{model: models/model.gguf}]
""")
    config = load_config(path)
    assert config.api_key == "${LS_KEY}-k"
    assert config.models[0].chat_template == "to ${recipient} {{ messages[0].content }}"


def test_an_entry_template_wins_over_the_defaults_in_either_form(work):
    write(work, "t.jinja", "file {{ messages[0].content }}")
    path = yaml_config(work, """
defaults: {chat_template: "inline {{ messages[0].content }}"}
models:
  - {alias: a, model: models/model.gguf, chat_template_file: t.jinja}
  - {alias: b, model: models/model.gguf}
""")
    a, b = load_config(path).models
    assert a.chat_template == "file {{ messages[0].content }}" and b.chat_template.startswith("inline")


@pytest.mark.parametrize(("entry", "message"), [
    ("chat_template_file: missing.jinja, chat_template: x", "give either chat_template or chat_template_file"),
    ("chat_template_file: missing.jinja", "cannot read {work}/missing.jinja: No such file or directory"),
    ("chat_template_file: latin1.jinja", "{work}/latin1.jinja is not UTF-8 text"),
    ("chat_template_file: models/model.gguf", "{work}/models/model.gguf is larger than 1 MiB"),
])
def test_template_file_problems_name_the_key_and_file(work, entry, message):
    (work / "latin1.jinja").write_bytes("caf\u00e9 {{ messages }}".encode("latin-1"))
    path = yaml_config(work, f"models:\n  - {{model: models/model.gguf, {entry}}}\n")
    found = problems(path)
    assert any(p.startswith(f"{path}: models[0].chat_template_file: " + message.format(work=work))
               for p in found), found


def test_a_template_that_does_not_compile_is_a_config_error_with_its_line(work, capsys):
    write(work, "broken.jinja", "{% for m in messages %}\n{{ m.content }\n{% endfor %}\n")
    path = yaml_config(work, "models:\n  - {alias: m, model: models/model.gguf, chat_template_file: broken.jinja}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{path}: m.chat_template_file: {work}/broken.jinja does not compile: "), err
    assert "line 2, column 14" in err and len(err.splitlines()) == 1
    inline = yaml_config(work, "models:\n  - {alias: m, model: models/model.gguf, chat_template: '{% if %}'}\n")
    assert main(["check", str(inline)]) == 2
    assert "m.chat_template: the template does not compile: parser:" in capsys.readouterr().err


def test_a_good_template_file_passes_check(work, capsys):
    path = yaml_config(work, f"models:\n  - {{alias: m, model: models/model.gguf, "
                             f"chat_template_file: {FUNCTIONARY}}}\n")
    assert main(["check", str(path)]) == 0
    assert f"chat_template={FUNCTIONARY}" in capsys.readouterr().out
