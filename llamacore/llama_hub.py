"""`Llama.from_pretrained`: a GGUF file (and companions) from a Hugging Face Hub repository.

As llama-cpp-python does it: each file name is a glob that must match exactly one file of the
repository, downloaded with huggingface_hub (its own cache and progress bars).
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import os
from pathlib import Path
from typing import Any


def download(repo_id: str, filename: str | None, additional_files: list | None = None,
             local_dir: str | os.PathLike[str] | None = None, local_dir_use_symlinks: bool | str = "auto",
             cache_dir: str | os.PathLike[str] | None = None) -> str:
    """The local path of `filename` in `repo_id` (downloaded if needed); `additional_files` are
    fetched too. Needs `huggingface-hub`."""
    try:
        from huggingface_hub import HfFileSystem, hf_hub_download
        from huggingface_hub.utils import validate_repo_id
    except ImportError as exc:
        raise ImportError("Llama.from_pretrained requires the huggingface-hub package: "
                          "pip install huggingface-hub") from exc
    validate_repo_id(repo_id)
    download_args: dict[str, Any] = {"local_dir": local_dir, "cache_dir": cache_dir}
    if "local_dir_use_symlinks" in inspect.signature(hf_hub_download).parameters:
        download_args["local_dir_use_symlinks"] = local_dir_use_symlinks
    elif local_dir_use_symlinks != "auto":
        raise ValueError("local_dir_use_symlinks: this huggingface-hub version no longer takes it "
                         "(local_dir always holds real files); leave it 'auto'")
    files = [f["name"] if isinstance(f, dict) else f for f in HfFileSystem().ls(repo_id, recursive=True)]
    file_list = [str(Path(f).relative_to(repo_id)) for f in files]

    def fetch(pattern: str | None) -> str:
        matches = [f for f in file_list if fnmatch.fnmatch(f, pattern or "")]
        if len(matches) != 1:
            how = "No file found" if not matches else "Multiple files found"
            raise ValueError(f"{how} in {repo_id} matching {pattern}\n\nAvailable Files:\n{json.dumps(file_list)}")
        subfolder = str(Path(matches[0]).parent)
        return hf_hub_download(repo_id=repo_id, filename=Path(matches[0]).name,
                               subfolder=None if subfolder == "." else subfolder, **download_args)

    model_path = fetch(filename)            # the local path of the downloaded file
    for pattern in additional_files or []:
        fetch(pattern)
    return model_path
