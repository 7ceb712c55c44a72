"""peering.py: kopf's peering rule as we read it (judge), the priority, the config from `kopf run`'s
options, the Gate and the gated ApiClient; peering_watch.register's start and stop. The two-process
behaviour is in tests/reliability/test_operator_ha.py."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import kopf
import kubernetes.client
import pytest

from fleet_operator import peering_watch
from fleet_operator.__main__ import kopf_run_params
from fleet_operator.clock import format_time
from fleet_operator.context import OperatorContext
from fleet_operator.peering import (
    DEFAULT_LIFETIME_S,
    Gate,
    GatedApiClient,
    NotLeading,
    PeeringConfig,
    derived_priority,
    judge,
    leading_only,
)

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=timezone.utc)
MARGIN_S = 2.0


def entry(priority: int, seen_s_ago: float, lifetime: int = 15) -> dict:
    return {"priority": priority, "lifetime": lifetime, "lastseen": format_time(NOW - timedelta(seconds=seen_s_ago))}


@pytest.mark.parametrize("status, leading, leader", [
    ({"me": entry(10, 1)}, True, "me"),
    ({"me": entry(10, 1), "old": entry(5, 1)}, True, "me"),
    ({"me": entry(10, 1), "top": entry(20, 1)}, False, "top"),
    # kopf pauses both of two equal peers
    ({"me": entry(10, 1), "twin": entry(10, 1)}, False, "me"),
    # a higher peer whose lifetime has passed is dead: we lead
    ({"me": entry(10, 1), "dead": entry(20, 16)}, True, "me"),
    # our own keep-alive not there yet (just started) / ending within the margin (not landing)
    ({"top": entry(5, 1)}, False, "top"),
    ({"me": entry(10, 14)}, False, "me"),
    ({}, False, None),
    # a hand-edited entry is skipped, as kopf would fail to read it
    ({"me": entry(10, 1), "junk": "x"}, True, "me"),
], ids=["alone", "above-a-lower-peer", "below-a-higher-peer", "equal-priorities", "higher-peer-dead",
        "own-entry-missing", "own-entry-stale", "empty", "junk-entry"])
def test_judge_follows_kopfs_rule(status, leading, leader):
    verdict = judge([status], "me", 10, NOW, MARGIN_S)
    assert (verdict.leading, verdict.leader) == (leading, leader)


def test_the_lease_ends_a_margin_before_the_others_count_us_dead():
    verdict = judge([{"me": entry(10, 4)}], "me", 10, NOW, MARGIN_S)
    assert verdict.until == NOW + timedelta(seconds=15 - 4 - MARGIN_S)
    stale = judge([{"me": entry(10, 14)}], "me", 10, NOW, MARGIN_S)
    assert stale.own_entry_stale and not stale.own_entry_live
    gone = judge([{"other": entry(5, 1)}], "me", 10, NOW, MARGIN_S)
    assert not gone.own_entry_stale  # written out (an exit), not failing keep-alives


def test_a_rival_lease_is_reported_for_the_handover():
    verdict = judge([{"me": entry(10, 1), "old": entry(5, 3)}], "me", 10, NOW, MARGIN_S)
    assert verdict.rivals_until == NOW + timedelta(seconds=15 - 3 - MARGIN_S)


def test_namespaced_peering_leads_only_where_every_namespace_says_so():
    lead, lose = {"me": entry(10, 1)}, {"me": entry(10, 1), "top": entry(20, 1)}
    assert judge([lead, lead], "me", 10, NOW, MARGIN_S).leading
    assert not judge([lead, lose], "me", 10, NOW, MARGIN_S).leading


def test_derived_priorities_rank_older_replicas_higher_and_differ():
    assert derived_priority(1000.0) > derived_priority(1000.002)
    assert len({derived_priority(1000.0) for _ in range(50)}) > 40  # the random draw splits ties


def run_params(*args: str) -> dict:
    return kopf_run_params(list(args))


@pytest.mark.parametrize("args, enabled, namespaces", [
    (["--peering=sf", "-A"], True, ()),
    (["--peering=sf", "-n", "a", "-n", "b"], True, ("a", "b")),
    (["--standalone", "-A"], False, ()),
    (["-A"], False, ()),  # kopf's auto-detection: our gate stays open, as kopf runs unpaused
])
def test_config_from_kopf_run_options(args, enabled, namespaces):
    config = PeeringConfig.from_run_args(run_params(*args), {"POD_ID": "pod-1"})
    assert (config.enabled, config.namespaces, config.identity) == (enabled, namespaces, "pod-1")
    assert config.lifetime_s == DEFAULT_LIFETIME_S


@pytest.mark.parametrize("env, args, enabled, priority", [
    ({"KOPF_RUN_STANDALONE": "1"}, ["--peering=sf"], False, None),
    ({"KOPF_RUN_PEERING": "sf", "KOPF_RUN_PRIORITY": "5"}, [], True, 5),
    ({}, ["--peering=sf", "--dev"], True, 666),
], ids=["standalone-from-env", "peering-and-priority-from-env", "dev"])
def test_config_reads_kopf_run_options_as_kopf_does(monkeypatch, env, args, enabled, priority):
    # kopf gives `run` the KOPF_RUN_ prefix: read otherwise, our gate would judge a peering kopf
    # does not run (or miss one it does) and a priority kopf does not write.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = PeeringConfig.from_run_args(run_params(*args), {"KOPF_RUN_NAMESPACE": "legacy"})
    assert config.enabled is enabled and config.namespaces == ("legacy",)
    assert priority is None or config.priority == priority


def test_config_takes_an_explicit_priority_and_the_lifetime_from_the_environment():
    config = PeeringConfig.from_run_args(run_params("--peering=sf", "-A", "--priority=7"),
                                         {"SCORINGFLEET_PEERING_LIFETIME_S": "4"})
    assert (config.priority, config.lifetime_s) == (7, 4)
    assert config.poll_s == 0.5 and config.margin_s == 1.0
    with pytest.raises(ValueError, match="at least 2"):
        PeeringConfig(lifetime_s=1)


def test_gate_is_open_only_within_its_window():
    now = [NOW]
    gate = Gate(True, lambda: now[0])
    assert not gate.may_write()
    gate.set((NOW + timedelta(seconds=1), NOW + timedelta(seconds=5)))
    assert not gate.may_write()  # settling
    now[0] = NOW + timedelta(seconds=2)
    assert gate.may_write()
    now[0] = NOW + timedelta(seconds=5)
    assert not gate.may_write()  # the lease as last proved has ended
    assert Gate(False, lambda: NOW).may_write()  # peering off


def test_gated_client_refuses_writes_and_names_the_replica():
    gate = Gate(True, lambda: NOW)
    client = GatedApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:9"), gate, "pod-1")
    assert client.user_agent == "scoring-fleet-operator/pod-1"
    for method in ("POST", "PATCH", "PUT", "DELETE"):
        with pytest.raises(NotLeading, match=method):
            client.call_api(method, "http://127.0.0.1:9/api/v1/namespaces/x/events")
    client.close()


def test_leading_only_skips_while_shut_and_ends_quietly_when_shut_midway():
    calls = []

    def handler(memo, **_):
        calls.append(memo)
        raise NotLeading("shut mid-way")

    shut = Gate(True, lambda: NOW)
    assert leading_only(handler)(memo=SimpleNamespace(peering_gate=shut)) is None
    assert calls == []
    open_ = Gate(False, lambda: NOW)
    assert leading_only(handler)(memo=SimpleNamespace(peering_gate=open_)) is None
    assert len(calls) == 1


class ClosingClient(kubernetes.client.ApiClient):
    """An ApiClient that records, as it is closed, whether the peering watcher still ran."""

    def __init__(self, memo: kopf.Memo) -> None:
        super().__init__(kubernetes.client.Configuration(host="http://127.0.0.1:9"))  # refused
        self.memo, self.closed_while_watching = memo, None

    def close(self) -> None:
        watcher = self.memo.get("peering_watcher")
        self.closed_while_watching = watcher is not None and watcher.thread.is_alive()
        super().close()


@pytest.mark.parametrize("enabled", [True, False], ids=["peering", "standalone"])
def test_stop_closes_the_ungated_client_once_the_watcher_has_stopped(enabled):
    registry = kopf.OperatorRegistry()
    peering_watch.register(registry, PeeringConfig(enabled=enabled, identity="me", lifetime_s=2))
    memo = kopf.Memo()
    memo.context = OperatorContext(api=ClosingClient(memo))
    plain = memo.context.api

    def run(activity: str) -> None:
        for handler in registry._activities.get_all_handlers():
            if handler.activity.value == activity:
                handler.fn(memo=memo, settings=kopf.OperatorSettings())

    run("startup")
    assert isinstance(memo.context.api, GatedApiClient)  # handlers.stop closes that one
    run("cleanup")
    assert plain.closed_while_watching is False  # closed, after the watcher's thread was joined
    memo.context.api.close()
