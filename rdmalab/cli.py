"""The `rdmalab` command: `rdmalab doctor [--json]`, `rdmalab bench TEST|compare [...]`, `rdmalab allreduce`,
`rdmalab class report DIR`, `rdmalab capture -o FILE.pcap -- CMD`."""
import argparse
import signal
import sys

from rdmalab.allreduce.algorithms import ALGORITHMS, DTYPES
from rdmalab.allreduce.transports import TRANSPORTS
from rdmalab.errors import RdmalabError, RequestError
from rdmalab.verbs import CHOICES as PROVIDERS


def parser():
    top = argparse.ArgumentParser(prog="rdmalab", description="Hands-on RDMA for distributed AI training.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doc = commands.add_parser("doctor", help="what this machine offers for RDMA, and the next step")
    doc.add_argument("--json", action="store_true", help="print the findings as JSON")

    from rdmalab.bench import TESTS
    bench = commands.add_parser("bench", help="perftest-style benchmarks: RDMA against TCP",
                                description="Run a perftest-style test between two processes, or `compare` "
                                            "RDMA and TCP side by side. Tests: " + ", ".join(TESTS) + ".")
    bench.add_argument("test", choices=[*TESTS, "compare"], metavar="TEST", help=f"{', '.join(TESTS)} or compare")
    sizes = bench.add_mutually_exclusive_group()
    sizes.add_argument("--size", "-s", type=_size, action="append",
                       help="message size in bytes (1K, 64K, 1M allowed); repeat for several")
    sizes.add_argument("-a", "--all", action="store_true", help="sweep 2 B .. 8 MiB, as perftest -a")
    bench.add_argument("--iters", "-n", type=int, help="iterations per size (default: perftest's 1000 latency, "
                       "5000 bandwidth, capped at 1 GiB moved per size)")
    bench.add_argument("--provider", choices=PROVIDERS, help="verbs provider for the RDMA side")
    bench.add_argument("--events", "-e", action="store_true",
                       help="sleep on completion events instead of polling the CQ, as perftest -e")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")

    ar = commands.add_parser("allreduce", help="the hand-built AllReduce on N ranks, nccl-tests' columns",
                             description="Sum-AllReduce on N local ranks (ipyparallel engines), reported as "
                                         "nccl-tests' all_reduce_perf reports NCCL's. More ranks than usable "
                                         "CPUs are started with a warning of what they cost; more than 8 per "
                                         "CPU are refused (see --oversubscribe).")
    ar.add_argument("--ranks", "-n", type=int, default=2, help="number of ranks (default 2)")
    ar.add_argument("--size", "-s", type=_sizes, default="1M",
                    help="sizes in bytes, comma-separated: 1K,1M,64M (default 1M)")
    ar.add_argument("--algo", choices=ALGORITHMS, default="ring")
    ar.add_argument("--transport", choices=TRANSPORTS, default="rdma")
    ar.add_argument("--dtype", choices=DTYPES, default="float32")
    ar.add_argument("--iters", type=int, default=5, help="timed iterations per size (default 5)")
    ar.add_argument("--provider", choices=PROVIDERS, help="verbs provider on the ranks")
    ar.add_argument("--compare-mpi", action="store_true", help="also time MPI_Allreduce (mpi4py + MPICH)")
    ar.add_argument("--json", action="store_true", help="print the results as JSON")
    ar.add_argument("--oversubscribe", action="store_true",
                    help="start more than 8 ranks per usable CPU anyway (they take minutes to start, then take turns)")
    cap = commands.add_parser("capture", help="run a program with soft0 on the wire, and capture its packets",
                              description="Run CMD with soft0's udp link (RoCEv2 over UDP port 4791 between NIC "
                                          "processes) and write every packet its NICs send and receive to a pcap "
                                          "file, which Wireshark and tshark dissect as RoCEv2 "
                                          "(tshark -r FILE -d udp.port==4791,infiniband).")
    cap.add_argument("-o", "--output", required=True, metavar="FILE.pcap", help="the pcap file to write")
    cap.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]", help="the program to run")
    cls = commands.add_parser("class", help="the instructor's view of a class (workshop/README.md)")
    cls_commands = cls.add_subparsers(dest="class_command", required=True, metavar="ACTION")
    rep = cls_commands.add_parser("report", help="who answered what, who is stuck on which exercise",
                                  description="Tabulate the records learners' lessons wrote in a class "
                                              "directory (RDMALAB_CLASS_DIR on their servers).")
    rep.add_argument("directory", metavar="DIR", help="the class directory")
    rep.add_argument("--json", action="store_true", help="print the table as JSON")
    return top


