"""parlschedctl: a thin command-line client (shared/spec/interfaces.md).

It parses, calls and prints. Exit codes: 0 success, 1 refused or failed,
2 usage error (click's default; with --json also its error object, code "usage"),
3 the daemon is not reachable.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import json
import math
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import click

from parlschedd import __version__
from parlschedd.build import build_id, other_build
from parlschedctl import client, runner
from parlschedd.daemon import protocol
from parlschedctl.outputs import FILE, OUT_FILE, CannotWrite, check_figure, figure_suffix, print_json
from parlschedctl.render import printable, status_screen, status_table, terminal_size, unpinned_warning
from parlschedctl.runner import PlotFailed, draw
from parlschedd.words import n_threads

if TYPE_CHECKING:  # config check loads them when it runs
    from parlschedd.hostcheck import Finding, HostReport


class _Pid(click.IntRange):
    name = "process id"  # click's words for a bad one: "'abc' is not a valid process id."


PID = _Pid(min=1, max=4_194_303)  # below PID_MAX_LIMIT (4194304): the largest pid any kernel hands out


AS_JSON = click.option("--json", "as_json", is_flag=True,
                       help='Machine-readable output on stdout; a refusal as {"error": {"code": ..., "message": ...}}.')


def talks_to_daemon(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map the client's errors to the contract's exit codes and one-line messages; with
    --json a refusal is also the daemon's error object on stdout, so that a script
    reading stdout gets an object either way (an unreachable daemon sent none: exit 3).
    A reply without what this parlschedctl reads, from a daemon of another version or
    other code of this one (an upgrade it was not restarted after), says so; it was a
    KeyError's traceback. From a daemon of this code it is a bug, shown as one."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (KeyError, TypeError, IndexError):
            pong = _ping(args[0])
            theirs = pong.get("version")
            if theirs not in (None, __version__):
                runs = f"parlschedd {printable(str(theirs))} and this parlschedctl is {__version__}"
            elif other_build(pong.get("build")):
                runs = f"other code (build {printable(pong['build'])}) than this parlschedctl's (build {build_id()})"
            else:
                raise
            _warn(f"parlschedctl: the daemon runs {runs}: its reply lacks what this one reads; restart it "
                  "(systemctl restart parlschedd)")
            sys.exit(1)
        except client.Unreachable as exc:
            _warn(f"parlschedctl: {exc}")
            sys.exit(3)
        except client.Refused as exc:
            if kwargs.get("as_json"):
                with reader_may_leave():
                    print_json({"error": {"code": exc.code, "message": str(exc)}})
            _warn(f"parlschedctl: {exc} ({exc.code})")
            sys.exit(1)
        except KeyboardInterrupt:  # waiting for the daemon's reply (a stopped one: 10 s): click said "Aborted!"
            _interrupted(kwargs.get("as_json", False))
        except BrokenPipeError:  # the socket's is client.Unreachable: stderr's reader left, or top's
            _no_reader(1, 2)  # exit 0: the request was done, or the view ended

    return wrapper


@contextlib.contextmanager
def reader_may_leave() -> Iterator[None]:
    """Output on stdout whose reader may have left (``| head``, a pager quit): lost,
    and the command goes on, its warnings on stderr and its exit code the request's.
    click's own handling exited 1 at once, so that a script saw an attach that took
    place as one refused and lost the warnings after it."""
    try:
        yield
    except BrokenPipeError:
        _no_reader(1)


def _no_reader(*fds: int) -> None:
    """``fds`` whose readers left go to /dev/null: the exit's flush of what is left in
    their buffers has nowhere to fail."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in fds:
            os.dup2(devnull, fd)


def _warn(line: str) -> None:
    """A line on stderr that is lost, not the exit code, when stderr's reader left."""
    with contextlib.suppress(OSError):
        click.echo(line, err=True)


