"""The naive AllReduce lesson's exercises (naive-allreduce): algbw and busbw, and the naive AllReduce by hand. Each
check accepts its reference and rejects each plausible mistake with a message that names it. The learner's
functions are defined as a notebook defines them (their module is __main__, so the check runs them as the ranks
would: without the notebook's names, imports inside)."""
import pytest

from rdmalab.lessons import exercises


def feedback(name, answer):
    return exercises.check(name, answer)


def notebook(fn):
    fn.__module__ = "__main__"
    return fn


def naive(slot=lambda r, n: (r - 1) * n, read=lambda peer, n: (peer - 1) * n, read_first=False, back="data",
          wait_for_sum=True, flush=True, sum_first=False, view=None):
    """The reference naive AllReduce with one decision changed: where rank r puts its x in rank 0's stage (slot)
    and where rank 0 reads peer's (read), both from x.nbytes; whether rank 0 reads a slot before its wait();
    which region of each rank the sum goes to; whether a rank waits for the sum; whether it flushes; whether it
    waits for the sum before it puts its x; a hard-coded dtype for the stage."""
    def my_naive(comm, x):
        p, r = comm.size, comm.rank
        if r == 0:
            stage = comm.t.buffer("stage")
            for peer in range(1, p):
                if not read_first:
                    comm.t.wait(peer)
                at = read(peer, x.nbytes)
                x += stage[at:at + x.nbytes].view(view or x.dtype)
                if read_first:
                    comm.t.wait(peer)
            for peer in range(1, p):
                comm.t.put(peer, x, back, 0)
        else:
            if sum_first:
                comm.t.wait(0)
            comm.t.put(0, x, "stage", slot(r, x.nbytes))
            if wait_for_sum and not sum_first:
                comm.t.wait(0)
        if flush:
            comm.t.flush()
    return notebook(my_naive)


@notebook
def uses_the_notebooks_numpy(comm, x):
    return np.add(x, 1)   # noqa: F821 (the notebook's np: not on the ranks)


@notebook
def puts_to_a_rank_that_is_not_there(comm, x):
    comm.t.put(comm.rank - 1, x, "stage", 0)   # rank 0's left neighbour, without % p


def test_naive_allreduce_the_reference_passes_and_a_skeleton_is_not_yet():
    name = "naive-allreduce.naive"
    assert feedback(name, exercises.REGISTRY[name].reference()).passed
    assert feedback(name, naive()).passed   # naive() unchanged: the reference, as a learner writes it

    @notebook
    def skeleton(comm, x):   # the lesson's cell, as given
        p, r = comm.size, comm.rank
        stage = comm.t.buffer("stage")
        if r == 0:
            ...
        else:
            ...
        comm.t.flush()

    @notebook
    def not_written(comm, x):
        raise NotImplementedError

    f = feedback(name, skeleton)
    assert f.status == "not yet" and "no put yet" in f.message
    assert feedback(name, not_written).status == "not yet"
    assert "naive AllReduce alone" in feedback(name, (naive(), naive())).message   # the old exercise's answer
    assert "lambda: my_naive" in feedback(name, 3).message


