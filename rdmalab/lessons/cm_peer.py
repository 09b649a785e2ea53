"""The other end of lesson 04's rdma_cm connection: a second process that listens with rdma_cm, as a
server written with librdmacm does, and answers one message.

    with CMPeer() as peer:                       # it listens on this machine's RDMA address, peer.address:peer.port
        ... your CMID connects to it and SENDs a message ...
        peer.report()                            # its QP's numbers once connected (as qp_numbers gives them)
    qp_numbers(cmid)                             # a CMID's QP: number, state, destination QP, PSNs

The child runs `python -m rdmalab.lessons.cm_peer ADDRESS`: it binds a port, says where it listens, takes
one connection request (rdma_get_request), posts a receive, accepts (which moves its QP to RTR and RTS),
reports its QP's numbers, waits for one message and answers it in capitals, then disconnects (it
destroys its id, as rdma-core's examples do), and closes when asked.
"""
import random
import sys

from rdmalab import verbs as v
from rdmalab.errors import ProviderError
from rdmalab.proc.children import Helper, answer, end_with_parent
from rdmalab.lessons.fixtures import STATE_NAMES

PORTS = range(20000, 30000)   # rdma_cm's ports (RDMA_PS_TCP) are a space of their own, not TCP's


class CMPeer:
    """`host`: the peer runs on that host instead (over ssh), listening on that address: give the other
    machine's address on its RDMA port (its RoCE interface's, or IPoIB's)."""

    def __init__(self, timeout=60, host=None):
        self.address = host or v.choose_route().ipv4
        if not self.address:
            raise ProviderError("rdma_cm needs an IP address on the RDMA port, and this port has none "
                                  "(an InfiniBand port: give its IPoIB interface an address)")
        self.helper = Helper("the rdma_cm peer" + (f" on {host}" if host else ""), "rdmalab.lessons.cm_peer",
                             self.address, timeout=timeout, host=host)
        self.port = self.helper.reply()["port"]

    def report(self):
        """The peer's QP once it accepted your connection: its number, state, destination QP and PSNs."""
        return self.helper.reply()

    def close(self):
        self.helper.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def qp_numbers(cmid):
    """What a CMID's QP holds of the connection: the numbers lesson 03 swaps by hand."""
    e = v.enums
    attr, _ = cmid.query_qp(e.IBV_QP_STATE | e.IBV_QP_DEST_QPN | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN)
    return {"QP number": cmid.qpn, "state": STATE_NAMES.get(attr.qp_state, str(attr.qp_state)),
            "dest QP": attr.dest_qp_num, "sq_psn": attr.sq_psn, "rq_psn": attr.rq_psn}


def _listen(cm, ce, address, qp_init):
    """A listening CMID on a free port of `address`, and the port."""
    for port in random.sample(PORTS, 20):
        info = cm.AddrInfo(src=address, src_service=str(port), port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
        try:
            listener = cm.CMID(creator=info, qp_init_attr=qp_init)
            listener.listen()
            return listener, port
        except v.pyverbs_error.PyverbsRDMAError:   # in use: another port
            continue
    raise SystemExit(f"rdmalab: no free rdma_cm port among 20 tried on {address}")


def main(address):
    end_with_parent()
    cm, ce, e = v.cmid, v.cm_enums, v.enums
    qp_init = v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_send_wr=1, max_recv_wr=1))
    listener, port = _listen(cm, ce, address, qp_init)
    answer({"port": port})
    conn = listener.get_request()             # blocks until a client's connect() arrives
    inbox = conn.reg_msgs(64)
    conn.post_recv(inbox)                     # before accept: the client may send as soon as it is connected
    conn.accept()                             # returns once the connection is established
    answer(qp_numbers(conn))
    wc = conn.get_recv_comp()
    message = inbox.read(wc.byte_len, 0)
    reply = conn.reg_msgs(64)
    reply.write(message.upper(), len(message))
    conn.post_send(reply, length=len(message))
    conn.get_send_comp()
    for obj in (reply, inbox, conn):          # destroying the connected id disconnects it: the learner's
        obj.close()                           # disconnect() then completes (on rxe it waits for this side)
    sys.stdin.readline()                      # until asked to close (or the lesson's process ends)
    listener.close()


if __name__ == "__main__":
    main(sys.argv[1])
