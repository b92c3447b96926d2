"""MkDocs hook: the CLI reference page is generated from the typer app at build time, never copied by hand."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- generated: the deploykit CLI reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    import click
    import typer.main
    from typer.cli import get_docs_for_click

    from deploykit.cli.main import app

    command = typer.main.get_command(app)
    context = click.Context(command, info_name="deploykit")
    reference = get_docs_for_click(obj=command, ctx=context, name="deploykit")
    # typer writes the top command as a level-1 heading; the page has its own title
    reference = reference.replace("# `deploykit`", "## `deploykit`", 1)
    return markdown.replace(MARKER, reference)
