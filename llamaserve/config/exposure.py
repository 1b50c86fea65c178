"""A server reachable from other machines without a key: refused with require_api_key, else warned
about at config load; and a key that interpolated to empty (the server then has none)."""

from __future__ import annotations

import logging

from llamacore.rpc import is_loopback
from llamaserve.config.checks import Problems
from llamaserve.config.values import EnvStr

log = logging.getLogger("llamaserve.config.parse")     # config-load messages share one logger

def check_exposure(data: dict, settings: dict, problems: Problems) -> None:
    """No key on a public address is refused with require_api_key, else warned about loudly; so is a key
    that came out empty from its environment variable (the server then has none)."""
    for key in ("api_key", "admin_key"):
        if isinstance(data.get(key), EnvStr) and not data[key].strip():
            log.warning("%s: %s is empty after environment interpolation: the server has no %s",
                        problems.label, key, key.replace("_", " "))
    host = settings.get("host", "127.0.0.1")
    if settings.get("api_key") or is_loopback(host):
        return
    if settings.get("require_api_key"):
        problems.add("api_key", f"required (require_api_key: true) to listen on {host}, a non-loopback address")
    else:
        log.warning("%s: listening on %s without an api_key: anyone who can reach it may use, load and unload "
                    "every model (set api_key, or require_api_key: true to refuse this)", problems.label, host)


__all__ = ["check_exposure"]
