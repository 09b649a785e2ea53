"""The glass-box view of soft0's NIC, read without posting anything: what it holds for a QP (look), what it
would do with a WR, stage by stage (walk: the step mode), and every check it would make of one (verdicts:
what rdmalab.lessons.explain reads after a completion failed). A real NIC keeps all this to itself; soft0's
is ours to read. The verdicts are the NIC's own (checks.every, run dry); this module only says them.
rdmalab.verbs.emulated is how the lessons reach it."""
from rdmalab.errors import QP_STATE_NAMES, status_name
from rdmalab.wire.psn import packets, positions, psn_add

from . import checks, requester
from .constants import (IBV_QPS_INIT as INIT, IBV_QPS_RESET as RESET, IBV_QPS_RTR as RTR, IBV_QPS_RTS as RTS,
                        IBV_QPS_SQD as SQD, IBV_QPT_RC, IBV_SEND_SIGNALED, IBV_WC_RETRY_EXC_ERR,
                        IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND)
from .cq import entries
from .layout import (M_PD, Q_ACCESS, Q_ALIVE, Q_EXPECTED_PSN, Q_MAX_DEST_RD_ATOMIC, Q_MIN_RNR_TIMER, Q_NUM, Q_PATH_MTU,
                     Q_PD, Q_RQ_CONSUMED, Q_RQ_POSTED, Q_SRQ, Q_STATE, Q_TYPE)
from .mr import REGISTERED, find
from .operations import MESSAGE

def look(qp):
    """What soft0's NIC holds for `qp` beyond what query() tells: its send queue's waiting WQEs and what
    each waits for, its receive queue's posted and completed slots, its CQs' entries not yet polled,
    the expected PSN, and its PD's MRs. A real NIC
    keeps all this in its own memory; soft0 is ours to read (rdmalab.lessons.nic_view shows it)."""
    send, rq = qp._send, qp._rq
    waiting = send.waiting(qp._words[Q_STATE] in (RESET, INIT, RTR))
    return {"expected_psn": int(qp._words[Q_EXPECTED_PSN]), "sq_psn": send.psn, "send_slots": qp._cap.max_send_wr,
            "send_waiting": waiting, "recv_slots": rq.receives, "recv_posted": rq.posted_ids(),
            "recv_completed": int(rq.waiting()),
            "send_cq": entries(qp._send_cq),   # (recv_cq None: the send CQ takes the receives' completions too)
            "recv_cq": None if qp._recv_cq is qp._send_cq else entries(qp._recv_cq),
            "mrs": [(mr.lkey, mr.rkey, mr.buf, mr.length, mr._access) for mr in list(REGISTERED.values())
                    if mr._pd is qp._pd]}


