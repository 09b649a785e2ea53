"""The lab across two hosts: two kernels, two Soft-RoCE devices, a wire between them.

`make test-two-hosts` (softroce/vm.sh --pair) boots two QEMU guests, a (10.20.0.1) and b (10.20.0.2), each
with its own rxe0 over eth0, joined by a virtual Ethernet link; these tests run on a, and reach b as
docs/cluster.md says a user with two machines does: over ssh, by address. Everything that crosses the
link is captured from outside both guests; softroce/read_link_capture.py reads that capture with tshark
afterwards. Elsewhere they skip, saying where they run.
"""
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time

import pytest

if os.environ.get("RDMALAB_PAIR") != "a":
    pytest.skip("runs on the first guest of a two-host pair: make test-two-hosts (softroce/vm.sh --pair)",
                allow_module_level=True)

from rdmalab import verbs as v  # noqa: E402
from rdmalab.allreduce import report  # noqa: E402
from rdmalab.allreduce.cluster import Cluster, ClusterError  # noqa: E402
from rdmalab.lessons import freeze  # noqa: E402
from rdmalab.lessons.cm_peer import CMPeer, qp_numbers  # noqa: E402
from rdmalab.lessons.target import RemoteBuffer  # noqa: E402
from rdmalab.proc.children import SSH_ARGS  # noqa: E402
from rdmalab.verbs import rc  # noqa: E402

HERE, PEER = os.environ["RDMALAB_PAIR_ADDRESS"], os.environ["RDMALAB_PAIR_PEER"]
e = v.enums
GiB = 1 << 30


