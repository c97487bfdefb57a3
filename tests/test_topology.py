"""Topology discovery on fake sysfs trees, and once on the real one."""

import os
from pathlib import Path

import pytest

from parlschedd.topology import TopologyError, read_topology


def fake_sysfs(root: Path, nodes: list[str], llc: list[str], packages: list[int], isolated: str = "", nohz: str = "(null)",
               siblings: list[str] | None = None) -> Path:
    """A sysfs tree: one cpulist per NUMA node, an L3 shared list and a package id per
    CPU (``llc[i]`` and ``packages[i]`` belong to CPU i), and the SMT siblings of each
    when given (else no thread_siblings_list: a CPU is a core)."""
    cpu = root / "devices/system/cpu"
    cpu.mkdir(parents=True)
    n = len(llc)
    (cpu / "online").write_text(f"0-{n - 1}\n")
    (cpu / "isolated").write_text(isolated + "\n")
    (cpu / "nohz_full").write_text(nohz + "\n")
    for i in range(n):
        for idx, (level, kind, shared) in enumerate([(1, "Data", str(i)), (1, "Instruction", str(i)), (3, "Unified", llc[i])]):
            d = cpu / f"cpu{i}/cache/index{idx}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "type").write_text(kind + "\n")
            (d / "shared_cpu_list").write_text(shared + "\n")
        (cpu / f"cpu{i}/topology").mkdir()
        (cpu / f"cpu{i}/topology/physical_package_id").write_text(f"{packages[i]}\n")
        if siblings is not None:
            (cpu / f"cpu{i}/topology/thread_siblings_list").write_text(siblings[i] + "\n")
    for k, cpus in enumerate(nodes):
        d = root / f"devices/system/node/node{k}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    return root


@pytest.fixture
def two_socket(tmp_path):
    """8 CPUs, 2 NUMA nodes, 4 L3 groups (CCX-like), 2 packages."""
    llc = ["0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"]
    return fake_sysfs(tmp_path, ["0-3", "4-7"], llc, [0, 0, 0, 0, 1, 1, 1, 1])


def test_numa_first_on_a_numa_machine(two_socket):
    t = read_topology(two_socket)
    assert t.domains() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert t.domains("llc") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert t.domains("package") == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_llc_when_one_numa_node(tmp_path):
    root = fake_sysfs(tmp_path, ["0-3"], ["0-1", "0-1", "2-3", "2-3"], [0, 0, 0, 0])
    assert read_topology(root).domains() == [[0, 1], [2, 3]]


def test_one_domain_when_nothing_splits(tmp_path):
    root = fake_sysfs(tmp_path, ["0-1"], ["0-1", "0-1"], [0, 0])
    assert read_topology(root).domains() == [[0, 1]]


def test_auto_passes_over_caches_and_packages_of_one_cpu_each(tmp_path):
    """A guest with one vCPU per socket and no cache shared between vCPUs: a domain
    per CPU left Level 2 nothing to choose and Level 1 one thread to move a T_NUMA.
    Asked for by name, such a grouping is still given."""
    root = fake_sysfs(tmp_path, ["0-3"], ["0", "1", "2", "3"], [0, 1, 2, 3])
    t = read_topology(root)
    assert t.domains() == [[0, 1, 2, 3]]
    assert t.domains("llc") == [[0], [1], [2], [3]]


def test_auto_passes_over_a_grouping_of_one_core_each_to_the_next(tmp_path):
    """Two packages of two SMT cores whose caches sysfs shows shared by a core's
    siblings only (firmware that describes no shared last-level cache): the caches
    are cores, the packages are the domains."""
    siblings = ["0,4", "1,5", "2,6", "3,7"] * 2
    root = fake_sysfs(tmp_path, ["0-7"], siblings, [0, 0, 1, 1, 0, 0, 1, 1], siblings=siblings)
    t = read_topology(root)
    assert t.domains() == [[0, 1, 4, 5], [2, 3, 6, 7]]
    one_package = fake_sysfs(tmp_path / "one", ["0-7"], siblings, [0] * 8, siblings=siblings)
    assert read_topology(one_package).domains() == [list(range(8))]


