"""The deployment files in deploy/: the systemd unit, the example config and env file, Docker.

These files are not imported by anything, so nothing else notices when they drift from the code;
each test ties one of them to the code or to the tool that will read it.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from gateway.cli.main import EX_CONFIG
from gateway.config.file import load_config
from gateway.config.models import CHAT_PLATFORMS, Config
from gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "memgate.service"
SANDBOXING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectControlGroups": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "LockPersonality": "yes",
    "CapabilityBoundingSet": "",
}


def looks_secret(name: str) -> bool:
    """A variable named like a secret: a KEY, TOKEN, SECRET or PASSWORD word in it."""
    return bool({"KEY", "TOKEN", "SECRET", "PASSWORD"} & set(name.upper().split("_")))


# -- systemd unit -----------------------------------------------------------------------------------
def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file as (key, value) pairs in order; keys may repeat, as systemd allows."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def service_values(key: str) -> list[str]:
    return [v for k, v in parse_unit(UNIT.read_text())["Service"] if k == key]


def service_value(key: str) -> str:
    values = service_values(key)
    assert len(values) == 1, f"{key} set {len(values)} times in {UNIT}"
    return values[0]


def verify_unit(text: str, tmp_path: Path) -> tuple[int, list[str]]:
    """Run systemd-analyze verify on `text`; return its status and the lines about this unit.

    verify exits 0 even for lines it ignores (an unknown key, an unparsable value), so the lines
    that name the unit are what tells a clean unit from a broken one. Lines about the host's own
    units (network-online.target, …) are not ours to judge.
    """
    path = tmp_path / "memgate.service"
    path.write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    output = (done.stdout + done.stderr).splitlines()
    return done.returncode, [line for line in output if "memgate.service" in line]


def runnable_unit() -> str:
    """The shipped unit with ExecStart pointed at this interpreter.

    verify fails on an ExecStart binary that does not exist, and the shipped path
    (/opt/memgate/.venv/bin/memgate) exists only on an installed server. `python -m gateway run`
    is the same command through the interpreter running these tests; every other line is as shipped.
    """
    text = UNIT.read_text()
    shipped = re.search(r"^ExecStart=(\S+) run$", text, flags=re.MULTILINE)
    assert shipped, "ExecStart must be `<absolute path to memgate> run`"
    return text.replace(shipped.group(0), f"ExecStart={sys.executable} -m gateway run")


needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


@needs_systemd_analyze
def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts the unit without a single complaint about it."""
    status, complaints = verify_unit(runnable_unit(), tmp_path)
    assert (status, complaints) == (0, [])


@needs_systemd_analyze
def test_verify_check_catches_a_bad_value(tmp_path: Path) -> None:
    """The verify check fails on a value systemd ignores, so its passing means something."""
    broken = runnable_unit().replace("ProtectSystem=strict", "ProtectSystem=stricter")
    _, complaints = verify_unit(broken, tmp_path)
    assert any("protect system" in line.lower() for line in complaints), complaints


def test_unit_runs_memgate_from_an_absolute_path() -> None:
    """ExecStart is an absolute path to the memgate console script, running `memgate run`."""
    command = shlex.split(service_value("ExecStart"))
    assert Path(command[0]).is_absolute()
    assert Path(command[0]).name == "memgate"
    assert command[1:] == ["run"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "memgate" in scripts


def test_unit_restarts_on_failure_but_not_on_bad_config() -> None:
    """Restart=on-failure, except on the CLI's bad-config status 78, so a bad file cannot loop."""
    assert service_value("Restart") == "on-failure"
    assert str(EX_CONFIG) in service_value("RestartPreventExitStatus").split()


def test_memgate_run_exits_with_the_status_the_unit_does_not_restart(tmp_path: Path) -> None:
    """`memgate run` on a config with an unknown key exits with RestartPreventExitStatus."""
    config = tmp_path / "config.yaml"
    config.write_text(f"workspace: {tmp_path / 'workspace'}\nno_such_key: 1\n")
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "MEMGATE_HOME": str(tmp_path)},
    )
    assert done.returncode in {int(s) for s in service_value("RestartPreventExitStatus").split()}
    assert "no_such_key" in done.stderr