def _ping(sock: str) -> dict[str, Any]:
    """The daemon's answer to ping (its version and build); empty when it cannot be asked."""
    try:
        return client.request(sock, "ping")
    except (client.Unreachable, client.Refused):
        return {}


class Commands(click.Group):
    """The model commands load numpy and scipy, most of a second: imported when asked
    for (or listed by --help), so that status, top and attach answer at once.

    A usage error (exit 2, click's message on stderr) of a command line that asks for
    --json also puts {"error": {"code": "usage", "message": ...}} on stdout, one line, as
    a refusal does: a script reading stdout found nothing there to parse. Whether it
    asks is read from the words (``_asks_for_json``), the options being unparsed."""

    lazy = {"model": ("parlschedctl.model", "model")}
    ARGV = "parlschedctl.argv"  # ctx.meta: the command line as given, for a usage error raised after the parse

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        words = list(args)  # the parse consumes args
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # parlschedctl's own options (--json before the command too)
            if parent is None:
                self._usage_json(words, exc)
            raise
        ctx.meta.setdefault(self.ARGV, words)
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # the command's (a group's: the subcommand's): its name, options, arguments
            if ctx.parent is None:
                self._usage_json(ctx.meta.get(self.ARGV, []), exc)
            raise

    def _usage_json(self, words: list[str], exc: click.UsageError) -> None:
        if _asks_for_json(self, words):
            with contextlib.suppress(OSError):  # stdout closed: click's message on stderr still says it
                click.echo(json.dumps({"error": {"code": "usage", "message": exc.format_message()}}))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, attr = self.lazy[name]
            try:
                return getattr(importlib.import_module(module), attr)
            except (KeyboardInterrupt, ImportError) as exc:  # in the second the import takes: as the command
                # says it a moment later; inside an extension module's init it comes as its ImportError's cause
                if not isinstance(exc, KeyboardInterrupt) and not isinstance(exc.__cause__, KeyboardInterrupt):
                    raise
                self.interrupted(ctx.find_root().meta.get(self.ARGV, []), name)
        return super().get_command(ctx, name)

    def interrupted(self, words: list[str], name: str | None = None) -> NoReturn:
        """A Ctrl-C while a command's code loads (``name``'s, or the CLI's own when
        None), said as one while it runs."""
        _interrupted(_asks_for_json(self, words), name)


def _interrupted(as_json: bool, name: str | None = None) -> NoReturn:
    """A Ctrl-C, said: exit 1, and with --json the error object on stdout."""
    if as_json:
        with contextlib.suppress(OSError):
            click.echo(json.dumps({"error": {"code": "interrupted", "message": "interrupted"}}))
    _warn(f"parlschedctl{'' if name is None else ' ' + name}: interrupted")
    sys.exit(1)


def _asks_for_json(group: click.Group, words: list[str]) -> bool:
    """Whether a command line asks for --json: the word ``--json`` (or ``--json=...``)
    anywhere among parlschedctl's own words, before the command (``parlschedctl --json
    status``, itself the usage error) or after it, before or after the word in error.
    Not a word after ``--``, nor one from CMD on in run (model measure), nor the value
    of an option that takes one (``--threads --json``), which are not options: walked
    as click reads them, each word resolved against the command it falls under."""
    command: click.Command | None = group
    rest = iter(words)
    for word in rest:
        if word == "--":
            return False
        if word == "--json" or word.startswith("--json="):
            return True
        if word.startswith("-") and word != "-":
            name, _, value = word.partition("=")
            option = next((p for p in command.params if isinstance(p, click.Option) and name in p.opts), None) \
                if command is not None else None
            if option is not None and not option.is_flag and not option.count and not value:
                next(rest, None)  # its value, whatever it reads
        elif isinstance(command, click.Group):
            with contextlib.suppress(Exception):  # a command that is not there: its options unknown
                command = command.get_command(click.Context(command), word)
        elif command is not None and not command.context_settings.get("allow_interspersed_args", True):
            return False  # CMD begins: the rest is CMD's
    return False


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--socket", "socket_path", default=None, metavar="PATH",
              help=f"Daemon socket (env PARLSCHED_SOCKET; default {client.DEFAULT_SOCKET}).")
