#!/usr/bin/env python3
"""print() the pyverbs objects a program logs: DeviceAttr, PortAttr, GID, AHAttr, QPAttr, CQ and WC.

Shape: linux-rdma/rdma-core Documentation/pyverbs.md (every version): "Query a device" (`attr =
ctx.query_device(); print(attr)` shows "FW version : ..."), "Query port" (`print(port_attr)` shows
"Port state : Active (4)", "Active MTU : 1024 (3)"), "Query GID" (`print(gid)`), "Addressing
related objects" (`print(ah_attr)` shows "DGID", "sgid index"), "CQ" (`print(cq)` shows "CQ /
Handle / CQEs"); the __str__ methods of pyverbs/device.pyx (DeviceAttr, PortAttr), pyverbs/qp.pyx
(QPAttr: "QP state : RTS", "Path MTU", "Dest QP number"), pyverbs/cq.pyx (WC: "WR ID", "status :
success", "opcode : Send", "byte length") and pyverbs/addr.pyx. pyverbs >= 59 spelling.

What it does: queries the first device and port 1 and prints them, prints a GID and an AHAttr,
connects two RC QPs of one process, prints qp.query()'s QPAttr, sends 8 bytes and prints the CQ and
the send WC. Asserts: each printout carries the labels pyverbs' __str__ writes (a program or a
person reading the log looks for them). Prints "OK print_objects", or the objects whose printout
lacks them.
"""
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import ibv_access_flags, ibv_mtu, ibv_qp_attr_mask, ibv_qp_type
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR


def show(name, obj, labels, wrong):
    text = str(obj)
    print(f'--- print({name}):')
    print(text)
    missing = [label for label in labels if label not in text]
    if missing:
        wrong.append(f'{name} (no {", ".join(repr(m) for m in missing)})')


def main():
    wrong = []
    ctx = Context(name=get_device_list()[0].name.decode())
    show('device_attr', ctx.query_device(), ['FW version', 'Max QP', 'Phys port count'], wrong)
    show('port_attr', ctx.query_port(1), ['Port state', 'Active (4)', 'Active MTU', 'Link layer'], wrong)
    gid_index = next(i for i in range(ctx.query_port(1).gid_tbl_len)
                     if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    gid = ctx.query_gid(1, gid_index)
    show('gid', gid, [gid.gid], wrong)
    ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=gid_index))
    show('ah_attr', ah_attr, ['dgid', 'sgid index'], wrong)

    pd = PD(ctx)
    cq = CQ(ctx, 8, None, None, 0)
    init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4))
    qps = [QP(pd, init, QPAttr()), QP(pd, init, QPAttr())]
    for qp, peer in zip(qps, qps[::-1]):
        attr = QPAttr(path_mtu=ibv_mtu.IBV_MTU_1024)
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = ah_attr
        qp.to_rts(attr)
    qp_attr, _ = qps[0].query(ibv_qp_attr_mask.IBV_QP_STATE | ibv_qp_attr_mask.IBV_QP_PATH_MTU |
                              ibv_qp_attr_mask.IBV_QP_DEST_QPN)
    show('qp_attr', qp_attr, ['QP state', 'RTS', 'Path MTU', 'Dest QP number'], wrong)

    mr = MR(pd, 16, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
    qps[1].post_recv(RecvWR(1, 1, [SGE(mr.buf + 8, 8, mr.lkey)]))
    qps[0].post_send(SendWR(wr_id=0x42, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))
    show('cq', cq, ['CQ', 'Handle', 'CQEs'], wrong)
    wcs, t0 = [], time.time()
    while len(wcs) < 2 and time.time() - t0 < 10:
        n, got = cq.poll()
        wcs += got[:n]
    send_wc = [wc for wc in wcs if wc.wr_id == 0x42]
    if not send_wc:
        print(f'FAIL print_objects: the send did not complete ({len(wcs)} completions)')
        return 1
    show('wc', send_wc[0], ['WR ID', 'status', 'success', 'opcode', 'Send', 'byte length', 'QP num'], wrong)
    if wrong:
        print(f'FAIL print_objects: printout unlike pyverbs\' for: {"; ".join(wrong)}')
        return 1
    print('OK print_objects')
    return 0


if __name__ == '__main__':
    sys.exit(main())
