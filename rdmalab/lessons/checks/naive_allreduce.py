"""The naive AllReduce lesson (naive-allreduce): its exercises, each a check (raising Wrong with a hint) and a
reference solution.

- "naive-allreduce.busbw": algbw and busbw as nccl-tests defines them, from a size in bytes, a time in
  microseconds (as the lesson's tables show them) and the number of ranks. Named: the factor 2(n-1)/n missing,
  inverted, without its 2 or its /n; algbw and busbw swapped; bits, MB/s, MiB/s or GiB/s for GB/s; a time in
  microseconds read as seconds.
- "naive-allreduce.naive": the naive AllReduce written by hand from put and wait (reference:
  rdmalab.allreduce.algorithms' naive_allreduce), run on rdmalab.lessons.checking's transport as the ring of lesson
  09 is (2 to 5 ranks, 4- and 8-byte elements, twice in a row, a rank delayed at random). Named: the library's
  AllReduce called; one slot of rank 0's stage for every rank; bytes used before their flag; bytes read where no
  put ever wrote; a put nobody waited for (the sum); a deadlock; x changed after return without flush(); a sum
  that counts some rank's values twice or never, or never reaches a rank's x; ranks whose sums differ in their
  last bits; a rank other than 0 that sends to another rank.
"""
import numpy as np

from rdmalab.lessons import checking
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

# ------------------------------------------------------------------------------------------------ algbw and busbw

# (size in bytes, time in us, ranks): more than 2 ranks first (on 2, busbw is algbw), then 2
BUSBW_CASES = [(16 << 20, 5230.0, 4), (1 << 20, 812.5, 3), (64 << 10, 95.0, 8), (1 << 20, 410.0, 2)]
# what a slip multiplies algbw by, and what it is
UNITS = [(8, "bits per second (Gb/s): nccl-tests counts bytes, 8 bits each"),
         (1e3, "MB/s: GB/s divides bytes per second by 10^9, not 10^6"),
         (1e9 / 2 ** 20, "MiB/s: nccl-tests' GB/s divides by 10^9, not 2^20"),
         (1e9 / 2 ** 30, "GiB/s (2^30 bytes): nccl-tests' GB is 10^9 bytes"),
         (1e9, "bytes per second: divide by 10^9 for GB/s"),
         (1e-6, "time_us taken for seconds: a microsecond is 10^-6 s, so divide time_us by 10^6"),
         (1e-12, "time_us multiplied by 10^6: seconds are time_us / 10^6")]


def _close(a, b):
    return abs(a - b) <= 1e-6 * abs(b)


def _unit(got, right):
    """What a wrong algbw did (a sentence), from its ratio to the right one: one slip or two; None if no known one."""
    ratio = got / right
    for factor, said in UNITS:
        if _close(ratio, factor):
            return said
    for i, (f1, s1) in enumerate(UNITS):
        for f2, s2 in UNITS[i + 1:]:
            if _close(ratio, f1 * f2):
                return f"{s1}; and {s2}"
    return None


def _factor(got, n):
    """What a wrong busbw / algbw factor is, for n ranks (a sentence), or None."""
    right = 2 * (n - 1) / n
    for factor, said in [(1, "busbw equals algbw: the factor 2(n-1)/n is missing (it is 1 only on 2 ranks)"),
                         (1 / right, "the factor is upside down: busbw = algbw x 2(n-1)/n, more than algbw"),
                         ((n - 1) / n, "the factor lacks its 2: a ring moves each byte through a link twice, once "
                          "in the reduce-scatter and once in the all-gather"),
                         (2 * (n - 1), "the factor lacks its /n: each rank sends 2(n-1) chunks of n/p bytes"),
                         (2, "the factor is 2(n-1)/n, not 2"),
                         (2 * (n - 2) / (n - 1), "n in 2(n-1)/n is the number of ranks, not ranks - 1")]:
        if _close(got, factor):
            return said
    return None


@exercise("naive-allreduce.busbw", "algbw and busbw, as nccl-tests defines them",
          hints=["algbw is the buffer's size over the time, in GB/s (10^9 bytes per second: the time is in "
                 "microseconds); busbw is algbw x 2(n-1)/n, n the number of ranks."])
