"""Report rows of the loading cases: cold load, model switch, and the server's memory around an
idle unload (with what changed, mapping by mapping)."""

from __future__ import annotations

from pathlib import Path

from report_rows import Row, case_result


def load_rows(results: dict) -> list[Row]:
    rows = []
    cold = case_result(results, "cold_load")
    if cold:
        for what, label in (("load", "cold load (constructor)"), ("load_first_token", "cold load + first token")):
            med = cold[what]["median_s"]
            rows.append((label, med.get("llamacore"), "llama-cpp-python", med.get("llama-cpp-python"), "ms"))
    switch = case_result(results, "model_switch")
    if switch:
        peer = cold and cold["load_first_token"]["median_s"].get("llama-cpp-python")
        rows.append(("model switch: TTFT, model not loaded", switch["median_s"]["switch"],
                     "llama-cpp-python new Llama + first token" if peer else "-", peer, "ms"))
        rows.append(("model switch: TTFT, model loaded", switch["median_s"]["no switch"], "-", None, "ms"))
    return rows


def rss_rows(rss: dict) -> list[Row]:
    ours, peer = rss["rss_bytes"]["llamaserve"], rss["rss_bytes"]["llama-server"]
    return [("RSS before first load", ours["before_load"], "llama-server (loads at start)", None, "MiB"),
            ("RSS with the model loaded", ours["loaded"], "llama-server", peer["loaded"], "MiB"),
            ("RSS after idle unload", ours["after_idle_unload"], "llama-server after --sleep-idle-seconds",
             peer["after_idle_unload"], "MiB"),
            ("RSS after idle unload minus before first load", rss["after_minus_before"], "-", None, "MiB"),
            *([("RSS after idle unload minus before first load: anonymous memory (heap, stacks)",
                rss["anon_after_minus_before"], "-", None, "MiB"),
               ("RSS after a second load and idle unload minus after the first", rss["second_minus_first"], "-",
                None, "MiB")] if "anon_after_minus_before" in rss else []),
            *[(f"RSS after idle unload minus before first load: {Path(name).name}", kib * 1024, "-", None, "MiB")
              for name, kib in rss.get("changed_mappings_kib", {}).items()]]
