"""Build llama.cpp (static libraries, via CMake) and the llamacore Cython extension against it.

Extra CMake flags come from $CMAKE_ARGS as with llama-cpp-python, e.g.
CMAKE_ARGS="-DGGML_CUDA=ON" pip install -e . ; each flag set gets its own build folder under
build/llama.cpp/, so switching back and forth rebuilds incrementally. ccache is used when found.
"""

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "vendor"))
# vendor/fetch.py (it needs Python >= 3.11, as the project does) is imported when the extension
# is built, not here: on an older interpreter pip reads the metadata first and then refuses the
# install with its requires-python message.

LLAMA_CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_CURL=OFF",
    # the ggml RPC backend (two small files): models split across hosts, `llamaserve rpc-worker`;
    # RDMA off so the link never needs libibverbs
    "-DGGML_RPC=ON",
    "-DGGML_RPC_RDMA=OFF",
    # libmtmd (vision projectors) without video: with MTMD_VIDEO on, mtmd-helper spawns ffmpeg
    # for video and WebP, and a server must not start processes on untrusted input
    "-DLLAMA_BUILD_MTMD=ON",
    "-DMTMD_VIDEO=OFF",
    # the libraries end up in a shared object (the extension), where by default every global function
    # may be interposed, so the compiler neither inlines nor calls directly within a file; they cannot
    # be (the extension links with -Bsymbolic-functions, link_args)
    "-DCMAKE_C_FLAGS=-fno-semantic-interposition",
    "-DCMAKE_CXX_FLAGS=-fno-semantic-interposition",
]


# the flags of LLAMA_CMAKE_FLAGS (and ccache's) that the chat layer's build takes too
COMMON_CMAKE_FLAGS = {"-DCMAKE_BUILD_TYPE", "-DCMAKE_POSITION_INDEPENDENT_CODE", "-DCMAKE_CXX_FLAGS",
                      "-DCMAKE_CXX_COMPILER_LAUNCHER"}


def cmake_build_dir(user_args: list[str]) -> Path:
    tag = hashlib.sha1(" ".join(user_args).encode()).hexdigest()[:10] if user_args else "cpu"
    return ROOT / "build" / "llama.cpp" / tag


def stable_cmake() -> str:
    """A cmake that outlives this build: pip's isolated build env (and its cmake) is temporary,
    and a CMake build folder remembers the cmake that configured it.

    Scripts are passed over too: the `cmake` console script of PyPI's cmake package, run inside
    pip's build env, imports and runs the build env's own (temporary) cmake binary.
    """
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / "cmake"
        transient = "pip-build-env" in folder or folder.endswith("shims")   # shims may resolve into it
        if not transient and candidate.is_file() and os.access(candidate, os.X_OK) and not _is_script(candidate):
            return str(candidate)
    return shutil.which("cmake") or "cmake"


