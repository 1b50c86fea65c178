"""A hostile chat template (it comes with a model file) renders within bounds (vendor patch 0018):
string repetition and growth past 16 MiB, huge ranges and endless loops are refused in bounded time,
for every render of one call together."""

from __future__ import annotations

import time

import pytest

from llamacore.chat import native

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("template", "reason"), [
    ("{{ 'x' * 1000000000 }}", "past 16 MiB"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
     "{{ ns.s }}", "past 16 MiB or 65536 pieces"),
    ("{{ '-' * 100000 }}", "65536 pieces"),
    ("{% for i in range(1000000000) %}{% endfor %}", r"range\(\) of more than 100000 items"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "more than 2 s"),
])
def test_a_hostile_template_is_refused_in_bounded_time(template, reason):
    start = time.monotonic()
    with pytest.raises(ValueError, match=reason):
        native.render(native.compiled(template), MESSAGES)
    assert time.monotonic() - start < 6          # compiling (its analysis renders) and one render: 2 s each


def test_ordinary_templates_are_untouched():
    assert native.render(native.compiled("{{ '=' * 80 }}{% for m in messages %}{{ m.content }}{% endfor %}"),
                         MESSAGES).prompt == "=" * 80 + "hi"
