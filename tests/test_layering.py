"""The dependency direction between packages, checked on the source: a forbidden import fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Third-party SDKs and heavy libraries, each owned by exactly one module, or by the declared
# modules of one adapter (each chat SDK: that adapter's parts).
TELEGRAM_ADAPTER = (
    "channels/telegram.py",
    "channels/telegram_connect.py",
    "channels/telegram_delivery.py",
    "channels/telegram_media.py",
    "channels/telegram_mentions.py",
    "channels/telegram_updates.py",
)
DISCORD_ADAPTER = ("channels/discord.py", "channels/discord_connect.py", "channels/discord_live.py")
OWNERS: dict[str, str | tuple[str, ...]] = {
    "openai": "gateway/provider.py",
    "telegram": TELEGRAM_ADAPTER,
    "discord": DISCORD_ADAPTER,
    "tiktoken": "memory/tokens.py",
    "tiktoken_ext": "memory/tokens.py",
    "prometheus_client": "gateway/metrics.py",
    "yaml": "gateway/config_file.py",
    "PIL": "gateway/images.py",
    "pypdf": "gateway/documents.py",
    "mcp": "gateway/mcp.py",
    # The transport under both the openai and the mcp SDK: their owners name its errors.
    "httpx2": ("gateway/mcp.py", "gateway/provider.py"),
    "jsonschema": "gateway/mcp.py",
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_memory_imports_neither_gateway_nor_channels() -> None:
    """memory/ reaches the model through its own interface, never through the gateway."""
    for path in modules("memory"):
        for name in imports_of(path):
            assert name.split(".")[0] not in {"gateway", "channels"}, f"{path}: {name}"


def test_channels_import_only_the_bus() -> None:
    """channels/ may import gateway.bus, gateway.config (its models), memory.fileio and each other."""
    for path in modules("channels"):
        for name in imports_of(path):
            top = name.split(".")[0]
            if top == "gateway":
                # The bus, and the config models a channel takes as its settings.
                assert name in ("gateway.bus", "gateway.config"), f"{path}: {name}"
            if top == "memory":
                # The one file writer is a leaf every package shares.
                assert name == "memory.fileio", f"{path}: {name}"


def test_each_sdk_is_imported_by_one_module() -> None:
    """openai, telegram, discord, tiktoken, yaml, mcp and its helpers each have one owner module."""
    for package in ("gateway", "channels", "memory"):
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
    ours = {"gateway", "channels", "memory"}
    assert not {n.split(".")[0] for n in imports_of(ROOT / "gateway" / "bus.py")} & ours


def test_channels_take_only_the_channel_models_from_the_config() -> None:
    """Of gateway.config a channel imports only its own settings model, nothing of the loading."""
    for path in modules("channels"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "gateway.config":
                names = {alias.name for alias in node.names}
                assert names <= {"TelegramConfig", "DiscordConfig"}, f"{path}: {names}"
