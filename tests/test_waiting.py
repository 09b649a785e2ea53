"""rdmalab.proc.waiting: spin, yield, then sleep until woken; the policy follows the usable CPUs and backs
off when spinning gets preempted. (How soft0's NIC wakes a sleeper: tests/soft/test_wakeups.py.)"""
import contextlib
import errno
import threading
import time

import pytest

from rdmalab.proc import waiting


@pytest.mark.parametrize("cpus, spins, yields", [(4, True, False), (2, True, False), (1, False, True),
                                                 (0.5, False, True)])
def test_the_policy_spins_only_with_two_cpus_and_yields_only_with_fewer(cpus, spins, yields):
    p = waiting.Policy(cpus)
    assert (p.spin_s > 0) == spins and (p.yields > 0) == yields


@pytest.mark.parametrize("cpus, peers, spins", [(2, 2, True), (2, 4, False), (4, 4, True), (8, 4, True), (1, 1, False)])
def test_processes_that_wait_for_each_other_spin_only_with_a_cpu_each(cpus, peers, spins):
    p = waiting.Policy(cpus, peers)
    assert (p.spin_s > 0) == spins and (p.yields > 0) == (not spins)


@pytest.mark.parametrize("cpus, spins, yields", [(8, True, False), (2, False, False), (1, False, True)])
def test_on_the_udp_link_the_nic_processes_need_cpus_too(cpus, spins, yields):
    # an answer needs our NIC process and the peer host's: spin only with a CPU for each of the three;
    # with two CPUs, sleep at once (a yield would spin as well); with one, yield to them
    p = waiting.Policy(cpus, 1, nic_processes=2)
    assert (p.spin_s > 0) == spins and (p.yields > 0) == yields


def test_soft0s_udp_link_tells_the_policy_about_its_nic_processes(monkeypatch):
    monkeypatch.setattr(waiting, "_policy", None)
    monkeypatch.setattr(waiting, "_nic_processes", 0)
    monkeypatch.setattr(waiting, "usable_cpus", lambda: 2)
    assert waiting.policy().spin_s > 0
    waiting.answers_come_through_nic_processes(2)
    assert waiting.policy().nic_processes == 2 and waiting.policy().spin_s == 0 and waiting.policy().yields == 0


def test_the_cluster_tells_its_local_ranks_how_many_share_the_cpus(monkeypatch):
    monkeypatch.setattr(waiting, "_policy", None)
    monkeypatch.setattr(waiting, "usable_cpus", lambda: 2)
    monkeypatch.setenv(waiting.PEERS_ENV, "4")
    assert waiting.policy().peers == 4 and waiting.policy().spin_s == 0
    monkeypatch.setattr(waiting, "_policy", None)
    monkeypatch.delenv(waiting.PEERS_ENV)   # a process on its own
    assert waiting.policy().peers == 1 and waiting.policy().spin_s > 0
    monkeypatch.setattr(waiting, "_policy", None)
    monkeypatch.setenv(waiting.PEERS_ENV, "four")   # not a number: said, with the variable's name (settings)
    with pytest.raises(SystemExit, match="RDMALAB_LOCAL_PEERS='four'"):
        waiting.policy()


def test_a_preempted_spin_sleeps_at_once_for_a_while_then_tries_again():
    p = waiting.Policy(2)
    assert p.busy_waiting(100.0)
    p.preempted(100.0)
    assert not p.busy_waiting(100.1) and p.busy_waiting(100.0 + waiting.CALM_S[0])
    p.preempted(101.0)
    assert not p.busy_waiting(101.0 + waiting.CALM_S[0])   # it doubles while spinning keeps being preempted
    p.undisturbed()
    assert p.calm == waiting.CALM_S[0]


