"""`python -m bench.score_load`: open-loop Poisson load on /v1/score, in the style of SGLang's
bench_score, and one summary (text, or JSON with --json). Stops by itself after --duration plus
the last request's answer (each request times out after --timeout).

  python -m bench.score_load --url http://127.0.0.1:30000 --rate 2 --duration 60 --num-items 10 \
      --query-tokens 120 --item-tokens 180 --label-ids 9230,2838 --seed 1
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys

import aiohttp

from bench.client import check_loopback, fetch_vocab_size, run_open_loop
from bench.summary import Summary, format_summary, summarize
from bench.workload import Workload, make_bodies, poisson_send_times


def parse_label_ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"label ids must be comma-separated integers: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.score_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--url", default="http://127.0.0.1:30000", help="server base URL (loopback only)")
    add("--rate", type=float, default=2.0, help="target requests/s (Poisson arrivals)")
    add("--duration", type=float, default=60.0, help="seconds of sending")
    add("--num-items", type=int, default=10, help="items per request")
    add("--query-tokens", type=int, default=120)
    add("--item-tokens", type=int, default=180)
    add("--label-ids", type=parse_label_ids, default=(9230, 2838))
    add("--vocab-size", type=int, default=None,
        help="token ids are drawn below this (default: the server's, from /get_server_info)")
    add("--seed", type=int, default=0)
    add("--timeout", type=float, default=120.0, help="seconds per request; then it counts as failed")
    add("--json", action="store_true", help="print the summary as one JSON object")
    return parser


async def run(args: argparse.Namespace) -> Summary:
    url = check_loopback(args.url)
    vocab_size = args.vocab_size or await fetch_vocab_size(url)
    workload = Workload(args.num_items, args.query_tokens, args.item_tokens, args.label_ids,
                        vocab_size)
    send_times = poisson_send_times(args.rate, args.duration, args.seed)
    bodies = make_bodies(workload, len(send_times), args.seed)
    result = await run_open_loop(url, bodies, send_times, args.timeout)
    return summarize(result.outcomes, result.peaks, duration_s=args.duration,
                     target_rate_per_s=args.rate, item_count=args.num_items,
                     distribution="POISSON")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        summary = asyncio.run(run(args))
    except ValueError as error:  # bad workload, non-loopback URL
        parser.error(str(error))
    except (OSError, aiohttp.ClientError) as error:
        print(f"cannot reach {args.url}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(summary.to_dict()) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
