"""The two-level scheduler: joins, leaves, timing of Level 1, one migration, resets."""

import numpy as np
import pytest

from parlschedd.learning.params import LearningParams
from parlschedd.learning.scheduler import FREE, TwoLevelScheduler

DOMAINS = [[0, 1], [2, 3, 4]]


def run(s, keys, utility_of_cpu, steps):
    u = np.full(len(keys), np.nan)
    for _ in range(steps):
        p = s.step(np.array(keys), u)
        u = np.array([utility_of_cpu(c) for c in p.cpus], dtype=float)
    return p


def test_placements_are_inside_the_thread_domain():
    s = TwoLevelScheduler(DOMAINS, LearningParams(seed=1), domain_every=5)
    p = run(s, [5, 6, 7, 8], lambda c: 1.0, 30)
    for cpu, dom in zip(p.cpus, p.domains):
        assert cpu in DOMAINS[dom]


def test_same_seed_same_decisions_other_seed_differs():
    def trace(seed):
        s = TwoLevelScheduler(DOMAINS, LearningParams(seed=seed, zeta=0.5), domain_every=3)
        out, u = [], np.full(6, np.nan)
        for k in range(60):
            p = s.step(np.arange(6), u)
            u = (p.cpus + 1.0) * (1 + 0.1 * (k % 3))
            out.append(p.cpus.copy())
        return np.array(out)

    np.testing.assert_array_equal(trace(42), trace(42))
    assert not np.array_equal(trace(42), trace(43))


def test_joins_and_leaves_keep_state_of_the_others():
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(seed=0, eps=0.5), domain_every=10)
    run(s, [10, 20], lambda c: 1.0 if c == 3 else 0.01, 200)
    x20 = s.x[s.keys == 20].copy()
    p = s.step(np.array([30, 20]), np.array([0.5, 1.0]))  # 10 left, 30 joined
    assert s.keys.tolist() == [20, 30]
    assert p.keys.tolist() == [30, 20]  # aligned with the input order
    np.testing.assert_allclose(s.x[1], [0.25] * 4)  # the newcomer starts uniform
    assert s.x[0].argmax() == x20.argmax() == 3


def test_a_forgotten_key_given_again_joins_afresh():
    """A tid the kernel gave a new thread: forgotten, it starts uniform, and its first
    period is not learned from; the other thread keeps what it learned."""
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(seed=0, eps=0.5, lam=0.0), domain_every=10)
    run(s, [10, 20], lambda c: 1.0 if c == 3 else 0.01, 200)
    x20 = s.x[1].copy()
    assert s.x[0].max() > 0.9
    s.forget([10, 99])  # 99: never known, nothing to forget
    assert s.keys.tolist() == [20]
    s.step(np.array([10, 20]), np.array([1.0, np.nan]))
    np.testing.assert_allclose(s.x[0], [0.25] * 4)
    np.testing.assert_allclose(s.x[1], x20)


def test_a_negative_utility_is_not_measured():
    """A negative rate (a counter that went back) fed to Level 1 set b = rho / eta above
    bbar = rho (step 3's raise with rho < 0): it is taken as not measured."""
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0), domain_every=1)
    s.step(np.array([1]), np.array([np.nan]))
    s.step(np.array([1]), np.array([-1.0]))
    assert np.isnan(s.rho[0])
    s.step(np.array([1]), np.array([2.0]))
    assert s.rho[0] == 2.0 and s.bench.lower[0] < s.bench.upper[0]
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0), domain_every=3)  # a window of -1 then 5
    for u in (np.nan, -1.0, 5.0):
        s.step(np.array([1]), np.array([u]))
    assert s.rho[0] == 5.0, "the mean of the periods measured, 5; with -1 counted, 2"


def test_a_thread_gone_idle_stays_satisfied_and_takes_no_move():
    """A worker that goes idle (u = 0, a thread blocked on a queue) used to be
    unsatisfied every window (rho falling by 1 - nu below b = rho) and take the one
    move of nearly every window (198 of 200) from the working threads. Its idle windows
    are not measured: its aspiration stays, and it moves no more than the others."""
    s = TwoLevelScheduler([[0, 1], [2, 3]], LearningParams(seed=0, zeta=0.0), domain_every=1)
    keys = np.array([1, 2, 3, 4])
    s.step(keys, np.full(4, np.nan))
    for _ in range(20):
        s.step(keys, np.full(4, 1e9))
    rho = s.rho[0]
    moves = [s.step(keys, np.array([0.0, 1e9, 1e9, 1e9])).domain_move for _ in range(200)]
    assert moves.count(1) == 0 and s.rho[0] == rho


