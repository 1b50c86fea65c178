"""`python -m llamacore` describes the installation: versions, source pin, build flags, backends."""

from __future__ import annotations

import json
import tomllib

from helpers import REPO_ROOT
from isolation import run_child


def _pin() -> dict:
    with (REPO_ROOT / "vendor" / "llama_cpp.toml").open("rb") as f:
        return tomllib.load(f)["source"]


def test_report_names_versions_build_and_backends():
    proc = run_child(["-m", "llamacore"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    import llamacore

    assert out.startswith("llamacore 0.")
    assert f"llama.cpp: {llamacore.llama_cpp_version()} (ggml " in out
    pin = _pin()
    assert f"{pin['package']} {pin['version']} sdist" in lines["llama.cpp source"] and pin["sha256"] in out
    assert "-DBUILD_SHARED_LIBS=OFF" in lines["cmake flags"]
    assert lines["backends"].startswith("backends: ") and "CPU [CPU: " in lines["backends"]
    assert "RPC []" in lines["backends"]           # built in; its devices are the workers a model names
    assert "CUDA=" in lines["compiled in"] and "Metal=" in lines["compiled in"] and "RPC=" in lines["compiled in"]
    assert "system info: CPU : " in out
    assert proc.stderr == ""


def test_json_report_matches_the_module():
    proc = run_child(["-m", "llamacore", "--json"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    import llamacore
    from llamacore import _core

    assert report["llama_cpp_version"] == llamacore.llama_cpp_version()
    assert report["system_info"] == llamacore.system_info().strip()
    assert report["gpu_offload"] == llamacore.supports_gpu_offload()
    assert [b["name"] for b in report["backends"]] == [b["name"] for b in _core.backends()]
    assert "CPU" in [b["name"] for b in report["backends"]]
    assert all(b["devices"] for b in report["backends"] if b["name"] == "CPU")
    # a CUDA/Metal/RPC backend is reported compiled in exactly when llama.cpp registered it
    names = {b["name"] for b in report["backends"]}
    assert report["compiled_in"] == {k: k in names for k in report["compiled_in"]}
    build = report["build"]
    assert build["build_folder"].startswith("build/llama.cpp/")
    assert isinstance(build["cmake_args"], str) and build["ggml_native"] in ("ON", "OFF")
    assert any(name.startswith("libllama") for name in build["static_libraries"])
