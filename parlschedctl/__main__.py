"""The parlschedctl command (and ``python -m parlschedctl``)."""

import signal
import sys


def main() -> None:
    """Load the CLI, then run it. A Ctrl-C in the third of a second the loading takes
    (click, the client, the renderer) is held until the CLI is there and then said as
    one while the model commands load is (exit 1, "interrupted", --json's error
    object); Python's own handler printed a traceback of whichever import it fell in.
    Ignored when we were started with SIGINT ignored, as Python's handler would be."""
    held: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        from parlschedctl.cli import cli, main as run
    finally:
        signal.signal(signal.SIGINT, before)
    if held and before is not signal.SIG_IGN:
        cli.interrupted(sys.argv[1:])
    run()


if __name__ == "__main__":
    main()
