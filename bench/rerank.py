"""Rerank vs what a user would do without it: documents/s and computed tokens of one N-document
/v1/rerank against N independent /v1/score calls of the template's expanded prompts (sent at once,
so the server may batch them), in the same run, on the same server.

  python -m bench.rerank [--model-path default|DIR|FILE.gguf | --url http://127.0.0.1:PORT]
      [--documents 20] [--doc-words 60] [--rounds 5] [--threads N] [--json]

A rerank's filled query is one request's shared head: computed once for its N documents. N
independent calls each compute the head again. The computed tokens are the server's own counters
(sglang:computed_tokens_total, before and after each case), so the sharing shows as tokens, not
only as time. Both cases score the same token ids; the largest difference between their relevance
scores is printed as a check. NOTE: a cross-request query cache (a later `--query-cache-tokens`)
would let the independent calls share the head as well; this comparison is meant with it off,
to show the sharing inside one rerank (this server has no such cache yet).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time

import aiohttp

from bench.server_process import start_server
from bench.tokens import read_token_counts

WORDS = ("river city capital bridge market museum history train station harbor north ancient "
         "modern festival garden mountain lake coffee bakery library castle tower square school "
         "paris france europe population century built famous visitors travel guide").split()
QUERY = "What is the capital of France and what is it famous for?"


def documents(num: int, num_words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(num_words)).capitalize() + "." for _ in range(num)]


async def post(session: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with session.post(url, json=body) as response:
        payload = await response.json()
        if response.status != 200:
            raise RuntimeError(f"{url}: {response.status} {payload}")
        return payload


async def rerank_case(session, url: str, docs: list[str]) -> list[float]:
    payload = await post(session, f"{url}/v1/rerank", {"query": QUERY, "documents": docs,
                                                       "return_documents": False})
    by_index = {r["index"]: r["relevance_score"] for r in payload["results"]}
    return [by_index[i] for i in range(len(docs))]


def fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


async def independent_case(session, url: str, docs: list[str], template: dict) -> list[float]:
    """N /v1/score calls, one expanded prompt each, all sent at once."""
    head = fill(template["query"], {"instruction": template["instruction"], "query": QUERY})
    labels = [template["no_token_id"], template["yes_token_id"]]
    bodies = [{"query": head, "items": [fill(template["document"], {"document": doc})],
               "label_token_ids": labels, "apply_softmax": True} for doc in docs]
    answers = await asyncio.gather(*(post(session, f"{url}/v1/score", body) for body in bodies))
    return [answer["scores"][0][1] for answer in answers]


async def measure(url: str, docs: list[str], rounds: int) -> dict:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(f"{url}/get_server_info") as response:
            template = (await response.json())["rerank_template"]
        if template is None:
            raise RuntimeError(f"{url} serves no /v1/rerank")
        cases = {"rerank": lambda: rerank_case(session, url, docs),
                 "independent": lambda: independent_case(session, url, docs, template)}
        await cases["rerank"]()  # warm-up, both paths
        await cases["independent"]()
        figures, scores = {}, {}
        for name, case in cases.items():
            before, started = read_token_counts(url), time.perf_counter()
            for _ in range(rounds):
                scores[name] = await case()
            elapsed_s, counts = time.perf_counter() - started, read_token_counts(url) - before
            figures[name] = {"documents_per_s": rounds * len(docs) / elapsed_s,
                             "computed_tokens_per_rerank": counts.num_computed / rounds,
                             "padding_tokens_per_rerank": counts.num_padding / rounds}
    difference = max(abs(a - b) for a, b in zip(scores["rerank"], scores["independent"]))
    return {"template": template["name"], "documents": len(docs), "rounds": rounds, **figures,
            "max_score_difference": difference, "load_average_1m": os.getloadavg()[0]}


def report(result: dict) -> str:
    rerank, independent = result["rerank"], result["independent"]
    lines = [f"template {result['template']}, {result['documents']} documents x {result['rounds']} "
             f"rounds, load average {result['load_average_1m']:.2f}"]
    for name in ("rerank", "independent"):
        figures = result[name]
        lines.append(f"  {name:<12} {figures['documents_per_s']:8.1f} documents/s   "
                     f"{figures['computed_tokens_per_rerank']:8.0f} computed tokens per "
                     f"{result['documents']} documents ({figures['padding_tokens_per_rerank']:.0f} padding)")
    speedup = rerank["documents_per_s"] / independent["documents_per_s"]
    tokens = independent["computed_tokens_per_rerank"] / max(rerank["computed_tokens_per_rerank"], 1)
    lines.append(f"  rerank / independent: {speedup:.2f}x documents/s, {tokens:.2f}x fewer computed tokens; "
                 f"scores differ by at most {result['max_score_difference']:.1e}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rerank", description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running server (default: start python -m server)")
    parser.add_argument("--model-path", default="default")
    parser.add_argument("--threads", type=int, default=None, help="the started server's --num-threads")
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--doc-words", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    docs = documents(args.documents, args.doc_words)
    if args.url:
        result = asyncio.run(measure(args.url, docs, args.rounds))
    else:
        flags = ["--model-path", args.model_path, "--dtype", "float32"]
        flags += ["--num-threads", str(args.threads)] if args.threads else []
        with start_server("server", flags, env={"HF_HUB_OFFLINE": "1"}) as server:
            server.wait_ready()
            result = asyncio.run(measure(server.url, docs, args.rounds))
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
