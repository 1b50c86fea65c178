"""Runtime adapter paths (find_adapter_file) and adapter naming and ids, on real files and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamaserve.config.settings import ModelEntry
from llamaserve.errors import FieldError, UnsafePathError
from llamaserve.lora.catalog import BaseAdapters, find_adapter_file, name_adapters, still_inside


@pytest.fixture
def folders(tmp_path):
    """adapters/ (a.gguf, team/b.gguf, links in and out, a dir, a FIFO), extra/ (c.gguf), outside/ (secret)."""
    root = tmp_path
    adapters, extra, outside = root / "adapters", root / "extra", root / "outside"
    for d in (adapters / "team", extra, outside, adapters / "folder"):
        d.mkdir(parents=True)
    for f in (adapters / "a.gguf", adapters / "team/b.gguf", extra / "c.gguf", outside / "secret.gguf"):
        f.write_bytes(b"GGUF")
    os.mkfifo(outside / "fifo")
    os.mkfifo(adapters / "fifo")
    (adapters / "inside-link.gguf").symlink_to(adapters / "team/b.gguf")
    (adapters / "out-link.gguf").symlink_to(outside / "secret.gguf")
    (adapters / "out-fifo.gguf").symlink_to(outside / "fifo")         # opening it would block: never opened
    (adapters / "dangling.gguf").symlink_to(adapters / "gone.gguf")
    (adapters / "outdir").symlink_to(outside)
    (adapters / "to-extra.gguf").symlink_to(extra / "c.gguf")
    return adapters, extra, outside


def test_paths_inside_resolve_to_the_real_file(folders):
    adapters, extra, _ = folders
    found = find_adapter_file("a.gguf", [adapters])
    assert (found.real, found.folder, found.relative) == (adapters / "a.gguf", adapters, "a.gguf")
    assert find_adapter_file("team/b.gguf", [adapters]).relative == "team/b.gguf"
    assert find_adapter_file("./team//b.gguf", [adapters]).relative == "team/b.gguf"
    link = find_adapter_file("inside-link.gguf", [adapters])
    assert link.real == adapters / "team/b.gguf" and link.relative == "inside-link.gguf"
    assert find_adapter_file(str(adapters / "a.gguf"), [adapters]).real == adapters / "a.gguf"
    # several folders: the first that holds the name; a link from one configured folder into another is fine
    assert find_adapter_file("c.gguf", [adapters, extra]).folder == extra
    assert find_adapter_file("to-extra.gguf", [adapters, extra]).real == extra / "c.gguf"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text, error, words", [
    ("../outside/secret.gguf", UnsafePathError, "'..'"),
    ("team/../../outside/secret.gguf", UnsafePathError, "'..'"),
    ("team/../a.gguf", UnsafePathError, "'..'"),
    ("OUTSIDE", UnsafePathError, "outside every adapters_dir"),        # an absolute path elsewhere
    ("out-link.gguf", UnsafePathError, "symlink"),
    ("out-fifo.gguf", UnsafePathError, "symlink"),
    ("outdir/secret.gguf", UnsafePathError, "symlink"),
    ("to-extra.gguf", UnsafePathError, "symlink"),                     # extra/ is not configured here
    ("http://example.com/a.gguf", FieldError, "URL"),
    ("file:///etc/passwd", FieldError, "URL"),
    ("hf://org/repo/a.gguf", FieldError, "URL"),
    ("a.gguf\0.txt", FieldError, "NUL"),
    ("x" * 5000, FieldError, "too long"),
    ("", FieldError, "non-empty"),
    ("folder", FieldError, "not a regular file"),
    ("fifo", FieldError, "not a regular file"),
    ("missing.gguf", FileNotFoundError, "no adapter file"),
    ("dangling.gguf", FileNotFoundError, ""),
])
def test_refused_paths(folders, text, error, words):
    adapters, _, outside = folders
    text = str(outside / "secret.gguf") if text == "OUTSIDE" else text
    with pytest.raises(error) as info:
        find_adapter_file(text, [adapters])
    assert words in str(info.value)


def test_no_folders_means_runtime_adapters_are_off(folders):
    with pytest.raises(UnsafePathError, match="set adapters_dir"):
        find_adapter_file("a.gguf", [])


def test_non_string_path_is_refused(folders):
    with pytest.raises(FieldError):
        find_adapter_file(["a.gguf"], [folders[0]])


def test_still_inside_notices_a_file_swapped_for_a_link(folders):
    adapters, _, outside = folders
    path = adapters / "a.gguf"
    assert still_inside(str(path), [adapters])
    path.unlink()
    path.symlink_to(outside / "secret.gguf")
    assert not still_inside(str(path), [adapters])
    assert not still_inside(str(outside / "secret.gguf"), [adapters])


# -- names and ids ---------------------------------------------------------------------------


def _entry(alias: str, lora: dict[str, float] | None = None, adapters: list[tuple[str, str | None]] = ()) -> ModelEntry:
    return ModelEntry(alias=alias, aliases=(), model=Path("/m/base.gguf"),
                      lora_adapters=tuple((Path(p), s) for p, s in (lora or {}).items()),
                      adapters=tuple((Path(p), n) for p, n in adapters))


def test_names_are_stems_unless_given_in_config_order():
    entries = [_entry("a", {"/x/coder.gguf": 1.0}),
               _entry("b", adapters=[("/x/style.gguf", "tone"), ("/x/ner.gguf", None)]),
               _entry("c", {"/x/coder.gguf": 0.5, "/x/style.gguf": 1.0})]
    names, conflicts = name_adapters(entries)
    assert names == {Path("/x/coder.gguf"): "coder", Path("/x/style.gguf"): "tone", Path("/x/ner.gguf"): "ner"}
    assert conflicts == []
    catalog = BaseAdapters(entries)
    assert [(a.id, a.name) for a in catalog.listed()] == [(0, "coder"), (1, "tone"), (2, "ner")]


def test_name_conflicts():
    entries = [_entry("a", adapters=[("/x/one.gguf", "same")]), _entry("b", adapters=[("/y/two.gguf", "same")]),
               _entry("c", adapters=[("/x/one.gguf", "other")]), _entry("d", {"/p/dup.gguf": 1.0, "/q/dup.gguf": 1.0})]
    _, conflicts = name_adapters(entries)
    messages = {entry.alias: message for entry, message in conflicts}
    assert "one.gguf is already named 'same'" in messages["c"]
    assert "both named 'same'" in messages["b"]
    assert "both named 'dup'" in messages["d"]
    assert len(conflicts) == 3


def test_ids_are_never_reused_and_a_file_is_recorded_once(tmp_path):
    catalog = BaseAdapters([_entry("a", {"/x/coder.gguf": 1.0})])
    one = catalog.add_name(str(tmp_path / "one.gguf"), "one")
    again = catalog.add_name(str(tmp_path / "one.gguf"), "one-half")       # same file, a second name
    assert again is one and one.names == ["one", "one-half"] and catalog.by_name("one-half") is one
    assert catalog.remove_name("one") is None                               # still named
    assert catalog.remove_name("one-half") is one and catalog.by_id(one.id) is None
    two = catalog.add_name(str(tmp_path / "two.gguf"), "two")
    assert two.id == one.id + 1
    assert catalog.add_name("/x/coder.gguf", "coder-alias").configured
    assert catalog.remove_name("coder-alias") is None                       # configured files stay
    assert [a.name for a in catalog.listed()] == ["coder", "two"]
