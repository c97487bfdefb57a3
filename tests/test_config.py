"""Config loading and validation: every error named by its key path."""

import importlib
import json
import os
import socket

import pytest

from parlschedd import config
from parlschedd.__main__ import REFUSED
from parlschedd.config import SUN_PATH_MAX, Config, ConfigError, from_mapping, load, socket_path_too_long


def errors_of(raw):
    with pytest.raises(ConfigError) as e:
        from_mapping(raw)
    return dict(e.value.errors)


def test_defaults_and_domain_every():
    c = from_mapping({})
    assert c == Config()
    assert c.domain_every == 40
    assert from_mapping(None) == Config()


def test_full_config_round_trip():
    c = from_mapping({
        "period_s": 0.2, "domain_period_s": 8, "domains": [[0, 1], [2, 3]], "cpus": [0, 1, 2, 3],
        "utility": "task-clock", "learning": {"eps": 0.1, "lambda": 0.0, "seed": 7, "normalise": "thread",
                                              "free": True, "free_prior": 0.5, "reward": "target"},
        "targets": [{"name": "^swaptions$", "observe": True, "threads": "worker"}, {"cgroup": "/app.slice"}],
        "restore_on_exit": False, "socket": {"path": "/run/x.sock", "group": "parlsched", "mode": "0640"},
        "metrics": "127.0.0.1:9177",
    })
    assert c.domains == ((0, 1), (2, 3)) and c.learning.lam == 0.0 and c.learning.seed == 7
    assert c.learning.free and c.learning.free_prior == 0.5 and c.learning.reward == "target"
    assert c.targets[0].observe and c.targets[1].cgroup == "/app.slice"
    assert c.socket.mode == 0o640 and c.domain_every == 40


def test_every_error_has_its_key_path():
    errs = errors_of({
        "period_s": 0, "domains": "sockets", "cpus": [-1], "utility": "cycles",
        "learning": {"eps": 2, "eta": 1.0, "seed": -3, "bogus": 1, "free": "yes", "free_prior": 2, "reward": "team"},
        "targets": [{"name": "("}, {}, {"cgroup": "../etc"}, "x"],
        "socket": {"path": "rel.sock", "mode": "999"}, "metrics": "everywhere", "colour": "red",
    })
    for key in ("period_s", "domains", "cpus", "utility", "learning.eps", "learning.eta", "learning.seed",
                "learning.bogus", "learning.free", "learning.free_prior", "learning.reward", "targets[0].name", "targets[1]", "targets[2].cgroup", "targets[3]",
                "socket.path", "socket.mode", "metrics", "colour"):
        assert key in errs, key


_BOUNDS = [  # (key path, a value just out of range, the range's edge that is in it)
    ("learning.eps", 0, 1), ("learning.lambda", -0.01, 0), ("learning.nu", 0, 1), ("learning.zeta", 1.01, 0),
    ("learning.gamma", 0, 1), ("learning.eta", 1.0, 1.01), ("learning.decay", 1.01, 1), ("learning.decay", 0, 0.5),
    ("learning.sharpness", 0.99, 1), ("learning.free_prior", 1.5, 1), ("rescan_s", 0, 0.01),
    ("history_periods", 0, 1), ("metrics_max_threads", -5, 1), ("period_s", -1, 0.01),
]


def _nested(path, value):
    head, _, rest = path.partition(".")
    return {head: _nested(rest, value) if rest else value}


@pytest.mark.parametrize("path, bad, edge", _BOUNDS, ids=[f"{p}={b}" for p, b, _ in _BOUNDS])
def test_each_range_is_checked_at_its_edge(path, bad, edge):
    """One bad key at a time: only that key is named, and the edge of its range passes."""
    assert list(errors_of(_nested(path, bad))) == [path]
    from_mapping(_nested(path, edge))