def test_unit_is_sandboxed() -> None:
    """The unit's sandboxing and the extras a network service can live with are all set."""
    found = {key: service_value(key) for key in SANDBOXING}
    assert found == SANDBOXING
    user = service_value("User")
    assert user and user not in {"root", "0"}


def test_unit_keeps_state_config_and_secrets_where_the_docs_say() -> None:
    """StateDirectory is MEMGATE_HOME, the config is in /etc/memgate, secrets in an EnvironmentFile."""
    environment = dict(
        item.split("=", 1) for line in service_values("Environment") for item in shlex.split(line)
    )
    assert service_value("StateDirectory") == "memgate"
    assert environment["MEMGATE_HOME"] == "/var/lib/memgate"
    assert environment["MEMGATE_CONFIG"] == "/etc/memgate/config.yaml"
    assert service_value("EnvironmentFile").lstrip("-") == "/etc/memgate/memgate.env"
    assert not [name for name in environment if looks_secret(name)]


def test_unit_stop_timeout_covers_the_clean_shutdown() -> None:
    """SIGTERM, and more than twice the default shutdown_grace before systemd sends SIGKILL."""
    assert service_value("KillSignal") == "SIGTERM"
    assert float(service_value("TimeoutStopSec")) > 2 * Config().shutdown_grace