def test_a_thread_idle_from_the_start_has_no_aspiration_nor_weight_in_its_domain():
    """Idle from the start, a thread has no aspiration: no better reply, and its zero
    does not lower its domain's mean against the others'."""
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0, zeta=1.0), domain_every=1)
    keys = np.array([1, 2])
    s.step(keys, np.full(2, np.nan))
    moves = [s.step(keys, np.array([0.0, 5.0])).domain_move for _ in range(50)]
    assert np.isnan(s.rho[0]) and 1 not in moves


@pytest.mark.parametrize("free", [False, True])
def test_a_thread_that_did_not_run_keeps_its_core_or_stays_free(free):
    """A thread idle through a period (u = 0) or not measured (NaN) learned nothing
    there and draws no new core: a pool of 300 parked threads was re-pinned about 40
    times a period. With lambda 1 each draw is uniform over the 3 cores (and "free"),
    so a thread that drew would move 2 times in 3 (3 in 4): those that ran do."""
    s = TwoLevelScheduler([[0, 1, 2]], LearningParams(seed=3, lam=1.0, free=free), domain_every=10**6)
    keys = np.arange(300)
    first = s.step(keys, np.full(keys.size, np.nan)).cpus
    u = np.where(keys < 100, 1.0, np.where(keys < 200, 0.0, np.nan))
    moved = np.zeros(keys.size, dtype=bool)
    for _ in range(20):
        moved |= s.step(keys, u).cpus != first
    assert not moved[100:].any()
    assert moved[:100].all()


def test_a_thread_new_this_step_draws_its_core_though_not_measured():
    """A thread's first step has no utility of ours (NaN), yet it draws: it has no
    core of ours to keep. Left on the CPU it was seen running on, 8 new threads seen
    on CPU 0 all stayed there (and, idle, for good)."""
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(seed=0, free=False), domain_every=10)
    s.step(np.array([100]), np.array([np.nan]))  # one known before: the others join a running scheduler
    p = s.step(np.arange(8), np.full(8, np.nan), ran_on=np.zeros(8, dtype=np.int64))
    assert len(set(p.cpus.tolist())) > 1, p.cpus


def test_new_thread_utility_is_not_learned_from():
    s = TwoLevelScheduler([[0, 1]], LearningParams(seed=0, eps=1.0, lam=0.0), domain_every=10)
    s.step(np.array([1]), np.array([5.0]))
    np.testing.assert_allclose(s.x[0], [0.5, 0.5])


def test_joining_thread_starts_in_the_domain_it_ran_in():
    s = TwoLevelScheduler(DOMAINS, LearningParams(seed=0), domain_every=10)
    p = s.step(np.array([1, 2, 3]), np.full(3, np.nan), ran_on=np.array([4, 0, 99]))
    assert p.domains.tolist() == [1, 0, 0], "CPU 99 is in no domain: the least populated, ties to the lowest"


def test_a_joining_thread_of_no_known_cpu_goes_to_the_least_populated_domain():
    s = TwoLevelScheduler(DOMAINS, LearningParams(seed=0), domain_every=10)
    p = s.step(np.array([1, 2, 3, 4]), np.full(4, np.nan), ran_on=np.array([0, 1, -1, -1]))
    assert p.domains.tolist() == [0, 0, 1, 1]


def test_level1_runs_every_domain_every_periods_and_moves_at_most_one():
    s = TwoLevelScheduler([[0], [1], [2]], LearningParams(seed=0, zeta=1.0, gamma=1.0), domain_every=4)
    keys = np.arange(9)
    p = s.step(keys, np.full(9, np.nan))
    u = np.ones(9)
    moves = []
    for k in range(2, 42):
        before = s.alpha.copy()
        p = s.step(keys, u)
        changed = int((s.alpha != before).sum())
        assert changed <= 1
        if k % 4:
            assert changed == 0 and p.domain_move is None
        moves.append(p.domain_move)
        u = np.where(p.domains == 2, 10.0, 1.0) * (1 + keys / 100)
    assert any(m is not None for m in moves)