def test_a_domain_period_between_multiples_is_told_the_two_nearest():
    """It said "Level 1 runs every 1 periods, so say 0.1" for 0.14: one choice, in broken English."""
    with pytest.raises(ConfigError) as e:
        from_mapping({"period_s": 0.1, "domain_period_s": 0.14})
    assert e.value.errors == [("domain_period_s", "must be a whole multiple of period_s (0.1), got 0.14; say 0.1 "
                                                  "(Level 1 every 1 period) or 0.2 (every 2)")]


def test_domain_period_shorter_than_period_is_refused():
    assert "domain_period_s" in errors_of({"period_s": 1.0, "domain_period_s": 0.5})


def test_an_error_is_about_what_was_written_not_a_default_standing_in():
    """period_s: 0 made domain_period_s "not a whole multiple of period_s (0.1)", the
    default put in place of the bad value; a default not written is named as such."""
    assert errors_of({"period_s": 0, "domain_period_s": 0.25}) == {"period_s": "must be > 0 and <= 3600, got 0"}
    assert errors_of({"period_s": 5}) == {"domain_period_s": "must be >= period_s (5), got 4 (its default: not in the file)"}


def test_a_rule_that_is_null_needs_a_name_or_cgroup():
    assert errors_of({"targets": [None]}) == {"targets[0]": "needs a name regex or a cgroup path"}


def test_one_rule_without_its_list_is_said_in_yaml_s_words():
    """``targets: {name: app}`` (the list's dash forgotten) said "got dict"."""
    assert errors_of({"targets": {"name": "app"}}) == {"targets": "must be a list of rules, got a mapping"}
    assert errors_of({"learning": ["free"]}) == {"learning": "must be a mapping, got a list"}


def test_socket_mode_is_octal_as_written(tmp_path):
    """YAML reads a bare 400 as decimal 400, which became mode 0620 in silence; a bare
    0660 is YAML's octal, and stays accepted."""
    assert from_mapping({"socket": {"mode": "0600"}}).socket.mode == 0o600
    for bare in (400, 432, True, "rw", "-1"):  # 432: an int that was not written in octal
        assert "octal file mode such as '0660'" in errors_of({"socket": {"mode": bare}})["socket.mode"]
    written = tmp_path / "modes.yaml"
    written.write_text("socket: {mode: 0640}\n")
    assert load(written).socket.mode == 0o640
    written.write_text("socket: {mode: 640}\n")
    with pytest.raises(ConfigError, match="socket.mode: .*got 640"):
        load(written)


def test_values_are_shown_as_yaml_writes_them():
    errs = errors_of({"restore_on_exit": 1, "learning": {"free": None}, "cpus": [0, True], "utility": "x"})
    assert errs["restore_on_exit"].endswith("got 1") and errs["learning.free"].endswith("got null")
    assert errs["cpus"].endswith("got [0, true]") and errs["utility"].endswith("got 'x'")


