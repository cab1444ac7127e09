"""Checks of docker-compose.yml and the lakehouse image, as plain functions returning problems.

* :func:`schema_errors`: the file against a JSON Schema of the part of the Compose
  specification it uses (unknown keys of a service are errors, so a typo fails);
* :func:`semantic_errors`: what a schema cannot say (dependencies exist, named volumes are
  declared, every service that runs until stopped has a healthcheck, every ``${VAR}`` is
  documented in .env.example, no literal secret, every port published on the host's loopback
  only);
* :func:`profile_errors`: agreement with the ``cluster`` configuration profile (every host and
  port it names is a compose service listening there, the warehouse bucket is created, the
  credentials reach the services that need them, the state folder is a volume);
* :func:`image_errors`: docker/Dockerfile builds what the profile expects.

Each returns a list of messages; an empty list means the check passed. tests/unit/test_compose.py
runs them on the real files and on broken copies.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
MAKEFILE = REPO_ROOT / "Makefile"

# What .env would hold: the required variables, with values no check mistakes for real ones.
SAMPLE_ENV = {"AWS_ACCESS_KEY_ID": "sample-access-key", "AWS_SECRET_ACCESS_KEY": "sample-secret-key",
              "LAKEHOUSE_THRIFT_PASSWORD": "sample-thrift-password"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|PRIVATE_KEY", re.IGNORECASE)
S3_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
REST_CATALOG_IMAGE = "apache/iceberg-rest-fixture"
LAKEHOUSE_DOCKERFILE = "docker/Dockerfile"
# Ports of `lakehouse cluster ...` commands when no --port is given.
LAKEHOUSE_DEFAULT_PORTS = {("cluster", "master"): 7077, ("cluster", "thrift-server"): 10000}
NEVER_STOPS = ("always", "unless-stopped")


# --- loading and interpolation -----------------------------------------------------------------

def load(path: Path = COMPOSE_FILE) -> dict:
    """The compose file as data; YAML anchors and merge keys resolved, variables not."""
    return yaml.safe_load(path.read_text())


def unshared(compose: dict) -> dict:
    """A copy with no shared parts (anchors share objects; a mutation must touch one service)."""
    return json.loads(json.dumps(compose))


class InterpolationError(ValueError):
    pass


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)
_MALFORMED = re.compile(r"(?<!\$)(?:\$\$)*\$\{(?![A-Za-z_][A-Za-z0-9_]*(?::?[-?+][^}]*)?\})")


def _interpolate_text(text: str, env: Mapping[str, str]) -> str:
    def substitute(match: re.Match) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["plain"]
        op, arg, value = match["op"] or "", match["arg"] or "", env.get(name)
        missing = not value if op.startswith(":") else value is None
        if op.endswith("-"):
            return arg if missing else value
        if op.endswith("?"):
            if missing:
                raise InterpolationError(f"{name}: {arg or 'required'}")
            return value
        if op.endswith("+"):
            return "" if missing else arg
        return value or ""

    return _VARIABLE.sub(substitute, text)


def interpolate(node, env: Mapping[str, str]):
    """Compose-style ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$`` substitution."""
    if isinstance(node, str):
        return _interpolate_text(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    return node


def _strings(node) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)


def references(node) -> list[tuple[str, str]]:
    """Every ``(variable, operator)`` that interpolation would read ('' for a plain ``$VAR``)."""
    found = []
    for text in _strings(node):
        for match in _VARIABLE.finditer(text):
            if not match["escaped"]:
                found.append((match["braced"] or match["plain"], match["op"] or ""))
    return found


def referenced_names(value) -> set[str]:
    return {name for name, _ in references(value)} if isinstance(value, str) else set()


# --- .env.example ----------------------------------------------------------------------------

def read_env_example(text: str) -> dict[str, tuple[str, bool]]:
    """``NAME -> (value, commented)`` of every ``NAME=value`` line, commented out (optional) or not."""
    entries: dict[str, tuple[str, bool]] = {}
    for line in text.splitlines():
        stripped = line.strip()
        commented = stripped.startswith("#")
        match = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(.*)", stripped.lstrip("#").strip())
        if match and (match[1] not in entries or not commented):
            entries[match[1]] = (match[2].strip(), commented)
    return entries


# --- reading services ----------------------------------------------------------------------------

def services(compose: dict) -> dict[str, dict]:
    return compose.get("services") or {}


def environment(service: dict) -> dict[str, str | None]:
    """The environment of a service; ``None`` for a name passed through from the user's."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = [item.split("=", 1) for item in env]
        return {pair[0]: (pair[1] if len(pair) > 1 else None) for pair in pairs}
    return {key: (None if value is None else str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in env.items()}


def command(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def option(cmd: list[str], name: str) -> str | None:
    for index, part in enumerate(cmd):
        if part == name and index + 1 < len(cmd):
            return cmd[index + 1]
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    return None


def depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def has_healthcheck(service: dict) -> bool:
    check = service.get("healthcheck")
    if not check or check.get("disable"):
        return False
    test = check.get("test")
    return bool(test) and test != ["NONE"] and test != "NONE"


def on_demand(service: dict) -> bool:
    """Started only when asked for (``docker compose run``), not by ``up``."""
    return bool(service.get("profiles"))


def one_shots(compose: dict) -> set[str]:
    """Services that others wait for to finish: they run once and exit."""
    return {name for service in services(compose).values()
            for name, condition in depends_on(service).items() if condition == "service_completed_successfully"}


def long_running(compose: dict) -> list[str]:
    shots = one_shots(compose)
    return [name for name, service in services(compose).items() if name not in shots and not on_demand(service)]


def is_named_volume(source: str) -> bool:
    return bool(source) and not source.startswith((".", "/", "~", "$"))


def volume_mounts(service: dict) -> list[tuple[str, str]]:
    """``(source, target)`` of the short-syntax volumes of a service."""
    mounts = []
    for spec in service.get("volumes") or []:
        if isinstance(spec, str) and ":" in spec:
            source, target = spec.split(":")[:2]
            mounts.append((source, target))
    return mounts


def named_volume_at(service: dict, path: str) -> str | None:
    """The named volume holding ``path`` in this service, if one does."""
    best = None
    for source, target in volume_mounts(service):
        if is_named_volume(source) and (path == target or path.startswith(target.rstrip("/") + "/")):
            if best is None or len(target) > len(best[1]):
                best = (source, target)
    return best[0] if best else None


def published_on(service: dict) -> list[tuple[str | None, str]]:
    """``(host address or None for every interface, spec)`` of the short-syntax published ports."""
    found = []
    for spec in service.get("ports") or []:
        parts = str(spec).split("/")[0].rsplit(":", 2)
        found.append((parts[0] if len(parts) == 3 else None, str(spec)))
    return found


def published(service: dict) -> list[tuple[int, int]]:
    """``(host_port, container_port)`` of the short-syntax published ports."""
    ports = []
    for spec in service.get("ports") or []:
        parts = str(spec).split("/")[0].split(":")
        if len(parts) >= 2 and parts[-1].isdigit() and parts[-2].isdigit():
            ports.append((int(parts[-2]), int(parts[-1])))
    return ports


def lakehouse_image_services(compose: dict) -> list[str]:
    """Services running the image of docker/Dockerfile (built here, or its tag)."""
    built = {name: service for name, service in services(compose).items()
             if isinstance(service.get("build"), dict)
             and str(service["build"].get("dockerfile", "")).endswith(LAKEHOUSE_DOCKERFILE)}
    tags = {service.get("image") for service in built.values()} - {None}
    return [name for name, service in services(compose).items() if name in built or service.get("image") in tags]


def lakehouse_command(service: dict) -> list[str] | None:
    cmd = command(service)
    return cmd if cmd[:1] == ["lakehouse"] else None


def spark_applications(compose: dict) -> list[str]:
    """Services whose Spark driver runs on the cluster until stopped."""
    apps = []
    for name in long_running(compose):
        cmd = lakehouse_command(services(compose)[name]) or []
        if cmd[1:2] == ["submit"] or cmd[1:3] == ["cluster", "thrift-server"]:
            apps.append(name)
    return apps


def kafka_listeners(text: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> ``[(NAME, host, port)]``."""
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"([A-Za-z0-9_-]+)://([^:]*):(\d+)", item)
        if match:
            found.append((match[1], match[2], int(match[3])))
    return found


def listening_ports(service: dict) -> set[int]:
    """The ports a service listens on in the compose network, from its own configuration."""
    env, cmd, image = environment(service), command(service), str(service.get("image", ""))
    ports: set[int] = set()
    if env.get("KAFKA_LISTENERS"):
        ports |= {port for _, _, port in kafka_listeners(env["KAFKA_LISTENERS"])}
    if env.get("SCHEMA_REGISTRY_LISTENERS"):
        ports |= {urlsplit(url.strip()).port for url in env["SCHEMA_REGISTRY_LISTENERS"].split(",")} - {None}
    if image.startswith(REST_CATALOG_IMAGE):
        # The fixture's server port is the catalog property rest.port, 8181 unless set.
        ports.add(int(env.get("CATALOG_REST_PORT") or 8181))
    if "minio/minio" in image and cmd[:1] == ["server"]:
        ports.add(int((option(cmd, "--address") or ":9000").rsplit(":", 1)[1]))
    if cmd[:1] == ["lakehouse"]:
        default = LAKEHOUSE_DEFAULT_PORTS.get(tuple(cmd[1:3]))
        if default:
            ports.add(int(option(cmd, "--port") or default))
    return ports


def service_named(compose: dict, host: str) -> str | None:
    """The service a host name reaches in the compose network (its name or hostname)."""
    for name, service in services(compose).items():
        if host in (name, service.get("hostname")):
            return name
    return None


def depends_transitively(compose: dict, name: str, target: str) -> bool:
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        for dep in depends_on(services(compose).get(current, {})):
            if dep == target:
                return True
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return False


def memory_mb(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([kmgt])b?", str(text).strip().lower())
    if not match:
        return None
    return int(int(match[1]) * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[match[2]])


# --- 1. the schema -------------------------------------------------------------------------------

_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(us|ms|s|m|h))+$"}
_STRING_OR_LIST = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_SCALAR = {"type": ["string", "number", "boolean", "null"]}
_SERVICE = {
    "type": "object",
    "properties": {
        "image": {"type": "string", "minLength": 1},
        "build": {"oneOf": [
            {"type": "string"},
            {"type": "object", "required": ["context"], "additionalProperties": False, "properties": {
                "context": {"type": "string"}, "dockerfile": {"type": "string"}, "target": {"type": "string"},
                "args": {"type": "object", "additionalProperties": _SCALAR}}},
        ]},
        "command": _STRING_OR_LIST,
        "entrypoint": _STRING_OR_LIST,
        "environment": {"oneOf": [
            {"type": "object", "additionalProperties": _SCALAR},
            {"type": "array", "items": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(=.*)?$"}},
        ]},
        "env_file": {"oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"oneOf": [
                {"type": "string"},
                {"type": "object", "required": ["path"], "additionalProperties": False,
                 "properties": {"path": {"type": "string"}, "required": {"type": "boolean"}}},
            ]}},
        ]},
        "ports": {"type": "array", "items": {"oneOf": [
            {"type": "string", "pattern": r"^(([0-9]{1,3}\.){3}[0-9]{1,3}:)?([0-9]+:)?[0-9]+(/(tcp|udp))?$"},
            {"type": "integer"},
        ]}},
        "volumes": {"type": "array", "items": {"type": "string", "pattern": r"^[^:]+:/[^:]*(:(ro|rw))?$"}},
        "depends_on": {"oneOf": [
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            {"type": "object", "additionalProperties": {
                "type": "object", "required": ["condition"], "additionalProperties": False, "properties": {
                    "condition": {"enum": ["service_started", "service_healthy", "service_completed_successfully"]},
                    "restart": {"type": "boolean"}, "required": {"type": "boolean"}}}},
        ]},
        "healthcheck": {"type": "object", "additionalProperties": False, "properties": {
            "test": {"oneOf": [
                {"type": "string"},
                {"type": "array", "minItems": 1, "items": {"type": "string"},
                 "prefixItems": [{"enum": ["CMD", "CMD-SHELL", "NONE"]}]},
            ]},
            "interval": _DURATION, "timeout": _DURATION, "start_period": _DURATION,
            "retries": {"type": "integer", "minimum": 1}, "disable": {"type": "boolean"}}},
        "restart": {"oneOf": [
            {"enum": ["no", "always", "on-failure", "unless-stopped"]},
            {"type": "string", "pattern": "^on-failure:[0-9]+$"},
        ]},
        "init": {"type": "boolean"},
        "stop_grace_period": _DURATION,
        "profiles": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z0-9][a-zA-Z0-9_.-]*$"}},
        "hostname": {"type": "string"},
        "user": {"type": "string"},
        "working_dir": {"type": "string"},
    },
    "anyOf": [{"required": ["image"]}, {"required": ["build"]}],
    "additionalProperties": False,
}
COMPOSE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["services"],
    "properties": {
        "name": {"type": "string"},
        "services": {"type": "object", "minProperties": 1,
                     "propertyNames": {"pattern": "^[a-z0-9][a-z0-9_-]*$"},
                     "additionalProperties": _SERVICE},
        "volumes": {"type": "object", "additionalProperties": {"oneOf": [
            {"type": "null"},
            {"type": "object", "additionalProperties": False, "properties": {
                "driver": {"type": "string"}, "name": {"type": "string"}, "external": {"type": "boolean"}}},
        ]}},
    },
    "patternProperties": {"^x-": {}},
    "additionalProperties": False,
}


def schema_errors(compose: dict, env: Mapping[str, str] = SAMPLE_ENV) -> list[str]:
    """The file, interpolated as docker compose would with ``env``, against COMPOSE_SCHEMA."""
    try:
        resolved = interpolate(compose, env)
    except InterpolationError as exc:
        return [f"interpolation: {exc}"]
    validator = jsonschema.Draft202012Validator(COMPOSE_SCHEMA)
    return [f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
            for error in sorted(validator.iter_errors(resolved), key=lambda e: list(map(str, e.absolute_path)))]


# --- 2. consistency within the file ------------------------------------------------------------

def semantic_errors(compose: dict, env_example_text: str) -> list[str]:
    errors: list[str] = []
    all_services = services(compose)
    declared_volumes = set(compose.get("volumes") or {})
    shots = one_shots(compose)
    running = long_running(compose)

    for name, service in all_services.items():
        for dep, condition in depends_on(service).items():
            if dep not in all_services:
                errors.append(f"{name}: depends on {dep!r}, which is no service")
            elif condition == "service_healthy" and not has_healthcheck(all_services[dep]):
                errors.append(f"{name}: waits for {dep} to be healthy, but {dep} has no healthcheck")
        for source, _ in volume_mounts(service):
            if is_named_volume(source) and source not in declared_volumes:
                errors.append(f"{name}: named volume {source!r} is not declared under top-level volumes")

    for name in running:
        if not has_healthcheck(all_services[name]):
            errors.append(f"{name}: runs until stopped but has no healthcheck (`up --wait` cannot tell it works)")
    for name in sorted(shots & set(all_services)):
        if str(all_services[name].get("restart", "no")) in NEVER_STOPS:
            errors.append(f"{name}: one-shot service with restart {all_services[name]['restart']!r} never completes")
        # `docker compose up --wait` fails on an exited container unless a running service waits for it.
        if not any(depends_on(all_services[other]).get(name) == "service_completed_successfully"
                   for other in running):
            errors.append(f"{name}: one-shot service no long-running service waits for "
                          "(service_completed_successfully): `up --wait` reports its exit as a failure")

    errors += _cycle_errors(compose)
    errors += _exposure_errors(compose)
    errors += _persistence_errors(compose)
    errors += _variable_errors(compose, env_example_text)
    errors += _secret_errors(compose, env_example_text)
    return errors


def _cycle_errors(compose: dict) -> list[str]:
    return [f"{name}: depends on itself through depends_on" for name in services(compose)
            if depends_transitively(compose, name, name)]


def _exposure_errors(compose: dict) -> list[str]:
    """Every port is published on the host's loopback only, and a lakehouse endpoint published
    from a container listens beyond the container's own loopback (or nothing reaches it); the
    Thrift Server, reached from other containers, with its password."""
    errors = []
    for name, service in services(compose).items():
        for address, spec in published_on(service):
            if address not in ("127.0.0.1", "[::1]", "::1"):
                errors.append(f"{name}: publishes {spec} on every interface of the host: publish it on "
                              "127.0.0.1 like the other ports")
        env = environment(service)
        cmd = lakehouse_command(service) or []
        if cmd[1:3] == ["cluster", "thrift-server"]:
            host = option(cmd, "--host") or "127.0.0.1"
            if host in ("127.0.0.1", "localhost", "::1"):
                errors.append(f"{name}: the Thrift Server listens on its container's loopback ({host}): the other "
                              "containers and the published port cannot reach it (--host 0.0.0.0)")
            elif referenced_names(env.get("LAKEHOUSE_THRIFT_PASSWORD") or "") != {"LAKEHOUSE_THRIFT_PASSWORD"}:
                errors.append(f"{name}: the Thrift Server listens on {host} without LAKEHOUSE_THRIFT_PASSWORD "
                              "from .env: `lakehouse cluster thrift-server` refuses to start so")
        metrics_port = str(env.get("LAKEHOUSE_METRICS_PORT") or "")
        if metrics_port.isdigit() and int(metrics_port) in {container for _, container in published(service)} \
                and env.get("LAKEHOUSE_METRICS_BIND_ADDRESS") != "0.0.0.0":
            errors.append(f"{name}: publishes its metrics port {metrics_port}, but the endpoint listens on the "
                          "container's loopback only: set LAKEHOUSE_METRICS_BIND_ADDRESS: 0.0.0.0")
    return errors


def _persistence_errors(compose: dict) -> list[str]:
    """State that must survive a container: on named volumes."""
    errors = []
    for name, service in services(compose).items():
        env, cmd, image = environment(service), command(service), str(service.get("image", ""))
        for path in filter(None, (env.get("KAFKA_LOG_DIRS") or "").split(",")):
            if not named_volume_at(service, path.strip()):
                errors.append(f"{name}: Kafka data {path} is not on a named volume")
        if "minio/minio" in image and cmd[:1] == ["server"]:
            for path in [part for part in cmd[1:] if part.startswith("/")][:1]:
                if not named_volume_at(service, path):
                    errors.append(f"{name}: MinIO data {path} is not on a named volume")
        if image.startswith(REST_CATALOG_IMAGE):
            uri = env.get("CATALOG_URI") or ""
            match = re.fullmatch(r"jdbc:sqlite:(?:file:)?(/[^?]+)(\?.*)?", uri)
            if not match or "memory" in uri:
                errors.append(f"{name}: the catalog database ({uri or 'the image default'}) is not a file "
                              "(an in-memory catalog forgets every table on restart)")
            elif not named_volume_at(service, match[1]):
                errors.append(f"{name}: the catalog database {match[1]} is not on a named volume")
    return errors


def _variable_errors(compose: dict, env_example_text: str) -> list[str]:
    documented = read_env_example(env_example_text)
    errors = []
    text_refs = references(compose)
    for name, op in sorted(set(text_refs)):
        if name not in documented:
            errors.append(f"${{{name}}} is used but not documented in .env.example")
        elif op.endswith("?") and documented[name][1]:
            errors.append(f"${{{name}}} is required but commented out in .env.example")
    for service_name, service in services(compose).items():
        for key, value in environment(service).items():
            if value is None and key not in documented:
                errors.append(f"{service_name}: {key} is passed through from .env but not documented in .env.example")
    for match in _MALFORMED.finditer("\n".join(_strings(compose))):
        errors.append(f"malformed variable reference near {match.group(0)!r}")
    return errors


def _secret_errors(compose: dict, env_example_text: str) -> list[str]:
    errors = []
    for service_name, service in services(compose).items():
        for key, value in environment(service).items():
            if value is None or not SECRET_NAME.search(key):
                continue
            if not re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}", value):
                errors.append(f"{service_name}: {key} holds a literal value or a default; a secret must be a "
                              "${VARIABLE} reference to .env")
    for name, (value, _) in read_env_example(env_example_text).items():
        if SECRET_NAME.search(name) and value:
            errors.append(f".env.example: {name} has a value; secrets stay empty in the committed template")
    return errors


# --- 3. agreement with the cluster profile -------------------------------------------------------

def endpoints(settings) -> list[tuple[str, str, str | None, int | None]]:
    """``(setting, scheme, host, port)`` of every network address in the settings."""
    found = []
    for address in settings.kafka_bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        found.append(("kafka_bootstrap_servers", "", host, int(port) if port.isdigit() else None))
    for name in ("schema_registry_url", "catalog_uri", "s3_endpoint", "spark_master"):
        url = urlsplit(getattr(settings, name))
        found.append((name, url.scheme, url.hostname, url.port))
    found.append(("thrift_host:thrift_port", "", settings.thrift_host, settings.thrift_port))
    return found


EXPECTED_SCHEMES = {"schema_registry_url": {"http", "https"}, "catalog_uri": {"http", "https"},
                    "s3_endpoint": {"http", "https"}, "spark_master": {"spark"}}


def profile_errors(compose: dict, settings, credential_names: list[str], env_example_text: str) -> list[str]:
    """docker-compose.yml against the `cluster` Settings (``Settings.from_env`` of the profile)."""
    try:
        resolved = interpolate(compose, SAMPLE_ENV)
    except InterpolationError as exc:
        return [f"interpolation: {exc}"]
    errors = []
    all_services = services(resolved)

    # Every address of the profile is a service listening there.
    for setting, scheme, host, port in endpoints(settings):
        if setting in EXPECTED_SCHEMES and scheme not in EXPECTED_SCHEMES[setting]:
            errors.append(f"{setting}: scheme {scheme!r}, expected one of {sorted(EXPECTED_SCHEMES[setting])}")
        name = service_named(resolved, host or "")
        if name is None:
            errors.append(f"{setting}: host {host!r} is no service of docker-compose.yml")
        elif port not in listening_ports(all_services[name]):
            errors.append(f"{setting}: service {name} listens on {sorted(listening_ports(all_services[name]))}, "
                          f"not on port {port}")
    errors += _kafka_errors(resolved, settings)

    # The thrift server is reachable from the host too (dbt's `cluster` target, localhost:10000).
    thrift = service_named(resolved, settings.thrift_host)
    if thrift and (settings.thrift_port, settings.thrift_port) not in published(all_services[thrift]):
        errors.append(f"{thrift}: does not publish port {settings.thrift_port} on the host's port "
                      f"{settings.thrift_port} (dbt's cluster target connects to localhost:{settings.thrift_port})")

    errors += _warehouse_errors(resolved, settings)
    errors += _credential_errors(compose, resolved, settings, credential_names, env_example_text)
    errors += _lakehouse_service_errors(resolved, settings)
    errors += _capacity_errors(resolved, settings)
    return errors


def _kafka_errors(resolved: dict, settings) -> list[str]:
    errors = []
    for name, service in services(resolved).items():
        env = environment(service)
        if not env.get("KAFKA_LISTENERS"):
            continue
        listeners = {listener: port for listener, _, port in kafka_listeners(env["KAFKA_LISTENERS"])}
        advertised = kafka_listeners(env.get("KAFKA_ADVERTISED_LISTENERS") or "")
        for listener, host, port in advertised:
            if listeners.get(listener) != port:
                errors.append(f"{name}: advertised listener {listener}://{host}:{port} has no listener on port {port}")
            if host in ("localhost", "127.0.0.1") and not any(
                    published_port == (port, port) for published_port in published(service)):
                errors.append(f"{name}: advertises {host}:{port} to the host but does not publish {port}:{port}")
        for address in settings.kafka_bootstrap_servers.split(","):
            host, _, port = address.strip().rpartition(":")
            if service_named(resolved, host) == name and (host, int(port)) not in {(h, p) for _, h, p in advertised}:
                errors.append(f"{name}: bootstrap address {address} is not an advertised listener, so clients "
                              "would be sent elsewhere")
    return errors


def _warehouse_errors(resolved: dict, settings) -> list[str]:
    url = urlsplit(settings.warehouse)
    if url.scheme not in ("s3", "s3a"):
        return [f"warehouse {settings.warehouse} is not on the object store"]
    bucket, errors = url.netloc, []
    pattern = re.compile(r"\bmc\s+mb\b[^;&|]*?\s[\w.-]+/" + re.escape(bucket) + r"(?=[\s/;&|\"']|$)")
    creators = [name for name in one_shots(resolved)
                if pattern.search(" ".join(command(services(resolved).get(name, {}))
                                           + [str(services(resolved).get(name, {}).get("entrypoint", ""))]))]
    if not creators:
        errors.append(f"no one-shot service creates the warehouse bucket {bucket!r} ({settings.warehouse})")
    for app in spark_applications(resolved):
        if creators and not any(depends_transitively(resolved, app, creator) for creator in creators):
            errors.append(f"{app}: may start before the bucket {bucket!r} exists (no dependency on {creators[0]})")
    for name, service in services(resolved).items():
        if str(service.get("image", "")).startswith(REST_CATALOG_IMAGE):
            env = environment(service)
            if env.get("CATALOG_WAREHOUSE") != settings.warehouse:
                errors.append(f"{name}: CATALOG_WAREHOUSE {env.get('CATALOG_WAREHOUSE')!r} is not the profile's "
                              f"warehouse {settings.warehouse}")
            if env.get("CATALOG_S3_ENDPOINT") != settings.s3_endpoint:
                errors.append(f"{name}: CATALOG_S3_ENDPOINT {env.get('CATALOG_S3_ENDPOINT')!r} is not the profile's "
                              f"S3 endpoint {settings.s3_endpoint}")
            if env.get("CATALOG_IO__IMPL") != "org.apache.iceberg.aws.s3.S3FileIO":
                errors.append(f"{name}: the catalog does not write through S3FileIO (CATALOG_IO__IMPL)")
    return errors


def _credential_errors(compose: dict, resolved: dict, settings, credential_names: list[str],
                       env_example_text: str) -> list[str]:
    errors = []
    documented = read_env_example(env_example_text)
    raw_services = services(compose)
    consumers = lakehouse_image_services(compose)
    if not consumers:
        errors.append(f"no service runs the lakehouse image ({LAKEHOUSE_DOCKERFILE})")
    rest = [name for name, service in raw_services.items()
            if str(service.get("image", "")).startswith(REST_CATALOG_IMAGE)]
    for credential in credential_names:
        if credential not in documented:
            errors.append(f"credential {credential} is not in .env.example")
        needed_by = consumers + (rest if credential in S3_CREDENTIALS else [])
        for name in needed_by:
            env = environment(raw_services[name])
            if credential not in env:
                errors.append(f"{name}: credential {credential} does not reach this service")
            elif env[credential] is not None and referenced_names(env[credential]) != {credential}:
                errors.append(f"{name}: {credential} is not taken from ${{{credential}}} of .env")
    # The object store's own key is the one the clients use.
    for name, service in raw_services.items():
        env = environment(service)
        if "minio/minio" in str(service.get("image", "")):
            for store_key, client_key in (("MINIO_ROOT_USER", "AWS_ACCESS_KEY_ID"),
                                          ("MINIO_ROOT_PASSWORD", "AWS_SECRET_ACCESS_KEY")):
                if referenced_names(env.get(store_key) or "") != {client_key}:
                    errors.append(f"{name}: {store_key} is not ${{{client_key}}}, the key the lakehouse uses")
    for name in consumers + rest:
        region = environment(services(resolved)[name]).get("AWS_REGION")
        if region != settings.s3_region:
            errors.append(f"{name}: AWS_REGION {region!r} is not the profile's S3 region {settings.s3_region}")
    return errors


def _lakehouse_service_errors(resolved: dict, settings) -> list[str]:
    errors = []
    all_services = services(resolved)
    home = str(settings.home)
    for name in lakehouse_image_services(resolved):
        if environment(all_services[name]).get("LAKEHOUSE_PROFILE") != "cluster":
            errors.append(f"{name}: runs the lakehouse image without LAKEHOUSE_PROFILE=cluster")
    for name, service in all_services.items():
        cmd = lakehouse_command(service)
        if cmd is None:
            continue
        if not named_volume_at(service, home) or home not in {target for _, target in volume_mounts(service)}:
            errors.append(f"{name}: LAKEHOUSE_HOME {home} is not a mounted named volume")
        if cmd[1:2] == ["submit"] or cmd[1:3] == ["cluster", "thrift-server"]:
            driver_host = environment(service).get("LAKEHOUSE_SPARK_DRIVER_HOST")
            if service_named(resolved, driver_host or "") != name:
                errors.append(f"{name}: LAKEHOUSE_SPARK_DRIVER_HOST is {driver_host!r}: executors could not reach "
                              f"this driver (expected {name!r})")
    return errors


def _capacity_errors(resolved: dict, settings) -> list[str]:
    """The worker(s) can run one executor of every Spark application at once."""
    from lakehouse.core.settings import Settings

    errors = []
    all_services = services(resolved)
    workers = [name for name in long_running(resolved)
               if (lakehouse_command(all_services[name]) or [])[1:3] == ["cluster", "worker"]]
    if not workers:
        return ["no service runs a Spark worker (lakehouse cluster worker)"]
    worker_cores = worker_memory = 0
    for name in workers:
        cmd = command(all_services[name])
        cores, memory = option(cmd, "--cores"), memory_mb(option(cmd, "--memory") or "")
        if not (cores or "").isdigit() or memory is None:
            errors.append(f"{name}: give the worker --cores N and --memory SIZE (its size must be known)")
            continue
        worker_cores += int(cores)
        worker_memory += memory
    needed_cores = needed_memory = 0
    for name in spark_applications(resolved):
        env = {key: value for key, value in environment(all_services[name]).items() if value is not None}
        app = Settings.from_env({"LAKEHOUSE_PROFILE": settings.profile, **env})
        if not app.spark_cores_max:
            errors.append(f"{name}: no LAKEHOUSE_SPARK_CORES_MAX, so it takes every core and starves the others")
            continue
        executors = int(app.spark_cores_max) // app.spark_executor_cores
        if executors < 1:
            errors.append(f"{name}: LAKEHOUSE_SPARK_CORES_MAX {app.spark_cores_max} is below one executor's "
                          f"{app.spark_executor_cores} cores")
            continue
        needed_cores += executors * app.spark_executor_cores
        needed_memory += executors * (memory_mb(app.spark_executor_memory) or 0)
    if worker_cores < needed_cores or worker_memory < needed_memory:
        errors.append(f"the workers offer {worker_cores} cores and {worker_memory} MB, the Spark applications "
                      f"({', '.join(spark_applications(resolved))}) need {needed_cores} cores and "
                      f"{needed_memory} MB: one of them would wait forever")
    return errors


# --- 4. the lakehouse image --------------------------------------------------------------------

def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    instructions, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        current += " " + stripped.rstrip("\\").strip() if current else stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            keyword, _, rest = current.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
            current = ""
    return instructions


def _mvn_command(text: str) -> list[str] | None:
    match = re.search(r"(?:^|[\s@;&|])(mvn[ \t][^&;|\n]*)", text)
    return shlex.split(match.group(1)) if match else None


def image_errors(dockerfile_text: str, dockerignore_text: str, makefile_text: str, settings) -> list[str]:
    errors = []
    instructions = dockerfile_instructions(dockerfile_text)
    stages = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    if not stages:
        return ["docker/Dockerfile has no FROM"]
    final = instructions[stages[-1]:]
    if not final[0][1].startswith("python:3.11"):
        errors.append(f"the final stage is FROM {final[0][1]}, not Python 3.11 (docs/ARCHITECTURE.md §3)")
    env = {}
    for keyword, arguments in final:
        if keyword == "ENV":
            env.update(dict(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|\S+)", arguments)))
    if env.get("LAKEHOUSE_PROFILE") != settings.profile:
        errors.append(f"the image does not set LAKEHOUSE_PROFILE={settings.profile}")
    if "JAVA_HOME" not in env:
        errors.append("the image does not set JAVA_HOME (Spark needs a JVM)")
    jars = str(settings.jars_dir)
    if not any(keyword == "COPY" and "--from=" in arguments and arguments.split()[-1].rstrip("/") == jars
               for keyword, arguments in final):
        errors.append(f"the final stage copies no jars to LAKEHOUSE_JARS_DIR {jars}")
    run_text = "\n".join(arguments for keyword, arguments in instructions if keyword == "RUN")
    docker_mvn, make_mvn = _mvn_command(run_text), _mvn_command(makefile_text)
    if docker_mvn is None or make_mvn is None:
        errors.append("no mvn command in docker/Dockerfile or in the Makefile's jars rule")
    else:
        def without_target(tokens):
            return [t for t in tokens if not t.startswith("-Dlakehouse.jars=")]

        if without_target(docker_mvn) != without_target(make_mvn):
            errors.append(f"the image fetches jars with `{' '.join(docker_mvn)}`, `make setup` with "
                          f"`{' '.join(make_mvn)}`")
        if f"-Dlakehouse.jars={jars}" not in docker_mvn:
            errors.append(f"the image's mvn does not put the jars in {jars}")
    if str(settings.home) not in run_text:
        errors.append(f"the image does not create LAKEHOUSE_HOME {settings.home} (a new volume takes its owner)")
    ignored = {line.strip().rstrip("/") for line in dockerignore_text.splitlines()
               if line.strip() and not line.startswith("#")}
    for needed in (".env", ".lakehouse", ".venv", ".git"):
        if needed not in ignored:
            errors.append(f".dockerignore does not exclude {needed}")
    return errors