def on_peer(command, timeout=60, check=True):
    """A shell command on the other host, over ssh; its output."""
    done = subprocess.run(["ssh", *SSH_ARGS, PEER, command], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"on {PEER}: {command}: exit {done.returncode}: {done.stderr}"
    return done.stdout


def peer_python(code):
    """Python on the other host (this checkout, this Python's path there); what it prints, read as JSON."""
    return json.loads(on_peer(f"PYTHONPATH=/project {sys.executable} -c {shlex.quote(code)}"))


def leftovers(pattern="ipyparallel|rdmalab"):
    """The lab's processes still running here and on the other host (but these tests' own, and the search)."""
    command = f"pgrep -af {shlex.quote(pattern)} || true"
    mine = {str(os.getpid()), str(os.getppid())}
    here = [line for line in subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout.splitlines()
            if line.split()[0] not in mine and "pytest" not in line and "pgrep" not in line]
    there = [line for line in on_peer(command).splitlines() if "sshd" not in line and "pgrep" not in line]
    return here, there


def test_each_host_has_its_own_device_and_address_on_the_link():
    here = v.choose_route()
    there = peer_python("from rdmalab import verbs; import json; r = verbs.choose_route(); "
                        "print(json.dumps({'device': r.device, 'gid': r.gid, 'ipv4': r.ipv4}))")
    print(f"\nthis host: {here.device} GID {here.gid} ({here.ipv4}); the other: {there['device']} GID {there['gid']} "
          f"({there['ipv4']})")
    assert (here.ipv4, there["ipv4"]) == (HERE, PEER)   # each RoCE v2 GID is its own host's address on the link
    boot_ids = {open("/proc/sys/kernel/random/boot_id").read(), on_peer("cat /proc/sys/kernel/random/boot_id")}
    assert len(boot_ids) == 2   # two kernels


def test_rping_and_rdma_cm_connect_one_host_to_the_other():
    # rping, the check docs/cluster.md starts with: a server on b, a client here
    server = subprocess.Popen(["ssh", *SSH_ARGS, PEER, f"exec rping -s -a {PEER} -C 3 -v"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    for _ in range(10):   # (until the server listens: it starts under CPU emulation)
        time.sleep(2)
        client = subprocess.run(["rping", "-c", "-a", PEER, "-C", "3", "-v"], capture_output=True, text=True, timeout=60)
        if client.returncode == 0:
            break
    try:
        served = server.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        server.kill()
        served = server.communicate()[0] + "\n(the server was still running 20 s after the client finished)"
        on_peer("pkill rping || true")
    print(f"\nrping -c (here): exit {client.returncode}\n{client.stdout}{client.stderr}rping -s (on {PEER}):\n{served}")
    assert client.returncode == 0 and client.stdout.count("ping data:") == 3
    # lesson 04's rdma_cm connection, with its peer on the other host
    cm, ce = v.cmid, v.cm_enums
    with CMPeer(host=PEER) as peer:
        where = cm.AddrInfo(dst=peer.address, dst_service=str(peer.port), port_space=ce.RDMA_PS_TCP)
        me = cm.CMID(creator=where, qp_init_attr=v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_recv_wr=1)))
        reply = me.reg_msgs(64)
        me.post_recv(reply)
        me.connect()
        mine, theirs = qp_numbers(me), peer.report()
        msg = me.reg_msgs(64)
        msg.write(b"hello from host a", 17)
        me.post_send(msg, length=17)
        me.get_send_comp()
        answered = reply.read(me.get_recv_comp().byte_len, 0)
        me.disconnect()
        me.close()
    print(f"rdma_cm: {HERE} QP {mine['QP number']:#x} <-> {PEER} QP {theirs['QP number']:#x}, both {mine['state']}; "
          f"the other host answered {answered!r}")
    assert mine["state"] == theirs["state"] == "RTS"
    assert mine["dest QP"] == theirs["QP number"] and theirs["dest QP"] == mine["QP number"]
    assert mine["rq_psn"] == theirs["sq_psn"] and answered == b"HELLO FROM HOST A"


class PeerAccounting:
    """What process `pid` on the other host, and that host's kernel, spend between start() and stop(): read
    there by one process that sleeps in between (its own start-up falls outside the measured window)."""

    def __init__(self, pid):
        code = ("import json, sys; from rdmalab.proc import procstat\n"
                "def now(): return {'process': procstat.snapshot(%d), 'host': procstat.host_cpu()}\n"
                "sys.stdin.readline(); before = now(); print('started', flush=True)\n"
                "sys.stdin.readline(); after = now()\n"
                "print(json.dumps({'before': before, 'after': after}), flush=True)" % pid)
        self.proc = subprocess.Popen(["ssh", *SSH_ARGS, PEER, f"PYTHONPATH=/project {sys.executable} -c {shlex.quote(code)}"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def start(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "started"

    def stop(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        spent = json.loads(self.proc.stdout.readline())
        self.proc.wait(timeout=30)
        return spent["before"], spent["after"]


def test_a_stopped_target_on_the_other_host_still_takes_writes_reads_and_atomics():
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
    res = rc.Resources(mr_sizes=[1 << 16], access=access, max_send_wr=64, cq_depth=128, sq_sig_all=0)
    qp, cq, local = res.qp, res.cq, res.mr
    pattern = os.urandom(8)
    local.write(pattern, 8, 0)
    try:
        with RemoteBuffer(host=PEER) as target:
            res.connect(target.endpoint)
            target.connect(res.endpoint(mr=local))
            post = freeze.poster(qp, local, target)   # (lesson 05's post: one WR into the target's buffer)
            port = target.tcp_listen()
            sock = socket.create_connection((PEER, port), timeout=30)
            target.tcp_accept()
            on_peer(f"kill -STOP {target.pid}")
            try:
                state = on_peer(f"cut -d' ' -f3 /proc/{target.pid}/stat").strip()
                statuses = []
                for opcode, offset, length, remote in ((e.IBV_WR_RDMA_WRITE, 0, 8, 0), (e.IBV_WR_RDMA_READ, 64, 8, 0),
                                                       (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 128, 8, 256)):
                    post(opcode, length, remote_offset=remote, local_offset=offset)
                    statuses.append(rc.wait_for_completion(cq, timeout=30).status)
                read_back = local.read(8, 64)
                # TCP to the same stopped process: its kernel takes bytes until the socket's buffers are full, then
                # nothing more moves (stalled: no byte accepted for 3 s) until the process reads
                sock.setblocking(False)
                pushed, chunk, quiet_since = 0, bytes(1 << 16), time.monotonic()
                while time.monotonic() - quiet_since < 3 and pushed < 256 << 20:
                    try:
                        pushed += sock.send(chunk)
                        quiet_since = time.monotonic()
                    except BlockingIOError:
                        time.sleep(0.05)
                still = on_peer(f"cut -d' ' -f3 /proc/{target.pid}/stat").strip()
            finally:   # whatever happened: never leave a stopped process behind (a pending SIGTERM waits too)
                on_peer(f"kill -CONT {target.pid}", check=False)
            seen = target.read(8, 0)
            sock.close()
            print(f"\ntarget process {target.pid} on {PEER}: state {state} while stopped; WRITE, READ, atomic "
                  f"completed {[s == e.IBV_WC_SUCCESS for s in statuses]}; TCP stalled after {pushed / 2**20:.1f} MiB; "
                  f"after SIGCONT it found its memory written: {seen == pattern}")
            assert state == still == "T"
            assert statuses == [e.IBV_WC_SUCCESS] * 3
            assert read_back == pattern and seen == pattern   # the READ saw the WRITE the stopped target never did
            assert pushed < 256 << 20   # TCP needs the stopped receiver: its buffers fill and the sender blocks

            # WRITEs streaming into the target while its process sits blocked in read(): what the target host spends
            writes, size = 4096, 4096
            local.write(os.urandom(size), size, 0)
            accounting = PeerAccounting(target.pid)
            accounting.start()
            start = time.monotonic()
            for i in range(writes):
                last = i == writes - 1
                post(e.IBV_WR_RDMA_WRITE, size, signaled=last or i % 8 == 7)
                if last or i % 8 == 7:
                    assert rc.wait_for_completion(cq, timeout=30).status == e.IBV_WC_SUCCESS
            elapsed = time.monotonic() - start
            before, after = accounting.stop()
            streamed = writes * size
            spent = {k: after["process"][k] - before["process"][k] for k in ("user_s", "system_s", "syscr", "syscw")}
            host = {k: after["host"][k] - before["host"][k] for k in ("softirq", "system", "irq")}
            per_gib = GiB / streamed
            print(f"{streamed / 2**20:.0f} MiB of WRITEs into {PEER} in {elapsed:.1f} s "
                  f"({streamed / elapsed / 2**20:.1f} MiB/s under CPU emulation). Per GiB streamed:\n"
                  f"  the target process: {(spent['user_s'] + spent['system_s']) * per_gib * 1e3:.1f} ms CPU, "
                  f"{(spent['syscr'] + spent['syscw']) * per_gib:.0f} read/write syscalls (it sat blocked in read())\n"
                  f"  the target host's kernel, all CPUs: {host['softirq'] * per_gib * 1e3:.0f} ms softirq (rxe's receive "
                  f"path and its copy into the target's memory: a software NIC's work, which a hardware NIC's DMA does "
                  f"without the host's CPU), {host['system'] * per_gib * 1e3:.0f} ms system (kernel threads, and sshd "
                  f"carrying this test's probe), {host['irq'] * per_gib * 1e3:.0f} ms irq")
            assert spent["syscr"] + spent["syscw"] == 0 and spent["user_s"] + spent["system_s"] < 0.05
            assert host["softirq"] > 0   # (rxe: the target kernel did the NIC's work, in softirq)
    finally:
        res.close()
    here, there = leftovers("rdmalab.lessons.target")
    assert here == [] and there == []


def test_docs_cluster_md_two_machines_as_written_two_ranks_a_host():
    """The Python block of docs/cluster.md's "Two machines, step by step", run as it is written (its addresses
    are these guests'): 4 ranks, 2 on each host; its table checked."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "cluster.md")) as f:
        doc = f.read()
    section = doc[doc.index("## Two machines, step by step"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    block = block[:block.index("```")]
    assert f'hosts={{"{HERE}": 2, "{PEER}": 2}}' in block
    scope = {}
    exec(compile(block, "docs/cluster.md", "exec"), scope)
    table = scope["table"]
    assert table.data["ranks"] == 4 and table.data["device"].startswith("rxe0")
    assert all(row[p]["wrong"] == 0 for row in table.data["rows"] for p in ("out", "in"))
    assert leftovers() == ([], [])


def _fails_within(cluster, what, break_it, delay=0.0):
    """Start AllReduces that go on for a while, break something after 2 s (`delay` s after break_it returns:
    when it only schedules the break); the ClusterError, and how long it took to come after the break."""
    broke = []
    threading.Timer(2.0, lambda: (break_it(), broke.append(time.monotonic() + delay))).start()
    with pytest.raises(ClusterError) as raised:
        cluster.allreduce(1 << 16, iters=100000)
    took = time.monotonic() - broke[0]
    print(f"\n{what}: {raised.value} ({took:.1f} s after)")
    return str(raised.value), took


def test_allreduce_with_a_rank_on_each_host_until_the_other_hosts_rank_is_killed():
    """2 ranks, one on each host (under CPU emulation a cluster takes about 90 s to start: this one serves
    both the results and the failure)."""
    with Cluster(ranks=2, launcher="ssh", hosts={HERE: 1, PEER: 1}, max_bytes=1 << 20, progress=print) as cluster:
        assert sorted(set(cluster.hosts)) == ["rdmalab-a", "rdmalab-b"]
        assert cluster.check([(n, dtype, "ring", True) for n in (1, 1001, 65537) for dtype in ("float32", "int32")]) \
            == [0] * 6
        measured = report.measure(cluster, [4096, 1 << 20], iters=3)
        print(f"\n2 ranks, one on each host ({HERE}, {PEER}):\n{measured.text()}")
        assert all(row[p]["wrong"] == 0 for row in measured.data["rows"] for p in ("out", "in"))
        assert measured.data["device"].startswith("rxe0")
        victim = cluster.hosts.index("rdmalab-b")
        said, took = _fails_within(cluster, "rank killed on b",
                                   lambda: on_peer(f"kill -9 {cluster.pids[victim]}"))
    assert f"rank {victim} (on rdmalab-b) died" in said
    assert took < 60   # (a bound on a hang, not a speed: the note reports the time)
    assert leftovers() == ([], [])


def test_a_cut_link_ends_the_allreduce_naming_the_host_and_leaves_nothing_running():
    with Cluster(ranks=2, launcher="ssh", hosts={HERE: 1, PEER: 1}, max_bytes=1 << 20) as cluster:
        other = cluster.hosts.index("rdmalab-b")
        # b takes its end of the link down for 30 s (and so cannot be reached meanwhile, ssh included)
        # (a second later: this ssh session ends, with its status, before the link goes)
        cut = "nohup sh -c 'sleep 1; ip link set eth0 down; sleep 30; ip link set eth0 up' >/dev/null 2>&1 &"
        said, took = _fails_within(cluster, "link cut", lambda: on_peer(cut), delay=1.0)
    assert f"rank {other} (on rdmalab-b)" in said
    assert took < 90
    deadline = time.monotonic() + 120   # the link comes back; b's engine has shut down, its controller gone
    while True:
        try:
            left = leftovers()
        except (AssertionError, subprocess.TimeoutExpired):   # not reachable yet
            left = None
        if left == ([], []) or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert left == ([], []), f"still running (here, on {PEER}): {left}"