def test_a_key_given_twice_is_an_error_with_both_lines(tmp_path):
    """YAML's loader keeps the last silently, and the check then blamed the other key."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("period_s: 0.1\nlearning:\n  eps: 0.1\nperiod_s: 5\n")
    with pytest.raises(ConfigError, match=r"line 4, column 1: .*'period_s' is given twice \(first on line 1\)"):
        load(twice)
    one_line = tmp_path / "one-line.yaml"
    one_line.write_text("socket: {mode: '0600', mode: '0666'}\n")
    with pytest.raises(ConfigError, match=r"'mode' is given twice \(first on line 1\)"):
        load(one_line)
    merged = tmp_path / "merged.yaml"  # a merge key is no key given twice, and a key beside it overrides it
    merged.write_text("targets:\n  - &r {name: app1, observe: true}\n  - <<: *r\n    name: app2\n")
    assert [(r.name, r.observe) for r in load(merged).targets] == [("app1", True), ("app2", True)]
    nested = tmp_path / "nested.yaml"
    nested.write_text("learning:\n  eps: 0.1\n  eps: 0.2\n")
    with pytest.raises(ConfigError, match=r"line 3, column 3: .*'eps' is given twice \(first on line 2\)"):
        load(nested)


def test_load_from_files(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("period_s: 0.5\ndomain_period_s: 5\n")
    assert load(good).domain_every == 10
    bad = tmp_path / "bad.yaml"
    bad.write_text("period_s: [\n")
    with pytest.raises(ConfigError, match="line 2"):
        load(bad)
    with pytest.raises(ConfigError, match=f"^cannot read config {tmp_path / 'missing.yaml'}: no such file$"):
        load(tmp_path / "missing.yaml")


def test_a_config_that_is_no_file_or_nested_without_end_is_refused_in_a_line(tmp_path):
    """A FIFO as the config held up the daemon's start and config check for good; a
    directory was click's usage error (exit 2) where every other refused config exits
    78; lists nested 500 deep (1 KB) ended both in a RecursionError's traceback."""
    from tests.conftest import refused_start
    from tests.ctl.test_cli import ctl

    fifo, deep = tmp_path / "fifo.yaml", tmp_path / "deep.yaml"
    os.mkfifo(fifo, 0o600)
    deep.write_text("period_s: " + "[" * 500 + "]" * 500 + "\n")
    deep.chmod(0o600)
    for given, said in ((fifo, f"cannot read config {fifo}: not a regular file (a FIFO, a socket or a device); "
                                "give --config the YAML file itself"),
                         (tmp_path, f"cannot read config {tmp_path}: a directory; give --config the YAML file itself"),
                         (deep, f"invalid config {deep}: (file): not valid YAML: nested too deeply")):
        r = refused_start(given, tmp_path / "d.sock", tmp_path / "state")
        assert r.returncode == REFUSED and r.stderr.startswith(f"parlschedd: {said}"), r.stderr
        assert len(r.stderr.splitlines()) == 1
    for given, said in ((fifo, "not a regular file"), (deep, "nested too deeply")):
        r = ctl("config", "check", str(given))
        assert r.returncode == 1 and said in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_missing_config_file_is_not_called_invalid(tmp_path):
    """``parlschedd --config missing.yaml`` said "invalid config missing.yaml: (file):
    No such file or directory": there is no content to be invalid. It says it cannot
    read the file, and what to do; config check says the same (exit 1 both)."""
    from tests.conftest import refused_start
    from tests.ctl.test_cli import ctl

    missing = tmp_path / "missing.yaml"
    r = refused_start(missing, tmp_path / "d.sock", tmp_path / "state")
    assert r.returncode == REFUSED and r.stderr.startswith(f"parlschedd: cannot read config {missing}: no such file; "
                                                     "check the path given to --config"), r.stderr
    assert "invalid" not in r.stderr and len(r.stderr.splitlines()) == 1
    r = ctl("config", "check", str(missing))
    assert r.returncode == 1 and r.stderr == f"cannot read config {missing}: no such file; check the path\n"
    r = ctl("config", "check", "--json", str(missing))
    said = json.loads(r.stdout)
    assert r.returncode == 1 and said["errors"] == [{"key": "(file)", "message": "cannot read: no such file"}]
    assert (said["passed"], said["valid"]) == (False, None)  # not called invalid (it was false)


