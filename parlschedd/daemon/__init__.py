"""The daemon: the per-period engine, the control protocol and the server loop."""
