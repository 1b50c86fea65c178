"""Property tests of llamaserve.config.parse.load_config: any document either loads or fails cleanly.

Generated YAML / TOML / JSON documents mix the real config keys with garbage keys, values of
the right and of wrong types, huge numbers, unicode, ${VAR} references, paths to real GGUF
files and to junk. Whatever the file holds, load_config must return a ServerConfig or raise
ConfigError with one problem per line, each line starting with the config's file name.
Anything else (RuntimeError, OverflowError, RecursionError, ...) is a bug.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llamaserve.config.keys import ENTRY_KEYS, KV_CACHE_TYPES, LOG_LEVELS, POOLING_TYPES, ROOT_KEYS
from llamaserve.config.parse import ConfigError, ServerConfig, load_config

# hypothesis runs each property over many generated configs
pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
SUFFIXES = (".yaml", ".yml", ".toml", ".json")
ENV_SET = {"LLAMASERVE_FUZZ_PORT": "8081", "LLAMASERVE_FUZZ_TEXT": "héllo\nworld", "LLAMASERVE_FUZZ_EMPTY": ""}


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_model_path, lora_a_path, lora_other_arch_path):
    """A folder with real and junk GGUF files that generated configs point at."""
    folder = tmp_path_factory.mktemp("fuzz_config")
    models = folder / "models"
    models.mkdir()
    for name, src in [("model.gguf", tiny_model_path), ("lora.gguf", lora_a_path),
                      ("lora-gpt2.gguf", lora_other_arch_path)]:
        (models / name).symlink_to(src)
    (models / "junk.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4)
    (models / "text.gguf").write_text("not a model")
    (models / "empty.gguf").write_bytes(b"")
    # a header whose key holds arrays nested 5000 deep (a recursive reader overflows the stack)
    nested = [b"GGUF", struct.pack("<IQQ", 3, 0, 1), struct.pack("<Q", 1), b"a", struct.pack("<I", 9)]
    (models / "nested.gguf").write_bytes(b"".join(nested + [struct.pack("<IQ", 9, 1)] * 5000
                                                  + [struct.pack("<IQ", 4, 0)]))
    saved = {k: os.environ.get(k) for k in ENV_SET}
    os.environ.update(ENV_SET)
    os.environ.pop("LLAMASERVE_FUZZ_UNSET", None)
    yield folder
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# -- strategies ---------------------------------------------------------------------------

MODEL_PATHS = ["models/model.gguf", "models/lora.gguf", "models/lora-gpt2.gguf", "models/junk.gguf",
               "models/text.gguf", "models/empty.gguf", "models/nested.gguf", "models/missing.gguf",
               "models", "models/", "./models/../models/model.gguf", "~llamaserve-no-such-user/m.gguf",
               "~/definitely/not/here.gguf", "/dev/null", "/proc/self/status", "", " ", "\x00",
               "${LLAMASERVE_FUZZ_UNSET}", "${LLAMASERVE_FUZZ_UNSET:-models/model.gguf}",
               "models/model.gguf\nmodels/lora.gguf"]
SPECIAL_STRINGS = ["${LLAMASERVE_FUZZ_PORT}", "${LLAMASERVE_FUZZ_TEXT}", "${LLAMASERVE_FUZZ_EMPTY}",
                   "${LLAMASERVE_FUZZ_UNSET}", "${LLAMASERVE_FUZZ_UNSET:-12}", "${LLAMASERVE_FUZZ_UNSET:-}",
                   "${", "${}", "$${X}", "${1BAD}", "${A:-${B}}", "12GiB", "500MB", "2G", "0", "-1", "1e400",
                   "9" * 400, "5m", "1.5h", "never", "NaN", "inf", "true", "off", "auto", "on", "\u202e\u2028",
                   "\r\n", "\x85", "'\"", "*" * 2000, *LOG_LEVELS, *KV_CACHE_TYPES, *POOLING_TYPES,
                   "chatml", "llama-3", "no-such-format", "{{ messages }}"]
ALL_KEYS = sorted({*ROOT_KEYS, *ENTRY_KEYS, "defaults", "models"})

huge_ints = st.sampled_from([2**31, 2**63, 2**64 + 1, -(2**63) - 1, 10**30, 10**400])
numbers = st.one_of(st.integers(-3, 70000), huge_ints,
                    st.floats(allow_nan=True, allow_infinity=True), st.just(1e308))
strings = st.one_of(st.text(max_size=30), st.sampled_from(SPECIAL_STRINGS), st.sampled_from(MODEL_PATHS))
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
keys = st.one_of(st.sampled_from(ALL_KEYS), st.sampled_from(ALL_KEYS).map(str.upper),
                 st.text(min_size=1, max_size=12),
                 st.sampled_from(["", "models ", "n_ctx\n", "${LLAMASERVE_FUZZ_PORT}"]))


def anything(max_leaves: int = 12):
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=max_leaves)


@st.composite
def model_entry(draw):
    entry = draw(st.dictionaries(st.sampled_from(sorted(ENTRY_KEYS)), anything(4), max_size=4))
    if draw(st.booleans()):
        entry["model"] = draw(st.sampled_from(MODEL_PATHS))
    if draw(st.booleans()):
        entry["lora_adapters"] = draw(st.one_of(
            st.dictionaries(st.sampled_from(MODEL_PATHS), st.one_of(numbers, strings), max_size=3),
            st.lists(st.sampled_from(MODEL_PATHS), max_size=3), anything(3)))
    return entry


@st.composite
def config_doc(draw):
    """A top-level mapping: mostly real keys with plausible or wrong values, plus garbage."""
    doc = draw(st.dictionaries(st.sampled_from(sorted(ROOT_KEYS)), st.one_of(scalars, anything(4)), max_size=5))
    doc.update(draw(st.dictionaries(keys, anything(6), max_size=3)))
    if draw(st.integers(0, 4)):
        doc["models"] = draw(st.lists(st.one_of(model_entry(), anything(3)), max_size=4))
    if draw(st.booleans()):
        doc["defaults"] = draw(st.one_of(model_entry(), anything(3)))
    if draw(st.integers(0, 5)) == 0:
        doc["models_dir"] = draw(st.sampled_from(["models", "models/model.gguf", "nope", "~llamaserve-nobody"]))
    return doc


PLAUSIBLE = {
    "port": st.integers(0, 70000), "parallel": st.integers(-1, 64), "max_queue": st.integers(-1, 1000),
    "n_ctx": st.integers(-1, 1 << 20), "idle_unload": st.sampled_from([0, 1.5, "5m", "never", "1h", -1, "x"]),
    "max_body_bytes": st.sampled_from(["4MiB", "1KB", 0, "12 GiB", "-1", 10**20]),
    "memory_budget": st.sampled_from(["2G", None, "1.5PB", "0"]), "log_level": st.sampled_from(LOG_LEVELS),
    "cors": st.one_of(st.text(max_size=10), st.lists(st.text(max_size=5), max_size=3)),
    "chat_format": st.sampled_from(["chatml", "llama-3", "chatlm", None]),
    "lora_adapters": st.sampled_from([["models/lora.gguf"], {"models/lora.gguf": 0.5}, ["models/lora-gpt2.gguf"],
                                      {"models/lora.gguf": "x"}, []]),
    "type_k": st.sampled_from(KV_CACHE_TYPES + ("q9",)), "flash_attn": st.sampled_from(["auto", True, "maybe"]),
    "pooling_type": st.sampled_from(POOLING_TYPES + (3, 9)), "kv_overrides": st.sampled_from([{"a.b": 1}, {"a": []}]),
    "aliases": st.lists(st.sampled_from(["a", "b", "m", ""]), max_size=3),
    "default_model": st.sampled_from(["m", "zz"]),
}


@st.composite
def near_valid_doc(draw):
    """A config that loads, with a few keys set to plausible (sometimes out-of-range) values."""
    entry = {"alias": "m", "model": "models/model.gguf"}
    doc = {"models": [entry]}
    for key in draw(st.lists(st.sampled_from(sorted(PLAUSIBLE)), max_size=3, unique=True)):
        target = doc if key in ROOT_KEYS else entry
        target[key] = draw(PLAUSIBLE[key])
    return doc


# -- writers ------------------------------------------------------------------------------


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if v is None:
        return '""'            # TOML has no null
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"


def dump(doc, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(doc, ensure_ascii=False)          # NaN / Infinity are what Python reads back
    if suffix == ".toml":
        return "\n".join(f"{_toml_str(str(k))} = {_toml_value(v)}" for k, v in doc.items()) + "\n"
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


# -- the property -------------------------------------------------------------------------


def check_load(path: Path) -> ServerConfig | ConfigError:
    """load_config's result or ConfigError; any other exception propagates and fails the test."""
    try:
        config = load_config(path)
    except ConfigError as e:
        lines = str(e).splitlines()
        assert lines and len(lines) == len(e.problems), repr(str(e)[:2000])
        bad = [line for line in lines if not line.startswith(f"{path}: ")]
        assert not bad, f"problem lines without the file name: {bad[:3]!r}"
        return e
    assert isinstance(config, ServerConfig)
    assert config.models, "a config that loads serves at least one model"
    for entry in config.models:
        assert entry.model.is_file(), entry.model
        assert all(p.is_file() for p, _ in entry.lora_adapters), entry.lora_adapters
    return config