class Clock:
    """A stand-in for the time module in rdmalab.proc.waiting: time passes only when the test says so,
    so a preemption of the test process cannot make a yield look slow."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_yields_that_a_cpu_bound_process_takes_turn_into_sleeping(monkeypatch):
    """One CPU shared with a CPU-bound process: each yield lets it run a whole slice (about 2 ms) before
    the peer answers. Once can be a busy peer; twice in a row, the waiter sleeps instead of yielding."""
    clock = Clock()
    monkeypatch.setattr(waiting, "time", clock)
    p = waiting.Policy(1)
    monkeypatch.setattr(waiting, "_policy", p)
    answered = []
    def yield_to_a_hog():   # the hog's slice passes, then the peer answers
        clock.sleep(2 * waiting.SLICE_S)
        answered.append(True)
    monkeypatch.setattr(waiting, "yield_cpu", yield_to_a_hog)
    waiting.until(lambda: bool(answered), 5, "the peer")
    assert p.slow_answers == 1 and p.busy_waiting(clock.now)   # once: a peer that was busy, keep yielding
    answered.clear()
    waiting.until(lambda: bool(answered), 5, "the peer")
    assert not p.busy_waiting(clock.now)                       # twice: sleep from now on, for a while
    assert p.sleep_only_until == clock.now + waiting.CALM_S[0]
    monkeypatch.setattr(waiting, "yield_cpu", lambda: answered.append(True))   # answered with no time passing
    p.sleep_only_until = 0.0
    answered.clear()
    waiting.until(lambda: bool(answered), 5, "the peer")       # a prompt answer: counted from zero again
    assert p.slow_answers == 0 and p.calm == waiting.CALM_S[0]


def test_a_wait_that_never_ends_is_a_timeout_naming_what_it_waited_for():
    with pytest.raises(TimeoutError, match="the peer's flag"):
        waiting.until(lambda: False, 0.05, "the peer's flag")


def test_a_dead_peer_ends_the_wait_early():
    asked = []

    def alive():
        asked.append(1)
        return False

    with pytest.raises(TimeoutError, match="rank 1"):
        waiting.until(lambda: False, 30, "rank 1", alive=alive)
    assert asked == [1]   # the first check of the peer ended the wait (ignored, it would be asked until 30 s)


def test_a_wait_returns_when_another_thread_makes_it_true():
    box = []
    threading.Timer(0.05, box.append, [1]).start()
    waiting.until(lambda: bool(box), 10, "the timer")
    assert box == [1]


def test_without_futexes_waits_nap_say_so_once_and_still_end(monkeypatch, capsys):
    monkeypatch.setattr(waiting, "_libc", False)
    monkeypatch.setattr(waiting, "_warned", False)
    box = []
    threading.Timer(0.02, box.append, [1]).start()

    class Bell:   # would be used if futexes worked
        def arm(self):
            raise AssertionError("no futex: the bell must not be used")

    waiting.until(lambda: bool(box), 10, "the timer", bell=Bell(), busy=False)
    waiting.until(lambda: True, 10, "nothing")
    waiting.until(lambda: bool(box), 10, "the timer again", bell=Bell(), busy=False)
    assert capsys.readouterr().err.count("no futex") == 1


def test_a_futex_that_will_not_sleep_turns_waits_into_naps_not_a_spin(monkeypatch, capsys):
    # a sandbox without futexes on shared memory answers at once (ENOSYS, EPERM): a wait that went on
    # asking would spin, and on one CPU hold off the peer it waits for until the scheduler's next tick
    monkeypatch.setattr(waiting, "_libc", None)
    monkeypatch.setattr(waiting, "_warned", False)
    refused = []

    class Bell:
        def arm(self):
            return 0

        def sleep(self, token, seconds):
            refused.append(seconds)
            return errno.ENOSYS

        def disarm(self):
            pass

    box = []
    threading.Timer(0.05, box.append, [1]).start()
    waiting.until(lambda: bool(box), 10, "the timer", bell=Bell(), busy=False)
    assert len(refused) == 1 and not waiting.futex_works()   # asked once, then napped
    assert capsys.readouterr().err.count("no futex") == 1


def test_a_signal_pipe_turns_readable_on_a_signal_and_is_given_back():
    import os
    import select
    import signal
    import threading
    from rdmalab.proc.waiting import signal_pipe
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        with signal_pipe() as fd:
            assert select.select([fd], [], [], 0)[0] == []
            os.kill(os.getpid(), signal.SIGUSR1)   # (between two looks of a wait: still seen at the next)
            assert select.select([fd], [], [], 5)[0] == [fd]
        assert signal.set_wakeup_fd(-1) == -1   # given back: no descriptor left set
        with signal_pipe() as again:   # the process's one pipe, emptied: the last wait's signal is not this one's
            assert again == fd and select.select([again], [], [], 0)[0] == []
        child = os.fork()
        if child == 0:   # a forked child waits on a pipe of its own, which its parent's signals never fill
            with signal_pipe() as own:
                os._exit(0 if own not in (None, fd) else 1)
        assert os.waitpid(child, 0)[1] == 0
        seen = []
        worker = threading.Thread(target=lambda: seen.append(signal_pipe().__enter__()))
        worker.start()
        worker.join()
        assert seen == [None]   # (only the main thread runs handlers)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_thread_that_waits_while_sleeping_never_spins(monkeypatch):
    """waiting.sleeping(): an AllReduce thread beside backward must not spin (it would hold the GIL and the CPU).
    Counted, not timed: inside sleeping() a wait checks its condition once before it first sleeps (and once more
    as it arms its bell), where the same wait outside spins, checking it again and again before any sleep. The
    policy is one that spins and is never preempted, so the contrast holds however slow or busy the machine."""
    import threading
    from rdmalab.proc import waiting

    spinning = waiting.Policy(cpus=2, peers=1)
    spinning.spin_s, spinning.preempted_after = max(waiting.SPIN_S, 50e-6), float("inf")
    monkeypatch.setattr(waiting, "_policy", spinning)
    monkeypatch.setattr(waiting, "futex_works", lambda: True)   # (the bell below records each sleep)

    def events(sleeps):
        seen, start = [], time.monotonic()

        class Bell:
            def arm(self):
                return 0

            def sleep(self, token, seconds):
                seen.append("sleep")
                time.sleep(seconds)
                return 0

            def disarm(self):
                pass

        def ready():
            seen.append("check")
            return time.monotonic() - start > 0.03
        with waiting.sleeping() if sleeps else contextlib.nullcontext():
            waiting.until(ready, 5, bell=Bell(), spin_s=waiting.COLLECTIVE_SPIN_S)
        return seen

    got = {}
    thread = threading.Thread(target=lambda: got.update(sleeping=events(True)))
    thread.start()
    thread.join()
    asleep = got["sleeping"]
    assert asleep.index("sleep") == 2, asleep[:10]   # the first check, the check as the bell is armed, sleep
    assert asleep.count("check") <= 2 * asleep.count("sleep") + 1, asleep   # never more between two sleeps
    awake = events(False)
    assert awake.index("sleep") > 2, awake[:10]   # outside sleeping(), the same wait spun first
    assert not getattr(waiting._this_thread, "sleeps", False)   # (only that thread's waits changed, and only inside)