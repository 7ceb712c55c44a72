import kubernetes
import pytest

from kube_emulator.fixtures import *  # noqa


@pytest.fixture()
def core(kube_api):
    return kubernetes.client.CoreV1Api(kube_api.client())


@pytest.fixture()
def apps(kube_api):
    return kubernetes.client.AppsV1Api(kube_api.client())
