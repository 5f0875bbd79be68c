"""docker-compose.yml and the Dockerfile, checked without Docker.

No Docker engine runs here, so the files are parsed (PyYAML) and checked against the code they
start: every service command must parse with the real ``assay`` CLI (typer -> click), worker queues
must be real Celery queues, secrets must come from the environment, the image must keep ``assay/``,
``config/`` and ``migrations/`` side by side (the package finds the last two next to itself).

Each check is a function that returns the problems it finds. The real files must give none, and
``test_check_catches`` feeds each check a broken copy to show that it can fail.
"""

from __future__ import annotations

import copy
import json
import posixpath
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import typer
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"

REQUIRED_SERVICES = {"postgres", "redis", "migrate", "api", "worker-judge", "worker-metrics", "beat", "flower"}
APP_SERVICES = {"migrate", "api", "worker-judge", "worker-metrics", "beat", "flower"}
# Services that touch the database and so must wait for the one-shot migration.
NEEDS_MIGRATED_DB = {"api", "worker-judge", "worker-metrics", "beat"}
# Secrets: compose stops with a message when one is missing.
REQUIRED_SECRETS = {"POSTGRES_PASSWORD", "ASSAY_API_KEYS", "ASSAY_FLOWER_PASSWORD"}
# Optional: without it the judge component is skipped.
OPTIONAL_SECRETS = {"ANTHROPIC_API_KEY"}
SECRET_WORDS = ("PASSWORD", "API_KEY", "SECRET", "TOKEN")

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


# --- loading ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    assert COMPOSE_FILE.is_file(), "docker-compose.yml is missing"
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), "no services: mapping"
    return data


@pytest.fixture(scope="module")
def dockerfile() -> str:
    assert DOCKERFILE.is_file(), "Dockerfile is missing"
    return DOCKERFILE.read_text()


def _cli_commands() -> dict[str, Any]:
    """The ``assay`` subcommands, as click commands (typer ships its own copy of click)."""
    import assay.cli

    group = typer.main.get_command(assay.cli.cli)
    commands = getattr(group, "commands", None)
    assert isinstance(commands, dict) and commands, f"assay.cli.cli has no subcommands: {group!r}"
    return dict(commands)


def _is_usage_error(exc: BaseException) -> bool:
    # click.ClickException, or its twin in typer's bundled click: both have exit_code and format_message.
    return isinstance(exc, click.ClickException) or (hasattr(exc, "format_message") and hasattr(exc, "exit_code"))


