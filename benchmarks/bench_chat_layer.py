"""The chat layer's cost per request: rendering a conversation with tools offered (llama.cpp's Jinja
engine, its tool-call grammar and answer parser, through llamacore.chat) and reading an answer back.

The conversation is the issue's: 20 messages (user, assistant tool calls, tool results) and 10 tools.
For each template it reports the median over --reps of one render (ChatTemplates.apply: prompt,
grammar, triggers, parser) and of one parse of a complete tool-call answer, in milliseconds, beside
llama-server's /apply-template for the same body when build/peer-tools has llama-server (that figure
includes its HTTP round trip, so it bounds the peer's cost from above). The target is render plus
parse under 2 ms.

Usage: python benchmarks/bench_chat_layer.py [--reps 200] [--templates Qwen-Qwen3-0.6B,...] [--no-peer]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "vendor" / "llama.cpp" / "models" / "templates"
DEFAULT = ("Qwen-Qwen3-0.6B", "meta-llama-Llama-3.3-70B-Instruct", "openai-gpt-oss-120b", "deepseek-ai-DeepSeek-V3.1",
           "GLM-4.6")


def tools(n: int = 10) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool number {i}",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city"]}}} for i in range(n)]


def conversation(n: int = 20) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are a helpful agent."}]
    turn = 0
    while len(messages) < n:
        call_id = f"call_{turn}"
        messages += [
            {"role": "user", "content": f"Question {turn}: what is the weather in city {turn}?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": f"tool_{turn % 10}", "arguments": json.dumps({"city": f"City {turn}", "days": turn})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": f"Sunny, {20 + turn} C"},
        ]
        turn += 1
    return messages[:n - 1] + [{"role": "user", "content": "And tomorrow?"}]


def median_ms(fn, reps: int) -> float:
    fn()                                               # the first call compiles and analyses the template
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def ours(name: str, reps: int) -> tuple[float, float]:
    from llamacore._core import ChatParser
    from llamacore.chat import native
    from llamacore.chat.answer import AnswerReader

    templates = native.compiled((TEMPLATES / f"{name}.jinja").read_text(), "<s>", "</s>")
    messages, offered = conversation(), tools()
    params = native.render(templates, messages, tools=offered)
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_x", "type": "function", "function": {
        "name": "tool_3", "arguments": json.dumps({"city": "Paris", "days": 2})}}]}
    # the answer is the text the template itself renders for an assistant tool call
    before = native.render(templates, messages, tools=offered, add_generation_prompt=True).prompt
    after = native.render(templates, [*messages, call], tools=offered, add_generation_prompt=False).prompt
    answer = after[len(before):] if after.startswith(before) else after

    def parse() -> None:
        reader = AnswerReader(ChatParser(params))
        reader.push(answer)
        reader.finish()

    return (median_ms(lambda: native.render(templates, messages, tools=offered), reps), median_ms(parse, reps))


def peer(name: str, reps: int) -> float | None:
    """llama-server's /apply-template for the same body (median ms, its HTTP round trip included)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import tempfile

    import httpx
    import servers

    if not (REPO / "build" / "peer-tools" / "bin" / "llama-server").exists():
        return None
    model = REPO / "llamaserve" / "demo" / "stories260K.gguf"
    with tempfile.TemporaryDirectory() as workdir:
        server = servers.llama_server(model, Path(workdir), threads=1, parallel=1, extra_args=[
            "--jinja", "--chat-template-file", str(TEMPLATES / f"{name}.jinja")]).start()
        try:
            body = {"messages": conversation(), "tools": tools()}
            with httpx.Client(base_url=server.base_url, timeout=30) as client:
                return median_ms(lambda: client.post("/apply-template", json=body).raise_for_status(), reps)
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--templates", default=",".join(DEFAULT))
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args(argv)
    print("| template | render ms | parse ms | total ms | llama-server /apply-template ms (HTTP incl.) |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.templates.split(","):
        render_ms, parse_ms = ours(name, args.reps)
        theirs = None if args.no_peer else peer(name, max(20, args.reps // 4))
        print(f"| {name} | {render_ms:.2f} | {parse_ms:.3f} | {render_ms + parse_ms:.2f} | "
              f"{'-' if theirs is None else f'{theirs:.2f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
