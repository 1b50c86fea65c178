"""One side of bench_llama_speculative: a `Llama` (llamacore's, or llama-cpp-python's when run with
vendor/lcp_python.py's environment) answering timed completion requests, one JSON line each.

stdin: a first line {"model", "mode": plain|lookup|draft, "draft", "threads", "n_ctx"}, then lines
{"prompt": [token ids], "n_gen": N}; stdout: one JSON line per request {"text", "n", "wall_s",
"drafted", "accepted"} (the draft counts where the Llama reports them).
"""

from __future__ import annotations

import json
import sys
import time


def build(cfg: dict):
    impl = cfg["impl"]
    if impl == "llama_cpp":
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    else:
        from llamacore import Llama
        from llamacore.llama_speculative import LlamaPromptLookupDecoding
    draft = None
    if cfg["mode"] == "lookup":             # llama-cpp-python's defaults on both sides
        draft = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=10)
    elif cfg["mode"] == "draft":
        draft = Llama(cfg["draft"], n_ctx=cfg["n_ctx"], n_threads=cfg["threads"], verbose=False)
    return Llama(cfg["model"], n_ctx=cfg["n_ctx"], n_batch=512, n_threads=cfg["threads"],
                 n_threads_batch=cfg["threads"], flash_attn=False, draft_model=draft, verbose=False)


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    llm = build(cfg)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        before = (getattr(llm, "n_drafted", 0), getattr(llm, "n_accepted", 0))
        started = time.perf_counter()
        out = llm.create_completion(req["prompt"], max_tokens=req["n_gen"], temperature=0.0)
        wall = time.perf_counter() - started
        print(json.dumps({"text": out["choices"][0]["text"], "n": out["usage"]["completion_tokens"],
                          "wall_s": wall, "drafted": getattr(llm, "n_drafted", 0) - before[0],
                          "accepted": getattr(llm, "n_accepted", 0) - before[1]}), flush=True)


if __name__ == "__main__":
    main()