def _tokens(command: Any) -> list[str]:
    if command is None:
        return []
    if isinstance(command, str):
        return shlex.split(command)
    return [str(part) for part in command]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):  # the short form means service_started
        return {name: "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def _build_context(service: dict[str, Any]) -> str | None:
    build = service.get("build")
    if isinstance(build, str):
        return build
    if isinstance(build, dict):
        return build.get("context", ".")
    return None


def _option_value(tokens: list[str], option: str) -> str | None:
    for i, token in enumerate(tokens):
        if token == option and i + 1 < len(tokens):
            return tokens[i + 1]
        if token.startswith(option + "="):
            return token.split("=", 1)[1]
    return None


def _strip_interpolations(value: str) -> str:
    return INTERPOLATION.sub("SECRET", value)


# --- compose checks -----------------------------------------------------------------------------------


def check_required_services(c: dict[str, Any]) -> list[str]:
    missing = REQUIRED_SERVICES - set(c["services"])
    return [f"missing service {name}" for name in sorted(missing)]


def check_redis_durability(c: dict[str, Any]) -> list[str]:
    redis = c["services"].get("redis") or {}
    tokens = _tokens(redis.get("command"))
    problems = []
    if not tokens or tokens[0] != "redis-server":
        problems.append(f"redis command does not start redis-server: {tokens}")
    if _option_value(tokens, "--appendonly") != "yes":
        problems.append("redis: --appendonly yes is missing (queued tasks lost on restart)")
    if _option_value(tokens, "--maxmemory-policy") != "noeviction":
        problems.append("redis: --maxmemory-policy noeviction is missing (Redis could evict queued tasks)")
    if not redis.get("volumes"):
        problems.append("redis: no volume for the AOF file")
    if not (c["services"].get("postgres") or {}).get("volumes"):
        problems.append("postgres: no data volume")
    return problems


def check_app_services_build_and_run_assay(c: dict[str, Any], dockerfile_text: str) -> list[str]:
    """Every app service builds ``.`` and runs a real ``assay`` command with options it has."""
    commands = _cli_commands()
    problems = []
    entrypoint = _dockerfile_entrypoint(dockerfile_text)
    for name in sorted(APP_SERVICES & set(c["services"])):
        service = c["services"][name]
        if _build_context(service) != ".":
            problems.append(f"{name}: does not build . (build: {service.get('build')!r})")
        if "entrypoint" in service and _tokens(service["entrypoint"]) != ["assay"]:
            problems.append(f"{name}: overrides the entrypoint: {service['entrypoint']!r}")
        if entrypoint != ["assay"]:
            problems.append(f"{name}: the image's ENTRYPOINT is {entrypoint}, not assay")
        tokens = _tokens(service.get("command"))
        if not tokens:
            problems.append(f"{name}: no command")
            continue
        sub = commands.get(tokens[0])
        if sub is None:
            problems.append(f"{name}: `assay {tokens[0]}` is not an assay command (have: {sorted(commands)})")
            continue
        known: dict[str, Any] = {}
        for param in sub.params:
            if getattr(param, "param_type_name", None) == "option":
                for opt in (*param.opts, *param.secondary_opts):
                    known[opt] = param
        args = tokens[1:]
        i = 0
        while i < len(args):
            token = args[i]
            if token.startswith("-"):
                opt = token.split("=", 1)[0]
                param = known.get(opt)
                if param is None:
                    problems.append(f"{name}: `assay {tokens[0]}` has no option {opt} (has: {sorted(known)})")
                elif not param.is_flag and "=" not in token:
                    i += 1  # the option's value
            i += 1
        # The real parser too: option values must convert (ints, ranges), nothing may be left over.
        try:
            sub.make_context(f"assay {tokens[0]}", list(args))
        except Exception as exc:
            if not _is_usage_error(exc):
                raise
            problems.append(f"{name}: `assay {' '.join(tokens)}` does not parse: {exc.format_message()}")
    return problems


def _workers(c: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[str]]]:
    """Every service that runs ``assay worker``, by name: (name, service, its command's tokens)."""
    services = ((name, service, _tokens(service.get("command"))) for name, service in sorted(c["services"].items()))
    return [(name, service, tokens) for name, service, tokens in services if tokens and tokens[0] == "worker"]


def check_worker_queues(c: dict[str, Any]) -> list[str]:
    from assay.workers.app import Queue, consumed_queues

    real = {q.value for q in Queue}
    problems = []
    if real != {"metrics", "judge", "control", "online-metrics", "online-judge"}:
        problems.append(f"the Celery queues changed: {sorted(real)}; update this test and the compose file")
    consumed: set[str] = set()
    for name, service, tokens in _workers(c):
        queues = _option_value(tokens, "--queues")
        if queues is None:
            problems.append(f"{name}: worker without --queues (would take every queue)")
            continue
        names = [q.strip() for q in queues.split(",") if q.strip()]
        unknown = set(names) - real
        if unknown:
            problems.append(f"{name}: unknown queue(s) {sorted(unknown)}")
        # `assay worker` adds a queue's online twin ahead of it.
        consumed |= set(consumed_queues([n for n in names if n in real]))
        pool = _option_value(tokens, "--pool")
        if pool not in (None, "prefork", "threads"):
            problems.append(f"{name}: unknown pool {pool}")
        if names == ["judge"] and pool != "threads":
            problems.append(f"{name}: the judge queue is I/O bound and belongs on a threads pool, not {pool}")
    idle = real - consumed
    if idle:
        problems.append(f"no worker consumes queue(s) {sorted(idle)}: their tasks would never run")
    return problems


# The healthcheck names its own node with the `hostname` command; `$$` is compose's escape for a literal `$`.
OWN_HOST_IN_HEALTHCHECK = "$$(hostname)"


