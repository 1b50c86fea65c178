"""vendor/fetch.py: a re-extracted llama.cpp tree is dated now, so its build never keeps objects of
a patch that was removed (the archive's own dates are older than any object built before)."""

import io
import tarfile
import time

from helpers import vendor_fetch


def test_an_extracted_tree_is_dated_now(tmp_path):
    archive = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in (("pkg-1.0/vendor/llama.cpp/ggml/src/ops.c", b"int x;\n"),
                           ("pkg-1.0/vendor/llama.cpp/CMakeLists.txt", b"project(x)\n"),
                           ("pkg-1.0/README.md", b"not the tree\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(text), 1_000_000_000          # 2001, as an old archive's dates
            tar.addfile(info, io.BytesIO(text))
    started = time.time()
    tree = tmp_path / "tree"
    vendor_fetch().extract(archive, {"subdir": "vendor/llama.cpp", "sha256": "0" * 64}, into=tree, patches=False)
    files = [p for p in tree.rglob("*") if p.is_file()]
    assert {p.relative_to(tree).as_posix() for p in files} >= {"ggml/src/ops.c", "CMakeLists.txt"}
    assert all(p.stat().st_mtime >= started - 1 for p in files)
