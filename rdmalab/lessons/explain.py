"""Why a work request failed, in a sentence that names the rule and the numbers, where a NIC gives a status.

    wc = lessons.one_sided(pair, e.IBV_WR_RDMA_WRITE, rkey=0x1234)
    lessons.explain(wc, pair.posted, pair.a)      # the completion, the WR posted, the QP it was posted on

On soft0 the explanation comes from the emulated NIC's own checks, run again on what the WR named (the
remote key's MR, its range and access flags, the target QP's state, access flags and receives): it says
"checked". On a real device only the status and what the program posted are known, and it says so
("inferred"). Each explanation ends with what rxe and mlx5 report for the same mistake. Nothing here runs
on the data path: it reads the NIC's state after the completion failed.
"""
import html
import textwrap

from rdmalab import verbs as v
from rdmalab.verbs import emulated
from rdmalab.errors import QP_STATE_NAMES, STATUS_HINTS, WR_OPCODE_NAMES, status_name

# what each status is on the devices the lab knows (rxe: probed in the Soft-RoCE guest, tests/conformance;
# mlx5: rdma-core's providers/mlx5 and ibv_poll_cq(3))
DEVICES = {
    1: "ibv_poll_cq(3): a receive too small for the incoming message; mlx5 reports that so on the receiver, "
       "rxe and soft0 report LOC_QP_OP_ERR (2).",
    2: "rxe and soft0 report an lkey that is no MR of the QP's PD as LOC_QP_OP_ERR (2), mlx5 as LOC_PROT_ERR "
       "(4); the QP moves to ERR.",
    4: "LOC_PROT_ERR (4) on rxe and mlx5 for an SGE outside its MR, or a READ into an MR without LOCAL_WRITE; "
       "the QP moves to ERR.",
    5: "WR_FLUSH_ERR (5) on every device: the QP was in ERR. Look for the first completion that failed.",
    9: "REM_INV_REQ_ERR (9) on rxe and mlx5: the target refused the kind of request; on RC both QPs move to ERR.",
    10: "REM_ACCESS_ERR (10) on rxe and mlx5, on the sender; on RC both QPs move to ERR.",
    11: "rxe: REM_OP_ERR (11) on the sender and LOC_QP_OP_ERR (2) on the receiver; mlx5's receiver reports "
        "LOC_LEN_ERR (1).",
    12: "RETRY_EXC_ERR (12) on every device, after retry_cnt + 1 local ACK timeouts (4.096 us x 2^timeout each).",
    13: "RNR_RETRY_EXC_ERR (13) on every device; rnr_retry=7 retries for ever instead.",
}
ACCESS = (("LOCAL_WRITE", 1), ("REMOTE_WRITE", 2), ("REMOTE_READ", 4), ("REMOTE_ATOMIC", 8))


class Explanation:
    """The status, what went wrong and how that is known (checked on soft0, or inferred), what devices say."""

    def __init__(self, status, said, checked, devices=""):
        self.status, self.said, self.checked, self.devices = status, said, checked, devices

    def __str__(self):
        how = "checked by soft0's NIC" if self.checked else "inferred from the status and the work request"
        parts = [f"status {self.status} ({status_name(self.status)}): {self.said}", f"({how})", self.devices]
        return "\n".join(textwrap.fill(p, 92, subsequent_indent="  ") for p in parts if p)

    __repr__ = __str__

    def _repr_html_(self):
        how = "checked by soft0's NIC" if self.checked else "inferred from the status and the work request"
        return (f"<p><b>status {self.status} ({status_name(self.status)})</b>: {html.escape(self.said)} "
                f"<i>({how})</i><br><small>{html.escape(self.devices)}</small></p>")


def explain(wc, wr=None, qp=None):
    """Why `wc` (a completion, or a status) failed: `wr` is the work request that was posted (or the record
    of it lessons.one_sided keeps, pair.posted), `qp` the QP it was posted on (each makes the sentence more precise)."""
    status = int(getattr(wc, "status", wc))
    if status == v.enums.IBV_WC_SUCCESS:
        return Explanation(status, "it completed: nothing went wrong.", True)
    said = _checked(status, wr, qp)
    return Explanation(status, said or _inferred(status, wr), said is not None, DEVICES.get(status, ""))