def walk(qp, wr):
    """What soft0's NIC will do with `wr` (an RDMA WRITE, RDMA READ or SEND on an RC QP) if it is posted
    now, stage by stage, without posting it: [(stage, what happens, passed)], and the status its
    completion should have (None: it will wait, for a receive or for an ACK that does not come). The
    verdicts are the NIC's own checks (checks.every, run dry), in the order it makes them; this says them.
    rdmalab.lessons.nic_view's step mode then posts the WR and compares."""
    send, stages = qp._send, []
    if qp.qp_type != IBV_QPT_RC or wr.opcode not in (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_SEND):
        raise ValueError("the step mode walks an RDMA WRITE, an RDMA READ or a SEND on an RC QP")
    state = qp._words[Q_STATE]
    if state == SQD:
        return [("post_send", "the WR takes a slot of the send queue, but the QP is in SQD: its NIC starts nothing "
                              "new until the QP is back in RTS and a later post rings the doorbell", False)], None
    if state != RTS:   # (post_send's own refusal, before the NIC sees the WR)
        return [("post_send", f"refused at once (errno 22): the QP is in {QP_STATE_NAMES.get(int(state), state)}, and a QP "
                              f"posts sends only in RTS", False)], "EINVAL"
    stages.append(("post_send", f"the WR takes a slot of the send queue ({send.slots_held() + 1} of "
                                f"{qp._cap.max_send_wr}); the NIC reads it (the doorbell)", True))
    length, read = sum(sge[1] for sge in wr._sges), wr.opcode == IBV_WR_RDMA_READ
    count = 1 if read else packets(length, send.mtu)   # the request's packets (a READ's responses take its PSNs too)
    found = verdicts(qp, wr.opcode, wr._sges, wr._rkey, wr._remote_addr, wr.imm_data, wr.send_flags)
    refused = lambda names: next((v for name, v in found if v is not None and name in names), None)  # noqa: E731

    local = refused(checks.names_of(checks.REQUESTER))
    if local is not None:
        return stages + [("requester checks", f"{local.rule}; nothing is sent", False)], local.answer
    if read:   # its SGEs are where the answer will land: judged when it comes back
        stages.append(("requester checks", f"a READ sends no data: its {len(wr._sges)} SGE(s), {length} bytes, are "
                                           f"where the answer will land, checked when it comes back", True))
    else:
        stages.append(("requester checks", f"{len(wr._sges)} SGE(s), {length} bytes, each inside an MR of the "
                                           f"QP's PD", True))
    if read:
        what = f"RDMA_READ_REQUEST (PSN {send.psn:#x}), with a RETH: remote address, rkey, length"
    else:
        kind = MESSAGE[wr.opcode]   # RDMA_WRITE or SEND: data in packets
        what = ", ".join(f"{kind}_{position} (PSN {psn_add(send.psn, i):#x})" for i, position in enumerate(positions(count)[:4]))
        what += (f", ... {count} packets" if count > 4 else "") + \
            (". The first carries the RETH: remote address, rkey, length" if kind == "RDMA_WRITE" else "")
    stages.append(("packets", f"path MTU {send.mtu}: {what}.", True))

    at = f"QP {send.dest_qp_num:#x}"
    remote = refused(checks.names_of(checks.RESPONDER) | checks.names_of(checks.LANDING, checks.receive_room))
    if remote is not None and remote.answer == checks.NO_ANSWER:
        retries = (f"the requester resends after each ACK timeout, retry_cnt ({send.retry_cnt}) times, then fails "
                   f"with RETRY_EXC_ERR (12)" if send.retry_cnt < 7 else "the requester resends for ever (retry_cnt 7)")
        back = "the rest never comes" if remote.lands else "nothing comes back"   # (lands: a READ's first responses)
        return stages + [("responder", f"{at}: {remote.rule}: {back}; {retries}", False)], \
            IBV_WC_RETRY_EXC_ERR if send.retry_cnt < 7 else None
    if remote is not None and remote.answer == checks.RNR_NAK:
        then = (f"rnr_retry ({send.rnr_retry}) times, then fails with RNR_RETRY_EXC_ERR (13) unless a receive "
                f"is posted meanwhile" if send.rnr_retry < 7 else "until a receive is posted (rnr_retry 7)")
        return stages + [("responder", f"{at}: {remote.rule}, and the requester waits out its min_rnr_timer and "
                                       f"resends, {then}", False)], IBV_WC_RNR_RETRY_EXC_ERR if send.rnr_retry < 7 else None
    if remote is not None:
        landed = "the SGEs before that one keep their bytes" if remote.lands else "writes nothing"
        return stages + [("responder", f"{at}: {remote.rule}: it NAKs it ({status_name(remote.answer)}), "
                                       f"{landed} and enters ERR", False)], remote.answer
    if wr.opcode == IBV_WR_SEND:
        stages.append(("responder", f"{at} takes its next posted receive and copies the {length} bytes into it", True))
    elif not length:
        stages.append(("responder", f"{at}: a zero-length {'READ' if read else 'WRITE'} names no memory: no key is "
                                    f"checked", True))
    else:
        stages.append(("responder", f"{at}: the rkey {wr._rkey:#x} names an MR that allows it, and "
                                    f"[{wr._remote_addr:#x}, +{length}) lies inside: it "
                                    + ("reads the bytes" if read else "writes the bytes"), True))
    answer = (f"{packets(length, send.mtu)} RDMA_READ_RESPONSE packet(s) carry the bytes back" if read
              else f"an ACK for PSN {psn_add(send.psn, count - 1):#x}")
    landing = refused(checks.names_of(checks.LANDING, checks.landing))
    if landing is not None:
        return stages + [("answer", f"{answer}, but they may not land in your SGE ({landing.rule}): "
                                    f"{status_name(landing.answer)}", False)], landing.answer
    stages.append(("answer", answer, True))
    signaled = wr.send_flags & IBV_SEND_SIGNALED or send.sig_all
    stages.append(("completion", "a completion with status 0 (SUCCESS) on the send CQ" if signaled
                   else "none: the WR is unsignaled (a later signaled one's completion covers it)", True))
    return stages, IBV_WC_SUCCESS


def verdicts(qp, opcode, sges, rkey=0, remote_addr=0, imm=0, flags=0):
    """Every check of soft0's NIC (checks.every), run dry now on a WR of `opcode` with these SGEs ((addr,
    length, lkey)) and remote address and key, posted on the RC or UC QP `qp` toward its destination:
    [(check, verdict or None)], in the NIC's order. What lessons.explain reads after a completion failed.
    Without a QP, the PD of the first SGE's MR stands in for the QP's, and for the target a QP that is ready,
    in order, allows every operation and has a receive posted, in the rkey's MR's PD: what can refuse is
    then the WR's own keys, ranges and alignment."""
    length = sum(sge[1] for sge in sges)
    count = requester.psns(opcode, length, qp._send.mtu if qp is not None else 1024)
    if qp is not None:
        send = qp._send
        request = checks.Request(opcode, length, rkey, remote_addr, imm, flags, sges, send.qp_type, qp._pd,
                                 peer=send.peer(), psn=send.psn, count=count, mtu=send.checked_mtu())
    else:
        mine = next((REGISTERED[lkey] for _, _, lkey in sges if lkey in REGISTERED), None)
        seg = find(rkey)
        ready = {Q_STATE: RTS, Q_ALIVE: 1, Q_TYPE: IBV_QPT_RC, Q_EXPECTED_PSN: 0, Q_ACCESS: 0xF,
                 Q_MAX_DEST_RD_ATOMIC: 1, Q_RQ_CONSUMED: 0, Q_RQ_POSTED: 1, Q_SRQ: 0, Q_MIN_RNR_TIMER: 0,
                 Q_PATH_MTU: 0, Q_NUM: 0, Q_PD: seg.header[M_PD] if seg is not None else 0}
        request = checks.Request(opcode, length, rkey, remote_addr, imm, flags, sges, IBV_QPT_RC,
                                 mine._pd if mine is not None else None, h=ready, count=count)
    return checks.every(request)