@click.version_option(__version__, prog_name="parlschedctl")
@click.pass_context
def cli(ctx: click.Context, socket_path: str | None) -> None:
    """Control the parlsched daemon and use the energy-time model."""
    if socket_path == "":
        raise click.BadParameter("an empty path; leave --socket out for the default", param_hint="--socket")
    ctx.obj = client.socket_path(socket_path)


@cli.command()
@click.argument("pid", type=PID)
@click.option("--observe", is_flag=True, help="Measure and learn without pinning.")
@click.option("--threads", metavar="REGEX", help="Only threads whose name matches.")
@click.option("--descendants", is_flag=True, help="Also manage child processes, present and future.")
@AS_JSON
@click.pass_obj
@talks_to_daemon
def attach(sock: str, pid: int, observe: bool, threads: str | None, descendants: bool, as_json: bool) -> None:
    """Manage all threads of PID."""
    reply = client.request(sock, "attach", pid=pid, observe=observe, threads=threads, descendants=descendants)
    t = reply["target"]
    with reader_may_leave():
        if as_json:
            print_json(reply)
        else:
            click.echo(f"attached {t['pid']} ({printable(t['name'])}), {n_threads(len(t['threads']))}, mode {t['mode']}")
    if warning := unpinned_warning(reply):  # stderr: for people, with --json too
        click.echo(warning, err=True)
    if threads and not t["threads"]:
        click.echo(f"parlschedctl: warning: no thread name of {pid} matches --threads {protocol.clip(repr(threads))} "
                   f"({t.get('threads_ignored', 0)} left out); threads created or renamed later to a matching name are adopted",
                   err=True)


@cli.command()
@click.argument("pid", type=PID)
@AS_JSON
@click.pass_obj
@talks_to_daemon
def detach(sock: str, pid: int, as_json: bool) -> None:
    """Stop managing PID and restore its threads' original affinity."""
    reply = client.request(sock, "detach", pid=pid)
    with reader_may_leave():
        if as_json:
            print_json(reply)
        else:
            if reply.get("mode") == "observe":
                click.echo(f"detached {pid}: stopped observing {n_threads(reply['threads'])} (observe mode set no "
                           "mask: none to restore)")
            else:
                click.echo(f"detached {pid}, restored {n_threads(reply['restored'])}")
            if reply.get("rule") is not None:
                click.echo(f"config rule {reply['rule']} matches it: left alone until it exits (attach it to manage "
                           "it again)")
    if reply.get("state_file_error"):  # stderr: for people, with --json too
        click.echo(f"parlschedctl: warning: the daemon's state file could not be written: {reply['state_file_error']}; were it "
                   f"to crash before it is, its next start would act on the state last written (see the daemon's log)",
                   err=True)


@cli.command()
@click.argument("pid", type=PID, required=False)
@AS_JSON
@click.pass_obj
@talks_to_daemon
def status(sock: str, pid: int | None, as_json: bool) -> None:
    """The daemon and its targets; per thread: tid, name, cpu, domain, utility, pinned."""
    reply = client.request(sock, "status", pid=pid)
    with reader_may_leave():
        if as_json:
            print_json(reply)
        else:
            click.echo(status_table(reply))


ITERATIONS_RECONNECT_S = 60.0  # a systemctl restart takes seconds; a daemon not back in a minute is down


