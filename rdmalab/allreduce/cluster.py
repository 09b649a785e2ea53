"""N ranks as ipyparallel engines, each with a transport connected to all the others.

    from rdmalab.allreduce.cluster import Cluster
    with Cluster(ranks=4, transport="rdma") as cluster:      # local engines on this machine
        cluster.allreduce(1 << 20, "float32", algorithm="ring")
        cluster.view                                         # an ipyparallel DirectView: %%px works on it

Launchers: `launcher="local"` (default) starts engines as processes here; `launcher="mpi"` starts
them with mpiexec (mpi4py and MPICH from PyPI on one host); `launcher="ssh", hosts={"10.0.0.1": 2,
"10.0.0.2": 2}` starts them on other machines over ssh (ipyparallel's SSH launcher, configured as
ssh_options() says); on many nodes, ipyparallel's "mpi" and "slurm" launchers, configured through
`ipp_options` (see docs/cluster.md). Each rank opens the verbs provider,
registers its regions, and the ranks swap (qp_num, psn, gid, rkey, addr) through this process, which
plays the part of an out-of-band bootstrap network. This module is the host side; what each engine
runs is in rdmalab.allreduce.ranks. Teardown always runs (close(), `with`, or at exit).
A rank that dies is noticed within a second (on another host: a few seconds, as the controller's
heartbeat misses it): the others are interrupted and ClusterError names it and its host.

Local ranks are weighed before any starts: more than RANKS_PER_CPU per usable CPU are refused (unless
`oversubscribe=True`), and more than one per CPU are started with a word on what they cost, given to
`progress` (a callable taking one line of text, e.g. `print`), which also hears how many ranks are
ready while they start. Without `progress`, nothing is printed.
"""
import atexit
import concurrent.futures
import os
import signal
import socket
import sys
import time
import warnings

from rdmalab import settings, sockets
from rdmalab.allreduce import mpi
from rdmalab.allreduce import ranks as engine   # what each engine runs (here `ranks` is their number)
from rdmalab.allreduce.algorithms import stage_bytes, validate
from rdmalab.allreduce.transports import TRANSPORTS
from rdmalab.proc import children, waiting, watchdog
from rdmalab.proc.cpus import usable_cpus
from rdmalab.proc.procstat import pid_alive
from rdmalab.verbs import emulated
from rdmalab.errors import RdmalabError, RequestError