def test_naive_allreduce_rejects_each_plausible_wrong_naive_and_names_it():
    @notebook
    def calls_the_librarys_naive(comm, x):
        from rdmalab.allreduce.algorithms import naive_allreduce
        naive_allreduce(comm, x)

    @notebook
    def calls_comm_allreduce(comm, x):
        comm.allreduce(x, "naive")

    @notebook
    def everyone_to_everyone(comm, x):   # right sums, bit-identical (the same order everywhere), but no rank 0
        p, r = comm.size, comm.rank
        stage = comm.t.buffer("stage")
        for peer in range(p):
            if peer != r:
                comm.t.put(peer, x, "stage", r * x.nbytes)
        for peer in range(p):
            if peer != r:
                comm.t.wait(peer)
        stage[r * x.nbytes:(r + 1) * x.nbytes] = x.view("uint8")
        total = stage[:x.nbytes].view(x.dtype).copy()
        for k in range(1, p):
            total += stage[k * x.nbytes:(k + 1) * x.nbytes].view(x.dtype)
        comm.t.flush()
        x[:] = total
        comm.barrier()   # (no rank puts again before every rank has added: the second call is safe)

    @notebook
    def sums_in_its_own_order(comm, x):   # every rank gathers every x, then adds them starting from its own
        p, r = comm.size, comm.rank
        stage = comm.t.buffer("stage")
        for peer in range(p):
            if peer != r:
                comm.t.put(peer, x, "stage", (r - peer - 1) % p * x.nbytes)
        for peer in range(p):
            if peer != r:
                comm.t.wait(peer)
        total = x.copy()
        for k in range(1, p):
            total += stage[(k - 1) * x.nbytes:k * x.nbytes].view(x.dtype)
        comm.t.flush()
        x[:] = total
        comm.barrier()

    import numpy as np
    first = "your naive AllReduce (on 3 ranks, 7 float32 elements)"
    for wrong, says, hint in [
            (naive(slot=lambda r, n: 0, read=lambda peer, n: 0), f"{first}: rank 2's put landed on bytes 0 to 28 of "
             "rank 0's stage before rank 0 had used what rank 1's put left there", "its own slot in rank 0's stage"),
            (naive(read_first=True), f"{first}: rank 0's result holds 7 poisoned elements: bytes used before their "
             "flag had landed", "after wait()"),
            (naive(slot=lambda r, n: r * n), f"{first}: rank 0's result holds 7 poisoned elements, from bytes nobody "
             "ever put: rank 0 read bytes of its stage that no put wrote, in any call (puts to it landed on bytes 28 "
             "to 56 and 56 to 84 only)", "rank r puts at byte (r - 1) x x.nbytes"),
            (naive(wait_for_sum=False), f"{first}: rank 1 returned while rank 0's put was still on its way to it: "
             "nothing waited for its flag, so nothing said its bytes had landed (in the first call, rank 0 put to "
             "rank 1 once, and rank 1 waited for rank 0 never)", "a rank waits for every put made to it"),
            (naive(flush=False), f"{first}: rank 0 changed the bytes its put sent (data bytes 0 to 28) after it "
             "returned", "flush()"),
            (naive(sum_first=True), f"{first} deadlocked: every rank waited for another and none had put anything "
             "for it: rank 0 waited for rank 1; rank 1 waited for rank 0; rank 2 waited for rank 0. Rank 1 waited "
             "before its first put", "put first, then wait"),
            (naive(read=lambda peer, n: 0), f"{first}: rank 0's result is rank 0's x + 2 x rank 1's x: rank 1's x "
             "counted twice, rank 2's x is missing", ""),
            (naive(back="stage"), f"{first}: rank 1's x still holds its own values: the sum never reached it (rank 0 "
             "put it into rank 1's stage, at byte 0)", ""),
            (everyone_to_everyone, f"{first}: the sums are right, but rank 1 put to rank 2: in the naive AllReduce "
             "every rank sends its x to rank 0", ""),
            (sums_in_its_own_order, f"{first}: every rank has the sum, but rank 1's differs from rank 0's in the last "
             "bits", ""),
            (uses_the_notebooks_numpy, "raised NameError", "import what it needs"),
            (puts_to_a_rank_that_is_not_there, "rank 0 raised ValueError: rank 0 has no connection to rank -1", ""),
            (calls_the_librarys_naive, "calls the library's AllReduce (naive_allreduce)", ""),
            (calls_comm_allreduce, "calls the library's AllReduce (allreduce)", ""),
            (naive(view=np.float32), "(on 3 ranks, 7 int32 elements)", ""),
    ]:
        f = feedback("naive-allreduce.naive", wrong)
        assert f.status == "wrong" and says in f.message and hint in f.hint, (says, f.message, f.hint)


def test_naive_allreduce_names_bytes_nobody_ever_put_on_two_ranks_too():
    """On 2 ranks the stage has room for a slot at r x x.nbytes: the bytes rank 0 reads were never put, and the
    feedback says so (not 'used before their flag'), whatever the seed."""
    from rdmalab.lessons import checking
    from rdmalab.lessons.checks.naive_allreduce import NaiveJudge
    for seed in range(3):
        with pytest.raises(exercises.Wrong, match="from bytes nobody ever put: rank 0 read bytes of its stage") as said:
            NaiveJudge("naive AllReduce")(checking.run(naive(slot=lambda r, n: r * n), 2, 7, "int64", seed,
                                                       library=False))
        assert "landed on bytes 56 to 112 only" in str(said.value) and "flag" not in str(said.value)


