"""handlers/reconcile/kube seams that need no cluster: registration, retry vocabulary, paths."""
from __future__ import annotations

import kopf
import pytest

from fleet_operator import kube
from fleet_operator.__main__ import make_registry, make_settings
from fleet_operator.context import OperatorConfig, OperatorContext
from fleet_operator.handlers import _api_errors, backoff_s
from fleet_operator.reconcile import owner_fleet
from fleet_operator.tick import TICK_S


def test_each_registry_is_fresh_and_independent():
    first, second = make_registry(OperatorConfig()), make_registry(OperatorConfig())
    assert first is not second
    # NOTE: kopf has no public listing of a registry's handlers; these sub-registries are kopf
    # 1.4x's (pinned through the lock of the test environment).
    for registry in (first, second):
        ids = {h.id for h in registry._changing.get_all_handlers()}
        assert ids == {"reconcile"}
        assert {h.id for h in registry._spawning.get_all_handlers()} == {"resync", "autoscale"}
        assert {h.id for h in registry._watching.get_all_handlers()} == {"child_changed", "gateway_changed"}
        # login, startup and cleanup; the peering watcher's startup, cleanup and `leading` probe
        assert len(registry._activities.get_all_handlers()) == 6
    assert kopf.get_default_registry() not in (first, second)


def test_settings_keep_kopf_state_in_our_annotations_and_finalizer():
    settings = make_settings()
    assert settings.persistence.finalizer == "scoring.fleet.dev/finalizer"


@pytest.mark.parametrize("status,error", [
    (409, kopf.TemporaryError),
    (429, kopf.TemporaryError),
    (500, kopf.TemporaryError),
    (503, kopf.TemporaryError),
    (0, kopf.TemporaryError),
    (403, kopf.PermanentError),
    (422, kopf.PermanentError),
], ids=["conflict", "throttled", "server-error", "unavailable", "unreachable", "forbidden",
        "invalid"])
def test_api_errors_become_kopf_retry_decisions(status, error):
    with pytest.raises(error):
        with _api_errors(retry=3):
            raise kube.ApiError(status, "Reason", "message")


def test_temporary_error_backs_off_with_the_retry_count():
    with pytest.raises(kopf.TemporaryError) as raised:
        with _api_errors(retry=3):
            raise kube.ApiError(409, "Conflict", "stale")
    assert raised.value.delay == 8.0


@pytest.mark.parametrize("retry,delay", [(0, 1.0), (1, 2.0), (5, 32.0), (6, 60.0), (40, 60.0)],
                         ids=["first", "second", "sixth", "capped", "far"])
def test_backoff_s(retry, delay):
    assert backoff_s(retry) == delay


@pytest.mark.parametrize("refs,owner", [
    ([], None),
    ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "1"}], None),
    ([{"apiVersion": "scoring.fleet.dev/v1alpha1", "kind": "ScoringFleet", "name": "q", "uid": "u"}],
     ("q", "u")),
    ([{"apiVersion": "other.dev/v1", "kind": "ScoringFleet", "name": "q", "uid": "u"}], None),
], ids=["no-owner", "other-kind", "fleet", "other-group"])
def test_owner_fleet(refs, owner):
    assert owner_fleet({"metadata": {"ownerReferences": refs}}) == owner


@pytest.mark.parametrize("environ,image", [({}, None), ({"SCORINGFLEET_DEFAULT_IMAGE": ""}, None),
                                           ({"SCORINGFLEET_DEFAULT_IMAGE": "op:1"}, "op:1")],
                         ids=["unset", "empty", "set"])
def test_operator_config_from_env(environ, image):
    assert OperatorConfig.from_env(environ).default_image == image


@pytest.mark.parametrize("environ,image", [({}, None), ({"SCORINGFLEET_GATEWAY_IMAGE": ""}, None),
                                           ({"SCORINGFLEET_GATEWAY_IMAGE": "control:1"}, "control:1")],
                         ids=["unset", "empty", "set"])
def test_gateway_image_from_env(environ, image):
    assert OperatorConfig.from_env(environ).gateway_image == image


@pytest.mark.parametrize("environ,interval", [
    ({}, 30.0), ({"SCORINGFLEET_RESYNC_INTERVAL_S": "0.5"}, 0.5)], ids=["default", "set"])
def test_resync_interval_from_env(environ, interval):
    assert OperatorConfig.from_env(environ).resync_interval_s == interval


def test_resync_interval_must_be_positive():
    with pytest.raises(ValueError):
        OperatorConfig(resync_interval_s=0)


@pytest.mark.parametrize("environ,address", [
    ({}, None), ({"SCORINGFLEET_PROMETHEUS_ADDRESS": ""}, None),
    ({"SCORINGFLEET_PROMETHEUS_ADDRESS": "http://prometheus.monitoring:9090"}, "http://prometheus.monitoring:9090"),
], ids=["unset", "empty", "set"])
def test_prometheus_address_from_env(environ, address):
    assert OperatorConfig.from_env(environ).prometheus_address == address


@pytest.mark.parametrize("environ,namespace", [
    ({}, None), ({"POD_NAMESPACE": ""}, None), ({"POD_NAMESPACE": "scoring-system"}, "scoring-system"),
], ids=["unset", "empty", "set"])
def test_operator_namespace_from_the_downward_api_env(environ, namespace):
    assert OperatorConfig.from_env(environ).namespace == namespace


def test_prometheus_address_must_be_an_http_url():
    with pytest.raises(ValueError, match="SCORINGFLEET_PROMETHEUS_ADDRESS must be an http"):
        OperatorConfig.from_env({"SCORINGFLEET_PROMETHEUS_ADDRESS": "prometheus:9090"})


@pytest.mark.parametrize("args,path", [
    (("v1", "Service", "ns", "x"), "/api/v1/namespaces/ns/services/x"),
    (("apps/v1", "Deployment", "ns"), "/apis/apps/v1/namespaces/ns/deployments"),
    (("scoring.fleet.dev/v1alpha1", "ScoringFleet", "ns", "q", "scale"),
     "/apis/scoring.fleet.dev/v1alpha1/namespaces/ns/scoringfleets/q/scale"),
], ids=["core", "group-collection", "subresource"])
def test_object_path(args, path):
    assert kube.object_path(*args) == path


@pytest.mark.parametrize("autoscaling,active", [
    ({"enabled": True, "mode": "native"}, True),
    ({"enabled": True, "mode": "hpa"}, False),
    ({"enabled": False}, False),
], ids=["native", "hpa", "off"])
def test_the_autoscale_timer_runs_only_for_native_fleets(autoscaling, active):
    [timer] = [h for h in make_registry(OperatorConfig())._spawning.get_all_handlers()
               if h.id == "autoscale"]
    assert timer.interval == TICK_S
    # kopf's copy goes through the one parse, with the operator's config from the memo
    memo = kopf.Memo(context=OperatorContext(api=None, config=OperatorConfig()))
    spec = {"model": {"source": "m"}, "image": "i", "autoscaling": autoscaling}
    assert timer.when(name="q", namespace="ns", spec=spec, memo=memo) is active
