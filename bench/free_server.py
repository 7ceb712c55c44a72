"""A scoring server whose model costs nothing: the real app, engine and scheduler over a FreeRunner,
so requests/s through it is the overhead of HTTP + validation + scheduling alone.

  python -m bench.free_server --port 30100   (accepts the server's flags; --model-path is ignored)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import uvicorn

from server.app import create_app
from server.config import ServerConfig, parse_args
from server.engine import Engine
from server.sequence import RunResult
from server.special_tokens import NO_SPECIAL_TOKENS, SpecialTokens


@dataclass(frozen=True)
class FreeRunner:
    """Satisfies server.interfaces.Runner; run() returns constant scores without any arithmetic.
    vocab_size is SmolLM2's so that the same token-id workload is valid against both servers."""

    vocab_size: int = 49152
    max_context_tokens: int = 8192
    shares_query_in_forward: bool = False  # each row holds its query (the scheduler counts it per row)
    special_tokens: SpecialTokens = NO_SPECIAL_TOKENS  # adds nothing around a text

    def tokenize(self, text: str) -> list[int]:
        return [ord(ch) % self.vocab_size for ch in text]

    def run(self, sequences) -> RunResult:
        return RunResult([[0.5] * len(seq.request.options.label_token_ids) for seq in sequences], 0)

    def keep_only(self, live_request_ids) -> None:
        pass


def build_app(config: ServerConfig):
    config = config.resolve("cpu", "float32")  # FreeRunner computes nothing: CPU defaults
    return create_app(config, Engine(config, FreeRunner()))


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    uvicorn.run(build_app(config), host=config.host, port=config.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
