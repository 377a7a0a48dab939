"""The dependency rules, checked on the source: a forbidden import fails here.

Three packages, one direction (channels/ and memory/ never import the agent); inside each, rooms
(a subpackage, or a module at the package's root) on floors: a room imports only rooms on lower
floors of its package, never one beside it, and nothing runs back up. Each third-party SDK has one
owner."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "channels", "memory")

# Top floor first. A room is named by its subpackage; a root module is the package's own room
# ("gateway" etc.) unless it is named here on a floor of its own.
FLOORS: dict[str, list[set[str]]] = {
    "gateway": [
        {"gateway.__main__"},  # `python -m gateway`: the command line
        {"gateway.cli"},
        {"gateway.service"},
        {"gateway.console"},  # the web console `memgate run` serves
        {"gateway.agent"},
        {"gateway.tools", "gateway.media"},
        {"gateway.skills"},  # the file tools read skills, the prompt lists them
        {"gateway.automation", "gateway.llm", "gateway.config"},
        {"gateway"},  # bus, errors, logs, state, units: shared by every room above
    ],
    "channels": [
        {"channels.telegram", "channels.discord", "channels.slack", "channels.matrix"},
        {"channels"},  # base, admission, inbox, pairing, live and the small helpers
    ],
    "memory": [
        {"memory.consolidation", "memory.search"},
        {"memory.budget"},
        {"memory.sessions"},
        {"memory"},  # fileio, files, tokens, errors
    ],
}
# What a package may take from another: channels only the message types, their own settings
# models and the one file writer; memory nothing of ours.
ACROSS: dict[str, set[str]] = {
    "gateway": {"channels", "memory"},
    "channels": {"gateway.bus", "gateway.config.models", "gateway.config.slack", "memory.fileio"},
    "memory": set(),
}

# Third-party SDKs and heavy libraries, each owned by exactly one module, or by the declared
# modules of one adapter (each chat SDK: that adapter's parts).
TELEGRAM_ADAPTER = tuple(
    f"channels/telegram/{name}.py"
    for name in (
        "channel",
        "connect",
        "delivery",
        "inbound",
        "media",
        "mentions",
        "presses",
        "updates",
    )
)
DISCORD_ADAPTER = (
    "channels/discord/channel.py",
    "channels/discord/connect.py",
    "channels/discord/live.py",
)
SLACK_ADAPTER = tuple(
    f"channels/slack/{name}.py" for name in ("channel", "connect", "delivery", "files")
)
MATRIX_ADAPTER = tuple(
    f"channels/matrix/{name}.py" for name in ("channel", "connect", "live", "media")
)
OWNERS: dict[str, str | tuple[str, ...]] = {
    "openai": ("gateway/llm/provider.py", "gateway/llm/clients.py"),
    "telegram": TELEGRAM_ADAPTER,
    "discord": DISCORD_ADAPTER,
    "slack_sdk": SLACK_ADAPTER,
    "nio": MATRIX_ADAPTER,
    "markdown_it": "channels/matrix/render.py",
    "tiktoken": "memory/tokens.py",
    "tiktoken_ext": "memory/tokens.py",
    "prometheus_client": "gateway/service/metrics.py",
    # The config file's, and skills' front matter (their one reader).
    "yaml": ("gateway/config/file.py", "gateway/skills/skill.py"),
    "PIL": "gateway/media/images.py",
    "pypdf": "gateway/media/documents.py",
    # servers.py names the SDK's types for mypy only: the SDK itself loads with client.py.
    "mcp": (
        "gateway/tools/mcp/servers.py",
        "gateway/tools/mcp/client.py",
        "gateway/tools/mcp/stdio.py",
    ),
    # The transport under both the openai and the mcp SDK: their owners name its errors.
    "httpx2": ("gateway/tools/mcp/client.py", "gateway/llm/provider.py"),
    "jsonschema": "gateway/tools/mcp/servers.py",
    "ruamel": "gateway/config/file.py",
    "argcomplete": "gateway/cli/completion.py",
    "json_repair": "gateway/llm/arguments.py",
    "trafilatura": "gateway/tools/web/extract.py",
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from gateway.x import y` may name a module y of the package x.
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if _exists(name) or "." not in name or not _ours(name)}


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def room_of(module: str) -> str:
    """The room a module of ours lives in: its subpackage, a root module named on a floor of its
    own, or the package's root."""
    parts = module.split(".")
    package = parts[0]
    if len(parts) > 1 and (ROOT / package / parts[1]).is_dir():
        return f"{package}.{parts[1]}"
    named = {room for floor in FLOORS[package] for room in floor}
    return module if module in named else package


