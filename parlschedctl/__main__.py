"""python -m parlschedctl: the same as the installed parlschedctl command."""

from parlschedctl.cli import main

main()
