"""What a /v1/score request must be before a worker sees it: pure checks of its head and body,
each failure a Refusal with the status the server would give (or the one it cannot give).

- a body over the workers' limit: 413, from Content-Length before reading, else as it streams in;
  a client that hangs up before its body is complete: 499 (counted; nobody reads it);
- gzip or deflate: decoded here and passed on plain (the server decodes nothing: it answers 415),
  the decoded size held to the same limit (413: a compressed bomb stops expanding at the limit);
  a stream that does not decode is 400; any other Content-Encoding is 415;
- not JSON, or JSON nested deeper than the parser's recursion limit: 400.
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Mapping

from aiohttp import StreamReader

from gateway.errors import CLIENT_CLOSED, Refusal
from gateway.key_check import key_header
from scoringfleet_contract.facts import body_too_large, is_authorized as header_is_authorized

# Headers that travel upstream; everything else is hop-by-hop or the gateway's own business.
UPSTREAM_HEADERS = ("content-type", "accept")
# Content-Encodings decoded at the door -> zlib's wbits (gzip's header; deflate is zlib-wrapped).
DECODED = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def content_encoding(headers: Mapping[str, str]) -> str:
    """The body's encoding, lower case; "" for none (identity)."""
    encoding = headers.get("content-encoding", "").strip().lower()
    return "" if encoding == "identity" else encoding


def check_head(headers: Mapping[str, str], max_bytes: int) -> None:
    """Refuse what the head alone shows: an encoding not decoded here (415), a declared size over
    max_bytes (413). A missing or malformed Content-Length is checked as the body streams in."""
    encoding = content_encoding(headers)
    if encoding and encoding not in DECODED:
        raise Refusal(415, f"Content-Encoding {encoding!r} is not accepted: send the JSON body "
                           "uncompressed, or gzip or deflate")
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise Refusal(413, body_too_large(max_bytes))


async def read_body(content: StreamReader, max_bytes: int) -> bytes:
    """The whole body from `content` (its readany() gives b"" at the end), refused (413) as soon
    as more than max_bytes have arrived; 499 when the client hangs up before its end (aiohttp
    then raises ConnectionResetError: the client's doing, not a gateway fault)."""
    body = bytearray()
    try:
        while chunk := await content.readany():
            body += chunk
            if len(body) > max_bytes:
                raise Refusal(413, body_too_large(max_bytes))
    except ConnectionResetError:
        raise Refusal(CLIENT_CLOSED, "the client closed the connection before its body was "
                                     "complete") from None
    return bytes(body)


def decode_body(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """The body as the worker must get it: unchanged without an encoding, else decoded (gzip,
    deflate); 413 as soon as the decoded bytes pass max_bytes, 400 when it does not decode."""
    if not encoding:
        return body
    decoder = zlib.decompressobj(DECODED[encoding])
    try:
        plain = decoder.decompress(body, max_bytes + 1)  # bounded: a bomb stops at the limit
    except zlib.error as error:
        raise Refusal(400, f"bad compression: the body is not valid {encoding} ({error})") from None
    if len(plain) > max_bytes:
        raise Refusal(413, f"decoded {body_too_large(max_bytes)}")
    if not decoder.eof or decoder.unused_data:
        raise Refusal(400, f"bad compression: the {encoding} stream is truncated or has trailing "
                           "data")
    return plain


def parse_body(body: bytes):
    """The body's JSON value; Refusal 400 when it is not JSON or nests too deep to parse."""
    try:
        return json.loads(body)
    except RecursionError:
        raise Refusal(400, "malformed JSON: nested too deeply") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Refusal(400, f"malformed JSON: {error}") from None


# Where a body's sequences are, by route: /v1/score, Cohere and vLLM's queries/documents, TEI, vLLM's
# text_1/text_2 (N:N: as many as text_2), /classify.
SEQUENCE_KEYS = ("items", "documents", "texts", "text_2", "input")


def count_sequences(payload) -> int:
    """Items in a score request, documents in a rerank (Cohere's documents, TEI's texts, vLLM's
    text_2), texts to classify (input): one sequence each; 1 when the body is not what we expect
    (the worker will answer 400 and we only need a weight)."""
    if not isinstance(payload, dict):
        return 1
    for key in SEQUENCE_KEYS:
        if isinstance(payload.get(key), list):
            return max(len(payload[key]), 1)
    return 1


def is_authorized(headers: Mapping[str, str], api_key: str | None) -> bool:
    """True without a key; else 'Authorization: Bearer <key>' (compared in constant time)."""
    return header_is_authorized(headers.get("authorization", ""), api_key)


def upstream_headers(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """The headers sent to a worker: content type and accept, and the gateway's own key when it
    has one (else the client's Authorization, unchanged, for servers that check it themselves)."""
    sent = {name: headers[name] for name in UPSTREAM_HEADERS if name in headers}
    if api_key is not None:
        sent.update(key_header(api_key))
    elif "authorization" in headers:
        sent["authorization"] = headers["authorization"]
    return sent