def check_worker_node_names(c: dict[str, Any]) -> list[str]:
    """Each worker container has its own node name, NAME@%h (%h: the container's hostname), so a service
    scaled to several containers (``--scale worker-judge=3``) is several workers to Flower and to inspect
    ping, not one; NAME is fixed and differs between services. Its healthcheck pings that node, named by
    the `hostname` command in a shell: not the HOSTNAME variable, which podman's exec session does not set
    (the ping then reached nobody and a working worker was reported unhealthy)."""
    problems = []
    seen: dict[str, str] = {}
    for name, service, tokens in _workers(c):
        node = _option_value(tokens, "--name")
        if node is None:
            problems.append(f"{name}: worker without --name NAME@%h (Celery's default celery@HOST is every worker's)")
            continue
        prefix, _, host = node.partition("@")
        if host != "%h":
            problems.append(f"{name}: --name {node} is not NAME@%h: replicas of the service would share one node name")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix):
            problems.append(f"{name}: --name {node}: NAME must be fixed (no placeholder or variable) for the healthcheck")
        elif prefix in seen:
            problems.append(f"{name}: node names {prefix}@... are also {seen[prefix]}'s")
        seen[prefix] = name
        for key in ("hostname", "container_name"):
            if key in service:
                problems.append(f"{name}: a fixed {key} ({service[key]}) gives every replica one name (or forbids --scale)")
        test = _tokens((service.get("healthcheck") or {}).get("test"))
        if not test or test[0] != "CMD-SHELL":
            problems.append(f"{name}: the healthcheck is not CMD-SHELL: nothing would run `hostname` in {test}")
        shell = " ".join(test[1:])
        if "HOSTNAME" in shell:
            problems.append(f"{name}: the healthcheck reads the HOSTNAME variable, unset in podman's exec: {shell}")
        target = f"{prefix}@{OWN_HOST_IN_HEALTHCHECK}"
        if not re.search(r"\binspect ping\b", shell) or not re.search(rf"(-d|--destination)[ =]{re.escape(target)}(\s|$)", shell):
            problems.append(f"{name}: the healthcheck does not ping its own node {target}: {shell}")
    return problems


def check_secrets(c: dict[str, Any], text: str) -> list[str]:
    problems = []
    # Every interpolation is well formed and every `$` is either one or an escaped `$$`.
    leftover = INTERPOLATION.sub("", text.replace("$$", ""))
    if "$" in leftover:
        problems.append("a `$` that is neither ${VAR...} nor an escaped $$")
    forms: dict[str, set[str]] = {}
    for match in INTERPOLATION.finditer(text):
        forms.setdefault(match["name"], set()).add(match["op"] or "")
    for name in sorted(REQUIRED_SECRETS):
        if forms.get(name) != {":?"}:
            problems.append(f"{name} must always be read as ${{{name}:?message}} (found forms {forms.get(name)})")
    for name in sorted(OPTIONAL_SECRETS):
        if forms.get(name) != {":-"}:
            problems.append(f"{name} must be optional: ${{{name}:-}} (found forms {forms.get(name)})")
    # No literal secret in any environment: each secret-looking variable is an interpolation.
    for svc_name, service in sorted(c["services"].items()):
        for key, value in _environment(service).items():
            if any(word in key for word in SECRET_WORDS) and not re.fullmatch(INTERPOLATION.pattern, value):
                problems.append(f"{svc_name}: {key} is a literal, not ${{VAR:?}}")
    # The database URL carries the password: only as ${POSTGRES_PASSWORD:?...}.
    for svc_name in sorted(APP_SERVICES & set(c["services"])):
        url = _environment(c["services"][svc_name]).get("ASSAY_DATABASE_URL", "")
        userinfo = url.split("://", 1)[-1].rsplit("@", 1)[0] if "@" in url else ""
        password = userinfo.split(":", 1)[1] if ":" in userinfo else ""
        if not re.fullmatch(r"\$\{POSTGRES_PASSWORD:\?[^}]*\}", password):
            problems.append(f"{svc_name}: the ASSAY_DATABASE_URL password is not ${{POSTGRES_PASSWORD:?...}}")
    return problems


def check_app_environment(c: dict[str, Any]) -> list[str]:
    """The URLs point at the compose services, the same ones for every app service."""
    services = c["services"]
    problems = []
    seen: dict[str, set[str]] = {}
    postgres_env = _environment(services.get("postgres") or {})
    for name in sorted(APP_SERVICES & set(services)):
        env = _environment(services[name])
        for key, scheme, host in (
            ("ASSAY_DATABASE_URL", "postgresql+psycopg", "postgres"),
            ("ASSAY_BROKER_URL", "redis", "redis"),
            ("ASSAY_REDIS_URL", "redis", "redis"),
        ):
            value = env.get(key)
            if not value:
                problems.append(f"{name}: {key} is not set")
                continue
            seen.setdefault(key, set()).add(value)
            parts = urlsplit(_strip_interpolations(value))
            if parts.scheme != scheme or parts.hostname != host or host not in services:
                problems.append(f"{name}: {key}={value} does not point at the {host} service")
            if key == "ASSAY_DATABASE_URL" and (
                parts.username != postgres_env.get("POSTGRES_USER") or parts.path.lstrip("/") != postgres_env.get("POSTGRES_DB")
            ):
                problems.append(f"{name}: {key} user/database differ from the postgres service's")
    for key, values in seen.items():
        if len(values) > 1:
            problems.append(f"{key} differs between app services: {sorted(values)}")
    if seen.get("ASSAY_BROKER_URL") and seen.get("ASSAY_BROKER_URL") == seen.get("ASSAY_REDIS_URL"):
        problems.append("ASSAY_BROKER_URL and ASSAY_REDIS_URL share a Redis database")
    return problems