def test_cpus_no_numa_node_lists_are_a_domain_of_their_own(tmp_path):
    """Online CPUs 6-7 in no node's cpulist were in no domain, though usable."""
    root = fake_sysfs(tmp_path, ["0-1,4-5", "2-3"], ["0-7"] * 8, [0] * 8)
    t = read_topology(root)
    assert t.domains() == t.domains("numa") == [[0, 1, 4, 5], [2, 3], [6, 7]]
    assert read_topology(root, cpus=[0, 1, 6]).domains() == [[0, 1], [6]]


def test_isolated_and_nohz_narrow_the_usable_cpus_unless_named(tmp_path):
    root = fake_sysfs(tmp_path, ["0-3", "4-7"], ["0-7"] * 8, [0] * 8, isolated="7", nohz="6")
    t = read_topology(root)
    assert t.usable == (0, 1, 2, 3, 4, 5)
    assert t.domains() == [[0, 1, 2, 3], [4, 5]]
    assert read_topology(root, cpus=[1, 2]).usable == (1, 2)
    assert read_topology(root, cpus=[1, 6, 7]).usable == (1, 6, 7)  # named: opted in


def test_the_daemons_own_affinity_does_not_narrow_the_usable_cpus(tmp_path):
    """A service confined to housekeeping CPUs (CPUAffinity=, AllowedCPUs=) dragged
    every target onto them; each target's cpuset bounds it instead (the engine)."""
    root = fake_sysfs(tmp_path, ["0-3", "4-7"], ["0-7"] * 8, [0] * 8, isolated="7")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        assert read_topology(root).usable == tuple(range(7))
    finally:
        os.sched_setaffinity(0, before)


def test_a_domain_left_without_usable_cpus_disappears(two_socket):
    assert read_topology(two_socket, cpus=[0, 1]).domains() == [[0, 1]]


def test_explicit_domains_are_checked(two_socket):
    t = read_topology(two_socket)
    assert t.domains([[0, 2], [1, 3]]) == [[0, 2], [1, 3]]
    with pytest.raises(TopologyError, match="repeats CPUs 1 of an earlier domain"):
        t.domains([[0, 1], [1]])
    with pytest.raises(TopologyError, match="empty"):
        t.domains([[]])
    with pytest.raises(TopologyError, match="unknown domains mode"):
        t.domains("socket")
    with pytest.raises(TopologyError, match="names no CPU online on this host") as e:
        t.domains([[9], [10, 11]])
    assert e.value.key == "domains"


def test_an_explicit_layout_outlives_cpus_taken_offline(two_socket):
    """A layout copied from a server's node lists refused the daemon's start once SMT
    was turned off or one CPU taken offline ("names CPUs [128, 129, ...] that are not
    usable"), where ``cpus`` naming the same CPUs only narrows: left out alike, and a
    domain with none left. What it leaves out is said (``absent``; config check and
    the daemon's start warn of it, tests/test_hostcheck.py)."""
    (two_socket / "devices/system/cpu/online").write_text("0-2,4-5\n")  # 3, 6 and 7 offline
    t = read_topology(two_socket)
    assert t.domains([[0, 1, 2, 3], [4, 5, 6, 7]]) == [[0, 1, 2], [4, 5]]
    assert t.absent([[0, 1, 2, 3], [4, 5, 6, 7]]) == [(0, [3]), (1, [6, 7])]
    assert t.domains([[0, 1], [6, 7], [4, 5, 9]]) == [[0, 1], [4, 5]]  # the second left out, 9 absent
    assert t.absent("numa") == [] and t.absent([[0, 1]]) == []