def test_busbw_passes_nccl_tests_definition_and_names_each_slip():
    name = "naive-allreduce.busbw"
    assert feedback(name, exercises.REGISTRY[name].reference()).passed
    assert feedback(name, lambda size, t, n: (size / t / 1e3, size / t / 1e3 * 2 * (n - 1) / n)).passed   # (us: 10^-6)

    def bandwidths(algbw="size / (t / 1e6) / 1e9", busbw="algbw * 2 * (n - 1) / n"):
        return eval(f"lambda size, t, n: (lambda algbw: (algbw, {busbw}))({algbw})")

    assert feedback(name, lambda size, t, n: (None, None)).status == "not yet"
    assert feedback(name, lambda size, t, n: None).status == "not yet"
    case = "for 16,777,216 bytes in 5230 us on 4 ranks"
    for wrong, says in [
            (bandwidths(busbw="algbw"), f"{case} your busbw is 3.208 GB/s; algbw x 2(n-1)/n is 4.812: busbw equals "
             "algbw: the factor 2(n-1)/n is missing"),
            (bandwidths(busbw="algbw * n / (2 * (n - 1))"), "the factor is upside down"),
            (bandwidths(busbw="algbw * (n - 1) / n"), "the factor lacks its 2"),
            (bandwidths(busbw="algbw * 2 * (n - 1)"), "the factor lacks its /n"),
            (bandwidths(busbw="algbw * 2"), "the factor is 2(n-1)/n, not 2"),
            (bandwidths(busbw="algbw * 2 * (n - 2) / (n - 1)"), "the number of ranks, not ranks - 1"),
            (lambda size, t, n: ((size / t / 1e3) * 2 * (n - 1) / n, size / t / 1e3),
             f"{case} your algbw is 4.812 and your busbw 3.208: they are swapped"),
            (lambda size, t, n: ((size / t / 1e3) * 2 * (n - 1) / n,) * 2, "your algbw is 4.812 GB/s, the bus "
             "bandwidth: algbw is size / time alone, 3.208"),
            (bandwidths(algbw="8 * size / (t / 1e6) / 1e9"), f"{case} your algbw is 25.66; in GB/s it is 3.208: "
             "bits per second"),
            (bandwidths(algbw="size / (t / 1e6) / 1e6"), "MB/s: GB/s divides bytes per second by 10^9"),
            (bandwidths(algbw="size / (t / 1e6) / 2**20"), "MiB/s"),
            (bandwidths(algbw="size / (t / 1e6) / 2**30"), "GiB/s"),
            (bandwidths(algbw="size / (t / 1e6)"), "bytes per second: divide by 10^9"),
            (bandwidths(algbw="size / t / 1e9"), "time_us taken for seconds"),
            (bandwidths(algbw="size / (t * 1e6) / 1e9"), "time_us multiplied by 10^6"),
            (bandwidths(algbw="8 * size / t / 1e9"), "bits per second (Gb/s): nccl-tests counts bytes, 8 bits each; "
             "and time_us taken for seconds"),
            (bandwidths(algbw="size / (t / 1e6) / 1e9 * 1.1"), f"{case} your algbw is 3.529; in GB/s it is 3.208."),
            (lambda size, t, n: size / t, "return two numbers, (algbw, busbw)"),
            (lambda size, t, n: ("3.2", "4.8"), "return two numbers"),
            ("my_bandwidths", "lambda: my_bandwidths"),
    ]:
        f = feedback(name, wrong)
        assert f.status == "wrong" and says in f.message, (says, f.message)


def test_naive_allreduce_a_deadlock_where_only_rank_0_waited_first_is_counted_not_blamed_on_rank_0():
    """Rank 0 waits before it puts by design: a deadlock there is named by the puts and waits that differ."""
    @notebook
    def waits_twice_for_each(comm, x):
        p, r = comm.size, comm.rank
        if r == 0:
            stage = comm.t.buffer("stage")
            for peer in range(1, p):
                comm.t.wait(peer)
                comm.t.wait(peer)
                x += stage[(peer - 1) * x.nbytes:peer * x.nbytes].view(x.dtype)
            for peer in range(1, p):
                comm.t.put(peer, x, "data", 0)
        else:
            comm.t.put(0, x, "stage", (r - 1) * x.nbytes)
            comm.t.wait(0)
        comm.t.flush()

    f = feedback("naive-allreduce.naive", waits_twice_for_each)
    assert f.status == "wrong" and "Counted per pair: in the first call, rank 1 put to rank 0 once, and rank 0 " \
        "waited for rank 1 twice" in f.message and "before its first put" not in f.message, f.message
    assert "each wait() one put" in f.hint and "put first" not in f.hint
