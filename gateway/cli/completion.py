"""Shell completion for bash, zsh and fish, from the parser itself (argcomplete): the script a
shell loads, and the answer to each of its requests.

gateway/cli/main.py imports this module only when one of them is wanted, so no other command
pays for importing argcomplete.
"""

from __future__ import annotations

import argparse

from argcomplete import autocomplete
from argcomplete.shell_integration import shellcode


def script(shell: str) -> str:
    """What `memgate completion SHELL` prints: the shell then asks `memgate` for the words."""
    return shellcode(["memgate"], shell=shell)


def answer(parser: argparse.ArgumentParser) -> None:
    """The words for the request of a shell's script (it sets _ARGCOMPLETE), then exit."""
    autocomplete(parser)