def _class(args):
    import json
    import os

    from rdmalab.lessons import classroom
    if not os.path.isdir(args.directory):
        raise RequestError(f"{args.directory} is not a directory: the class directory is the one "
                         f"{classroom.ENV} names on the learners' servers")
    print(json.dumps(classroom.table(args.directory), indent=1) if args.json else classroom.report(args.directory))
    return 0


def _size(text):
    """'64', '4K', '1M' -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    try:
        return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: use bytes, or a number with K or M (64K)")


def _sizes(text):
    """'1K,1M,64M' -> [1024, 1048576, 67108864]."""
    return [_size(part) for part in text.split(",") if part.strip()]


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)   # `timeout`, a batch system; a closed terminal


class Stopped(KeyboardInterrupt):
    """One of STOP_SIGNALS: unwinds as Ctrl-C does, so the cluster is shut down on the way out."""


def _stop(signum, frame):
    for s in STOP_SIGNALS:   # a second signal must not cut the shutdown short (SIGKILL still can: the watchdog)
        signal.signal(s, signal.SIG_IGN)
    raise Stopped(signum)


def _allreduce(args):
    from rdmalab import allreduce
    if args.ranks < 1 or args.iters < 1:
        raise SystemExit("rdmalab allreduce: --ranks and --iters must be at least 1")
    previous = {s: signal.signal(s, _stop) for s in STOP_SIGNALS}
    try:
        report = allreduce.run(args.ranks, args.size, args.algo, args.transport, args.dtype,
                               args.iters, args.compare_mpi, args.provider,
                               progress=lambda row, done, total: print(f"  {done}/{total}: {row['size']} bytes done",
                                                                       file=sys.stderr, flush=True),
                               starting=lambda line: print(f"rdmalab: {line}", file=sys.stderr, flush=True),
                               oversubscribe=args.oversubscribe)
    except Stopped as stopped:
        signum = stopped.args[0]
        print(f"rdmalab: stopped by {signal.Signals(signum).name}; the cluster was shut down", file=sys.stderr)
        return 128 + signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(report.to_json() if args.json else report.text())
    return 0 if all(row[p]["wrong"] == 0 for row in report.data["rows"] for p in ("out", "in")) else 1


def _bench(args):
    from rdmalab import bench
    sizes = bench.ALL_SIZES if args.all else args.size

    def progress(row, done, total):
        print(f"  {done}/{total}: {row['size']} bytes done", file=sys.stderr, flush=True)

    if args.test == "compare":
        result = bench.compare(sizes=sizes or (8, 65536, 1 << 20), iters=args.iters, provider=args.provider,
                               progress=progress)
    else:
        result = bench.run(args.test, sizes=sizes, iters=args.iters, provider=args.provider, progress=progress,
                           events=args.events)
    print(result.to_json() if args.json else result.text())
    return 0


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        if args.command == "doctor":
            from rdmalab.doctor import main as run
            return run(args)
        if args.command == "allreduce":
            return _allreduce(args)
        if args.command == "class":
            return _class(args)
        if args.command == "capture":
            from rdmalab.verbs.soft.link.capture import run as capture
            previous = {s: signal.signal(s, _stop) for s in STOP_SIGNALS}   # SIGTERM: stop, and keep the capture
            try:
                return capture(args.output, args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
        return _bench(args)
    except RdmalabError as error:   # said on purpose, with what to do; anything else is a bug: its traceback shows
        print(f"rdmalab: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rdmalab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
