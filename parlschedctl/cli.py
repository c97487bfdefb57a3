"""parlschedctl: a thin command-line client (shared/spec/interfaces.md).

It parses, calls and prints. Exit codes: 0 success, 1 refused or failed,
2 usage error (click's default), 3 the daemon is not reachable.
"""

from __future__ import annotations

import click

from parlschedd import __version__
from parlschedctl.model import model


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="parlschedctl")
def cli() -> None:
    """Control the parlsched daemon and use the energy-time model."""


cli.add_command(model)


def main() -> None:
    cli(prog_name="parlschedctl")