@pytest.mark.parametrize("free", [False, True], ids=["spec", "free"])
def test_domain_change_resets_x_over_the_new_domain(free):
    """Spec: x restarts uniform over the new domain's cores; with the free action, the
    free prior on it and the rest uniform over the cores."""
    extra = dict(free=True, free_prior=0.8) if free else {}
    s = TwoLevelScheduler([[0, 1], [2, 3, 4]], LearningParams(seed=1, zeta=1.0, gamma=1.0, eps=0.9, **extra), domain_every=2)
    keys = np.arange(4)
    u = np.full(4, np.nan)
    for _ in range(200):
        p = s.step(keys, u)
        if p.domain_move is not None:
            i = int(np.flatnonzero(s.keys == p.domain_move)[0])
            cores = len([[0, 1], [2, 3, 4]][s.alpha[i]])
            # reset, then nothing learnt yet in the new domain
            if free:
                np.testing.assert_allclose(s.x[i, : cores + 1], [0.2 / cores] * cores + [0.8])
            else:
                np.testing.assert_allclose(s.x[i, :cores], 1.0 / cores)
            return
        u = np.where(p.domains == 1, 5.0, 1.0) + keys
    pytest.fail("no thread changed domain")


def test_one_domain_keeps_level1_quiet():
    s = TwoLevelScheduler([[0, 1, 2]], LearningParams(seed=0, zeta=1.0), domain_every=1)
    for _ in range(20):
        p = s.step(np.arange(4), np.ones(4))
        assert p.domain_move is None
    assert np.isnan(s.rho).all()  # Level 1 never ran


def test_threads_move_towards_the_better_domain():
    """Domain 1 gives ten times the utility; the aspiration dynamics should fill it."""
    s = TwoLevelScheduler([[0, 1], [2, 3]], LearningParams(seed=3, gamma=0.9, zeta=0.1), domain_every=5)
    keys = np.arange(4)
    u = np.full(4, np.nan)
    s.step(keys, u, ran_on=np.zeros(4, dtype=np.int64))  # all start in domain 0
    for _ in range(400):
        p = s.step(keys, u)
        u = np.where(p.domains == 1, 10.0, 1.0)
    assert (s.alpha == 1).sum() >= 3


# -- closed domains: none of their CPUs is one the threads may use (a cpuset) -----------

def test_a_closed_domain_is_never_joined_moved_to_or_placed_in():
    """Three domains, the middle one closed (the target's cpuset leaves it no CPU), as
    for a container bound to two of three sockets. An empty domain is a better reply
    for everyone and zeta 0.5 makes threads explore: the closed one still never gets a
    thread, whether it joins (even from a CPU of that domain, where it ran before the
    cpuset changed) or moves, while Level 1 goes on moving threads between the two
    open ones."""
    closed = [2, 3]
    s = TwoLevelScheduler([[0, 1], [], [4, 5]], LearningParams(seed=7, zeta=0.5, gamma=1.0), domain_every=2)
    keys = np.arange(8)
    p = s.step(keys, np.full(8, np.nan), ran_on=np.array([0, 2, 3, 2, 0, 1, 4, 5]))
    assert 1 not in p.domains.tolist()
    rng = np.random.default_rng(0)
    moves, seen = 0, set()
    for _ in range(600):
        u = np.where(p.domains == 2, 2.0, 1.0) * (0.5 + rng.random(8))
        p = s.step(keys, u)
        assert 1 not in p.domains.tolist() and not np.isin(p.cpus, closed).any()
        moves += p.domain_move is not None
        seen.update(zip(p.domains.tolist(), p.cpus.tolist()))
    assert moves > 20, "Level 1 goes on between the open domains"
    assert {d for d, _ in seen} == {0, 2} and {c for _, c in seen} == {0, 1, 4, 5}


@pytest.mark.parametrize("free", [False, True], ids=["spec", "free"])
def test_a_domain_is_drawn_from_only_the_cpus_given_for_it(free):
    """A cpuset narrower than a domain: the domain is given its allowed CPUs only, and
    Level 2 draws from those (and "free") alone; with one domain open, Level 1 stays
    quiet however eager it is."""
    s = TwoLevelScheduler([[], [3]], LearningParams(seed=1, zeta=1.0, lam=0.5, free=free), domain_every=1)
    for _ in range(50):
        p = s.step(np.arange(4), np.ones(4))
        assert p.domain_move is None and (p.domains == 1).all()
        assert set(p.cpus.tolist()) <= {3, FREE}
    assert np.allclose(s.x.sum(axis=1), 1.0)


