"""A loopback stand-in for the Hugging Face Hub's HTTP API, for `HF_ENDPOINT=http://127.0.0.1:PORT`.

It serves the part huggingface_hub (2.x, read from its file_download.py and hf_api.py) calls to
list a model repository and download its files, with the headers it requires:

    GET  /api/models/{repo}[/revision/{rev}]           repo_info: {"id", "sha", "siblings"}
    GET  /api/models/{repo}/tree/{rev}[/{path}]         list_repo_tree (?recursive=true|false)
    HEAD /{repo}/resolve/{rev}/{path}                   X-Repo-Commit, ETag (the sha256), Content-Length
    GET  /{repo}/resolve/{rev}/{path}                   the bytes (a Range of bytes=N- too)

Errors carry the Hub's X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound), which
huggingface_hub turns into its own exceptions. Every request is recorded, so a test can tell
that an offline run made none.
"""

from __future__ import annotations

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from hub_repo import HubRepo

_LFS_POINTER_SIZE = 134                 # what a git-lfs pointer file takes; the Hub reports it
_API = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?")
_TREE = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?")
_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)")


class HubStandIn:
    """The stand-in on 127.0.0.1 (a free port), serving `repos` from a daemon thread."""

    def __init__(self, *repos: HubRepo) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.requests: list[tuple[str, str]] = []       # (method, path with query), in order
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def variables(self, home: Path, offline: bool = False) -> dict[str, str]:
        """The environment variables that point huggingface_hub (which reads them when imported) at
        this stand-in, with its cache under `home`/hub."""
        return {"HF_ENDPOINT": self.endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else "0",
                "HF_HUB_DISABLE_TELEMETRY": "1"}

    def env(self, home: Path, offline: bool = False) -> dict[str, str]:
        """os.environ with `variables`, and without any other HF_* setting or token of the caller's."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        return {**inherited, **self.variables(home, offline)}

    def downloads(self) -> list[str]:
        """The paths of the files fetched (GET .../resolve/...), in order."""
        with self._lock:
            return [m["path"] for method, p in self.requests if method == "GET"
                    and (m := _RESOLVE.fullmatch(unquote(urlsplit(p).path)))]


def _handler(hub: HubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass                                        # the test reads hub.requests instead

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            hub.record(self.command, self.path)
            url = urlsplit(self.path)
            path = unquote(url.path)
            if m := _TREE.fullmatch(path):
                repo = self._repo(m["repo"], m["rev"])
                if repo is not None:
                    recursive = parse_qs(url.query).get("recursive", ["false"])[0].lower() == "true"
                    self._json(200, _tree(repo, (m["path"] or "").strip("/"), recursive), body)
            elif m := _API.fullmatch(path):
                repo = self._repo(m["repo"], m["rev"] or "main")
                if repo is not None:
                    self._json(200, {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit,
                                     "siblings": [{"rfilename": f} for f in sorted(repo.files)]}, body)
            elif m := _RESOLVE.fullmatch(path):
                repo = self._repo(m["repo"], m["rev"])
                if repo is not None and m["path"] not in repo.files:
                    self._json(404, {"error": "Entry not found"}, body,
                               {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit})
                elif repo is not None:
                    self._file(repo, m["path"], body)
            else:
                self._json(404, {"error": "Repository not found"}, body, {"X-Error-Code": "RepoNotFound"})

        def _repo(self, repo_id: str, rev: str) -> HubRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._json(404, {"error": "Repository not found"}, self.command == "GET",
                           {"X-Error-Code": "RepoNotFound"})
            elif rev not in ("main", repo.commit):
                self._json(404, {"error": f"Invalid rev id: {rev}"}, self.command == "GET",
                           {"X-Error-Code": "RevisionNotFound"})
            else:
                return repo
            return None

        def _json(self, status: int, value: object, body: bool, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            for name, text in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(name, text)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _file(self, repo: HubRepo, name: str, body: bool) -> None:
            data = repo.files[name].read_bytes()
            start = 0
            ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if ranged and body:
                start = min(int(ranged[1]), len(data))
            self.send_response(206 if start else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{repo.digests(name)[1]}"')
            self.send_header("Accept-Ranges", "bytes")
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            if body:
                self.wfile.write(data[start:])

    return Handler


def _tree(repo: HubRepo, under: str, recursive: bool) -> list[dict]:
    """The Hub's tree listing of `under` (the root when empty): files, and their folders."""
    prefix = f"{under}/" if under else ""
    entries: dict[str, dict] = {}
    for path in sorted(repo.files):
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix):].split("/")
        for depth in range(1, len(parts)):              # the folders on the way
            folder = prefix + "/".join(parts[:depth])
            if recursive or depth == 1:
                entries.setdefault(folder, {"type": "directory", "oid": "0" * 40, "size": 0, "path": folder})
        if recursive or len(parts) == 1:
            git, sha256 = repo.digests(path)
            size = repo.files[path].stat().st_size
            entries[path] = {"type": "file", "oid": git, "size": size, "path": path,
                             "lfs": {"oid": sha256, "size": size, "pointerSize": _LFS_POINTER_SIZE}}
    return list(entries.values())