def test_an_explicit_layout_may_not_take_cpus_the_config_keeps_out(tmp_path):
    """An online CPU the rest of the config keeps out (isolated or nohz_full, or outside
    ``cpus``) is refused, and the refusal says which and why: it said "names CPUs [3]
    that are not usable (usable: [0, 1, 2, 4, 5, ...])", every usable CPU in a Python
    list (5101 characters on a 1024-CPU host)."""
    root = fake_sysfs(tmp_path, ["0-511", "512-1023"], ["0-1023"] * 1024, [0] * 1024, isolated="3")
    layout = [range(512), range(512, 1024)]
    with pytest.raises(TopologyError) as e:
        read_topology(root).domains(layout)
    assert e.value.of_config() == ("domains[0]: names CPUs 3, isolated or nohz_full on this host: their owners "
                                   "reserved them, so only the config's cpus may opt them in; name them in cpus too, "
                                   "or leave them out here")
    assert read_topology(root, cpus=range(1024)).domains(layout) == [list(range(512)), list(range(512, 1024))]
    with pytest.raises(TopologyError) as e:
        read_topology(root, cpus=range(600)).domains(layout)
    assert e.value.of_config() == ("domains[1]: names CPUs 600-1023, outside the config's cpus (0-599); add them "
                                   "to cpus, or leave them out here")


def test_a_cpu_the_config_keeps_out_is_refused_offline_too(tmp_path):
    """One outside ``cpus`` or isolated was left out as offline, and refused once it came
    online: a restart then refused the config the daemon ran with (review). All of them
    are named (one of two was), and the config's cpus are said as written, not as the
    CPUs online of them."""
    root = fake_sysfs(tmp_path, ["0-7"], ["0-7"] * 8, [0] * 8, isolated="6")
    (root / "devices/system/cpu/online").write_text("0-3,6\n")  # 4, 5 and 7 offline
    with pytest.raises(TopologyError) as e:
        read_topology(root, cpus=range(6)).domains([[0, 1], [2, 3, 6, 7]])
    assert e.value.of_config() == ("domains[1]: names CPUs 6-7, outside the config's cpus (0-5); add them to cpus, "
                                   "or leave them out here")
    with pytest.raises(TopologyError) as e:
        read_topology(root).domains([[0, 1], [2, 3, 6, 7]])
    assert e.value.of_config() == ("domains[1]: names CPUs 6, isolated or nohz_full on this host: their owners "
                                   "reserved them, so only the config's cpus may opt them in; name them in cpus too, "
                                   "or leave them out here")
    (root / "devices/system/cpu/isolated").write_text("5-6\n")  # 5 isolated and offline
    with pytest.raises(TopologyError) as e:
        read_topology(root, cpus=[0, 1, 2, 3, 4, 6]).domains([[0, 1], [2, 3, 5, 7]])
    assert e.value.of_config() == ("domains[1]: names CPUs 5,7, outside the config's cpus (0-4,6); add them to cpus, "
                                   "or leave them out here")
    with pytest.raises(TopologyError) as e:
        read_topology(root, cpus=[0, 1, 2, 3, 4, 7]).domains([[0, 1], [2, 3, 4, 5, 6]])
    assert "names CPUs 5-6, outside the config's cpus (0-4,7)" in str(e.value)
    with pytest.raises(TopologyError) as e:
        read_topology(root, cpus=range(4)).domains([[0, 1], [2, 3], [5, 6]])  # isolated ones outside cpus: outside
    assert str(e.value).startswith("names CPUs 5-6, outside the config's cpus (0-3)")
    assert read_topology(root, cpus=[0, 1, 2, 3, 4, 5]).domains([[0, 1], [2, 3, 4, 5]]) == [[0, 1], [2, 3]]  # opted in


def test_missing_sysfs_is_a_clear_error(tmp_path):
    with pytest.raises(TopologyError, match="no online CPUs"):
        read_topology(tmp_path)


def test_real_machine():
    t = read_topology()
    assert set(t.usable) <= set(os.sched_getaffinity(0))
    assert sorted(c for d in t.domains() for c in d) == list(t.usable)