def test_observed_core_is_the_one_reinforced():
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(seed=0, eps=0.5, lam=0.0), domain_every=10)
    s.step(np.array([1]), np.array([np.nan]))
    for _ in range(30):
        s.step(np.array([1]), np.array([1.0]), ran_on=np.array([2]))
    assert s.x[0].argmax() == 2 and s.x[0, 2] > 0.99


def test_a_period_run_outside_the_domain_is_learned_at_neither_level():
    """Observe mode: thread 1 is in domain 0 (it joined there) but the kernel ran it on
    CPU 3, domain 1's. Its utility was credited to the core it had drawn in domain 0
    and to domain 0's window (review). Now that period teaches nothing; one run on
    domain 0's CPU 1 is learned on core 1."""
    s = TwoLevelScheduler([[0, 1], [2, 3]], LearningParams(seed=0, eps=0.5, lam=0.0), domain_every=100)
    s.step(np.array([1]), np.array([np.nan]), ran_on=np.array([0]))
    assert s.alpha[0] == 0
    s.step(np.array([1]), np.array([1.0]), ran_on=np.array([0]))  # the scale: 1.0
    x, window, n = s.x.copy(), s.window_sum.copy(), s.window_n.copy()
    for _ in range(5):
        s.step(np.array([1]), np.array([1.0]), ran_on=np.array([3]))
    assert s.x.tolist() == x.tolist() and s.window_sum.tolist() == window.tolist() and s.window_n.tolist() == n.tolist()
    s.step(np.array([1]), np.array([1.0]), ran_on=np.array([1]))
    assert s.x[0, 1] > x[0, 1] and s.window_sum[0] == window[0] + 1.0 and s.window_n[0] == n[0] + 1


def test_a_thread_that_changes_domain_draws_its_core_with_the_perturbation():
    """Step 3 draws from sigma = (1 - lambda) x + lambda / |J|, for a thread that has
    just changed domain too: its first core was drawn from x alone. With the free
    action at prior 0.9 and lambda = 1, sigma is uniform over the 2 cores and free: a
    third free, where x gives 0.9."""
    params = LearningParams(free=True, free_prior=0.9, lam=1.0, zeta=1.0, seed=5)
    free = []
    for stream in range(300):
        s = TwoLevelScheduler([[0, 1], [2, 3]], params, domain_every=2, stream=stream)
        s.step(np.array([7]), np.array([np.nan]), ran_on=np.array([0]))
        p = s.step(np.array([7]), np.array([1.0]))  # Level 1: domain 1 is empty, in its better replies
        assert p.domain_move == 7
        free.append(p.cpus[0] == FREE)
    assert abs(np.mean(free) - 1 / 3) < 0.1


def test_bad_input_is_refused():
    s = TwoLevelScheduler([[0]], LearningParams(), domain_every=1)
    with pytest.raises(ValueError):
        s.step(np.array([1, 1]), np.array([1.0, 2.0]))
    for domains in ([], [[], []]):
        with pytest.raises(ValueError, match="a CPU"):
            TwoLevelScheduler(domains, LearningParams(), domain_every=1)
    with pytest.raises(ValueError, match="eps"):
        LearningParams(eps=0.0)


# -- the free action and the target reward (LearningParams.free, .reward) --------------

FREE_PARAMS = dict(free=True, free_prior=0.8, seed=3)


def test_free_strategies_start_on_the_prior_and_stay_probability_vectors():
    s = TwoLevelScheduler(DOMAINS, LearningParams(**FREE_PARAMS), domain_every=4)
    s.step(np.arange(6), np.full(6, np.nan))
    width = s.domain_width[s.alpha]
    assert (width == np.array([3, 4])[s.alpha]).all()  # the domain's cores + free
    rows = np.arange(6)
    assert np.allclose(s.x[rows, width - 1], 0.8)
    assert np.allclose(s.x.sum(axis=1), 1.0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        p = s.step(np.arange(6), rng.random(6))
        assert np.allclose(s.x.sum(axis=1), 1.0) and (s.x >= 0).all()
        for cpu, dom in zip(p.cpus.tolist(), p.domains.tolist()):
            assert cpu == FREE or cpu in DOMAINS[dom]


def test_free_is_drawn_in_proportion_to_its_prior():
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(free=True, free_prior=0.7, lam=0.0, seed=1), domain_every=10)
    p = s.step(np.arange(4000), np.full(4000, np.nan))
    assert abs((p.cpus == FREE).mean() - 0.7) < 0.03