def test_without_a_config_path_the_default_file_is_read_or_the_built_in_defaults_used(tmp_path, monkeypatch):
    """parlschedd without --config starts on the built-in defaults when there is no
    file at the default path (README), and reads that file, errors and all, when there
    is one. The default path is moved under tmp_path: the host's /etc is not read."""
    default = tmp_path / "etc" / "parlsched" / "parlschedd.yaml"
    monkeypatch.setattr(config, "DEFAULT_PATH", default)
    assert load(None) == Config()
    default.parent.mkdir(parents=True)
    default.write_text("period_s: 0.5\ndomain_period_s: 5\n")
    assert load(None).period_s == 0.5 and load(None).domain_every == 10
    default.write_text("period_s: [\n")
    with pytest.raises(ConfigError, match="line 2") as e:
        load(None)
    assert e.value.source == str(default)
    default.unlink()
    default.symlink_to(tmp_path / "moved-away.yaml")  # a link to a config that is gone: not "no config"
    with pytest.raises(ConfigError, match="cannot read config .*: no such file") as e:
        load(None)
    assert e.value.source == str(default)


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to another user to be refused the file")
def test_a_default_config_the_daemon_may_not_read_is_an_error_not_the_defaults(tmp_path, monkeypatch):
    """A daemon run as another user (with capabilities) that may not look into
    /etc/parlsched ran on the built-in defaults without a word."""
    from tests.conftest import NOBODY, in_child_as

    default = tmp_path / "etc" / "parlschedd.yaml"
    default.parent.mkdir()
    default.write_text("period_s: 0.5\ndomain_period_s: 5\n")
    default.parent.chmod(0o700)
    monkeypatch.setattr(config, "DEFAULT_PATH", default)

    def as_nobody() -> str:
        try:
            return f"read period_s {load(None).period_s}"
        except ConfigError as exc:
            return str(exc)

    assert in_child_as(NOBODY, as_nobody) == f"cannot read config {default}: permission denied"


def test_shipped_default_config_is_valid():
    from pathlib import Path

    shipped = Path(__file__).parents[1] / "config" / "parlschedd.yaml"
    assert load(shipped) == Config()  # the documented file states the built-in defaults


def test_numbers_must_be_finite():
    """NaN, inf, and an integer beyond any float (401 digits: math.isfinite raised
    OverflowError, and config check ended in a traceback)."""
    errs = errors_of({"period_s": float("nan"), "domain_period_s": float("inf"), "learning": {"eta": float("inf"),
                      "sharpness": 10**400}})
    assert errs["period_s"].startswith("must be a finite number")
    assert errs["domain_period_s"].startswith("must be a finite number")
    assert errs["learning.eta"].startswith("must be a finite number")
    assert errs["learning.sharpness"].startswith("must be a finite number")


def test_a_number_yaml_1_1_loads_as_text_is_the_number_meant(tmp_path):
    """PyYAML (YAML 1.1) loads 1e-3 and 2.1e9 as text: the config refused them (with a
    hint to write 1.0e-3) where the cluster file took them. Both read them now as YAML
    1.2 does, as numbers (tests/energy/test_cluster.py); other text is still refused."""
    written = tmp_path / "exponents.yaml"
    written.write_text("period_s: 2e-2\ndomain_period_s: 4E-2\nrescan_s: 2.5e0\nlearning: {eps: 5.0e-1, lambda: 1e-4}\n")
    c = load(written)
    assert (c.period_s, c.domain_period_s, c.rescan_s, c.learning.eps, c.learning.lam) == (2e-2, 4e-2, 2.5, 0.5, 1e-4)
    assert from_mapping({"period_s": "0.5"}).period_s == 0.5  # parsed already: quoted or not is not known
    assert errors_of({"learning": {"eps": "2e0"}}) == {"learning.eps": "must be > 0 and <= 1, got 2.0"}
    for text in ("fast", "nan", "1_000", " 1e-3", "1e"):
        assert errors_of({"period_s": text}) == {"period_s": f"must be a number, got {text!r}"}
    assert "history_periods" in errors_of({"history_periods": "1e3"})  # a count is a whole number, as in YAML 1.2