ENGINE_ENV = {"OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
RANKS_PER_CPU = 8   # more local ranks than this per usable CPU are refused: they start for minutes, then take turns
# measured on a 2-core machine (docs/cluster.md): a local cluster starts in about START_S plus
# RANK_CPU_S of CPU time per rank (its engine and the engine's nanny process, each a Python process),
# and each rank's two processes hold about RANK_MEMORY (proportional set size, before any buffer)
START_S, RANK_CPU_S, RANK_MEMORY = 6.0, 1.0, 80 << 20
PROGRESS_EVERY = 5.0   # seconds between two start-up progress lines
# ranks on other hosts: the controller pings every engine each HEARTBEAT_MS and drops one that misses
# HEARTBEAT_MISSES pings in a row (a killed host, a cut link: noticed in about 4 s, not ipyparallel's 33),
# and an engine whose controller stops answering as long shuts itself down (nothing left on a host cut off)
HEARTBEAT_MS, HEARTBEAT_MISSES = 1000, 3


REAPER = "rdmalab.verbs.emulated:reap_when_gone"   # what the watchdog calls on the pids it killed (soft0's segments)

class ClusterError(RdmalabError):
    """A rank failed or died; the message says which and what the others were doing."""


class Cluster:
    def __init__(self, ranks=4, transport="rdma", launcher="local", max_bytes=64 << 20, algorithms=("ring",),
                 provider=None, start=True, ipp_options=None, progress=None, oversubscribe=False, hosts=None):
        if ranks < 1:
            raise RequestError("a cluster needs at least one rank")
        if transport not in TRANSPORTS:
            raise RequestError(f"transport {transport!r}: choose {' or '.join(TRANSPORTS)}")
        if hosts is not None and (launcher != "ssh" or sum(hosts.values()) != ranks):
            raise RequestError(f"hosts={hosts!r}: hosts go with launcher=\"ssh\", and their ranks must add up to "
                               f"ranks={ranks} (say hosts={{'10.0.0.1': 2, '10.0.0.2': 2}} for 4 ranks)")
        self.ranks, self.transport, self.launcher, self.where = ranks, transport, launcher, hosts
        self.max_bytes, self.algorithms, self.provider = max_bytes, tuple(algorithms), provider
        self.ipp_options = dict(ipp_options or {})   # passed to ipyparallel.Cluster: hosts, profiles, ...
        self.progress, self.oversubscribe = progress, oversubscribe
        self.regions = {"data": max_bytes,   # every rank registers these
                        "stage": max(stage_bytes(a, ranks, max_bytes) for a in self.algorithms)}
        self._ipp = self.client = self.view = self._watchdog = None
        self.pids = []
        if start:
            self.start()

    # -------------------------------------------------------------- lifecycle

    def memory_needed(self):
        """Bytes the ranks hold at most: their processes, registered regions and an out-of-place input each."""
        return self.ranks * (RANK_MEMORY + sum(self.regions.values()) + self.max_bytes)

    def start(self):
        import ipyparallel as ipp
        from traitlets.config import Config
        since = time.monotonic()
        if self.launcher == "local":
            self._weigh_cpus()
            self._refuse_what_memory_cannot_hold()
        env = dict(ENGINE_ENV)
        if self.launcher == "local":   # the ranks wait for each other: they spin only with a CPU each
            env[waiting.PEERS_ENV] = str(self.ranks)
        elif self.where:               # (ranks on the same host share its CPUs)
            env[waiting.PEERS_ENV] = str(max(self.where.values()))
        if self.launcher != "local":   # this process's settings reach engines on other hosts too
            env.update({k: v for k, v in os.environ.items() if k.startswith("RDMALAB_")})
        if self.provider:
            env["RDMALAB_PROVIDER"] = self.provider
        if self.launcher == "mpi":   # ipyparallel runs the first mpiexec on PATH: put MPICH's first
            os.environ["PATH"] = os.path.dirname(mpi.launcher()) + os.pathsep + os.environ.get("PATH", "")
        # engines can take minutes to start on a slow or emulated machine (60 s is ipyparallel's default)
        timeout = settings.number("RDMALAB_ENGINE_TIMEOUT", 300, 1, 86400, "a time in seconds, 1 to 86400")
        # and the controller drops an engine that has not finished registering within 30 s: under CPU
        # emulation four engines starting at once take about that long, so it gets the same patience
        heartbeat = [f"--HeartMonitor.period={HEARTBEAT_MS}",
                     f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}"] if self.where else []
        # the engines' environment from their start: numpy reads OPENBLAS_NUM_THREADS when it is imported, which
        # an engine does before set_env reaches it (2 BLAS threads a rank, spinning, made a matmul 10-40x slower)
        config = Config()
        config.BaseLauncher.environment = env
        options = {"engine_timeout": timeout, "config": config,
                   "controller_args": [f"--IPController.registration_timeout={int(timeout)}", *heartbeat],
                   **(ssh_options(self.where, env) if self.where else {}), **self.ipp_options}
        self._ipp = ipp.Cluster(n=self.ranks, engines=self.launcher, log_level=40, **options)
        atexit.register(self.close)
        # ipyparallel starts every process of the cluster with IPP_CLUSTER_ID in its environment: the
        # watchdog, running before the first of them, can stop them all if this process dies at any moment
        self._watchdog = children.spawn("rdmalab.proc.watchdog", self._ipp.cluster_id, REAPER, new_session=True)
        try:
            self._ipp.start_cluster_sync()
            self.client = self._ipp.connect_client_sync()
            self._wait_for_engines(options["engine_timeout"], since)
            self.view = self.client[:]
            self.view.block = True
            self.view.apply_sync(engine.set_env, env)
            # on soft0's wire link each local rank is a host of its own, with a NIC of its own, as a node is
            hosts = emulated.rank_hosts(self.ranks) if self.launcher == "local" else None   # (None: soft0's shm link)
            for i, host in enumerate(hosts or ()):
                self.client[i].apply_sync(engine.set_env, {"RDMALAB_SOFT_HOST": host})
            self.pids = self.view.apply_sync(os.getpid)
            self.hosts = self.view.apply_sync(socket.gethostname)
            self._here = self.view.apply_sync(_boot_id) == [_boot_id()] * self.ranks   # all on this machine
            self.view.scatter("rank", list(range(self.ranks)), flatten=True)
            tcp_host = "127.0.0.1" if len(set(self.hosts)) == 1 else None   # else each rank's own name
            endpoints = self._gather([self.client[i].apply_async(engine.setup, i, self.ranks, self.transport,
                                                                 self.regions, tcp_host or self.hosts[i])
                                      for i in range(self.ranks)])
            mine = {i: {peer: endpoints[peer]["to"][i] for peer in range(self.ranks) if peer != i}
                    for i in range(self.ranks)}
            pids = {i: (endpoints[i]["host"], endpoints[i]["pid"]) for i in range(self.ranks)}
            self._gather([self.client[i].apply_async(engine.connect, mine[i], pids) for i in range(self.ranks)])
        except BaseException:
            self.close()
            raise
        return self

    def close(self):
        """Tear the ranks down: close their verbs objects, stop the engines. Safe to call twice."""
        if self._ipp is None:
            return
        try:
            if self.client is not None and self.view is not None:
                try:   # (a bounded wait: a rank on a host cut off never answers)
                    self.view.apply_async(engine.close).wait(10)
                except Exception:
                    pass
                self.client.close()
        finally:
            try:
                self._ipp.stop_cluster_sync()
            except Exception:
                pass
            # whatever survived the stop: a stuck engine, a controller's scheduler still shutting down
            killed = watchdog.kill(self._ipp.cluster_id)
            for host in self.where or ():   # and on the other hosts, which this machine's /proc cannot see
                if not _loopback(host) and watchdog.kill_on(host, self._ipp.cluster_id) is None:
                    warnings.warn(f"could not reach {host} over ssh to stop what is left of this cluster there; its "
                                  f"engines stop by themselves once they miss the controller's heartbeats", RuntimeWarning)
            if self.launcher == "local":   # the shared memory of a rank that was killed
                emulated.reap_when_gone(self.pids + killed, timeout=5)
            if self._watchdog is not None:   # closed properly: it may go
                children.stop(self._watchdog)
            self._ipp = self.client = self.view = self._watchdog = None
            atexit.unregister(self.close)

    def _weigh_cpus(self):
        """Refuse more local ranks than RANKS_PER_CPU per usable CPU, before any starts; for more than
        one per CPU, say how long they will take to start."""
        cpus = usable_cpus()
        most = max(1, int(RANKS_PER_CPU * cpus))
        if self.ranks <= cpus:
            return
        start = _duration(START_S + self.ranks * RANK_CPU_S / cpus)
        if self.ranks > most and not self.oversubscribe:
            raise ClusterError(f"{self.ranks} local ranks are too many for {cpus:g} usable CPUs (at most {most}, "
                               f"{RANKS_PER_CPU} per CPU; starting them would take about {start}): use at most "
                               f"{most} ranks, or spread them over nodes with launcher=\"slurm\", \"mpi\" or \"ssh\" "
                               f"(docs/cluster.md), or oversubscribe anyway (--oversubscribe, oversubscribe=True)")
        self._say(f"{self.ranks} ranks on {cpus:g} usable CPUs: about {start} to start, and ranks that share a CPU "
                  f"take turns (their times include the wait)")

    def _wait_for_engines(self, timeout, since):
        """Wait until every engine has registered, telling `progress` every PROGRESS_EVERY s how many have."""
        ready = self.client.wait_for_engines(self.ranks, timeout=timeout, block=False, interactive=False)
        said = False
        while True:
            try:
                ready.result(timeout=PROGRESS_EVERY)
                break
            except concurrent.futures.TimeoutError:
                if ready.done():   # the wait itself timed out
                    raise
            said = True
            self._say(f"starting {self.ranks} ranks: {len(self.client.ids)}/{self.ranks} ready "
                      f"({time.monotonic() - since:.0f} s)")
        if said:
            self._say(f"starting {self.ranks} ranks: {self.ranks}/{self.ranks} ready ({time.monotonic() - since:.0f} s)")

    def _say(self, line):
        if self.progress is not None:
            self.progress(line)

    def _refuse_what_memory_cannot_hold(self):
        """A clear error now rather than the kernel's OOM killer taking a rank (or JupyterLab) later."""
        with open("/proc/meminfo") as f:
            available = int(next(line for line in f if line.startswith("MemAvailable:")).split()[1]) * 1024
        need = self.memory_needed()
        if need > available:
            raise ClusterError(f"{self.ranks} ranks with {_gib(self.max_bytes)} buffers need about {_gib(need)} "
                               f"of memory (registered regions and an out-of-place input), but this machine "
                               f"has {_gib(available)} available: use a smaller size or fewer ranks")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -------------------------------------------------------------- running code on every rank

    def run(self, fn, *args, timeout=600):
        """fn(comm, *args) on every rank, where comm is that rank's Communicator; returns the results."""
        return self._gather([self.client[i].apply_async(engine.run, fn, *args) for i in range(self.ranks)], timeout)

    def allreduce(self, count, dtype="float32", algorithm="ring", iters=5, warmup=1, check=True, in_place=True):
        """Time `iters` AllReduces of `count` elements on every rank; returns per-rank dicts with the
        times (s) and the number of wrong elements against numpy (0 expected). The request is validated
        here, before it reaches any rank."""
        validate(algorithm, dtype, self.ranks)
        return self.run(engine.timed_allreduce, count, dtype, algorithm, iters, warmup, check, in_place)

    def check(self, cases):
        """Run each (count, dtype, algorithm, in_place) once on every rank; returns, per case, the
        number of wrong elements summed over ranks (one round trip for the whole list). Every case is
        validated here, before any reaches a rank."""
        for count, dtype, algorithm, in_place in cases:
            validate(algorithm, dtype, self.ranks)
        per_rank = self.run(engine.check_cases, list(cases))
        return [sum(r[i] for r in per_rank) for i in range(len(cases))]

    def _gather(self, results, timeout=600):
        """Wait for every rank's result; if a rank dies meanwhile, interrupt the others and say so."""
        deadline = time.monotonic() + timeout
        while not all(r.ready() for r in results):
            dead = self._dead_ranks()
            if dead:
                self._interrupt(exclude=dead)
                for r in results:
                    r.wait(5)
                raise ClusterError(f"{self._who(dead)} died; the other ranks were interrupted "
                                   f"and have released their resources")
            if time.monotonic() > deadline:
                self._interrupt()
                raise ClusterError(f"the ranks did not finish within {timeout:.0f} s")
            pending = [r for r in results if not r.ready()]
            if pending:
                pending[0].wait(0.05)
        out, failures = [], {}   # message -> the ranks that reported it
        for i, r in enumerate(results):
            try:
                out.append(r.get())
            except Exception as error:
                message = f"{getattr(error, 'ename', type(error).__name__)}: {getattr(error, 'evalue', error)}"
                failures.setdefault(message, []).append(i)
        if failures:
            said = "; ".join(f"{self._who(ranks)} failed: {message}" for message, ranks in failures.items())
            dead = self._dead_ranks()   # a survivor may report first (peer lost): name the cause
            if dead:
                raise ClusterError(f"{self._who(dead)} died; the other ranks stopped: {said}")
            raise ClusterError(said)
        return out

    def _who(self, ranks):
        """'rank 3' or 'ranks 1, 3', with each rank's host when the ranks run on more than one."""
        hosts = getattr(self, "hosts", None)
        spread = hosts and len(set(hosts)) > 1
        return f"rank{'s' if len(ranks) > 1 else ''} " + ", ".join(
            f"{i} (on {hosts[i]})" if spread else str(i) for i in ranks)

    def _dead_ranks(self):
        if self.launcher == "local" and self.pids:
            return [i for i, pid in enumerate(self.pids) if not pid_alive(pid)]
        return [i for i in range(self.ranks) if i not in self.client.ids]

    def _interrupt(self, exclude=()):
        targets = [i for i in range(len(self.pids)) if i not in exclude]
        if not getattr(self, "_here", self.launcher == "local"):   # ranks on other hosts: through each engine's nanny, wherever it runs
            live = [i for i in targets if i in self.client.ids]
            if live:
                try:
                    self.client.send_signal(signal.SIGINT, targets=live, block=False)
                except Exception:   # (a host cut off: its ranks stop when their controller goes quiet)
                    pass
            return
        for i in targets:
            try:
                os.kill(self.pids[i], signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                pass


def ssh_options(hosts, env):
    """ipyparallel.Cluster's options for engines started over ssh: `hosts` {address: ranks there}. Every
    host runs this Python (the same path on each: a shared or identically installed venv) with `env`; the
    controller listens on this machine's address toward the first host; ssh never asks for a password or a
    host key (BatchMode: use keys) and gives up on an unreachable host in seconds; an engine that loses its
    controller shuts down."""
    from traitlets.config import Config
    config = Config()
    config.SSHEngineSetLauncher.engines = dict(hosts)
    config.SSHEngineSetLauncher.remote_python = sys.executable
    config.SSHEngineSetLauncher.environment = children.remote_environment(**env)
    config.SSHEngineSetLauncher.engine_args = [f"--IPEngine.max_heartbeat_misses={HEARTBEAT_MISSES + 2}"]
    config.SSHLauncher.ssh_args = list(children.SSH_ARGS)
    others = [h for h in hosts if not _loopback(h)] or list(hosts)
    return {"config": config, "controller_ip": sockets.address_toward(_address(others[0]))}


def _address(host):   # ("user@host:port", as ipyparallel's engines dict allows, to "host")
    return host.split("@")[-1].split(":")[0]


def _loopback(host):
    return _address(host) == "localhost" or _address(host).startswith("127.")


def _boot_id():
    """This machine's identity (a new one every boot): ranks with the same one share a kernel."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def _duration(seconds):
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _gib(n):
    return f"{n / 2 ** 30:.1f} GiB" if n >= 1 << 30 else f"{n / 2 ** 20:.0f} MiB"
