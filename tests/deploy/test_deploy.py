"""The deployment files in ``deploy/``: compose stack, Prometheus, Grafana, configuration, systemd.

Nothing here starts a container (CI has no image registry); the files are parsed and checked
against each other and against the service: the metric catalogue, the configuration loader,
``promtool``.
"""

from __future__ import annotations

import http.server
import json
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from streamanon.service.config import load_config
from streamanon.service.telemetry import METRICS, SERVICE_WIDE, exported_names

try:
    import yaml
except ImportError as exc:  # pragma: no cover - the test extras install it
    raise ImportError("tests/deploy need pyyaml; `make test` installs it with the test "
                      "extras (pip install -e '.[test]')") from exc

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFIG_IN_CONTAINER = "/etc/streamanon/streamanon.toml"
DATA_DIR = "/var/lib/streamanon"
SECRETS = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
METRIC_NAME = re.compile(r"streamanon_[a-z0-9_]+")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "streamanon.json").read_text(encoding="utf-8"))


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def _volumes(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) for the short and the long volume syntax."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *mode = volume.split(":")
            mounts.append((source, target, "ro" in (mode[0].split(",") if mode else [])))
        else:
            mounts.append((volume["source"], volume["target"], bool(volume.get("read_only"))))
    return mounts


def _is_local_path(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [target["expr"] for panel in dashboard["panels"]
             for target in panel.get("targets", []) if "expr" in target]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        exprs.append(query["query"] if isinstance(query, dict) else str(query))
    return exprs


def _dashboard_metrics(dashboard: dict[str, Any]) -> set[str]:
    return {name for expr in _expressions(dashboard) for name in METRIC_NAME.findall(expr)}


def _service_wide_names() -> set[str]:
    return {name + suffix for name in SERVICE_WIDE for suffix in ("", "_total", "_created")}


def _systemd_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value (systemd allows a key several times)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: {line!r} outside a section"
        assert "=" in line, f"{path.name}: {line!r} is not KEY=VALUE"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined."""
    instructions, pending = [], ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        instructions.append((word.upper(), rest.strip()))
    return instructions


# --- docker compose ------------------------------------------------------------------------


def test_compose_has_kafka_streamanon_prometheus_and_grafana(compose):
    services = compose["services"]
    assert {"kafka", "streamanon", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, f"{name}: no image and no build"


def test_kafka_runs_in_kraft_mode_without_zookeeper(compose):
    services = compose["services"]
    env = _environment(services["kafka"])
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    for key in ("KAFKA_NODE_ID", "KAFKA_CONTROLLER_QUORUM_VOTERS",
                "KAFKA_CONTROLLER_LISTENER_NAMES", "KAFKA_LISTENERS",
                "KAFKA_ADVERTISED_LISTENERS", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                "CLUSTER_ID"):
        assert env.get(key), f"kafka: {key} missing"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert "healthcheck" in services["kafka"]
    for name, service in services.items():
        assert "zookeeper" not in name.lower()
        assert "zookeeper" not in str(service.get("image", "")).lower()
        assert not any("ZOOKEEPER" in key for key in _environment(service))


def test_every_mounted_local_file_exists(compose):
    for name, service in compose["services"].items():
        for source, _, _ in _volumes(service):
            if _is_local_path(source):
                assert (DEPLOY / source).resolve().exists(), f"{name}: {source} missing"
    build = compose["services"]["streamanon"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).is_file()


def test_named_volumes_and_secrets_are_declared(compose):
    declared_volumes = set(compose.get("volumes") or {})
    declared_secrets = compose.get("secrets") or {}
    for name, service in compose["services"].items():
        for source, _, _ in _volumes(service):
            if not _is_local_path(source):
                assert source in declared_volumes, f"{name}: volume {source} not declared"
        for secret in service.get("secrets", []):
            secret_name = secret if isinstance(secret, str) else secret["source"]
            assert secret_name in declared_secrets, f"{name}: secret {secret_name} undeclared"
    for secret in declared_secrets.values():
        # Operator-made files, kept out of git by deploy/secrets/.gitignore.
        assert PurePosixPath(secret["file"]).parent == PurePosixPath("secrets")
    assert (DEPLOY / "secrets" / ".gitignore").read_text(encoding="utf-8").splitlines()[-2:] \
        == ["*", "!.gitignore"]


def test_published_ports_are_on_loopback_only(compose):
    published = 0
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            published += 1
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
            else:
                assert str(port).startswith("127.0.0.1:"), f"{name}: {port}"
    assert published >= 3


def test_streamanon_service_is_wired_to_kafka_secrets_and_config(compose):
    services = compose["services"]
    service = services["streamanon"]
    env = _environment(service)
    kafka_env = _environment(services["kafka"])
    assert env["STREAMANON_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert "PLAINTEXT://kafka:9092" in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert env["STREAMANON_HTTP_BIND"] == "0.0.0.0:8080"
    assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    secrets = set(service["secrets"])
    for variable in ("STREAMANON_HMAC_KEY", "STREAMANON_HTTP_TOKEN"):
        assert variable not in env, f"{variable} must come from a file, not the compose file"
        path = PurePosixPath(env[f"{variable}_FILE"])
        assert path.parent == PurePosixPath("/run/secrets") and path.name in secrets
    mounts = {target: (source, ro) for source, target, ro in _volumes(service)}
    assert mounts[CONFIG_IN_CONTAINER] == ("./streamanon.toml", True)
    assert mounts[DATA_DIR][0] in compose["volumes"]


def test_grafana_provisioning_loads_the_mounted_dashboard(compose):
    mounts = {source: target for source, target, _ in _volumes(compose["services"]["grafana"])}
    dashboard_target = PurePosixPath(mounts["./grafana/streamanon.json"])
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" /
                               "streamanon.yml").read_text(encoding="utf-8"))
    assert provider["providers"][0]["options"]["path"] == str(dashboard_target.parent)
    datasources = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" /
                                  "prometheus.yml").read_text(encoding="utf-8"))
    source = datasources["datasources"][0]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in compose["services"]


# --- Dockerfile ----------------------------------------------------------------------------


def test_dockerfile_runs_the_service_as_a_non_root_user():
    instructions = _dockerfile(DEPLOY / "Dockerfile")
    args = dict(instructions)  # the last of each instruction wins, as in docker
    assert instructions[0] == ("FROM", "python:3.12-slim")
    assert args["USER"] not in ("root", "0")
    assert json.loads(args["ENTRYPOINT"]) == ["streamanon"]
    assert json.loads(args["CMD"]) == ["serve", "--config", CONFIG_IN_CONTAINER]
    assert "8080" in args["EXPOSE"].split()
    assert "/healthz" in args["HEALTHCHECK"] and "urllib" in args["HEALTHCHECK"]
    assert DATA_DIR in json.loads(args["VOLUME"])
    env = " ".join(rest for word, rest in instructions if word == "ENV")
    assert f"STREAMANON_DATA_DIR={DATA_DIR}" in env and "NUMBA_CACHE_DIR=" in env
    copied = {source for word, rest in instructions if word == "COPY"
              for source in shlex.split(rest)[:-1]}
    assert {"pyproject.toml", "README.md", "streamanon/", "scheduler/"} <= copied
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def _healthcheck(dockerfile: Path) -> tuple[dict[str, str], list[str]]:
    """The HEALTHCHECK's options and its exec-form command."""
    arguments = dict(_dockerfile(dockerfile))["HEALTHCHECK"]
    options, _, command = arguments.partition("CMD ")
    return (dict(option.lstrip("-").split("=", 1) for option in options.split()),
            json.loads(command))


class _Healthz(http.server.BaseHTTPRequestHandler):
    answer = (200, "ok\n")

    def do_GET(self) -> None:
        code, body = self.answer if self.path == "/healthz" else (404, "")
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("answer", [(200, "ok\n"), (503, "unhealthy: compute\ncompute: the "
                                                          "compute process exited\n"), None])
def test_dockerfile_healthcheck_passes_only_on_healthz_200_and_shows_the_answer(
        subprocesses, answer):
    options, command = _healthcheck(DEPLOY / "Dockerfile")
    assert command[0] == "python" and "/healthz" in " ".join(command)
    assert {"interval", "timeout", "start-period", "retries"} <= set(options)
    server = http.server.HTTPServer(("127.0.0.1", 0), _Healthz)
    port = server.server_address[1]
    if answer is None:
        server.server_close()  # nothing listens: the check must fail, not hang
    else:
        _Healthz.answer = answer
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True,
                                timeout=int(options["timeout"].rstrip("s")),
                                env={"STREAMANON_HTTP_BIND": f"0.0.0.0:{port}"})
    finally:
        if answer is not None:
            server.shutdown()
            server.server_close()
    # Docker: 0 healthy, 1 unhealthy (2 is reserved); the output goes to `docker inspect`.
    if answer is not None and answer[0] == 200:
        assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    else:
        assert result.returncode == 1, result.stderr
        if answer is not None:
            assert answer[1].strip() in result.stdout + result.stderr
            assert "Traceback" not in result.stderr


