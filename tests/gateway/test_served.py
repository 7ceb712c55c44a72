"""gateway.served: a request's model, a worker's /v1/models, and the fleet a model resolves to,
as tables; and routing.with_adapter, the workers preferred for an adapter."""
import pytest

from gateway.routing import with_adapter
from gateway.served import Listing, Route, ServedNames, parse_listing, requested_model, resolve, unknown_model
from gateway.workers import Worker


def fleets(**names: tuple[str, ...]) -> list[tuple[str, ServedNames]]:
    return [(name, ServedNames(served)) for name, served in names.items()]


@pytest.mark.parametrize("headers, payload, model", [
    ({}, {"model": "m"}, "m"),
    ({"x-gateway-model-name": "h"}, {"model": "m"}, "h"),  # llm-d's header wins
    ({}, {"model": None}, None),
    ({}, {"model": ""}, None),
    ({}, {"model": 3}, None),  # not a name: the worker judges the type
    ({}, [1, 2], None),
    ({}, {}, None),
], ids=["body", "header-wins", "null", "empty", "not-a-string", "not-an-object", "absent"])
def test_requested_model_when(headers, payload, model):
    assert requested_model(headers, payload) == model


@pytest.mark.parametrize("model, route", [
    (None, Route("a", "scorer")),                  # none asked: the first fleet, its first name
    ("ranker", Route("b", "ranker")),
    ("ranker-alias", Route("b", "ranker-alias")),
    ("scorer:sql", Route("a", "scorer", "sql")),   # SGLang's base:adapter, by its base
    ("sql", Route("a", "sql", "sql")),             # an adapter's own name, learned from a worker
    ("gpt-4", None),
    ("gpt-4:sql", None),
    ("qwen3:8b", Route("c", "qwen3:8b")),          # a served name that holds ':'
    ("qwen3:8b:sql", Route("c", "qwen3:8b", "sql")),  # and its adapter: split at the last ':'
], ids=["absent", "served", "alias", "base-adapter", "adapter-name", "unknown", "unknown-base",
        "name-with-colon", "name-with-colon-adapter"])
def test_resolve_when(model, route):
    table = fleets(a=("scorer",), b=("ranker", "ranker-alias"), c=("qwen3:8b",))
    table[0][1].learn(Listing(("scorer", "sql"), frozenset({"sql"})))
    assert resolve(model, table) == route


def test_resolve_gives_a_name_two_fleets_claim_to_the_first():
    assert resolve("m", fleets(a=("m",), b=("m",))).fleet == "a"


def test_an_unknown_model_goes_to_a_fleet_that_knows_no_name_yet():
    # One fleet whose workers have not listed their models (and no --fleet-model): its workers
    # judge the model, as before the gateway knew models.
    assert resolve("anything", fleets(a=())) == Route("a", "")
    assert resolve("anything", fleets(a=("m",), b=())) == Route("b", "")


def test_served_names_keep_what_they_learned_in_order_once():
    names = ServedNames(("given",))
    names.learn(Listing(("w1", "given")))
    names.learn(Listing(("w2",)))
    assert names.names() == ("given", "w1", "w2") and "w1" in names and "other" not in names


def test_the_404_message_names_every_served_model_once():
    message = unknown_model("x", fleets(a=("m1", "m2"), b=("m2", "m3")))
    assert message == "model 'x' is not served here; served models: m1, m2, m3"


def test_parse_listing_marks_the_entries_with_a_parent_as_adapters():
    payload = {"object": "list", "data": [{"id": "base", "parent": None}, {"id": "sql", "parent": "base"},
                                          {"id": "base"}]}
    assert parse_listing(payload) == Listing(("base", "sql"), frozenset({"sql"}))


@pytest.mark.parametrize("payload", [None, {}, {"data": {}}, {"data": [{"name": "x"}]}, {"data": [3]}],
                         ids=["null", "no-data", "not-a-list", "no-id", "not-an-object"])
def test_parse_listing_refuses(payload):
    with pytest.raises(ValueError, match="not a /v1/models list"):
        parse_listing(payload)


def test_with_adapter_prefers_the_workers_that_list_it():
    pool = [Worker("http://w0", models=frozenset({"base"})), Worker("http://w1", models=frozenset({"base", "sql"})),
            Worker("http://w2")]  # w2: not asked yet
    assert [w.url for w in with_adapter(pool, "sql")] == ["http://w1"]
    assert with_adapter(pool, "other") == pool  # none lists it: any worker of the fleet
    assert with_adapter(pool, None) == pool