def write(folder: Path, suffix: str, content: str | bytes) -> Path:
    path = folder / f"fuzz{suffix}"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    return path


@SETTINGS
@given(doc=st.one_of(config_doc(), near_valid_doc()), suffix=st.sampled_from(SUFFIXES))
@example(doc={"models": [{"model": "models/model.gguf"}]}, suffix=".yaml")          # loads
@example(doc={"models": [{"model": "~llamaserve-no-such-user/m.gguf"}]}, suffix=".json")
@example(doc={"models_dir": "~llamaserve-no-such-user"}, suffix=".yaml")
@example(doc={"adapters_dir": "a\x00b", "models": [{"model": "models/model.gguf"}]}, suffix=".json")
@example(doc={"models_dir": "a\x00b", "chat_template_file": "t\x00", "models": [
    {"model": "models/model.gguf", "chat_template_file": "t\x00.jinja"}]}, suffix=".json")
@example(doc={"max_body_bytes": "9" * 400, "models": [{"model": "models/model.gguf"}]}, suffix=".json")
@example(doc={"shutdown_grace": 10**400, "models": [{"model": "models/model.gguf"}]}, suffix=".json")
@example(doc={"models": [{"model": "models/model.gguf", "tensor_split": [10**400]}]}, suffix=".yaml")
@example(doc={"port": "${LLAMASERVE_FUZZ_UNSET:-" + "1" * 5000 + "}"}, suffix=".json")
@example(doc={"models": [{"model": "models/model.gguf"}], "bad\nkey\u2028x": 1}, suffix=".json")
@example(doc={"models": [{"model": "models/nested.gguf"}]}, suffix=".yaml")
@example(doc={"models": [{"model": "models/model.gguf"}], "x": json.loads("[" * 500 + "]" * 500)}, suffix=".json")
def test_any_document_loads_or_raises_config_error(files, doc, suffix):
    check_load(write(files, suffix, dump(doc, suffix)))


