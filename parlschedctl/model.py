"""`parlschedctl model ...`: the energy-time model commands (placeholder until issue 4)."""

import click


@click.group()
def model() -> None:
    """Fit, validate and query the energy-time model of a distributed GA."""
