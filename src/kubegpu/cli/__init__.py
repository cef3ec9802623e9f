"""The `kubegpu` command line: one typer app, a sub-command per component or tool."""

from __future__ import annotations

from kubegpu.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