@SETTINGS
@given(doc=config_doc(), suffix=st.sampled_from(SUFFIXES), cuts=st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 8), st.text(max_size=4)), min_size=1, max_size=4))
def test_mangled_documents(files, doc, suffix, cuts):
    """Serialized documents with random splices: mostly syntax errors, sometimes odd valid files."""
    text = dump(doc, suffix)
    for pos, length, insert in cuts:
        pos %= len(text) + 1
        text = text[:pos] + insert + text[pos + length:]
    check_load(write(files, suffix, text))


@SETTINGS
@given(data=st.binary(max_size=2000), suffix=st.sampled_from(SUFFIXES))
@example(data=b"\xff\xfe\x00\x00", suffix=".yaml")
@example(data=b"[" * 100_000, suffix=".json")
@example(data=b"a = " + b"[" * 100_000, suffix=".toml")
@example(data=b"- " * 50_000, suffix=".yaml")
@example(data=b"a: &a [*a]\n", suffix=".yaml")
@example(data=b"a: !!python/object/apply:os.system ['true']\n", suffix=".yml")
@example(data="\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]).encode(), suffix=".yaml")
def test_random_bytes(files, data, suffix):
    check_load(write(files, suffix, data))


@pytest.mark.parametrize("suffix", [".txt", ".gguf", ""])
def test_unsupported_suffix_and_missing_file(files, suffix):
    err = check_load(write(files, suffix, b"models: []"))
    assert isinstance(err, ConfigError) and "unsupported config type" in str(err)
    missing = files / "nope.yaml"
    err = check_load(missing)
    assert isinstance(err, ConfigError) and "file not found" in str(err)