# --- Prometheus ----------------------------------------------------------------------------


def test_promtool_accepts_the_prometheus_config(subprocesses):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: it comes with Debian's `prometheus` package, which "
                    "`make test` installs (apt-get install prometheus)")
    result = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_holds_no_control_token(compose):
    """The control token would let Prometheus close surveys, and make it and every Grafana
    viewer readers of the statistics computed on the raw answers: it scrapes without it."""
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "streamanon")
    assert not {"authorization", "bearer_token", "bearer_token_file", "basic_auth"} & set(job)
    assert "streamanon_http_token" not in compose["services"]["prometheus"].get("secrets", [])


def test_prometheus_scrapes_the_compose_service_at_metrics(compose):
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "streamanon")
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    bind_port = _environment(compose["services"]["streamanon"])["STREAMANON_HTTP_BIND"]
    assert targets == [f"streamanon:{bind_port.rpartition(':')[2]}"]


# --- Grafana dashboard ---------------------------------------------------------------------


def test_dashboard_uses_only_exported_metric_names(dashboard):
    unknown = _dashboard_metrics(dashboard) - exported_names()
    assert not unknown, f"not exported by streamanon.service.telemetry: {sorted(unknown)}"


def test_dashboard_uses_at_least_ten_metric_names(dashboard):
    assert len(_dashboard_metrics(dashboard) & exported_names()) >= 10


