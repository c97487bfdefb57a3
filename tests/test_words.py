import signal

from parlschedd.words import counted, duration, signal_name


def test_signal_names_cover_the_real_time_signals_python_leaves_unnamed():
    """Python names only SIGRTMIN and SIGRTMAX; the others between are SIGRTMIN+N, as
    kill -l says, and a number of no signal says so."""
    assert signal_name(signal.SIGKILL) == "SIGKILL"
    assert signal_name(signal.SIGRTMIN + 3) == "SIGRTMIN+3"
    assert signal_name(signal.SIGRTMIN) == "SIGRTMIN" and signal_name(signal.SIGRTMAX) == "SIGRTMAX"
    assert signal_name(signal.SIGRTMAX - 1) == f"SIGRTMIN+{signal.SIGRTMAX - 1 - signal.SIGRTMIN}"
    assert signal_name(200) == "signal 200"


def test_counted_says_one_in_the_singular():
    assert counted(1, "period") == "1 period" and counted(4, "period") == "4 periods" and counted(0, "run") == "0 runs"


def test_duration_reads_as_a_time_to_plan_around():
    said = [duration(s) for s in (0.4, 45, 99.4, 100, 754, 5969, 5999, 7560, 35999, 36000, 147_600)]
    assert said == ["0 s", "45 s", "99 s", "2 min", "13 min", "99 min", "1.7 h", "2.1 h", "10 h", "10 h", "41 h"]
