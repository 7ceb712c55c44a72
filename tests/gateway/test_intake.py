"""gateway.intake and gateway.errors: the door's pure checks as tables, and the gateway's error
body (the server's shape, `param` naming the gateway)."""
import asyncio
import gzip
import json
import zlib

import pytest

from gateway.errors import Refusal, error_body, error_reply
from gateway.intake import (
    check_head,
    count_sequences,
    decode_body,
    is_authorized,
    parse_body,
    read_body,
    upstream_headers,
)

LIMIT = 1000


@pytest.mark.parametrize("headers, status", [
    ({}, None),
    ({"content-length": "1000"}, None),                      # at the limit: fine
    ({"content-length": "1001"}, 413),
    ({"content-length": "junk"}, None),                      # checked as the body streams in
    ({"content-encoding": "identity"}, None),
    ({"content-encoding": " GZip "}, None),                  # decoded at the door
    ({"content-encoding": "deflate"}, None),
    ({"content-encoding": "br"}, 415),
    ({"content-encoding": "zstd", "content-length": "5000"}, 415),  # encoding first
], ids=["none", "at-limit", "over-limit", "junk-length", "identity", "gzip", "deflate", "br",
        "zstd-and-big"])
def test_check_head(headers, status):
    if status is None:
        check_head(headers, LIMIT)
    else:
        with pytest.raises(Refusal) as refused:
            check_head(headers, LIMIT)
        assert refused.value.status == status


PLAIN = json.dumps({"query": [1], "items": [[2]], "label_token_ids": [3]}).encode()


@pytest.mark.parametrize("body, encoding, plain", [
    (PLAIN, "", PLAIN),
    (gzip.compress(PLAIN), "gzip", PLAIN),
    (gzip.compress(PLAIN), "x-gzip", PLAIN),
    (zlib.compress(PLAIN), "deflate", PLAIN),
    (gzip.compress(b"x" * LIMIT), "gzip", b"x" * LIMIT),          # decoded to the limit: fine
], ids=["identity", "gzip", "x-gzip", "deflate", "at-limit"])
def test_decode_body(body, encoding, plain):
    assert decode_body(body, encoding, LIMIT) == plain


@pytest.mark.parametrize("body, encoding, status, says", [
    (b"this is not gzip", "gzip", 400, "not valid gzip"),
    (gzip.compress(PLAIN)[:-6], "gzip", 400, "truncated"),
    (gzip.compress(PLAIN) + b"junk", "gzip", 400, "trailing data"),
    (gzip.compress(PLAIN), "deflate", 400, "not valid deflate"),
    (gzip.compress(b"\0" * (100 * LIMIT)), "gzip", 413, "decoded request body exceeds"),
], ids=["junk", "truncated", "trailing", "gzip-sent-as-deflate", "bomb"])
def test_decode_body_refuses(body, encoding, status, says):
    with pytest.raises(Refusal) as refused:
        decode_body(body, encoding, LIMIT)
    assert refused.value.status == status and says in refused.value.message


@pytest.mark.parametrize("body, says", [
    (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    (b"{not json", "malformed JSON"),
    (b"", "malformed JSON"),
    (b"\xff\xfe\x00junk", "malformed JSON"),
], ids=["50000-deep", "not-json", "empty", "not-utf8"])
def test_parse_body_refuses_what_is_not_json_with_400(body, says):
    with pytest.raises(Refusal) as refused:
        parse_body(body)
    assert refused.value.status == 400 and says in refused.value.message


@pytest.mark.parametrize("payload, count", [
    ({"items": [[1], [2], [3]]}, 3),
    ({"items": []}, 1),
    ({"items": "one"}, 1),
    ([1, 2], 1),
    ({}, 1),
    ({"query": "q", "documents": ["a", {"text": "b"}]}, 2),
    ({"query": "q", "documents": "a"}, 1),
    ({"query": "q", "texts": ["a", "b", "c"]}, 3),
    ({"text_1": "q", "text_2": ["a", "b"]}, 2),
    ({"queries": ["q", "r"], "documents": ["a", "b"]}, 2),
    ({"input": ["a", "b", "c", "d"]}, 4),
    ({"input": "a"}, 1),
], ids=["three", "none", "string", "not-an-object", "no-items", "rerank-documents", "rerank-string",
        "tei-texts", "vllm-text-2", "vllm-documents", "classify-list", "classify-one"])
def test_count_sequences(payload, count):
    assert count_sequences(payload) == count


class Chunks:
    """The body as it streams in: readany() as aiohttp's StreamReader has it (b"" at the end)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def readany(self) -> bytes:
        if self.chunks and isinstance(self.chunks[0], BaseException):
            raise self.chunks.pop(0)
        return self.chunks.pop(0) if self.chunks else b""


def test_read_body_stops_at_the_limit():
    async def read(*chunks):
        return await read_body(Chunks(*chunks), LIMIT)
    assert asyncio.run(read(b"x" * 600, b"y" * 400)) == b"x" * 600 + b"y" * 400
    with pytest.raises(Refusal) as refused:
        asyncio.run(read(b"x" * 600, b"y" * 401))
    assert refused.value.status == 413 and "1000 bytes" in refused.value.message


def test_a_client_that_hangs_up_mid_body_is_a_499_not_a_gateway_fault():
    with pytest.raises(Refusal) as refused:  # aiohttp's StreamReader raises this on a lost peer
        asyncio.run(read_body(Chunks(b"x" * 10, ConnectionResetError("Connection lost")), LIMIT))
    assert refused.value.status == 499 and "closed the connection" in refused.value.message


@pytest.mark.parametrize("header, key, ok", [
    (None, None, True),
    (None, "k", False),
    ("Bearer k", "k", True),
    ("bearer  k ", "k", True),
    ("Bearer nope", "k", False),
    ("Basic k", "k", False),
], ids=["no-key", "missing", "right", "case-and-spaces", "wrong", "other-scheme"])
def test_is_authorized(header, key, ok):
    headers = {} if header is None else {"authorization": header}
    assert is_authorized(headers, key) is ok


def test_upstream_headers_carry_the_gateways_key_else_the_clients():
    client = {"content-type": "application/json", "authorization": "Bearer client",
              "cookie": "x", "content-length": "12"}
    assert upstream_headers(client, "gw") == {"content-type": "application/json",
                                              "authorization": "Bearer gw"}
    assert upstream_headers(client, None)["authorization"] == "Bearer client"
    assert "authorization" not in upstream_headers({"content-type": "application/json"}, None)


@pytest.mark.parametrize("status, error_type", [
    (400, "BadRequestError"), (401, "AuthenticationError"), (404, "NotFoundError"),
    (413, "BadRequestError"), (415, "BadRequestError"), (502, "BadGatewayError"),
    (503, "ServiceUnavailableError"), (504, "TimeoutError"), (500, "InternalServerError"),
])
def test_the_error_body_is_the_servers_shape_naming_the_gateway(status, error_type):
    body = json.loads(error_body(status, "why"))
    assert body == {"object": "error", "message": "why", "type": error_type, "param": "gateway",
                    "code": status}
    reply = error_reply(status, "why", retry_after_s=1)
    assert reply.headers == {"content-type": "application/json", "retry-after": "1"}