def flags(access):
    return " | ".join(name for name, bit in ACCESS if access & bit) or "no access flags"


def _opname(opcode):
    return WR_OPCODE_NAMES.get(opcode, f"opcode {opcode}")


def _inferred(status, wr):
    if status == 10 and wr is not None and _need(wr.opcode):
        rkey, addr = _target(wr)
        what = f"rkey {rkey:#x} for {_opname(wr.opcode)} at {addr:#x}" if rkey is not None \
            else f"the rkey of this {_opname(wr.opcode)}"
        return (f"the target refused {what}: the key is "
                f"no MR of its PD, or that MR lacks {flags(_need(wr.opcode))}, or the range runs outside it. "
                f"Compare the rkey, address and length with what the target sent you.")
    return STATUS_HINTS.get(status, "no explanation known for this status") + "."


def _target(wr):
    """The rkey and remote address `wr` names, where they can be read back: a Posted record has them
    (lessons.fixtures), soft0's SendWR keeps them under its own names, pyverbs' SendWR gives neither."""
    if hasattr(wr, "remote_addr"):
        return wr.rkey, wr.remote_addr
    return getattr(wr, "_rkey", None), getattr(wr, "_remote_addr", None)


def _sges(wr):
    """(addr, length, lkey) of each SGE of `wr`, a Posted record or soft0's SendWR."""
    return wr.sges if hasattr(wr, "sges") else wr._sges


def _need(opcode):
    """The access a one-sided operation needs of the target's MR (0: none, or not one-sided)."""
    e = v.enums
    return {e.IBV_WR_RDMA_WRITE: e.IBV_ACCESS_REMOTE_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM: e.IBV_ACCESS_REMOTE_WRITE,
            e.IBV_WR_RDMA_READ: e.IBV_ACCESS_REMOTE_READ, e.IBV_WR_ATOMIC_CMP_AND_SWP: e.IBV_ACCESS_REMOTE_ATOMIC,
            e.IBV_WR_ATOMIC_FETCH_AND_ADD: e.IBV_ACCESS_REMOTE_ATOMIC}.get(opcode, 0)


# ---------------------------------------------------------------- soft0: the NIC's checks, run again

def _checked(status, wr, qp):
    """A sentence from soft0's own checks (run dry now on what the WR named: emulated.verdicts): the first
    verdict that gives this status. None when none does (the inferred one is used)."""
    if emulated.link() is None:   # a real device: its checks cannot be read
        return None
    if wr is None and status != 12:   # (only a request nobody answered is explained without its WR)
        return None
    dest = qp.query(v.enums.IBV_QP_DEST_QPN)[0].dest_qp_num if qp is not None else None
    if wr is None:   # (what it was does not matter to who answers)
        found = emulated.verdicts(qp, v.enums.IBV_WR_RDMA_WRITE, [])
    else:
        rkey, remote_addr = _target(wr)
        found = emulated.verdicts(qp, wr.opcode, list(_sges(wr)), rkey or 0, remote_addr or 0,
                                  getattr(wr, "imm_data", 0) or 0, getattr(wr, "send_flags", 0) or 0)
    verdict = next((verdict for _, verdict in found if verdict is not None and verdict.status == status), None)
    if verdict is not None:
        return _say(verdict, wr, qp, dest)
    return _no_answer(dest) if status == 12 else None


def _mrs():
    return "; ".join(f"lkey {lkey:#x} rkey {rkey:#x} [{buf:#x}, +{length})"
                     for lkey, rkey, buf, length in emulated.memory_regions()[:4]) or "none"