def _check_busbw(answer):
    if not callable(answer):
        raise Wrong("answer with your function, as the cell does: lambda: my_bandwidths.")
    for size, time_us, n in BUSBW_CASES:
        got = answer(size, time_us, n)
        if got is None or (isinstance(got, tuple) and any(v is None or v is Ellipsis for v in got)):
            raise NotYet("algbw or busbw is still None: write both.")
        if not (isinstance(got, (tuple, list)) and len(got) == 2
                and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in got)):
            raise Wrong(f"return two numbers, (algbw, busbw) in GB/s: for {size} bytes it returned {got!r}.")
        algbw, busbw = (float(v) for v in got)
        right_alg = size / (time_us / 1e6) / 1e9
        right_bus = right_alg * 2 * (n - 1) / n
        case = f"for {size:,} bytes in {time_us:g} us on {n} ranks"
        if _close(algbw, right_alg) and _close(busbw, right_bus):
            continue
        if n > 2 and _close(algbw, right_bus) and _close(busbw, right_alg):
            raise Wrong(f"{case} your algbw is {algbw:.4g} and your busbw {busbw:.4g}: they are swapped. algbw is "
                        "size / time; busbw, larger by 2(n-1)/n, what each link carries.")
        if n > 2 and _close(algbw, right_bus):
            raise Wrong(f"{case} your algbw is {algbw:.4g} GB/s, the bus bandwidth: algbw is size / time alone, "
                        f"{right_alg:.4g}.")
        if not _close(algbw, right_alg):
            unit = _unit(algbw, right_alg) if algbw else None
            raise Wrong(f"{case} your algbw is {algbw:.4g}; in GB/s it is {right_alg:.4g}"
                        + (f": {unit}." if unit else "."))
        factor = _factor(busbw / algbw, n) if algbw else None
        raise Wrong(f"{case} your busbw is {busbw:.4g} GB/s; algbw x 2(n-1)/n is {right_bus:.4g}"
                    + (f": {factor}." if factor else "."))


@reference("naive-allreduce.busbw")
def _busbw():
    def my_bandwidths(size, time_us, ranks):
        algbw = size / (time_us / 1e6) / 1e9       # GB/s: 10^9 bytes per second
        busbw = algbw * 2 * (ranks - 1) / ranks    # what each link carries, had the AllReduce been optimal
        return algbw, busbw
    return my_bandwidths


# ------------------------------------------------------------------------------------------ the naive AllReduce

class NaiveJudge(checking.Judge):
    """The verdict on a run of the learner's naive AllReduce: wrong sums named by whose values they hold."""
    slot_hint = ("Give each rank its own slot in rank 0's stage, (r - 1) x x.nbytes: rank 0 says nothing when it "
                 "has added one.")
    read_hint = ("Rank 0 reads each rank's x where that rank put it: rank r puts at byte (r - 1) x x.nbytes of "
                 "rank 0's stage.")
    waits_first = (0,)   # rank 0 adds before it sends: the others put first

    def sums(self, run, call, wrong):
        """Whose values each wrong result holds, and how many times (a least-squares fit on the inputs)."""
        inputs = np.array(run.inputs[call], dtype=np.float64)
        for rank, off in wrong.items():
            if not off.any() or run.count < run.ranks:
                continue
            got = run.results[call][rank].astype(np.float64)
            k = np.rint(np.linalg.lstsq(inputs.T, got, rcond=None)[0]).astype(int)
            if not np.allclose(inputs.T @ k, got, rtol=1e-4, atol=1e-3 * float(np.abs(inputs).max())):
                continue
            if (k == np.eye(run.ranks, dtype=int)[rank]).all():
                went = [put for put in run.puts if put.call == call and put.target == rank and put.region is not None]
                where = (f" (rank {went[0].sender} put it into rank {rank}'s {went[0].region}, at byte {went[0].lo})"
                         if went and (went[0].region, went[0].lo) != ("data", 0) else "")
                return (f"rank {rank}'s x still holds its own values: the sum never reached it{where}. Rank 0 puts the "
                        "sum into every rank's x: its data region, at byte 0.")
            held = " + ".join(f"{'' if n == 1 else f'{n} x '}rank {j}'s x" for j, n in enumerate(k) if n)
            slips = [f"rank {j}'s x {'is missing' if n == 0 else f'counted {_times(n)}'}" for j, n in enumerate(k)
                     if n != 1]
            return (f"rank {rank}'s result is {held or 'zero'}: {', '.join(slips)}. The sum adds each rank's x once: "
                    f"rank 0 adds rank r's from the slot where rank r put it.")
        return super().sums(run, call, wrong)

    def shape(self, run):
        """Wrong if the sums are right but the bytes did not go through rank 0."""
        for put in run.puts:
            if put.call == 0 and put.region is not None and put.sender != 0 and put.target != 0:
                raise Wrong(f"your {self.what} (on {run}): the sums are right, but rank {put.sender} put to rank "
                            f"{put.target}: in the naive AllReduce every rank sends its x to rank 0, and only rank 0 "
                            "sends (the sum) to the others.")


def _times(n):
    return {2: "twice"}.get(n, f"{n} times")


@exercise("naive-allreduce.naive", "The naive AllReduce, from put and wait",
          hints=["Every rank but 0 puts x into its own slot of rank 0's stage, (r - 1) x x.nbytes, and waits; rank 0 "
                 "waits for each rank, adds its slot into x, then puts the sum into every rank's x (its data, at "
                 "byte 0). Everyone flushes before returning."])
def _check_naive(answer):
    if isinstance(answer, tuple):
        raise Wrong("answer with your naive AllReduce alone, as the cell does: lambda: my_naive.")
    if not callable(answer):
        raise Wrong("answer with your function, as the cell does: lambda: my_naive.")
    checking.check(answer, NaiveJudge("naive AllReduce"), checking.CASES)


@reference("naive-allreduce.naive")
def _naive():
    from rdmalab.allreduce.algorithms import naive_allreduce
    return naive_allreduce
