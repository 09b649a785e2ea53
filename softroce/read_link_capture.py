"""Read the two-host pair's link capture (softroce/vm.sh --pair) as a user would: with tshark, and with the
lab's own codec (lesson 13's rdmalab.lessons.packets), and check that they agree.

    python softroce/read_link_capture.py [PCAP]      (default ~/.cache/rdmalab/pair-link.pcap)

QEMU wrote every Ethernet frame that crossed the link between the two guests, from outside both: the
wire between two kernels. Prints tshark's count of RoCEv2 packets by direction and opcode, the first RDMA
WRITE as tshark dissects it (its RETH: the target's address, rkey and length travel in the packet), and
a few packets as the lab's codec reads them. Exits non-zero if there is no RoCEv2 traffic both ways, no
WRITE with a RETH from 10.20.0.1 to 10.20.0.2, or the two readers count different packets.
"""
import collections
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rdmalab.lessons import packets  # noqa: E402

A, B = "10.20.0.1", "10.20.0.2"
FIELDS = ["ip.src", "ip.dst", "infiniband.bth.opcode", "infiniband.reth.va", "infiniband.reth.r_key",
          "infiniband.reth.dmalen", "_ws.col.Info"]
WRITE_FIRST, WRITE_ONLY = 6, 10   # RC RDMA WRITE First, Only: the packets that carry a RETH


def tshark(path):
    cmd = ["tshark", "-n", "-r", path, "-Y", "infiniband", "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for field in FIELDS:
        cmd += ["-e", field]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(FIELDS, line.split("\t"))) for line in out.splitlines()]


def main(path):
    if not os.path.exists(path):
        sys.exit(f"{path}: no capture (run softroce/vm.sh --pair first)")
    rows = tshark(path)
    by = collections.Counter((r["ip.src"], r["ip.dst"], r["_ws.col.Info"].split(" QP=")[0].strip()) for r in rows)
    print(f"{path}: {os.path.getsize(path) / 2**20:.1f} MiB; tshark finds {len(rows)} RoCEv2 packets between the hosts")
    for (src, dst, what), n in sorted(by.items(), key=lambda item: -item[1])[:12]:
        print(f"  {n:8d}  {src} -> {dst}  {what}")
    writes = [r for r in rows if r["ip.src"] == A and r["ip.dst"] == B and r["infiniband.bth.opcode"]
              and int(r["infiniband.bth.opcode"], 0) in (WRITE_FIRST, WRITE_ONLY)]
    if writes:
        w = writes[0]
        print(f"the first RDMA WRITE from {A} to {B}, as tshark dissects it: {w['_ws.col.Info']}\n"
              f"  RETH: virtual address {w['infiniband.reth.va']}, rkey {w['infiniband.reth.r_key']}, "
              f"DMA length {w['infiniband.reth.dmalen']} (where in the target's memory, with what key: in the packet)")
    ours = packets.capture(path)
    print(f"the lab's codec (lesson 13's packets.capture) reads {len(ours)} RoCEv2 packets, each ICRC-checked; the first:")
    for p in ours[:4]:
        print(f"  {p}")
    directions = {(src, dst) for src, dst, _ in by}
    problems = ([] if {(A, B), (B, A)} <= directions else [f"no RoCEv2 traffic both ways (saw {sorted(directions)})"]) + \
               ([] if writes else [f"no RDMA WRITE with a RETH from {A} to {B}"]) + \
               ([] if len(ours) == len(rows) else [f"tshark counts {len(rows)} RoCEv2 packets, the lab's codec {len(ours)}"])
    for problem in problems:
        print(f"read_link_capture: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/rdmalab/pair-link.pcap")))
