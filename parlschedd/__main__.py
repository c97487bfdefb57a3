"""parlschedd: the root daemon (shared/spec/interfaces.md, "Installed commands")."""

from __future__ import annotations

import os
import sys
from functools import partial
from typing import NoReturn

import click
import structlog

from parlschedd import __version__, config as config_mod
from parlschedd.logging import LEVELS, configure

# The exit status of a start refused with a one-line reason (a bad or untrusted config,
# an unusable socket or state dir, missing privileges): EX_CONFIG, which systemd shows as
# "status=78/CONFIG". The unit names it in RestartPreventExitStatus=, so systemd does not
# start again, every RestartSec, what will be refused again until the admin acts, and then
# refuse the admin's own start after the fix ("Start request repeated too quickly"); a
# crash (an uncaught exception exits 1, a signal) is still restarted.
REFUSED = 78


def _a_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An empty path is a usage error: --socket '' bound the config's socket,
    --state-dir '' took the working directory, without a word, and --config '' was
    "cannot read config .: a directory"."""
    if value == "":
        raise click.BadParameter("an empty path: give a path", ctx, param)
    return value


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(), default=None, callback=_a_path,  # a directory: load() says so, exit 78
              help=f"YAML config (default {config_mod.DEFAULT_PATH}; built-in defaults when absent). "
                   "A file given here that cannot be read stops the daemon with exit 78 (EX_CONFIG).")
# A relative --socket is bound as given (an absolute path in a deep directory can pass
# the 107 bytes of a socket address); the start log names both paths absolute.
@click.option("--socket", "socket_path", default=None, callback=_a_path,
              help="Control socket path (default: the config's socket.path).")
@click.option("--state-dir", default="/run/parlsched", show_default=True, callback=_a_path,
              help="Where the state file lives.")
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True)
@click.option("--log-level", type=click.Choice(LEVELS), default="info", show_default=True)
@click.version_option(__version__, prog_name="parlschedd")
def main(config_path: str | None, socket_path: str | None, state_dir: str, log_format: str, log_level: str) -> None:
    """Run the PaRLSched daemon in the foreground."""
    from parlschedd.daemon.server import Daemon, StartupError
    from parlschedd.hostcheck import config_file_untrusted

    configure(log_format, log_level)
    try:
        cfg = config_mod.load(config_path, judge=partial(config_file_untrusted, euid=os.geteuid()))
    except config_mod.ConfigUntrusted as exc:  # refused unread, in the start check's words
        _refuse(str(exc), log_format, state_dir)
    except config_mod.ConfigUnreadable as exc:
        _refuse(f"{exc}; {_unreadable_hint(exc, config_path)}", log_format, state_dir)
    except config_mod.ConfigError as exc:
        _refuse(f"invalid config {exc}", log_format, state_dir)
    daemon = Daemon(cfg, config_path, socket_path or cfg.socket.path, state_dir)
    try:
        daemon.run()
    except StartupError as exc:  # only a start's: a failure once running exits 1, and systemd restarts it
        _refuse(str(exc), log_format, state_dir)


def _refuse(reason: str, log_format: str, state_dir: str) -> NoReturn:
    """Stop a start that cannot succeed as it is, with its one-line reason: a JSON
    line as every other under --log-format json (the journal's reader, a log collector,
    parses each line; this one is the line an admin needs most). The masks a crashed
    run left pinned are put back first (``put_back_after_refusal``)."""
    from parlschedd.daemon.server import put_back_after_refusal

    try:
        put_back_after_refusal(state_dir)
    except Exception as exc:  # a bug, a host oddity: the refusal's reason and exit 78 come first
        structlog.get_logger().error("masks a crashed run left pinned not put back", state_dir=state_dir,
                                     error=f"{type(exc).__name__}: {exc}")
    if log_format == "json":
        structlog.get_logger().error("refused to start", error=reason)
    else:
        click.echo(f"parlschedd: {reason}", err=True)
    sys.exit(REFUSED)


def _unreadable_hint(exc: config_mod.ConfigUnreadable, config_path: str | None) -> str:
    """What to do about a config file that cannot be read."""
    if exc.not_a_file:
        return "give --config the YAML file itself"
    if not exc.missing:
        return "parlschedd must be able to read it (as root, or the user it runs as)"
    if config_path is not None:
        return (f"check the path given to --config, or leave --config out for {config_mod.DEFAULT_PATH} "
                "(the built-in defaults when there is none)")
    return "it is a link to a file that is gone: restore the file, or remove the link for the built-in defaults"


if __name__ == "__main__":
    main()
