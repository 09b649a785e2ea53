"""NCCL in practice, for the AllReduce lesson: protocols whose data carries its own flag, rings against trees.

    from rdmalab.lessons import nccl
    nccl.protocols()          # LL, LL128, Simple: bytes per flag, share of the wire that is data
    nccl.steps()              # messages on a ring's and a tree's critical path, for p ranks

A receiver must learn that data has arrived. This lab's ring (lesson 09) writes the data, then a flag the
reader polls, and trusts the order of the two writes (lesson 06's mailbox ends with a WRITE_WITH_IMM instead,
whose completion comes after the data); NCCL's Simple protocol also sends a chunk and then a separate flag,
with a memory fence between. NCCL's LL and LL128 protocols put the flags inside the data instead, so the
receiver polls the data itself and no ordering between two writes is needed: LL stores two 4-byte data words,
each beside its 4-byte flag, with one 16-byte store, and needs each 8-byte pair to arrive whole; LL128 puts
an 8-byte flag in every 128-byte line, which must arrive whole.

Sources: NCCL's src/include/device.h (`union ncclLLFifoLine`: data1, flag1, data2, flag2, "flags
have to be after data ... assuming data is written with an atomicity of 8 bytes (IB/RDMA)";
NCCL_LL128_LINESIZE 128 with 16 - 1 eight-byte data elements; NCCL_STEPS 8); NCCL's environment
documentation (NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE default 4 MiB, NCCL_MIN/MAX_NCHANNELS);
NCCL 2.18.1's release notes (LL128 unsafe where PCI relaxed ordering lets a line tear);
Hu et al., "Demystifying NCCL", arXiv:2507.04786 (2025), for the protocols' behaviour.
"""
import html
import math

SIMPLE_STEP = (4 << 20) // 8    # NCCL_BUFFSIZE (4 MiB by default) split into NCCL_STEPS (8) slots

# name, unit the receiver checks (bytes), data bytes in it, flag bytes in it, flags in it, what makes the flags
# trustworthy
PROTOCOLS = [
    ("LL", 16, 8, 8, 2, "two pairs of a 4-byte word and its 4-byte flag, written by one 16-byte store (an "
                        "ncclLLFifoLine); NCCL assumes an RDMA NIC writes each 8-byte pair at once"),
    ("LL128", 128, 120, 8, 1, "the 128-byte line must arrive whole and in order: NCCL enables LL128 only where "
                              "the platform guarantees it (NVLink); its 2.18.1 release notes warn that a PCI path "
                              "with relaxed ordering can corrupt data"),
    ("Simple", SIMPLE_STEP + 8, SIMPLE_STEP, 8, 1, "the flag (a step counter) is written after the data, with a "
                                                    "fence between, as this lab's ring does (lesson 09)"),
]


class Table:
    """Rows with a header: HTML in a notebook, aligned text elsewhere."""

    def __init__(self, header, rows, note=""):
        self.header, self.rows, self.note = header, rows, note

    def _repr_html_(self):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(str(c))}</td>" for c in row)
                       + "</tr>" for row in self.rows)
        note = f"<p style='font-size:small'>{html.escape(self.note)}</p>" if self.note else ""
        return f"<table><tr>{head}</tr>{body}</table>{note}"

    def __str__(self):
        cells = [self.header] + [[str(c) for c in row] for row in self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
        return "\n".join(lines + ([self.note] if self.note else []))

    __repr__ = __str__


def protocol_figures(nbytes=1 << 20):
    """Per protocol: data share of the bytes sent, and how many flags the receiver checks for `nbytes`."""
    return {name: {"unit": unit, "data": data, "flag": flag, "data_share": data / (data + flag),
                   "flags": math.ceil(nbytes / data) * flags, "why": why}
            for name, unit, data, flag, flags, why in PROTOCOLS}


def protocols(nbytes=1 << 20):
    """The three protocols as a table: per unit the receiver polls, data and flag, and their cost."""
    rows = [(name, _bytes(f["unit"]), _bytes(f["data"]), _bytes(f["flag"]), f"{f['data_share']:.3%}",
             f"{f['flags']:,}", f["why"]) for name, f in protocol_figures(nbytes).items()]
    return Table(["protocol", "unit polled", "data", "flag", "data share of the wire", f"flags per {nbytes >> 20} MiB",
                  "why the flag can be trusted"], rows,
                 "Sources: NCCL src/include/device.h; NCCL docs (NCCL_PROTO, NCCL_BUFFSIZE) and 2.18.1 release notes; "
                 "Hu et al., arXiv:2507.04786.")


def _bytes(n):
    return f"{n >> 10} KiB" if n % 1024 == 0 else (f"{n >> 10} KiB + {n % 1024} B" if n > 1024 else f"{n} B")


def steps(ranks=(8, 64, 512, 4096)):
    """Messages on the critical path of one AllReduce: a ring's 2(p-1) against a tree's 2 log2(p)."""
    rows = [(p, 2 * (p - 1), 2 * math.ceil(math.log2(p))) for p in ranks]
    return Table(["ranks p", "ring: 2(p-1) steps", "tree: 2 log2(p) steps (reduce up, broadcast down)"], rows,
                 "Both move about 2n bytes per rank; the tree's latency grows as log p (NCCL's double binary "
                 "trees, NVIDIA blog 'Massively Scale Your Deep Learning Training with NCCL 2.4', 2019).")
