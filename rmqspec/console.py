"""The consoles every command prints through (issue 27 item 12).

On a terminal: rich as usual (colour, tables fitted to the window). Anywhere else (a pipe, a log, CI):
plain text: no colour codes, no hard wrap at 80 columns (a line is as long as what it says, so ``grep``
keeps it whole), and tables as wide as their content. Never emoji codes: ``host.invalid:123:`` is an
address, not ``:123:``.
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.console import Console

# A table on a pipe is as wide as its content up to this; text lines are never wrapped (soft_wrap).
PLAIN_WIDTH = 1000


def make_console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr): rich on a terminal, plain text elsewhere."""
    if Console(stderr=stderr).is_terminal:
        return Console(stderr=stderr, emoji=False)
    return Console(
        stderr=stderr,
        soft_wrap=True,
        width=PLAIN_WIDTH,
        color_system=None,
        emoji=False,
        highlight=False,
    )


class Format(enum.StrEnum):
    """How a list command prints: text for people, JSON for programs."""

    TEXT = "text"
    JSON = "json"


FormatOpt = Annotated[Format, typer.Option("--format", help="text, or json for programs")]