def test_yaml_1_1_numbers_that_mean_something_else_in_1_2_are_refused_not_misread(tmp_path):
    """history_periods: 010 loaded as 8 (YAML 1.1's octal; 1.2 reads 10) and rescan_s:
    1:30 as 90 (1.1's base 60; 1.2 reads text), without a word."""
    written = tmp_path / "old-numbers.yaml"
    written.write_text("history_periods: 010\nrescan_s: 1:30\nperiod_s: 0.1\ndomain_period_s: 04\n")
    with pytest.raises(ConfigError) as e:
        load(written)
    said = dict(e.value.errors)
    assert said["history_periods"].endswith("got 8 (YAML 1.1 reads a number written with a leading 0 as octal: "
                                            "write it without the 0)"), said
    assert said["rescan_s"] == "must be a number, got '1:30'", said
    assert "octal" in said["domain_period_s"], said
    assert errors_of({"history_periods": "600"}) == {
        "history_periods": "must be a whole number >= 1 and <= 1,000,000, got '600'; write 600"}


def test_a_leading_0_is_refused_in_cpu_lists_and_the_seed_and_a_mode_shown_as_written(tmp_path):
    """cpus: [010] pinned to CPU 8, domains and seed the same, without a word; a mode
    out of range written in octal was shown in decimal with a hint to drop its 0."""
    written = tmp_path / "octal.yaml"
    written.write_text("cpus: [0, 010]\ndomains: [[0, 010], [1]]\nlearning: {seed: 010}\nsocket: {mode: 01777}\n")
    with pytest.raises(ConfigError) as e:
        load(written)
    said = dict(e.value.errors)
    assert "leading 0" in said["cpus"] and "leading 0" in said["domains[0]"] and "leading 0" in said["learning.seed"], said
    assert said["socket.mode"].endswith("got 01777"), said
    assert errors_of({"history_periods": 0.0})["history_periods"].endswith("got 0.0")  # no hint of a value refused
    assert errors_of({"history_periods": 1e20})["history_periods"].endswith("got 1.0e+20")


def test_a_yaml_boolean_where_text_is_meant_says_to_quote_it():
    """name: no, utility: off, socket.group: off were "got false": a value never written."""
    errs = errors_of({"targets": [{"name": False}], "utility": False, "socket": {"group": False}, "period_s": True})
    hint = "(YAML reads an unquoted yes, no, on, off as true or false: quote text)"
    assert errs["targets[0].name"] == f"must be a regular expression string, got false {hint}", errs
    assert all(hint in errs[key] for key in ("utility", "socket.group", "period_s")), errs


def test_periods_without_end_and_a_file_too_large_are_refused(tmp_path):
    """domain_period_s and rescan_s of 1e300 passed: Level 1 never ran, rules and
    cpusets were never looked at again. A config of tens of MB took seconds to parse
    in the daemon's loop at a reload, past the watchdog's 30 s at some 110 MB."""
    assert errors_of({"domain_period_s": 1e300, "rescan_s": 1e300}) == {
        "domain_period_s": "must be > 0 and <= 86400, got 1.0e+300", "rescan_s": "must be > 0 and <= 3600, got 1.0e+300"}
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError) as e:
        load(big)
    assert e.value.errors == [("(file)", "larger than 1 MiB, more than any config needs (is it the right file?)")]


def test_a_period_shorter_than_the_daemons_own_work_is_refused():
    """period_s: 0.0001 passed: 10,000 periods a second, each the daemon's own work."""
    message = errors_of({"period_s": 0.0001, "domain_period_s": 0.25})["period_s"]  # and no error of how the two relate
    assert message.startswith("must be >= 0.01 s, got 0.0001 (10,000 periods a second): each period costs the daemon")
    assert "the paper's T_CPU is 0.1 s" in message
    assert errors_of({"period_s": 0.0001, "domain_period_s": 0.25}).keys() == {"period_s"}
    assert from_mapping({"period_s": 0.01, "domain_period_s": 0.5}).period_s == 0.01  # the floor itself is allowed