def test_free_action_is_learnt_when_it_pays_and_left_when_it_does_not():
    for free_pays in (True, False):
        s = TwoLevelScheduler([[0, 1]], LearningParams(free=True, free_prior=0.5, eps=0.2, lam=0.0, seed=2), domain_every=10)
        p = run(s, list(range(20)), lambda c, free_pays=free_pays: 1.0 if (c == FREE) == free_pays else 0.1, 60)
        share = (p.cpus == FREE).mean()
        assert share > 0.9 if free_pays else share < 0.1


def test_target_reward_reinforces_every_thread_that_ran_by_the_total():
    """Threads 0 and 1 ran (0.25 and 0.75): each earns the total, 1.0, a full step
    towards its core. Thread 2 did not run (u = 0): it learns nothing, as with its
    own reward. It earned the total too, and was reinforced on the core it was
    parked on every period, till its strategy held that core alone (review)."""
    params = dict(eps=0.5, lam=0.0, seed=4)
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(reward="target", **params), domain_every=1000)
    s.step(np.arange(3), np.full(3, np.nan))
    s.step(np.arange(3), np.array([0.25, 0.75, 0.0]))  # scale: the total, 1.0
    for _ in range(20):
        beta, x = s.beta.copy(), s.x.copy()
        s.step(np.arange(3), np.array([0.25, 0.75, 0.0]))
        rows = np.arange(2)
        assert np.allclose(s.x[rows, beta[:2]], x[rows, beta[:2]] + 0.5 * (1 - x[rows, beta[:2]]))
    assert s.x[2].tolist() == [0.25] * 4


def test_each_stream_of_a_seed_draws_its_own_numbers():
    """The daemon gives each target its own stream (its pid): with a seed in the
    config, every target replayed the same draws. A stream is reproducible, and no
    stream is the seed's own (as numpy's default_rng(seed))."""
    params = LearningParams(seed=11, lam=0.5)

    def cores(stream):
        s = TwoLevelScheduler([[0, 1, 2, 3]], params, domain_every=10, stream=stream)
        return [s.step(np.arange(32), np.full(32, np.nan)).cpus.tolist() for _ in range(3)]

    assert cores(101) == cores(101) and cores(101) != cores(202)
    assert TwoLevelScheduler([[0]], params, 10).rng.random() == np.random.default_rng(11).random()


def test_an_infinite_utility_is_not_measured_and_learning_goes_on():
    """One infinite utility made the thread's scale infinite for good (inf * decay):
    every later reward was 0 and its strategy never moved again."""
    s = TwoLevelScheduler([[0, 1]], LearningParams(seed=3, eps=0.5, lam=0.0, normalise="thread"), domain_every=10)
    s.step(np.array([7]), np.array([1.0]))
    s.step(np.array([7]), np.array([np.inf]))
    before = s.x.copy()
    for _ in range(5):
        s.step(np.array([7]), np.array([1.0]))
    assert np.isfinite(s.scale).all() and not np.array_equal(s.x, before)


def test_level1_compares_rho_tau_for_better_replies_and_b_tau_for_satisfaction():
    """Spec, Level 1: the better-reply set is of rho(tau), and a thread is unsatisfied
    when rho(tau+1) < b(tau), the benchmark before this step's update. Two threads, one
    per single-core domain, Level 1 every period, nu 0.5, eta 1.5, gamma 1, zeta 0 (no
    exploration), by hand:

    - period 1: they join, thread 0 on CPU 0 (domain 0), thread 1 on CPU 1 (domain 1);
    - period 2, utilities 4 and 5: rho = 4, 5; b = 8/3, 10/3; bbar = 4, 5. Thread 0's
      set is {1} (4 < 5) but it is satisfied, and stays;
    - period 3, utilities 1.2 and 0.1: rho(tau+1) = 2.6 and 2.55, both below b(tau), so
      both are unsatisfied. Thread 0's set is still {1} (rho(tau) 4 < 5), thread 1's is
      empty (5 < 4 is false): thread 0 alone moves, to domain 1.
    With rho(tau+1) in the sets, 2.6 < 2.55 is false and no one moves; with b(tau+1)
    (8/3 lowered to 2.6) no thread is ever unsatisfied and no one moves either.
    """
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0, nu=0.5, eta=1.5, gamma=1.0, zeta=0.0), domain_every=1)
    keys = np.arange(2)
    assert s.step(keys, np.full(2, np.nan), ran_on=np.array([0, 1])).domains.tolist() == [0, 1]
    p = s.step(keys, np.array([4.0, 5.0]))
    assert p.domain_move is None
    np.testing.assert_allclose(s.bench.lower, [8 / 3, 10 / 3])
    np.testing.assert_allclose(s.bench.upper, [4.0, 5.0])
    p = s.step(keys, np.array([1.2, 0.1]))
    np.testing.assert_allclose(s.rho, [2.6, 2.55])
    assert p.domain_move == 0 and p.domains.tolist() == [1, 1]


