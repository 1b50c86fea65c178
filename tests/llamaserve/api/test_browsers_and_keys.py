"""Web pages and keys (hostile clients, issue findings 7): a keyless server refuses a text/plain
cross-site POST, a DNS-rebinding Host and another site's page; an admin key of its own guards the
admin routes; no key on a public address is warned about or refused."""

from __future__ import annotations

import logging

import httpx
import pytest
from helpers import N_THREADS, yaml_config
from server import ServerProcess

from llamaserve.config.parse import ConfigError, load_config

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def open_server(tmp_path_factory, tiny_model_path):
    config = {"defaults": {"n_ctx": 128, "n_threads": N_THREADS}, "cors": ["http://app.example"],
              "models": [{"alias": "tiny", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("open")).start()
    yield proc
    proc.stop()


def post(srv, path: str, **kw) -> httpx.Response:
    return httpx.post(srv.base_url + path, timeout=30, **kw)


def test_a_cross_site_text_plain_post_is_refused(open_server):
    """What a page on any site can send without asking first: refused, and the model stays unloaded."""
    attack = post(open_server, "/admin/models/tiny/load", content=b"{}",
                  headers={"Content-Type": "text/plain", "Origin": "http://evil.example",
                           "Sec-Fetch-Site": "cross-site"})
    assert attack.status_code == 403 and "another site" in attack.json()["error"]["message"]
    body = b'{"model": "tiny", "prompt": "Hi", "max_tokens": 2}'
    same_site = post(open_server, "/v1/completions", content=body, headers={"Content-Type": "text/plain"})
    assert same_site.status_code == 415 and "application/json" in same_site.json()["error"]["message"]
    assert httpx.get(open_server.base_url + "/admin/models", timeout=30).json()["data"][0]["state"] != "loaded"
    ok = post(open_server, "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert ok.status_code == 200


def test_a_listed_origin_may_post(open_server):
    allowed = post(open_server, "/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 2},
                   headers={"Origin": "http://app.example", "Sec-Fetch-Site": "cross-site"})
    assert allowed.status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "192.168.1.9:8000", "[fe80::1]:8000"])
def test_a_rebinding_host_is_refused(open_server, host):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: its Host is not one the server answers to."""
    refused = httpx.get(open_server.base_url + "/v1/models", headers={"Host": host}, timeout=30)
    assert refused.status_code == 403 and "allowed_hosts" in refused.json()["error"]["message"]
    assert httpx.get(open_server.base_url + "/health", headers={"Host": host}, timeout=30).status_code == 200


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
def test_loopback_names_are_served(open_server, host):
    port = open_server.base_url.rpartition(":")[2]
    assert httpx.get(open_server.base_url + "/v1/models", headers={"Host": f"{host}:{port}"},
                     timeout=30).status_code == 200


def test_an_admin_key_guards_the_admin_routes_alone(tmp_path_factory, tiny_model_path):
    config = {"api_key": "user-key", "admin_key": "admin-key", "allowed_hosts": ["*"],
              "defaults": {"n_ctx": 128, "n_threads": N_THREADS},
              "models": [{"alias": "tiny", "model": str(tiny_model_path)}]}
    srv = ServerProcess(config, tmp_path_factory.mktemp("admin")).start()
    try:
        def status(method: str, path: str, key: str) -> int:
            return httpx.request(method, srv.base_url + path, headers={"Authorization": f"Bearer {key}"},
                                 timeout=30).status_code
        assert status("GET", "/v1/models", "user-key") == 200 and status("GET", "/v1/models", "admin-key") == 200
        assert status("GET", "/admin/models", "user-key") == 401
        assert status("POST", "/admin/models/tiny/load", "user-key") == 401
        assert status("POST", "/v1/load_lora_adapter", "user-key") == 401
        assert status("POST", "/load_lora_adapter", "user-key") == 401
        assert status("GET", "/admin/models", "admin-key") == 200
        assert status("POST", "/admin/models/tiny/load", "admin-key") == 200
        assert status("GET", "/v1/models", "nobody") == 401

        def props(key: str) -> dict:
            return httpx.get(srv.base_url + "/props", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
        # the server's folders are shown to the admin key's holder alone
        assert props("user-key")["model_path"] == tiny_model_path.name
        assert props("admin-key")["model_path"] == str(tiny_model_path)
    finally:
        srv.stop()


def test_no_key_on_a_public_address_is_warned_about_or_refused(work, monkeypatch, caplog):
    monkeypatch.delenv("LS_NO_KEY", raising=False)
    path = yaml_config(work, "host: 0.0.0.0\napi_key: ${LS_NO_KEY:-}\nmodels: [{model: models/model.gguf}]\n")
    with caplog.at_level(logging.WARNING, logger="llamaserve.config.parse"):
        load_config(path)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "api_key is empty after environment interpolation" in said and "without an api_key" in said
    strict = yaml_config(work, "host: 0.0.0.0\nrequire_api_key: true\nmodels: [{model: models/model.gguf}]\n")
    with pytest.raises(ConfigError, match="require_api_key"):
        load_config(strict)