def test_dashboard_shows_every_metric_in_the_catalogue(dashboard):
    used = _dashboard_metrics(dashboard)
    suffixes = ("", "_total", "_bucket", "_sum", "_count", "_created")
    missing = [name for name in METRICS
               if not used & exported_names() & {name + suffix for suffix in suffixes}]
    assert not missing, f"no panel shows {missing}"


def test_dashboard_reads_the_provisioned_datasource_and_filters_by_survey(dashboard):
    datasources = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" /
                                  "prometheus.yml").read_text(encoding="utf-8"))
    uid = datasources["datasources"][0]["uid"]
    assert dashboard["uid"] == "streamanon"
    assert 38 <= dashboard["schemaVersion"] <= 41
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid, panel["title"]
            if set(METRIC_NAME.findall(target["expr"])) <= _service_wide_names():
                continue  # the service's own parts: no survey label
            assert '{survey=~"$survey"}' in target["expr"], (panel["title"], target["expr"])
    survey = next(v for v in dashboard["templating"]["list"] if v["name"] == "survey")
    assert survey["datasource"]["uid"] == uid
    assert survey["query"]["query"] == "label_values(streamanon_records_stored_total, survey)"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


# --- service configuration -----------------------------------------------------------------


def test_example_configuration_loads(compose):
    config = load_config(DEPLOY / "streamanon.toml", env=SECRETS)
    (survey,) = config.surveys
    assert survey.identifier
    assert len(survey.quasi_identifiers) >= 2
    assert survey.names("confidential")
    assert (survey.engine, survey.incremental) == ("mdav", "nn_split_end")
    assert survey.deadline is not None and survey.deadline > 0
    assert config.store.url.startswith(f"sqlite:///{DATA_DIR}/")  # absolute: four slashes
    assert str(config.output.directory) == f"{DATA_DIR}/releases"
    compose_env = {key: value
                   for key, value in _environment(compose["services"]["streamanon"]).items()
                   if not key.endswith("_FILE")}  # the secret files exist in the container only
    overridden = load_config(DEPLOY / "streamanon.toml", env={**SECRETS, **compose_env})
    assert overridden.kafka.bootstrap_servers == "kafka:9092"
    assert overridden.http.bind == "0.0.0.0:8080"