# -- example config and env file --------------------------------------------------------------------
def read_env_example() -> dict[str, str]:
    pairs = {}
    for line in (DEPLOY / "memgate.env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, sep, value = line.partition("=")
            assert sep and name == name.strip(), f"not VAR=value: {line!r}"
            pairs[name] = value
    return pairs


def model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every dotted key a config file may set, from the pydantic model itself."""
    keys = set()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        annotation = field.annotation
        if isinstance(field.default, BaseModel):
            # A section that is on by default (even one `null` turns off) lists its keys.
            annotation = type(field.default)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= model_keys(annotation, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def file_keys(tree: dict[str, object], prefix: str = "") -> set[str]:
    keys = set()
    for name, value in tree.items():
        if isinstance(value, dict) and value:  # `{}` is a value (an empty map), not a section
            keys |= file_keys(value, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def test_env_example_names_every_secret_and_ships_none() -> None:
    """The env example has the four secrets, each left empty."""
    assert read_env_example() == {
        "OPENAI_API_KEY": "",
        "TELEGRAM_BOT_TOKEN": "",
        "DISCORD_BOT_TOKEN": "",
        "MATRIX_ACCESS_TOKEN": "",
    }


def test_example_config_loads_with_the_real_loader(tmp_path: Path) -> None:
    """The example config loads with the env example's variables; the workspace follows MEMGATE_HOME."""
    env = {**read_env_example(), "OPENAI_API_KEY": "sk-test", "MEMGATE_HOME": str(tmp_path)}
    config = load_config(DEPLOY / "config.example.yaml", env=env)
    assert config.workspace == tmp_path / "workspace"
    assert config.llm.api_key == "sk-test"


def test_example_config_needs_no_variable_of_a_disabled_platform(tmp_path: Path) -> None:
    """With every chat platform disabled (as shipped), their tokens' variables may be unset: only
    the model's key is needed, whatever platforms the example names."""
    env = {"OPENAI_API_KEY": "sk-test", "MEMGATE_HOME": str(tmp_path)}
    config = load_config(DEPLOY / "config.example.yaml", env=env)
    assert not any(getattr(config.channels, name).enabled for name in CHAT_PLATFORMS)


@pytest.mark.parametrize(
    "home", ["telegram:42", "discord:99", "matrix:!room:example.org", "slack:C1"]
)
def test_the_heartbeat_home_may_be_any_chat_platform(tmp_path: Path, home: str) -> None:
    """automation.home names a chat on any platform the config has a section for, and no other."""
    env = {"OPENAI_API_KEY": "sk-test", "MEMGATE_HOME": str(tmp_path)}
    path = tmp_path / "config.yaml"
    path.write_text(f"automation:\n  home: '{home}'\n")
    assert load_config(path, env=env).automation.home == home
    path.write_text("automation:\n  home: 'irc:#memgate'\n")
    with pytest.raises(ConfigError, match="the platform one of telegram, discord, matrix, slack"):
        load_config(path, env=env)


def test_example_config_sets_every_key() -> None:
    """Every key the config model accepts appears in the example, and nothing else does."""
    example = yaml.safe_load((DEPLOY / "config.example.yaml").read_text())
    assert file_keys(example) == model_keys(Config)


def test_example_config_reads_secrets_only_from_the_environment() -> None:
    """The secrets in the example are ${VAR} references the env example defines."""
    example = yaml.safe_load((DEPLOY / "config.example.yaml").read_text())
    secrets = {
        "llm.api_key": example["llm"]["api_key"],
        "channels.telegram.token": example["channels"]["telegram"]["token"],
        "channels.discord.token": example["channels"]["discord"]["token"],
        "channels.matrix.token": example["channels"]["matrix"]["token"],
    }
    names = {key: re.fullmatch(r"\$\{(\w+)\}", value) for key, value in secrets.items()}
    assert all(names.values()), secrets
    assert {m.group(1) for m in names.values() if m} == set(read_env_example())


# -- Docker -----------------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        instructions.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def docker_args(name: str) -> list[str]:
    return [args for word, args in dockerfile_instructions() if word == name]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not the exec form: {args}"
    return value


def test_dockerfile_base_and_command() -> None:
    """python:3.11-slim, and `memgate run` as the default command."""
    assert docker_args("FROM") == ["python:3.11-slim"]
    assert [exec_form(args) for args in docker_args("CMD")] == [["memgate", "run"]]


def test_dockerfile_runs_as_a_non_root_user() -> None:
    """The last USER, the one the container runs as, is not root."""
    users = docker_args("USER")
    assert users and users[-1].split(":")[0] not in {"root", "0"}


def test_dockerfile_keeps_state_in_a_volume() -> None:
    """/data is a VOLUME and it is MEMGATE_HOME."""
    volumes = [path for args in docker_args("VOLUME") for path in exec_form(args)]
    assert "/data" in volumes
    env = dict(item.split("=", 1) for args in docker_args("ENV") for item in shlex.split(args))
    assert env["MEMGATE_HOME"] == "/data"


def test_dockerfile_bakes_in_no_secret() -> None:
    """No ENV or ARG names a key, token, secret or password."""
    names = [
        item.split("=", 1)[0]
        for word in ("ENV", "ARG")
        for args in docker_args(word)
        for item in shlex.split(args)
    ]
    assert names
    assert not [name for name in names if looks_secret(name)]


def test_dockerfile_copies_what_the_wheel_is_built_from() -> None:
    """COPY sources exist and cover pyproject's readme and every package of the wheel."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    sources = [s for args in docker_args("COPY") for s in shlex.split(args)[:-1]]
    assert all((ROOT / source).exists() for source in sources), sources
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert {"pyproject.toml", project["project"]["readme"], *packages} <= set(sources)


def test_dockerfile_healthcheck_asks_the_example_configs_health_endpoint() -> None:
    """HEALTHCHECK fetches /healthz on the address health.listen has in the example config."""
    (healthcheck,) = docker_args("HEALTHCHECK")
    listen = yaml.safe_load((DEPLOY / "config.example.yaml").read_text())["health"]["listen"]
    assert f"http://{listen}/healthz" in healthcheck


def test_compose_service_matches_the_dockerfile() -> None:
    """One service: env_file, a named volume on /data, unless-stopped, the Dockerfile's healthcheck."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    ((_, service),) = compose["services"].items()
    assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    assert service["env_file"] == "memgate.env"
    assert service["restart"] == "unless-stopped"
    volume, _, mount = service["volumes"][0].partition(":")
    assert (volume in compose["volumes"], mount) == (True, "/data")
    (healthcheck,) = docker_args("HEALTHCHECK")
    assert service["healthcheck"]["test"] == ["CMD", *exec_form(healthcheck.partition("CMD ")[2])]
    (config,) = service["configs"]
    assert config["target"] == service["environment"]["MEMGATE_CONFIG"]
    assert int(service["stop_grace_period"].removesuffix("s")) > 2 * Config().shutdown_grace


def test_service_docs_name_only_files_that_exist() -> None:
    """Every deploy/ file docs/service.md refers to is in the repository."""
    docs = (ROOT / "docs" / "service.md").read_text()
    named = set(re.findall(r"deploy/[\w.-]+", docs))
    assert named
    assert [name for name in sorted(named) if not (ROOT / name).exists()] == []