def _is_script(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


def build_llama_cpp() -> Path:
    """Configure (first time) and build the `llama` and `mtmd` targets; returns the build folder."""
    import fetch  # vendor/fetch.py

    source = fetch.ensure_source()
    user_args = shlex.split(os.environ.get("CMAKE_ARGS", ""))
    build = cmake_build_dir(user_args)
    flags = list(LLAMA_CMAKE_FLAGS)
    if shutil.which("ccache"):
        flags += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    cmake = stable_cmake()
    cache = build / "CMakeCache.txt"
    if cache.exists():
        configured_by = Path(cmake_cache_value(build, "CMAKE_COMMAND") or "")
        if configured_by.is_file():
            # Build with the cmake that configured the folder: another cmake version (another
            # interpreter's PATH) would regenerate the folder and rebuild every library.
            cmake = str(configured_by)
        else:
            cache.unlink()        # configured by a cmake that is gone; reconfigure (ccache keeps it quick)
            shutil.rmtree(build / "CMakeFiles", ignore_errors=True)
    configured = build / "llamacore-cmake-flags.txt"      # the flags the folder was configured with
    wanted = "\n".join([*flags, *user_args])
    if not cache.exists() or not configured.exists() or configured.read_text() != wanted:
        subprocess.run([cmake, "-S", str(source), "-B", str(build), *flags, *user_args], check=True)
        configured.write_text(wanted)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    subprocess.run([cmake, "--build", str(build), "--target", "llama", "mtmd", "-j", jobs], check=True)
    build_common(cmake, source, build, flags, user_args, jobs)
    return build


def build_common(cmake: str, source: Path, build: Path, flags: list[str], user_args: list[str], jobs: str) -> None:
    """llama.cpp's chat layer (vendor/common/CMakeLists.txt) into `build`/llamacore-common, with
    the flags libllama was built with."""
    folder = build / "llamacore-common"
    wanted = "\n".join([*flags, *user_args])
    configured = folder / "llamacore-cmake-flags.txt"
    if not (folder / "CMakeCache.txt").exists() or not configured.exists() or configured.read_text() != wanted:
        common_flags = [f for f in flags if f.split("=", 1)[0] in COMMON_CMAKE_FLAGS]
        subprocess.run([cmake, "-S", str(ROOT / "vendor" / "common"), "-B", str(folder), f"-DLLAMA_SOURCE={source}",
                        *common_flags, *user_args, "-Wno-dev", "--no-warn-unused-cli"], check=True)
        configured.write_text(wanted)
    subprocess.run([cmake, "--build", str(folder), "-j", jobs], check=True)


def cmake_cache_value(build: Path, key: str) -> str | None:
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return None


def static_libraries(build: Path) -> list[Path]:
    """The llama.cpp libraries the extension links, in dependency order."""
    libs = [build / "llamacore-common" / "libllamacore-common.a",
            build / "tools" / "mtmd" / "libmtmd.a", build / "vendor" / "hash" / "libvendor-hash.a",
            build / "src" / "libllama.a", build / "ggml" / "src" / "libggml.a"]
    backends = sorted(p for p in (build / "ggml" / "src").rglob("libggml-*.a") if p.name != "libggml-base.a")
    return libs + backends + [build / "ggml" / "src" / "libggml-base.a"]


def link_args(build: Path) -> list[str]:
    """Static libraries in dependency order, plus what the enabled backends need."""
    libs = static_libraries(build)
    args = ["-Wl,--start-group", *map(str, libs), "-Wl,--end-group", "-fopenmp", "-lpthread", "-ldl",
            # calls between llama.cpp's own functions go straight to them, as in llama.cpp's executables,
            # not through the PLT: the llama_* symbols stay exported (llama-cpp-python's ctypes binds
            # them, vendor/lcp_python.py), but nothing can interpose them
            "-Wl,-Bsymbolic-functions"]
    names = {p.name for p in libs}
    if "libggml-cuda.a" in names:
        cuda_lib = cmake_cache_value(build, "CUDAToolkit_LIBRARY_DIR") or "/usr/local/cuda/lib64"
        args += [f"-L{cuda_lib}", f"-Wl,-rpath,{cuda_lib}", "-lcudart", "-lcublas", "-lcublasLt", "-lcuda"]
        # llama.cpp's CUDA backend uses NCCL (multi-GPU all-reduce) when its CMake found it
        nccl = cmake_cache_value(build, "NCCL_LIBRARY") or ""
        if cmake_cache_value(build, "GGML_CUDA_NCCL") in ("ON", "TRUE", "1") and Path(nccl).is_file():
            args += [nccl, f"-Wl,-rpath,{Path(nccl).parent}"]
    if "libggml-vulkan.a" in names:
        args += ["-lvulkan"]
    if "libggml-blas.a" in names:
        args += ["-lopenblas"]
    return args


def build_info(build: Path) -> dict:
    """What `python -m llamacore` reports about this build (compiled into the extension)."""
    import fetch  # vendor/fetch.py

    pin = fetch.load_pin()

    def cache(key: str) -> str | None:
        return cmake_cache_value(build, key)

    return {
        "llama_cpp_source": f"{pin['package']} {pin['version']} sdist, {pin['subdir']} (sha256 {pin['sha256']})",
        "cmake_args": os.environ.get("CMAKE_ARGS", ""),
        "cmake_flags": LLAMA_CMAKE_FLAGS,
        "build_folder": str(build.relative_to(ROOT)),
        "compiler": cache("CMAKE_CXX_COMPILER"),
        "ggml_native": cache("GGML_NATIVE"),
        "static_libraries": sorted(p.name for p in build.rglob("*.a")),
    }


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class BuildWithLlamaCpp(build_ext):
    def run(self):
        import fetch  # vendor/fetch.py

        build = build_llama_cpp()
        source = fetch.TREE
        info = json.dumps(build_info(build), sort_keys=True)
        for ext in self.extensions:
            ext.include_dirs += [str(source / "include"), str(source / "ggml" / "include"),
                                 str(source / "tools" / "mtmd"), str(source / "common"), str(source / "vendor")]
            ext.extra_link_args += link_args(build)
            # a rebuilt llama.cpp (a new patch, say) relinks the extension even if its sources did not change
            ext.depends += [str(p) for p in static_libraries(build)]
            ext.define_macros = [m for m in ext.define_macros if m[0] != "LLAMACORE_BUILD_INFO"]
            ext.define_macros.append(("LLAMACORE_BUILD_INFO", c_string(info)))
        super().run()


def extensions():
    import numpy
    from Cython.Build import cythonize

    core = Extension(
        "llamacore._core",
        sources=["llamacore/_core.pyx"],
        include_dirs=[numpy.get_include()],
        language="c++",
        extra_compile_args=["-O2", "-std=c++17"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    return cythonize([core], include_path=[str(ROOT)], language_level=3,
                     compiler_directives={"embedsignature": True})


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildWithLlamaCpp})