def check_healthchecks(c: dict[str, Any]) -> list[str]:
    from assay.api.routes.health import router

    services = c["services"]
    problems = []
    for name in ("postgres", "redis", "api"):
        check = (services.get(name) or {}).get("healthcheck") or {}
        test = _tokens(check.get("test"))
        if not test or test[0] == "NONE" or check.get("disable"):
            problems.append(f"{name}: no healthcheck")
    pg = " ".join(_tokens(((services.get("postgres") or {}).get("healthcheck") or {}).get("test")))
    if "pg_isready" not in pg:
        problems.append("postgres: the healthcheck does not run pg_isready")
    rd = _tokens(((services.get("redis") or {}).get("healthcheck") or {}).get("test"))
    if "redis-cli" not in rd or "ping" not in rd:
        problems.append("redis: the healthcheck does not run redis-cli ping")
    api = services.get("api") or {}
    test = " ".join(_tokens((api.get("healthcheck") or {}).get("test")))
    port = _option_value(_tokens(api.get("command")), "--port")
    paths = {route.path for route in router.routes}
    match = re.search(r"https?://(?:127\.0\.0\.1|localhost):(\d+)(/\w+)", test)
    if match is None:
        problems.append(f"api: the healthcheck does not request a local URL: {test}")
    else:
        if match[1] != port:
            problems.append(f"api: the healthcheck port {match[1]} is not the api's --port {port}")
        if match[2] not in paths:
            problems.append(f"api: the healthcheck requests {match[2]}, which is not a health route ({sorted(paths)})")
    if re.search(r"\b(curl|wget)\b", test):
        problems.append("api: python:3.11-slim has neither curl nor wget; use python urllib")
    return problems


def check_startup_order(c: dict[str, Any]) -> list[str]:
    services = c["services"]
    problems = []
    migrate = services.get("migrate") or {}
    if _depends_on(migrate).get("postgres") != "service_healthy":
        problems.append("migrate: does not wait for postgres to be healthy")
    if migrate.get("restart") not in (None, "no"):
        problems.append(f"migrate: is one-shot but restarts ({migrate.get('restart')})")
    for name in sorted(NEEDS_MIGRATED_DB & set(services)):
        deps = _depends_on(services[name])
        if deps.get("migrate") != "service_completed_successfully":
            problems.append(f"{name}: does not wait for migrate to complete successfully")
        if deps.get("redis") != "service_healthy":
            problems.append(f"{name}: does not wait for redis to be healthy")
    return problems