def test_level1_measures_the_mean_utility_of_the_periods_measured_in_the_window():
    """u~(tau) is a rate over the last T_NUMA: the mean of the periods the thread was
    measured in, not their sum, nor a mean over periods it has no reading for. Level 1
    every 3 periods; thread 0 measured 2 then 4, thread 1 unread then 6: the first
    aspirations are 3 and 6 (a sum would give 6 and 6, a mean over the window's three
    periods 2 and 2)."""
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0, zeta=0.0), domain_every=3)
    keys = np.arange(2)
    s.step(keys, np.full(2, np.nan), ran_on=np.array([0, 1]))
    s.step(keys, np.array([2.0, np.nan]))
    s.step(keys, np.array([4.0, 6.0]))
    np.testing.assert_allclose(s.rho, [3.0, 6.0])


def test_level2_draws_from_sigma_uniform_over_the_threads_own_domain():
    """Spec, Level 2, step 3: the next core is drawn from sigma = (1 - lambda) x +
    lambda / |J|, |J| the cores of the thread's own domain. With lambda 1, sigma is
    uniform over them whatever x learnt: eps 1 and a full reward make every x a unit
    vector, yet each of domain 1's three cores is drawn about a third of the time, and
    a thread lands on the core its x points at about a third of the time (drawing from
    x: always; a share taken over another domain's cores: never on CPUs 2 and 3)."""
    s = TwoLevelScheduler([[0], [1, 2, 3]], LearningParams(seed=5, eps=1.0, lam=1.0), domain_every=10**6)
    keys = np.arange(3000)
    s.step(keys, np.full(keys.size, np.nan), ran_on=np.full(keys.size, 2))
    p = s.step(keys, np.ones(keys.size))
    assert (p.domains == 1).all() and np.allclose(s.x.max(axis=1), 1.0)
    np.testing.assert_allclose(np.bincount(p.cpus, minlength=4)[1:] / keys.size, [1 / 3] * 3, atol=0.03)
    assert abs((p.cpus == s.domain_cpus[1, s.x.argmax(axis=1)]).mean() - 1 / 3) < 0.03


# -- found by a mutation review: each fails under a change of the code that no test saw --

def test_an_unknown_ran_on_does_not_make_a_pinned_thread_free() -> None:
    """-1 is both "not known" in ran_on (the engine passes it for a pinned thread that
    ran where placed) and the FREE column: matched, it freed every pinned thread
    whenever a thread joined or a pin was refused (free action on, as shipped)."""
    s = TwoLevelScheduler([[0, 1]], LearningParams(seed=0, free=True, free_prior=0.0, lam=0.0), domain_every=10**6)
    p = s.step(np.array([7]), np.array([np.nan]))
    assert p.cpus[0] in (0, 1)
    for _ in range(20):
        p = s.step(np.array([7]), np.array([1.0]), ran_on=np.array([-1]))
        assert p.cpus[0] != FREE
    assert s.window_n[0] == 20 and s.x[0].max() > 0.5  # it learned from every period: -1 is not "elsewhere"


def test_target_reward_is_the_total_over_the_peak_total_not_saturated() -> None:
    """reward: target, eq. (4) on the target's total: totals 1.0 then 0.5 give the second
    period a reward of 0.5 / (0.999 * 1.0), half a step; every reward read as 1 (the
    scale fed the thread's own utility) passed the test of this mode before."""
    s = TwoLevelScheduler([[0, 1, 2, 3]], LearningParams(reward="target", eps=0.5, lam=0.0, seed=4), domain_every=1000)
    s.step(np.arange(2), np.full(2, np.nan))
    s.step(np.arange(2), np.array([0.25, 0.75]))  # the peak total, 1.0
    beta, x = s.beta.copy(), s.x.copy()
    s.step(np.arange(2), np.array([0.25, 0.25]))  # total 0.5
    rows, r = np.arange(2), 0.5 / 0.999
    np.testing.assert_allclose(s.x[rows, beta], x[rows, beta] + 0.5 * r * (1 - x[rows, beta]))