def floor_of(room: str) -> int:
    package = room.split(".")[0]
    return next(i for i, floor in enumerate(FLOORS[package]) if room in floor)


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def source_imports() -> list[tuple[str, str]]:
    """Every (importer, imported) pair of our modules, from the source."""
    return [
        (module_name(path), name)
        for package in PACKAGES
        for path in modules(package)
        for name in sorted(imports_of(path))
        if _ours(name)
    ]


def forbidden(pairs: list[tuple[str, str]]) -> list[str]:
    """The imports among `pairs` against the rules, as `importer -> imported (why)`."""
    wrong = []
    for importer, name in pairs:
        package, target = importer.split(".")[0], name.split(".")[0]
        if target != package:
            if not any(name == a or name.startswith(f"{a}.") for a in ACROSS[package]):
                wrong.append(f"{importer} -> {name} (across packages)")
            continue
        mine, theirs = room_of(importer), room_of(name)
        if theirs != mine and floor_of(theirs) <= floor_of(mine):
            wrong.append(f"{importer} -> {name} ({theirs} is not below {mine})")
    return wrong


def test_every_room_is_on_a_floor() -> None:
    """Each subpackage has its floor, so a new folder must be placed before it can be imported."""
    for package in PACKAGES:
        rooms = {room_of(module_name(path)) for path in modules(package)}
        placed = {room for floor in FLOORS[package] for room in floor}
        assert rooms <= placed, f"not on a floor: {sorted(rooms - placed)}"


def test_imports_run_down_the_floors_and_never_across_a_floor() -> None:
    """No room imports one above it or beside it; packages only as ACROSS allows."""
    assert forbidden(source_imports()) == []


def test_the_rules_catch_an_arrow_back_up_or_across() -> None:
    """The check is live: an import up a floor, beside on a floor, or across packages is named."""
    assert forbidden(
        [
            ("gateway.llm.provider", "gateway.agent.loop"),
            ("gateway.media.reader", "gateway.tools.scope"),
            ("channels.base", "gateway.agent.commands.registry"),
            ("memory.sessions.store", "memory.search.searcher"),
            ("gateway.agent.loop", "gateway.llm.types"),
        ]
    ) == [
        "gateway.llm.provider -> gateway.agent.loop (gateway.agent is not below gateway.llm)",
        "gateway.media.reader -> gateway.tools.scope (gateway.tools is not below gateway.media)",
        "channels.base -> gateway.agent.commands.registry (across packages)",
        "memory.sessions.store -> memory.search.searcher "
        "(memory.search is not below memory.sessions)",
    ]


def test_each_sdk_is_imported_by_one_module() -> None:
    """openai, telegram, discord, tiktoken, yaml, mcp and its helpers each have one owner module."""
    for package in PACKAGES:
        for path in modules(package):
            relative = path.relative_to(ROOT).as_posix()
            for name in imports_of(path):
                owner = OWNERS.get(name.split(".")[0])
                allowed = (owner,) if owner is None or isinstance(owner, str) else owner
                assert relative in allowed or owner is None, (
                    f"{relative} imports {name}; only {owner} may"
                )


def test_bus_imports_nothing_of_ours() -> None:
    """gateway/bus.py is the leaf every channel depends on."""
    assert not {n for n in imports_of(ROOT / "gateway" / "bus.py") if _ours(n)}


def test_channels_take_only_the_channel_models_from_the_config() -> None:
    """Of the config a channel imports only its own settings model, nothing of the loading."""
    for path in modules("channels"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "gateway.config.models":
                names = {alias.name for alias in node.names}
                assert names <= {"TelegramConfig", "DiscordConfig", "MatrixConfig"}, (
                    f"{path}: {names}"
                )


# -- the tests themselves ------------------------------------------------------------------------


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (tests/**/test_*.py) that the module at `path` imports, by dotted name."""
    package = module_name(path).split(".")[:-1]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            named.update(f"{module}.{alias.name}" for alias in node.names)
    found = set()
    for name in named:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            if (
                parts[end - 1].startswith("test_")
                and ROOT.joinpath(*parts[:end]).with_suffix(".py").is_file()
            ):
                found.add(".".join(parts[:end]))
    return sorted(found)


def test_no_test_module_imports_another() -> None:
    """No module of tests/ imports a test module; shared code is in conftest, fakes/ or a helper."""
    importing = {
        module_name(path): imported_test_modules(path)
        for path in sorted(ROOT.glob("tests/**/*.py"))
    }
    assert {module: found for module, found in importing.items() if found} == {}