def test_what_the_daemon_could_not_run_with_is_refused_by_its_key():
    """config check said ok to these, and the daemon then died on each with a
    traceback: period_s 3000000 (epoll's wait overflows, after READY), history_periods
    1e20 (every attach failed making its ring), a NUL byte in socket.path (bind
    refuses it, after a stray socket was made) or in a rule's cgroup."""
    assert errors_of({"period_s": 3000000, "domain_period_s": 3600}) == {
        "period_s": "must be > 0 and <= 3600, got 3000000"}
    assert from_mapping({"period_s": 3600, "domain_period_s": 7200}).period_s == 3600  # an hour itself is allowed
    assert errors_of({"history_periods": 10**20}) == {
        "history_periods": "must be a whole number >= 1 and <= 1,000,000, got 100000000000000000000"}
    assert from_mapping({"history_periods": 1_000_000}).history_periods == 1_000_000
    assert errors_of({"socket": {"path": "/run/x\0y"}}) == {
        "socket.path": "must be an absolute path without a NUL byte, got '/run/x\\x00y'"}
    assert errors_of({"targets": [{"cgroup": "/jobs\0x"}]}).keys() == {"targets[0].cgroup"}


def test_metrics_port_must_fit_in_16_bits():
    assert "0-65535" in errors_of({"metrics": "127.0.0.1:99999"})["metrics"]
    assert from_mapping({"metrics": "127.0.0.1:65535"}).metrics == "127.0.0.1:65535"


def test_a_config_that_is_not_utf8_names_its_line(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"period_s: 0.5\n# caf\xe9\n")
    with pytest.raises(ConfigError) as e:
        load(latin1)
    assert e.value.errors == [("line 2", "not UTF-8 text (byte 0xe9); save the file as UTF-8")]


def test_a_socket_path_longer_than_a_unix_socket_holds_is_an_error():
    """No host binds a socket path of more than sun_path's 108 bytes less its NUL:
    config check said ok, and the daemon then refused to start ("147 bytes, ... at
    most 108"; and at 108 bytes, "AF_UNIX path too long")."""
    at_most = "/run/" + "s" * (SUN_PATH_MAX - len("/run/"))
    assert from_mapping({"socket": {"path": at_most}}).socket.path == at_most
    assert errors_of({"socket": {"path": at_most + "x"}}) == {
        "socket.path": f"{SUN_PATH_MAX + 1} bytes, a Unix socket's path holds at most {SUN_PATH_MAX}; choose a shorter path"}
    assert "socket.path" in errors_of({"socket": {"path": "/run/" + "\u00e9" * 52}})  # bytes, not characters: 109