def test_target_reward_is_the_total_of_the_threads_that_learn() -> None:
    """A thread not measured this period (NaN) is left out of the total, not the whole
    target's reward (a NaN sum taught no thread anything)."""
    s = TwoLevelScheduler([[0, 1]], LearningParams(seed=0, reward="target", lam=0.0, eps=0.5), domain_every=10**6)
    s.step(np.array([1, 2]), np.array([np.nan, np.nan]))
    for _ in range(3):
        s.step(np.array([1, 2]), np.array([1.0, 1.0]))
    before = s.x.copy()
    s.step(np.array([1, 2]), np.array([1.0, np.nan]))
    assert not np.allclose(s.x[0], before[0])


def test_level_1_learns_each_threads_own_utility_in_target_mode() -> None:
    """The target total is Level 2's reward only: Level 1 (aspiration, per thread) is fed
    each thread's own utility (the total made every thread's domain look alike)."""
    s = TwoLevelScheduler([[0], [1]], LearningParams(reward="target", seed=0, zeta=0.0), domain_every=1)
    s.step(np.array([1, 2]), np.array([np.nan, np.nan]))
    s.step(np.array([1, 2]), np.array([1.0, 3.0]))
    assert s.rho.tolist() == [1.0, 3.0]


def test_an_idle_period_is_measured_at_level_1() -> None:
    """u = 0 is a measurement (the thread was idle), not a missing one: it counts in the
    window's mean. Windows of 3 periods, nu 0.1: the first window's mean is 2 (rho 2),
    the second's periods 0 and 4 give a mean of 2 (rho stays 2); taken as unmeasured,
    the 0 would leave a mean of 4 (rho 2.2)."""
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0, zeta=0.0, nu=0.1), domain_every=3)
    for u in (np.nan, 2.0, 2.0, 0.0, 4.0, np.nan):
        s.step(np.array([1]), np.array([u]))
    assert s.rho[0] == 2.0


def test_target_reward_leaves_out_a_thread_that_ran_outside_its_domain() -> None:
    """reward: target: the total is of the threads that learn this period. Thread 3 ran
    on CPU 0, outside its domain 1: its utility (5) is not the target's. Totals 4 then 2:
    the second period's reward is 2 / (0.999 * 4), for threads 1 and 2 alike (with
    thread 3's 5 in the total, 7 / 7 = 1)."""
    s = TwoLevelScheduler([[0, 1], [2, 3]], LearningParams(seed=0, reward="target", lam=0.0, eps=0.5),
                          domain_every=10**6)
    keys = np.array([1, 2, 3])
    assert s.step(keys, np.full(3, np.nan), ran_on=np.array([0, 1, 2])).domains.tolist() == [0, 0, 1]
    s.step(keys, np.array([2.0, 2.0, np.nan]))
    beta, x = s.beta.copy(), s.x.copy()
    s.step(keys, np.array([1.0, 1.0, 5.0]), ran_on=np.array([-1, -1, 0]))
    rows, r = np.arange(2), 2.0 / (0.999 * 4.0)
    np.testing.assert_allclose(s.x[rows, beta[rows]], x[rows, beta[rows]] + 0.5 * r * (1 - x[rows, beta[rows]]))
    assert s.x[2].tolist() == x[2].tolist()


def test_a_placement_keeps_its_domains_when_level_1_moves_a_thread_later() -> None:
    """Placement.domains is the step's own: Level 1 of a later step changes the
    scheduler's domains in place, and a caller holding the earlier placement (the
    engine's roster) must not see its domains change under it."""
    s = TwoLevelScheduler([[0], [1]], LearningParams(seed=0, nu=0.5, eta=1.5, gamma=1.0, zeta=0.0), domain_every=1)
    keys = np.arange(2)
    s.step(keys, np.full(2, np.nan), ran_on=np.array([0, 1]))
    held = s.step(keys, np.array([4.0, 5.0]))
    assert s.step(keys, np.array([1.2, 0.1])).domain_move == 0  # as in the rho(tau) test above
    assert held.domains.tolist() == [0, 1]
