"""Sequence classifiers as rerankers against what a user would write instead: documents/s of one
N-document /v1/rerank on the server against a plain transformers batched forward of the same
pairs (`model(**tokenizer([query] * N, documents, padding=True)).logits`, then the sigmoid), in
the same run, interleaved round by round, in the same dtype. Two rows: a cross-encoder (BERT,
MiniLM-L12's shape: bidirectional, so each pair runs whole; the server pads less, grouping pairs
by length) and a decoder seq-cls model (Qwen3, 6 layers: the server computes the query, a
Qwen3-Reranker style instruction, once per rerank). Random weights from configs (no hub):
bench/classifier_models.py.

  python -m bench.cross_encoder [--families bert,qwen3] [--documents 20] [--doc-words 40]
      [--rounds 5] [--dtype auto|float32|bfloat16] [--threads N] [--tiny] [--json]

Only the ratio means anything on a shared machine; the load average is printed with it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from bench.classifier_models import CORPUS, ENCODERS, build_classifier
from bench.rerank import WORDS
from bench.server_process import start_server

QUERY = "What is the capital of France and what is it famous for?"
# A decoder reranker's query is its instruction and the question (Qwen3-Reranker's prompt, shortened).
INSTRUCTED = ("Judge whether the Document meets the requirements based on the Query and the Instruct "
              "provided. Note that the answer can only be yes or no. <Instruct>: Given a web search "
              "query, retrieve relevant passages that answer the query <Query>: " + QUERY + " <Document>: ")


def documents(num: int, num_words: int, seed: int = 0) -> list[str]:
    """Documents of num_words / 2 to 3 num_words / 2 words: the lengths a retriever returns vary."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(num_words // 2, 3 * num_words // 2)))
            for _ in range(num)]


def plain_scores(model, tokenizer, query: str, docs: list[str]) -> list[float]:
    """What a user writes without a server: every pair in one padded forward, then the sigmoid."""
    with torch.inference_mode():
        inputs = tokenizer([query] * len(docs), docs, padding=True, return_tensors="pt")
        return torch.sigmoid(model(**inputs).logits[:, 0].float()).tolist()


def served_scores(client: httpx.Client, url: str, query: str, docs: list[str]) -> list[float]:
    response = client.post(f"{url}/v1/rerank", json={"query": query, "documents": docs, "return_documents": False})
    if response.status_code != 200:
        raise RuntimeError(f"{url}/v1/rerank: {response.status_code} {response.text}")
    by_index = {result["index"]: result["relevance_score"] for result in response.json()["results"]}
    return [by_index[index] for index in range(len(docs))]


def measure_family(family: str, folder: Path, docs: list[str], args, dtype: str) -> dict:
    """Start a server on the checkpoint, load it in-process too, then alternate the two paths."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    query = QUERY if family in ENCODERS else INSTRUCTED
    flags = ["--model-path", str(folder), "--dtype", dtype, "--request-timeout", "600"]
    flags += ["--num-threads", str(args.threads)] if args.threads else []
    with start_server("server", flags, env={"HF_HUB_OFFLINE": "1"}) as server, httpx.Client(timeout=600) as client:
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        server.wait_ready(1800)  # a decoder in bf16 on AMX compiles first (--compile auto)
        compiled = client.get(f"{server.url}/get_server_info").json()["compile"]
        served, plain = served_scores(client, server.url, query, docs), plain_scores(model, tokenizer, query, docs)
        elapsed = {"server": 0.0, "plain": 0.0}
        for _ in range(args.rounds):
            # NOTE: after a forward its process's OpenMP threads spin-wait a while; on a machine
            # with few cores they would take them from the other process's path timed next.
            time.sleep(args.pause_s)
            started = time.perf_counter()
            served_scores(client, server.url, query, docs)
            elapsed["server"] += time.perf_counter() - started
            time.sleep(args.pause_s)
            started = time.perf_counter()
            plain_scores(model, tokenizer, query, docs)
            elapsed["plain"] += time.perf_counter() - started
    per_s = {name: args.rounds * len(docs) / seconds for name, seconds in elapsed.items()}
    return {"family": family, "kind": "cross-encoder" if family in ENCODERS else "decoder seq-cls",
            "server_compile": compiled, "server_docs_per_s": per_s["server"], "plain_docs_per_s": per_s["plain"],
            "ratio": per_s["server"] / per_s["plain"],
            "max_score_difference": max(abs(a - b) for a, b in zip(served, plain))}


def report(result: dict) -> str:
    lines = [f"{result['documents']}-document rerank, {result['rounds']} rounds, {result['dtype']}, "
             f"torch threads {result['threads']}, load average {result['load_average_1m']:.2f}"]
    for row in result["rows"]:
        lines.append(f"  {row['kind']:<16} {row['family']:<8} server {row['server_docs_per_s']:8.1f} docs/s   "
                     f"plain batched forward {row['plain_docs_per_s']:8.1f} docs/s   "
                     f"{row['ratio']:.2f}x   scores differ by at most {row['max_score_difference']:.1e}   "
                     f"(server compiled: {row['server_compile']})")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cross_encoder", description=__doc__.split("\n")[0])
    parser.add_argument("--families", default="bert,qwen3", help="comma-separated (bench/classifier_models.py)")
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--doc-words", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                        help="both paths' dtype (auto: the server's choice for this CPU)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in-process and in the server")
    parser.add_argument("--pause-s", type=float, default=0.5,
                        help="idle seconds before each timed call (the other process's threads stop spinning)")
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny models (checks the bench, not speed)")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from server.model_loader import resolve_dtype

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = str(resolve_dtype(args.dtype, torch.device("cpu"))).removeprefix("torch.")
    docs = documents(args.documents, args.doc_words)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cross-encoder-") as root:
        for family in args.families.split(","):
            folder = build_classifier(Path(root) / family, family, small=not args.tiny,
                                      corpus=CORPUS + [" ".join(WORDS), QUERY, INSTRUCTED])
            rows.append(measure_family(family, folder, docs, args, dtype))
    result = {"documents": len(docs), "rounds": args.rounds, "dtype": dtype, "threads": torch.get_num_threads(),
              "load_average_1m": os.getloadavg()[0], "rows": rows}
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
