"""tests/tiers.py: which tests are `system` tests (a process or the emulator), read from the code."""
from __future__ import annotations

from tests.tiers import names_in, starting_names


def test_the_helpers_that_start_a_process_or_the_emulator_are_found():
    starters = starting_names()
    assert {"gateway_process", "start_worker", "running_operator", "run_kube_api", "ServerProcess",
            "stop", "helm_env.find_python"} <= starters
    # in-process servers (a thread) and pure helpers are not
    assert not {"serving", "live_server", "FakeRunner", "wait_for", "score_body"} & starters


def test_names_in_sees_names_imports_and_starters_reached_as_attributes():
    import ast
    code = ast.parse("import os.path as p\nfrom x import y\nasyncio.create_subprocess_exec(z.other)")
    assert names_in(code) == {"p", "y", "asyncio", "z", "create_subprocess_exec",
                              "asyncio.create_subprocess_exec", "z.other"}


def test_this_test_is_a_unit_test(request):
    assert request.node.get_closest_marker("system") is None
