from tests.kube_emulator.fixtures import *  # noqa