def test_example_configuration_reads_secrets_from_files(tmp_path):
    env = {}
    for name, value in SECRETS.items():
        (tmp_path / name).write_text(value + "\n", encoding="utf-8")
        env[f"{name}_FILE"] = str(tmp_path / name)
    config = load_config(DEPLOY / "streamanon.toml", env=env)
    assert config.hmac_key == SECRETS["STREAMANON_HMAC_KEY"].encode()
    assert config.http_token == SECRETS["STREAMANON_HTTP_TOKEN"]


# --- systemd -------------------------------------------------------------------------------


def test_systemd_unit_is_hardened():
    unit = _systemd_unit(DEPLOY / "streamanon.service")
    service = unit["Service"]

    def value(key: str) -> str:
        assert key in service, f"[Service] {key}= missing"
        return service[key][-1]

    assert value("ExecStart") == f"/opt/streamanon/bin/streamanon serve --config " \
                                 f"{CONFIG_IN_CONTAINER}"
    assert value("DynamicUser") == "yes" or value("User") not in ("", "root")
    assert value("StateDirectory") == PurePosixPath(DATA_DIR).name
    assert value("ConfigurationDirectory") == PurePosixPath(CONFIG_IN_CONTAINER).parent.name
    expected = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                "PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectKernelTunables": "yes",
                "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
                "ProtectControlGroups": "yes", "RestrictNamespaces": "yes",
                "LockPersonality": "yes", "UMask": "0077", "Restart": "on-failure"}
    for key, wanted in expected.items():
        assert value(key) == wanted, f"{key}={value(key)}, want {wanted}"
    assert set(value("RestrictAddressFamilies").split()) == {"AF_INET", "AF_INET6", "AF_UNIX"}
    assert "@system-service" in value("SystemCallFilter").split()
    # numba maps JIT-compiled code executable: MemoryDenyWriteExecute=yes would break it.
    assert service.get("MemoryDenyWriteExecute", ["no"])[-1] == "no"
    assert "WantedBy" in unit["Install"]


def test_systemd_unit_takes_secrets_from_credentials_only():
    service = _systemd_unit(DEPLOY / "streamanon.service")["Service"]
    credentials = dict(c.split(":", 1) for c in service["LoadCredential"])
    assert set(credentials) == {"hmac_key", "http_token"}
    assert all(Path(source).is_absolute() for source in credentials.values())
    env = dict(e.split("=", 1) for e in service["Environment"])
    assert env["STREAMANON_HMAC_KEY_FILE"] == "%d/hmac_key"
    assert env["STREAMANON_HTTP_TOKEN_FILE"] == "%d/http_token"
    assert env["STREAMANON_DATA_DIR"] == "%S/streamanon"
    assert "STREAMANON_HMAC_KEY" not in env and "STREAMANON_HTTP_TOKEN" not in env
    assert "EnvironmentFile" not in service


def test_systemd_unit_is_a_notify_service_with_a_watchdog():
    service = _systemd_unit(DEPLOY / "streamanon.service")["Service"]
    assert service["Type"][-1] == "notify"  # READY=1 once the service and its HTTP run
    assert service.get("NotifyAccess", ["main"])[-1] == "main"
    watchdog = service["WatchdogSec"][-1]
    assert re.fullmatch(r"\d+s", watchdog), watchdog
    # fed every 5 s while every part is healthy; a store check may take 3 s
    assert 30 <= int(watchdog[:-1]) <= 300
    assert service["Restart"][-1] == "on-failure"  # a watchdog timeout counts as a failure
    # the first start calibrates the cost models and compiles the kernels before READY=1
    timeout = service["TimeoutStartSec"][-1]
    assert timeout.endswith("min") and int(timeout[:-3]) >= 5, timeout