def test_the_longest_socket_path_the_config_takes_binds_and_one_byte_more_does_not(tmp_path):
    """The limit is the kernel's (and Python's), checked on a real socket."""
    stem = str(tmp_path / "s")
    path = stem + "s" * (SUN_PATH_MAX - len(os.fsencode(stem)))
    assert len(os.fsencode(path)) == SUN_PATH_MAX and socket_path_too_long(path) is None
    for name, binds in ((path, True), (path + "x", False)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(name)
            except OSError:
                assert not binds, f"{len(os.fsencode(name))} bytes did not bind"
            else:
                assert binds, f"{len(os.fsencode(name))} bytes bound"
    assert socket_path_too_long(path + "x") is not None


def test_cpus_may_be_a_cpu_list_as_the_kernel_writes_it(tmp_path):
    """``cpus: "0-1"`` was refused ("must be a non-empty list of CPU numbers"), though
    admins write CPU lists so and the daemon prints them so; a domain may be one too."""
    assert from_mapping({"cpus": "0-1"}).cpus == (0, 1)
    assert from_mapping({"cpus": " 8, 0-3 "}).cpus == (0, 1, 2, 3, 8)
    assert from_mapping({"domains": ["0-1", [2, 3]]}).domains == ((0, 1), (2, 3))
    written = tmp_path / "cpus.yaml"
    written.write_text("cpus: 0-3,8\n")  # plain YAML: a string
    assert load(written).cpus == (0, 1, 2, 3, 8)
    assert errors_of({"cpus": "0-x"}) == {"cpus": "bad CPU number 'x' in CPU list '0-x'; write CPU numbers and "
                                                  "ranges such as '0-3,8', or a list such as [0, 1, 2, 3, 8]"}
    assert "descending CPU range '3-1'" in errors_of({"cpus": "3-1"})["cpus"]
    assert errors_of({"cpus": ""})["cpus"].startswith("names no CPU, got ''")
    assert "domains[1]" in errors_of({"domains": ["0-1", "2-"]})
    assert "or a CPU list such as '0-3,8'" in errors_of({"cpus": 3})["cpus"]
    # the list form had no bound where the text form has one ('70000' was refused, [0, 70000] taken)
    assert errors_of({"cpus": [0, 70000]}) == {"cpus": "CPU number 70000 is above any CPU (65536)"}
    assert errors_of({"domains": [[0], [65536]]})["domains[1]"].startswith("CPU number 65536 is above any CPU")
    # a CPU list, not every CPU in a Python list (2537 characters for '0-511' twice)
    assert errors_of({"domains": ["0-511", "0-511"]}) == {
        "domains[1]": "repeats CPUs 0-511 of an earlier domain; a CPU belongs to one domain"}


@pytest.mark.parametrize("raw, key, said", [
    ({"domains": 3}, "domains", "must be one of"),
    ({"domains": "bogus"}, "domains", "package or a list of CPU lists, got 'bogus'"),  # the list named too (review)
    ({"domains": []}, "domains", "or a list of CPU lists, got []"),
    ({"targets": [{"name": 5}]}, "targets[0].name", "must be a regular expression string, got 5"),
    ({"targets": [{"name": "x", "threads": ["w"]}]}, "targets[0].threads", "must be a regular expression string, got [w]"),
    ({"targets": [{"cgroup": 7}]}, "targets[0].cgroup", "must be an absolute cgroup path"),
])
def test_a_key_of_the_wrong_kind_is_named_with_what_it_got(raw, key, said):
    """What a user wrote where another kind of value belongs is named under its key
    path, never taken as something else (a number for a regex, an empty list for no
    domains)."""
    errors = errors_of(raw)
    assert list(errors) == [key] and said in errors[key], errors


def test_config_check_of_a_file_the_user_cannot_read_says_so_as_of_one_it_cannot_reach(open_dir, tmp_path):
    """A user's config check of an existing file it may not read (root's 0600) was
    click's usage error (exit 2, "File ... is not readable", --json's stdout empty),
    while one under a directory it may not enter said "cannot read config ...:
    permission denied" (exit 1, --json's "(file)" error) as the command means to."""
    from click.testing import CliRunner

    from parlschedctl.cli import cli
    from tests.conftest import NOBODY, in_child_as

    importlib.import_module("parlschedd.hostcheck")  # nobody may not read the library under /root
    unreadable = open_dir / "secret.yaml"
    unreadable.write_text("period_s: 0.1\n")
    unreadable.chmod(0o600)
    unreachable = tmp_path / "parlschedd.yaml"  # root's 0700 tmp_path
    unreachable.write_text("period_s: 0.1\n")

    def check(*args: str) -> list:
        result = CliRunner().invoke(cli, ["config", "check", *args])
        return [result.exit_code, result.stdout, result.stderr]

    for path in (unreachable, unreadable):
        code, _, said = in_child_as(NOBODY, lambda p=path: check(str(p)))
        assert code == 1 and said == f"cannot read config {path}: permission denied\n", (path, code, said)
        code, out, _ = in_child_as(NOBODY, lambda p=path: check("--json", str(p)))
        assert code == 1 and json.loads(out)["errors"] == [{"key": "(file)", "message": "cannot read: permission denied"}]