def _published(service: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(host interface or None for every interface, container port) of each published port."""
    out = []
    for spec in service.get("ports") or []:
        if isinstance(spec, dict):
            out.append((spec.get("host_ip"), str(spec.get("target"))))
            continue
        parts = _strip_interpolations(str(spec)).split("/")[0].split(":")
        out.append((parts[0] if len(parts) == 3 else None, parts[-1]))
    return out


def check_published_ports(c: dict[str, Any]) -> list[str]:
    """Flower listens on every interface inside its container (assay flower's default is loopback, which
    the published port cannot reach) and is published on the host's loopback only; the API's published
    port is the one it listens on."""
    services = c["services"]
    problems = []
    flower = services.get("flower") or {}
    tokens = _tokens(flower.get("command"))
    if _option_value(tokens, "--address") != "0.0.0.0":
        problems.append(f"flower: does not listen on 0.0.0.0 in its container (unreachable through the port): {tokens}")
    port = _option_value(tokens, "--port") or "5555"
    published = _published(flower)
    if not published:
        problems.append("flower: no published port")
    for host_ip, target in published:
        if host_ip != "127.0.0.1":
            problems.append(f"flower: published on {host_ip or 'every interface'}, not the host's 127.0.0.1 only")
        if target != port:
            problems.append(f"flower: publishes container port {target}, but listens on {port}")
    api = services.get("api") or {}
    api_port = _option_value(_tokens(api.get("command")), "--port")
    if _option_value(_tokens(api.get("command")), "--host") != "0.0.0.0":
        problems.append("api: does not listen on 0.0.0.0 in its container")
    for _, target in _published(api):
        if target != api_port:
            problems.append(f"api: publishes container port {target}, but listens on {api_port}")
    return problems


# --- Dockerfile checks --------------------------------------------------------------------------------


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\s*\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _dockerfile_entrypoint(text: str) -> list[str] | None:
    entries = [rest for keyword, rest in _dockerfile_instructions(text) if keyword == "ENTRYPOINT"]
    if not entries:
        return None
    try:
        value = json.loads(entries[-1])
    except ValueError:
        return ["<shell form>", entries[-1]]
    return value if isinstance(value, list) else None


def check_dockerfile(text: str) -> list[str]:
    instructions = _dockerfile_instructions(text)
    problems = []
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    if not froms or not froms[-1].split()[0].startswith("python:3.11-slim"):
        problems.append(f"the final image is not based on python:3.11-slim: {froms}")
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    if not users:
        problems.append("no USER: the container runs as root")
    elif users[-1].split(":")[0] in ("root", "0"):
        problems.append(f"the last USER is root: {users[-1]}")
    if _dockerfile_entrypoint(text) != ["assay"]:
        problems.append(f'ENTRYPOINT is not ["assay"] (exec form): {_dockerfile_entrypoint(text)}')
    # Where assay/, config/ and migrations/ land: REPO_ROOT is the parent of the assay package, and
    # alembic_config() reads REPO_ROOT/migrations, so the three must be siblings.
    workdir = "/"
    placed: dict[str, str] = {}
    pip_runs = []
    for keyword, rest in instructions:
        if keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, rest))
        elif keyword in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            *sources, dest = parts
            target = posixpath.normpath(posixpath.join(workdir, dest))
            for src in sources:
                name = posixpath.basename(posixpath.normpath(src))
                if src in (".", "./"):
                    for top in ("assay", "config", "migrations"):
                        placed[top] = posixpath.join(target, top)
                elif dest.endswith("/") or dest == "." or len(sources) > 1:
                    placed[name] = posixpath.join(target, name)
                else:
                    placed[name] = target
        elif keyword == "RUN" and "pip install" in rest:
            pip_runs.append(rest)
    for top in ("assay", "config", "migrations"):
        if top not in placed:
            problems.append(f"{top}/ is not copied into the image")
    if {"assay", "config", "migrations"} <= set(placed):
        homes = {posixpath.dirname(placed[top]) for top in ("assay", "config", "migrations")}
        if len(homes) != 1:
            problems.append(f"assay/, config/ and migrations/ are not side by side: {placed}")
        for top in ("assay", "config", "migrations"):
            if posixpath.basename(placed[top]) != top:
                problems.append(f"{top}/ is copied under another name: {placed[top]}")
    # The package must run from the copied tree (editable), not from a site-packages copy whose
    # parent directory holds neither config/ nor migrations/.
    if not any(re.search(r"pip install\b.*(?:-e|--editable)\s+\.", run) for run in pip_runs):
        problems.append(f"the project is not installed editable from the tree (pip install -e .): {pip_runs}")
    return problems


def check_dockerignore(text: str) -> list[str]:
    patterns = [line.strip().rstrip("/") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    problems = []
    for needed in ("assay", "config", "migrations", "pyproject.toml", "README.md"):
        if needed in patterns or f"/{needed}" in patterns or "*" in patterns:
            problems.append(f".dockerignore drops {needed}, which the image needs")
    for secret in (".env", ".git"):
        if secret not in patterns:
            problems.append(f".dockerignore does not drop {secret}")
    return problems


# --- the real files -----------------------------------------------------------------------------------


def test_required_services(compose: dict[str, Any]) -> None:
    assert check_required_services(compose) == []


def test_redis_durability(compose: dict[str, Any]) -> None:
    assert check_redis_durability(compose) == []


def test_app_services_build_and_run_assay_commands(compose: dict[str, Any], dockerfile: str) -> None:
    assert check_app_services_build_and_run_assay(compose, dockerfile) == []


def test_worker_queues(compose: dict[str, Any]) -> None:
    assert check_worker_queues(compose) == []


def test_worker_node_names(compose: dict[str, Any]) -> None:
    assert check_worker_node_names(compose) == []


def test_secrets_come_from_the_environment(compose: dict[str, Any]) -> None:
    assert check_secrets(compose, COMPOSE_FILE.read_text()) == []


def test_app_environment(compose: dict[str, Any]) -> None:
    assert check_app_environment(compose) == []


def test_healthchecks(compose: dict[str, Any]) -> None:
    assert check_healthchecks(compose) == []


def test_startup_order(compose: dict[str, Any]) -> None:
    assert check_startup_order(compose) == []


def test_published_ports(compose: dict[str, Any]) -> None:
    assert check_published_ports(compose) == []


def test_dockerfile(dockerfile: str) -> None:
    assert check_dockerfile(dockerfile) == []


def test_dockerignore() -> None:
    assert DOCKERIGNORE.is_file(), ".dockerignore is missing"
    assert check_dockerignore(DOCKERIGNORE.read_text()) == []


# --- each check fails on a broken copy -----------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(c: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = c["services"]
        for key in parents:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()


def _env(service: str, key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(c: dict[str, Any]) -> None:
        env = _environment(c["services"][service])
        env[key] = value
        c["services"][service]["environment"] = env

    return mutate


COMPOSE_MUTANTS: dict[str, tuple[Callable[..., list[str]], Callable[[dict[str, Any]], None]]] = {
    "service missing": (check_required_services, _set("beat", _DELETE)),
    "redis without AOF": (check_redis_durability, _set("redis.command", ["redis-server", "--maxmemory-policy", "noeviction"])),
    "redis evicts": (check_redis_durability, _set("redis.command", "redis-server --appendonly yes --maxmemory-policy allkeys-lru")),
    "unknown assay command": (check_app_services_build_and_run_assay, _set("beat.command", ["scheduler"])),
    "unknown option": (check_app_services_build_and_run_assay, _set("worker-judge.command", ["worker", "--queue", "judge"])),
    "bad option value": (check_app_services_build_and_run_assay, _set("worker-judge.command", ["worker", "--concurrency", "0"])),
    "builds elsewhere": (check_app_services_build_and_run_assay, _set("api.build", "./api")),
    "image instead of build": (check_app_services_build_and_run_assay, _set("flower.build", _DELETE)),
    "entrypoint override": (check_app_services_build_and_run_assay, _set("api.entrypoint", ["uvicorn"])),
    "unknown queue": (check_worker_queues, _set("worker-metrics.command", ["worker", "--queues", "metrics,control,bulk"])),
    "queue nobody consumes": (check_worker_queues, _set("worker-metrics.command", ["worker", "--queues", "metrics"])),
    "judge on prefork": (check_worker_queues, _set("worker-judge.command", ["worker", "--queues", "judge", "--pool", "prefork"])),
    "worker without a name": (check_worker_node_names, _set("worker-judge.command", ["worker", "--queues", "judge", "--pool", "threads"])),
    "one fixed name per service, replicas share it": (check_worker_node_names, _set("worker-judge.command", ["worker", "--queues", "judge", "--pool", "threads", "--name", "worker-judge@assay"])),
    "name from the process id": (check_worker_node_names, _set("worker-judge.command", ["worker", "--queues", "judge", "--pool", "threads", "--name", "judge-%p@%h"])),
    "two services, one name": (check_worker_node_names, lambda c: c["services"]["worker-metrics"].update(
        command=["worker", "--queues", "metrics,control", "--name", "worker-judge@%h"],
        healthcheck=c["services"]["worker-judge"]["healthcheck"])),
    "fixed hostname": (check_worker_node_names, _set("worker-judge.hostname", "judge")),
    "fixed container name": (check_worker_node_names, _set("worker-judge.container_name", "assay-judge")),
    "healthcheck pings $HOSTNAME": (check_worker_node_names, _set("worker-judge.healthcheck", {"test": ["CMD-SHELL", "celery -A assay.workers.app:app inspect ping -d worker-judge@$$HOSTNAME --timeout 10"]})),
    "healthcheck pings ${HOSTNAME}": (check_worker_node_names, _set("worker-judge.healthcheck", {"test": ["CMD-SHELL", "celery -A assay.workers.app:app inspect ping -d worker-judge@$${HOSTNAME} --timeout 10"]})),
    "healthcheck without a shell": (check_worker_node_names, _set("worker-judge.healthcheck", {"test": ["CMD", "celery", "-A", "assay.workers.app:app", "inspect", "ping", "-d", "worker-judge@$$(hostname)"]})),
    "healthcheck pings the other worker": (check_worker_node_names, lambda c: c["services"]["worker-judge"].update(
        healthcheck=c["services"]["worker-metrics"]["healthcheck"])),
    "healthcheck pings the default name": (check_worker_node_names, _set("worker-judge.healthcheck", {"test": ["CMD-SHELL", "celery -A assay.workers.app:app inspect ping -d celery@$$(hostname)"]})),
    "healthcheck pings every worker": (check_worker_node_names, _set("worker-judge.healthcheck", {"test": ["CMD-SHELL", "celery -A assay.workers.app:app inspect ping --timeout 10"]})),
    "literal postgres password": (check_secrets, _env("postgres", "POSTGRES_PASSWORD", "hunter2")),
    "literal flower password": (check_secrets, _env("flower", "ASSAY_FLOWER_PASSWORD", "admin")),
    "password in the url": (check_secrets, _env("api", "ASSAY_DATABASE_URL", "postgresql+psycopg://assay:hunter2@postgres:5432/assay")),
    "broker elsewhere": (check_app_environment, _env("worker-judge", "ASSAY_BROKER_URL", "redis://127.0.0.1:6379/0")),
    "no database url": (check_app_environment, _env("beat", "ASSAY_DATABASE_URL", "")),
    "shared redis db": (check_app_environment, lambda c: [_env(s, "ASSAY_REDIS_URL", "redis://redis:6379/0")(c) for s in APP_SERVICES]),
    "no api healthcheck": (check_healthchecks, _set("api.healthcheck", _DELETE)),
    "no redis healthcheck": (check_healthchecks, _set("redis.healthcheck", {"test": ["NONE"]})),
    "api healthcheck wrong path": (check_healthchecks, _set("api.healthcheck", {"test": ["CMD", "python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"]})),
    "api healthcheck with curl": (check_healthchecks, _set("api.healthcheck", {"test": "curl -f http://localhost:8000/healthz"})),
    "api starts before migrate": (check_startup_order, _set("api.depends_on", {"migrate": {"condition": "service_started"}, "redis": {"condition": "service_healthy"}})),
    "worker short depends_on": (check_startup_order, _set("worker-metrics.depends_on", ["migrate", "redis"])),
    "migrate restarts": (check_startup_order, _set("migrate.restart", "always")),
    "flower on its loopback": (check_published_ports, _set("flower.command", ["flower", "--port", "5555"])),
    "flower on every host interface": (check_published_ports, _set("flower.ports", ["5555:5555"])),
    "flower published on another port": (check_published_ports, _set("flower.ports", ["127.0.0.1:5555:5556"])),
    "flower not published": (check_published_ports, _set("flower.ports", _DELETE)),
    "api published on another port": (check_published_ports, _set("api.ports", ["8000:8080"])),
}


@pytest.mark.parametrize("case", sorted(COMPOSE_MUTANTS))
def test_check_catches(case: str, compose: dict[str, Any], dockerfile: str) -> None:
    check, mutate = COMPOSE_MUTANTS[case]
    broken = copy.deepcopy(compose)
    mutate(broken)
    if check is check_app_services_build_and_run_assay:
        problems = check(broken, dockerfile)
    elif check is check_secrets:
        problems = check(broken, COMPOSE_FILE.read_text())
    else:
        problems = check(broken)
    assert problems, f"{check.__name__} missed: {case}"


@pytest.mark.parametrize(
    "case,old,new",
    [
        ("optional secret made required", "${ANTHROPIC_API_KEY:-}", "${ANTHROPIC_API_KEY:?set it}"),
        ("required secret with a default", "${ASSAY_API_KEYS:?", "${ASSAY_API_KEYS:-"),
        ("unescaped dollar", "-d worker-judge@$$(hostname)", "-d worker-judge@$(hostname)"),
    ],
)
def test_secret_syntax_check_catches(case: str, old: str, new: str, compose: dict[str, Any]) -> None:
    text = COMPOSE_FILE.read_text()
    assert old in text, f"the mutation for {case!r} no longer applies: update it"
    assert check_secrets(compose, text.replace(old, new)), f"check_secrets missed: {case}"


@pytest.mark.parametrize(
    "case,old,new",
    [
        ("root user", re.compile(r"^USER .*$", re.M), "USER root"),
        ("no user", re.compile(r"^USER .*$", re.M), ""),
        ("shell-form entrypoint", re.compile(r"^ENTRYPOINT .*$", re.M), "ENTRYPOINT assay"),
        ("other entrypoint", re.compile(r"^ENTRYPOINT .*$", re.M), 'ENTRYPOINT ["celery"]'),
        ("other base", re.compile(r"^FROM .*$", re.M), "FROM python:3.12-alpine"),
        ("no migrations", re.compile(r"^COPY migrations .*$", re.M), ""),
        ("migrations elsewhere", re.compile(r"^COPY migrations .*$", re.M), "COPY migrations /srv/migrations"),
        ("config renamed", re.compile(r"^COPY config .*$", re.M), "COPY config ./settings"),
        ("not editable", re.compile(r"pip install --no-deps -e \."), "pip install --no-deps ."),
    ],
)
def test_dockerfile_check_catches(case: str, old: re.Pattern[str], new: str, dockerfile: str) -> None:
    broken, count = old.subn(new, dockerfile)
    assert count, f"the mutation for {case!r} no longer applies: update it"
    assert check_dockerfile(broken), f"check_dockerfile missed: {case}"


@pytest.mark.parametrize("extra", ["assay/", "config", "/migrations", "README.md", "*"])
def test_dockerignore_check_catches(extra: str) -> None:
    assert check_dockerignore(DOCKERIGNORE.read_text() + f"\n{extra}\n")


def test_dockerignore_check_catches_missing_env() -> None:
    text = "\n".join(line for line in DOCKERIGNORE.read_text().splitlines() if line.strip() != ".env")
    assert check_dockerignore(text)


# --- services started before the database is ready or migrated ------------------------------------------
# Not every compose implementation honours `depends_on: condition:` (podman-compose starts everything at
# once), so api, workers and beat wait for a migrated store, and migrate for a reachable one, each with a
# log line, instead of crashing on a refused connection or a missing table and being restarted in a loop.


@pytest.fixture
def empty_database(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh, unmigrated database, set as ASSAY_DATABASE_URL for the test; dropped after it."""
    from assay.settings import get_settings
    from tests.conftest import TEST_DB, TEST_ENV, _admin_exec

    name = f"{TEST_DB}_wait"
    _admin_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin_exec(f'CREATE DATABASE "{name}"')
    url = TEST_ENV["ASSAY_DATABASE_URL"].rsplit("/", 1)[0] + f"/{name}"
    monkeypatch.setenv("ASSAY_DATABASE_URL", url)
    get_settings.cache_clear()
    yield url
    monkeypatch.undo()
    get_settings.cache_clear()
    _admin_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_service_waits_for_migrations_then_starts(empty_database: str, capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    from assay.cli.services import _wait_for_database
    from assay.scoring.store.db import migrate

    done = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            _wait_for_database("worker", interval=0.1, timeout=60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        done.set()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    assert not done.wait(1.0), "the worker did not wait for an unmigrated database"
    migrate(empty_database)
    assert done.wait(30), "the worker kept waiting after the migrations ran"
    assert errors == []
    err = capsys.readouterr().err
    assert "worker: waiting for the database: not migrated yet (at no revision" in err
    assert "run `assay migrate`" in err
    assert "worker: the database is ready and migrated" in err
    # Logged when the reason changes, not on every retry.
    assert err.count("waiting for the database") == 1


def test_service_on_a_migrated_database_starts_without_waiting(capsys: pytest.CaptureFixture[str]) -> None:
    from assay.cli.services import _wait_for_database

    _wait_for_database("api", timeout=0)
    assert "waiting" not in capsys.readouterr().err


def test_service_waits_for_an_unreachable_database(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from assay.cli.services import _wait_for_database
    from assay.settings import get_settings

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ASSAY_DATABASE_URL", f"postgresql+psycopg://assay@127.0.0.1:{port}/assay")
    get_settings.cache_clear()
    try:
        with pytest.raises(typer.Exit):
            _wait_for_database("beat", interval=0.1, timeout=0.5)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert "beat: waiting for the database: not reachable (" in err
    assert "beat: gave up waiting for the database" in err


def test_migrate_waits_only_for_a_reachable_database(empty_database: str) -> None:
    from assay.cli.services import _wait_for_database

    _wait_for_database("migrate", migrated=False, timeout=0)  # unmigrated is fine: it is migrate's job


@pytest.mark.parametrize("command", ["api", "worker", "beat", "migrate"])
def test_service_commands_wait_for_the_database(command: str) -> None:
    """The commands compose runs call the wait before they touch the store."""
    import inspect

    from assay.cli import services

    source = inspect.getsource(getattr(services, command))
    expected = f'_wait_for_database("{command}"'
    assert expected in source, f"assay {command} does not wait for the database"
