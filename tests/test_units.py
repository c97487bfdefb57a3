from parlschedd.host.base import CounterSource
from parlschedd.units import UNITS, UNKNOWN, unit_of


def test_every_counter_source_the_daemon_may_report_has_its_unit():
    """A source added to CounterSource without a row here would show status's header
    and a figure's axis in "the counter source units", unscaled."""
    assert {s.value for s in CounterSource} <= set(UNITS)
    assert unit_of("perf:task-clock").scale == 1e9 and unit_of("schedstat") == unit_of("perf:task-clock")


def test_a_source_unknown_or_absent_is_shown_unscaled():
    """A newer daemon's source, or a history with none recorded: UNKNOWN, scale 1."""
    assert unit_of("perf:cycles") is UNKNOWN and unit_of(None) is UNKNOWN and unit_of("") is UNKNOWN
    assert UNKNOWN.scale == 1.0