def _say(verdict, wr, qp, dest):
    """A verdict of soft0's checks as a learner reads it: the rule, the numbers, and what to do."""
    f, Check = verdict.figures, emulated.rules()
    op, (rkey, remote_addr) = (_opname(wr.opcode), _target(wr)) if wr is not None else ("request", (None, None))
    if verdict.check is Check.LOCAL_KEY:
        if not f["exists"]:
            return f"the SGE's lkey {f['lkey']:#x} is no MR of this process (its MRs: {_mrs()})."
        return f"the SGE's MR (lkey {f['lkey']:#x}) is registered in another PD than the QP's."
    if verdict.check is Check.LOCAL_BOUNDS:
        return f"the SGE {verdict.rule}."
    if verdict.check is Check.LOCAL_ACCESS:
        return (f"a {op}'s answer lands in the SGE's MR (lkey {f['lkey']:#x}), registered with "
                f"{flags(f['access'])}: the NIC writes it, so it needs LOCAL_WRITE.")
    if verdict.check is Check.RKEY:
        return _remote_access(verdict, op, rkey, remote_addr)
    if verdict.check is Check.OPERATION_ALLOWED:
        return (f"the target QP's qp_access_flags are {flags(f['qp_access'])}: an {op.replace('RDMA_', 'RDMA ')} needs "
                f"{flags(f['need'])} there too (set in its RESET to INIT modify), whatever the MR allows.")
    if verdict.check is Check.RESOURCES:
        return ("the target QP has max_dest_rd_atomic 0: no resources for READs and atomics (set it in the "
                "INIT to RTR modify).")
    if verdict.check is Check.RECEIVE_POSTED and qp is not None:
        return (f"no receive was posted on QP {dest:#x} when the {op} arrived, and the sender's "
                f"rnr_retry ({qp.query(v.enums.IBV_QP_RNR_RETRY)[0].rnr_retry}) ran out: post_recv before the "
                f"peer sends, or give rnr_retry=7.")
    if verdict.status == v.enums.IBV_WC_RETRY_EXC_ERR:   # nobody answered: the target QP, its state, the PSN
        return _no_answer(dest, verdict)
    return f"{verdict.rule}."


def _remote_access(verdict, op, rkey, remote_addr):
    f = verdict.figures
    rule, need = f["rule"], f.get("need", 0)
    mr = f"the target's MR (rkey {rkey:#x}, [{f.get('start', 0):#x}, +{f.get('length', 0)}))"
    if rule == "no such key" and rkey == 0:
        return ("rkey 0 is the key of an MR registered without any REMOTE_* flag (rxe and soft0 give such an MR "
                "rkey 0): the target's MR gives peers no access. Register it with the access the peer needs: "
                f"{flags(need | v.enums.IBV_ACCESS_LOCAL_WRITE)}.")
    if rule == "no such key":
        mine = any(lkey == rkey for lkey, *_ in emulated.memory_regions())
        return (f"rkey {rkey:#x} names no MR or memory window the target may use"
                + (f"; {rkey:#x} is the lkey of an MR of yours registered without remote access" if mine else "")
                + f". The MRs here: {_mrs()}.")
    if rule == "key invalidated":
        return f"rkey {rkey:#x} was invalidated (LOCAL_INV, SEND_WITH_INV) or its MR deregistered."
    if rule == "another PD":
        return f"{mr} is registered in another PD than the target QP: a QP reaches only its own PD's MRs."
    if rule == "access":
        return f"{mr} was registered with {flags(f['access'])}: an {op.replace('RDMA_', 'RDMA ')} needs {flags(need)}."
    if rule == "window of another QP":
        return f"rkey {rkey:#x} is a type 2 memory window bound to QP {f['qp_num']:#x}, not to the target QP."
    return f"the {op} of {f['reach']} bytes at {remote_addr:#x} runs {f['by']} bytes {rule} of {mr}."


def _no_answer(dest, verdict=None):
    """Why nobody answered QP `dest`: soft0's verdict (no such QP, a QP not ready, a PSN it does not
    expect), or without one, what is left: the packets went elsewhere."""
    if dest is None:
        return None
    check, Check = (verdict.check, emulated.rules()) if verdict is not None else (None, None)
    if check is not None:
        if check is Check.TARGET_QP:
            return (f"no QP numbered {dest:#x} exists on this NIC: the dest_qp_num given in the INIT to RTR modify "
                    f"is wrong, or that QP was destroyed.")
        if check is Check.PSN:
            return (f"QP {dest:#x} did not take the packets: their PSN is not the one it expects ({verdict.rule}); the "
                    f"sender's sq_psn must be the receiver's rq_psn.")
        if check is Check.QP_STATE:
            state = verdict.figures["state"]
            return (f"QP {dest:#x} is in {QP_STATE_NAMES.get(state, state)}: a QP answers only in RTR or RTS, so every "
                    f"resend went unanswered.")
    return (f"QP {dest:#x} is ready but did not take the packets: their PSN is not the one it expects (the sender's "
            f"sq_psn must be the receiver's rq_psn), or they went to another address (the GID).")