class Seconds(click.FloatRange):
    """A FloatRange of finite seconds: nan passes any bounds (every comparison with it
    is false) and inf a lower one, so top --interval nan ended in a traceback from
    sleep(), and --reconnect-timeout nan never gave up."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


@cli.command()
@click.option("--interval", type=Seconds(min=0, min_open=True, max=3600), default=None,
              help="Refresh interval, up to 3600 s (default: the daemon's period).")
@click.option("--iterations", type=click.IntRange(min=1), default=None, help="Stop after N frames shown.")
@click.option("--reconnect-timeout", type=Seconds(min=0), default=None, metavar="S",
              help="How long to wait for a daemon lost under the view before exiting 3 "
                   f"(default: for good; {ITERATIONS_RECONNECT_S:g} s with --iterations).")
@click.pass_obj
@talks_to_daemon
def top(sock: str, interval: float | None, iterations: int | None, reconnect_timeout: float | None) -> None:
    """Live view of status, refreshed every period (Ctrl-C to quit; a reader that
    stops reading, like | head, ends it as well, with exit code 0). On a terminal
    each frame is cut to the terminal's size (the rows left out are counted on its
    last line) and redrawn in place. Piped or in a file, a line with the time parts
    one frame from the next, and nothing is cut. A daemon that goes away once the
    view is up (a restart) is waited for, for --reconnect-timeout; the frames
    --iterations counts are those shown, not the refreshes that found no daemon."""
    if reconnect_timeout is None and iterations is not None:
        reconnect_timeout = ITERATIONS_RECONNECT_S  # a script's bounded run must end when the daemon does not come back
    if sys.stdout is None:  # started with stdout closed (>&-): no reader at all, as when one has left
        return
    lost_since: float | None = None
    period = 0.1  # until the daemon says its own
    shown = 0
    tty = sys.stdout.isatty()
    size: os.terminal_size | None = None
    try:
        while iterations is None or shown < iterations:
            try:
                # while the daemon is lost, a hung one's request waits only for what is left of
                # --reconnect-timeout: a whole request's 10 s more made 1 s about 20
                left = None if lost_since is None or reconnect_timeout is None else \
                    reconnect_timeout - (time.monotonic() - lost_since)
                reply = client.request(sock, "status", timeout=10.0 if left is None else min(max(left, 0.1), 10.0))
            except client.Unreachable as exc:
                if not shown:  # no view is up yet: nothing to wait for
                    raise
                if lost_since is None:
                    click.echo(f"parlschedctl: lost the daemon ({exc}); waiting for it", err=True)
                    lost_since = time.monotonic()
                elif reconnect_timeout is not None and time.monotonic() - lost_since >= reconnect_timeout:
                    raise client.Unreachable(f"{exc}; not back within {reconnect_timeout:g} s") from None
                if _reader_left(interval or period):  # while nothing is written, no EPIPE tells
                    break
                continue
            lost_since = None
            period = reply["daemon"]["period_s"]
            if tty:
                now = terminal_size()
                resized = size is not None and now != size
                frame = _screen_frame(status_screen(reply, now.lines - 1, now.columns), resized)
                size = now
            else:
                frame = _piped_frame(status_table(reply), first=not shown)
            click.echo(frame, nl=False)
            shown += 1
            if iterations is None or shown < iterations:
                time.sleep(interval or period)
    except KeyboardInterrupt:
        pass


def _screen_frame(lines: list[str], resized: bool) -> str:
    """One refresh of top on a terminal, drawn over the last from the top left, each
    line and then the rest of the screen cleared after it (clearing the whole screen
    first made every refresh flicker; it is done only after a resize, which leaves
    the last frame's lines rewrapped where the new one does not reach). ``lines``
    fit in the rows but one: the cursor rests on the last, and the newline that puts
    it there never scrolls the frame's header off the screen."""
    return ("\033[2J" if resized else "") + "\033[H" + "".join(f"{line}\033[K\n" for line in lines) + "\033[J"


def _piped_frame(text: str, first: bool) -> str:
    """One refresh of top piped or in a file: each frame but the first follows a line
    with the time, where frames ran together untold and undated."""
    stamp = datetime.now().astimezone().isoformat(timespec="milliseconds")
    return f"{text}\n" if first else f"--- {stamp} ---\n{text}\n"


def _reader_left(seconds: float) -> bool:
    """Wait ``seconds``; True as soon as the reader of a piped stdout has left (``| head``
    ended: poll(2) reports POLLERR on the pipe). A terminal or a file never reports it."""
    watch = select.poll()
    watch.register(sys.stdout.fileno(), 0)  # no events asked: only POLLERR, POLLHUP and POLLNVAL come back
    return bool(watch.poll(seconds * 1000))


def _figure_to(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """run's --plot, refused before CMD starts when the figure could not be written."""
    if path is not None:
        try:
            check_figure(path)
        except (CannotWrite, ValueError) as exc:
            raise click.BadParameter(str(exc)) from None
    return path


@cli.command(context_settings={"allow_interspersed_args": False})
@click.option("--observe", is_flag=True, help="Measure and learn without pinning.")
@click.option("--json", "as_json", is_flag=True,
              help="Also print the summary as one JSON object, the last line on stdout (CMD's output shares stdout). "
                   "It starts a line of its own: in a file, after a newline only when CMD's output did not end its "
                   "line; on a pipe, where that cannot be read back, after a newline always (an empty line may "
                   "come before it).")
@click.option("--plot", "plot_to", type=OUT_FILE, default=None, callback=_figure_to,
              help="Also draw the run, as `plot` does, into this figure once CMD has ended (its suffix is the "
                   "format: .svg, .pdf, ...; none: PNG). Checked before CMD starts; a plot that fails is said, and run "
                   "still exits with CMD's code.")
@click.option("--live/--no-live", default=None,
              help="A one-line status on stderr, redrawn in place while CMD runs, when stderr is a terminal. "
                   "Default: only when stdout goes to a file or a device (redrawn, it would write over CMD's output "
                   "on a terminal, or a pipe reader's there); never from the background.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
@talks_to_daemon
def run(sock: str, observe: bool, as_json: bool, plot_to: str | None, live: bool | None, cmd: tuple[str, ...]) -> None:
    """Start CMD, attach it, wait for it, print a summary, exit with CMD's exit code
    (128 + N when a signal N killed it; 127 when CMD is not found, 126 when it cannot run).
    Everything from CMD on is CMD's, options too."""
    runner.run(sock, observe, as_json, plot_to, cmd, live)


@cli.command()
@click.argument("pid", type=PID)
@click.option("--out", required=True, type=OUT_FILE, callback=figure_suffix,
              help="Figure to write; its suffix is the format (.svg, .pdf, ...; none: PNG).")
@click.option("--last", type=click.IntRange(min=1, max=protocol.MAX_INT), default=None, help="Only the last N periods.")
@click.pass_obj
@talks_to_daemon
def plot(sock: str, pid: int, out: str, last: int | None) -> None:
    """Plot PID's running average speed per thread and overall, with CPU and domain changes."""
    try:
        check_figure(out)
        said = draw(sock, pid, out, last)
    except (PlotFailed, ValueError) as exc:  # CannotWrite, a figure matplotlib failed to render
        _warn(f"parlschedctl: {exc}")
        sys.exit(1)
    with reader_may_leave():
        click.echo(said)


@cli.command()
@AS_JSON
@click.pass_obj
@talks_to_daemon
def reload(sock: str, as_json: bool) -> None:
    """Re-read the daemon's config (as SIGHUP does)."""
    reply = client.request(sock, "reload")
    pending = reply.get("restart_pending")
    for warning in reply.get("warnings", []):  # applied, but not all of it usable on the daemon's host
        click.echo(f"parlschedctl: warning: {warning}", err=True)
    with reader_may_leave():
        if as_json:
            print_json(reply)
        else:
            click.echo(f"reloaded; {', '.join(pending)}: takes effect at the next restart (systemctl restart "
                       "parlschedd)" if pending else "reloaded")


@cli.group("config")
def config_group() -> None:
    """Work with config files."""


@config_group.command("check")
@click.argument("path", type=FILE)
@click.option("--any-host", is_flag=True,
              help="Check only what holds on every host, for a config meant for another machine: "
                   "what this host's daemon would refuse is a warning, not an error.")
@click.option("--json", "as_json", is_flag=True,
              help="The verdict as one JSON object on stdout: path, passed, valid, any_host, errors, refused_here, warnings.")
def config_check(path: str, any_host: bool, as_json: bool) -> None:
    """Validate a config file; print every error with its key path. Exit 1 if the file
    is invalid, or if parlschedd would refuse to start with it on this host (a CPU, a
    group, a listen address it lacks) unless --any-host."""
    from parlschedd.config import ConfigError, ConfigUnreadable, load
    from parlschedd.hostcheck import Finding, HostReport, check_host, config_file_untrusted

    unreadable = None  # the reason the file could not be read: no content to be invalid
    try:
        host = check_host(load(path))
        errors: list[Finding] = []
    except ConfigError as exc:  # ConfigUnreadable too: --json lists it under "(file)"
        host, errors = HostReport(), [Finding(*e) for e in exc.errors]
        if isinstance(exc, ConfigUnreadable):  # said as parlschedd says it
            unreadable = f"{exc}{'; check the path' if exc.missing else ''}"
        else:
            # the file's owner and mode, which the daemon judges before it reads a byte
            # (and alone: the one reason it gives), said with the content's errors
            with contextlib.suppress(OSError):
                if problem := config_file_untrusted(path, os.stat(path)):
                    host.refused.append(Finding("(file)", problem))
    failed = bool(errors) or bool(host.refused and not any_host)
    try:  # the verdict, not whether a reader stayed (| head -1), is the exit code
        _say_checked(path, any_host, as_json, errors, host, unreadable, failed)
    except BrokenPipeError:  # stderr's; stdout's is reader_may_leave's
        _no_reader(2)
    sys.exit(int(failed))


def _say_checked(path: str, any_host: bool, as_json: bool, errors: list[Finding], host: HostReport, unreadable: str | None,
                 failed: bool) -> None:
    """config check's findings on stderr and its verdict (with --json, all of it) on stdout."""
    if unreadable is not None:
        click.echo(unreadable, err=True)
    for key, message in errors if unreadable is None else ():
        click.echo(f"{path}: {key}: {message}", err=True)
    for key, message in host.refused:
        click.echo(f"{path}: {'warning: ' if any_host else ''}{key}: {message}; parlschedd refuses to start with it here",
                   err=True)
    for key, message in host.warnings:
        click.echo(f"{path}: warning: {key}: {message}", err=True)
    verdict = "ok" if not host.refused else "valid, but parlschedd would not start with it on this host"
    with reader_may_leave():
        if as_json:
            listed = {"errors": errors, "refused_here": host.refused, "warnings": host.warnings}
            print_json({"path": path, "passed": not failed, "valid": not errors if unreadable is None else None,
                        "any_host": any_host, **{name: [f._asdict() for f in found] for name, found in listed.items()}})
        elif not failed:
            click.echo(f"{path}: {verdict}")
    if failed and not errors:
        click.echo(f"{path}: {verdict} (--any-host checks a config meant for another machine)", err=True)


# What writing stdout fails with when it is a full disk, a file past ulimit -f or a
# broken terminal: said in a line, as a file --out names is; a traceback showed it.
STDOUT_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def main() -> None:
    try:
        cli(prog_name="parlschedctl")
    except OSError as exc:
        if exc.errno not in STDOUT_FAILURES or exc.filename is not None:
            raise
        with contextlib.suppress(OSError):  # what is left in stdout's buffer is not written again at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        click.echo(f"parlschedctl: cannot write the output: {exc.strerror}", err=True)
        sys.exit(1)
