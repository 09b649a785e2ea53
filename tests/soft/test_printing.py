"""soft0's objects print as pyverbs prints them (the __str__ methods of rdma-core v59's pyverbs, which
Debian 12's pyverbs 44 shares): labels, their padding, and the words for numbers. The expected texts
are rxe0's printouts under pyverbs 44 (softroce/vm.sh), with soft0's own values put in."""
import socket
import time

import pytest

from rdmalab import verbs as v
from rdmalab.verbs.route import routable_gid_index
from rdmalab.verbs.soft import addr, cq as cqmod, device, enums as e, mr as mrmod, pd as pdmod, qp as qpmod, utils
from rdmalab.verbs.soft import wr as wrmod

from tests.conformance.conftest import to_init, to_rtr, to_rts

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="soft0's own objects, connected with the conformance "
                                "suite's helpers, which use the active provider's classes")

GID = "0000:0000:0000:0000:0000:ffff:7f00:0001"


def line(name, value, width=22, indent=""):
    """One line of a pyverbs printout, spelt out: the name padded to `width`, the value to 20."""
    return indent + name + " " * (width - len(name)) + ": " + str(value) + " " * (20 - len(str(value))) + "\n"


@pytest.fixture
def ctx():
    with device.Context(name="soft0") as c:
        yield c


# ------------------------------------------------------------------ completions

def test_status_names_are_pyverbs_words():
    names = [cqmod.cqe_status_to_str(status) for status in range(22)]
    assert names[e.IBV_WC_SUCCESS] == "success"
    assert names[e.IBV_WC_REM_ACCESS_ERR] == names[10] == "remote access error"
    assert names[e.IBV_WC_WR_FLUSH_ERR] == "WR flush error"
    assert names[e.IBV_WC_RNR_RETRY_EXC_ERR] == "RNR retry exceeded"
    assert names[e.IBV_WC_RETRY_EXC_ERR] == "retry exceeded error"
    assert names[e.IBV_WC_LOC_PROT_ERR] == "local protection error"
    assert names[e.IBV_WC_GENERAL_ERR] == names[21] == "general error"
    assert len(set(names)) == 22
    assert cqmod.cqe_status_to_str(22) == cqmod.cqe_status_to_str(99) == "Unknown CQE status"


def test_opcode_and_flag_names_are_pyverbs_words():
    assert [cqmod.cqe_opcode_to_str(op) for op in (0, 1, 2, 3, 4, 5, 6, 0x80, 0x81)] == [
        "Send", "RDMA write", "RDMA read", "Compare and swap", "Fetch and add", "Bind Memory window",
        "Local invalidate", "Receive", "Receive RDMA with immediate"]
    assert cqmod.cqe_opcode_to_str(0x88) == "Unknown CQE opcode 136"
    assert cqmod.cqe_flags_to_str(0) == ""
    assert cqmod.cqe_flags_to_str(e.IBV_WC_GRH | e.IBV_WC_WITH_IMM) == "GRH With immediate "
    assert cqmod.cqe_flags_to_str(e.IBV_WC_WITH_INV) == "With invalidate "
    assert cqmod.create_wc_flags_to_str(e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_IMM) == \
        "IBV_WC_EX_WITH_BYTE_LEN IBV_WC_EX_WITH_IMM "


def test_wc_prints_every_field_with_words():
    wc = cqmod.WC(wr_id=3, status=0, opcode=e.IBV_WC_RECV, byte_len=8, qp_num=18, imm_data=4660,
                  wc_flags=e.IBV_WC_GRH | e.IBV_WC_WITH_IMM)
    assert str(wc) == (line("WR ID", 3) + line("status", "success") + line("opcode", "Receive") +
                       line("vendor error", 0) + line("byte length", 8) + line("QP num", 18) + line("source QP", 0) +
                       line("WC flags", "GRH With immediate ") + line("pkey index", 0) + line("slid", 0) +
                       line("sl", 0) + line("imm_data", 4660) + line("dlid path bits", 0))
    assert "status=0 (success)" in repr(wc) and "opcode=128 (Receive)" in repr(wc)


def test_a_remote_access_error_completion_prints_its_status(ctx):
    gid_index = routable_gid_index(ctx, 1)
    pd, cq = pdmod.PD(ctx), cqmod.CQ(ctx, 8)
    init = qpmod.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=qpmod.QPCap(4, 4))
    a, b = qpmod.QP(pd, init), qpmod.QP(pd, init)
    for qp, peer in ((a, b), (b, a)):
        to_init(qp)
        to_rtr(ctx, gid_index, qp, peer.qp_num)
        to_rts(qp)
    src, dst = mrmod.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE), mrmod.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    wr = wrmod.SendWR(wr_id=10, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[wrmod.SGE(src.buf, 64, src.lkey)])
    wr.set_wr_rdma(dst.lkey ^ 0x5a5a00, dst.buf)   # no such rkey
    a.post_send(wr)
    deadline, wcs = time.monotonic() + 10, []
    while not wcs and time.monotonic() < deadline:
        wcs = cq.poll()[1]
    assert wcs and wcs[0].status == e.IBV_WC_REM_ACCESS_ERR
    text = str(wcs[0])
    assert "status                : remote access error \n" in text
    assert text.startswith("WR ID                 : 10                  \n")
    assert line("QP num", a.qp_num) in text and line("WC flags", "") in text
    assert len(text.splitlines()) == 13


def test_cq_and_cq_init_attr_ex(ctx):
    cq = cqmod.CQ(ctx, 8)
    assert str(cq) == "CQ\n" + line("Handle", cq._number) + line("CQEs", cq.cqe)
    attr = cqmod.CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN)
    assert str(attr) == (line("Number of CQEs", 8) + line("WC flags", "IBV_WC_EX_WITH_BYTE_LEN ") +
                         line("comp mask", 0) + line("flags", 0))


# ------------------------------------------------------------------ QPs

def test_qp_cap():
    assert str(qpmod.QPCap(4, 5, 2, 3, 16)) == (
        "max send wrs        : 4                   \nmax recv wrs        : 5                   \n"
        "max send sges       : 2                   \nmax recv sges       : 3                   \n"
        "max inline data     : 16                  \n")


def test_qp_init_attr(ctx):
    cq = cqmod.CQ(ctx, 8)
    init = qpmod.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=qpmod.QPCap(4, 4))
    assert str(init) == (line("QP type", "RC", 20) + line("SQ sig. all", 1, 20) + "QP caps:\n" +
                         line("max send WR", 4, 20, "    ") + line("max recv WR", 4, 20, "    ") +
                         line("max send SGE", 1, 20, "    ") + line("max recv SGE", 1, 20, "    ") +
                         line("max inline data", 0, 20, "    "))
    ex = qpmod.QPInitAttrEx(qp_type=e.IBV_QPT_UD, cap=qpmod.QPCap(2, 3), comp_mask=e.IBV_QP_INIT_ATTR_PD)
    text = str(ex)
    assert text.startswith(line("QP type", "UD", 20) + line("SQ sig. all", 0, 20) + "QP caps:\n" +
                           line("  max send WR", 2, 20))
    assert text.endswith(line("comp mask", "PD ", 20) + line("create flags", "", 20) +
                         line("max TSO header", 0, 20) + line("Source QPN", 0, 20))


def test_qp_attr_default():
    text = str(qpmod.QPAttr())
    ah = (line("port num", 1, 22, "  ") + line("sl", 0, 22, "  ") + line("source path bits", 0, 22, "  ") +
          line("dlid", 0, 22, "  ") + line("port num", 1, 22, "  ") + line("static rate", 0, 22, "  ") +
          line("is global", 0, 22, "  "))
    assert text == (
        line("QP state", "Init") + line("QP current state", "Reset") + line("Path MTU", 1024) +
        line("Path mig. state", "Migrated") + line("QKey", 0) + line("RQ PSN", 0) + line("SQ PSN", 0) +
        line("Dest QP number", 0) + line("QP access flags", "") + "QP caps:\n" +
        "".join(line(name, 0, 22, "  ") for name in ("max send WR", "max recv WR", "max send SGE", "max recv SGE",
                                                     "max inline data")) +
        "AH Attr:\n" + ah + "Alt. AH Attr:\n" + ah +
        "".join(line(name, value) for name, value in (
            ("PKey index", 0), ("Alt. PKey index", 0), ("En. SQD async notify", 0), ("SQ draining", 0),
            ("Max RD atomic", 0), ("Max dest. RD atomic", 0), ("Min RNR timer", 0), ("Port number", 1),
            ("Timeout", 0), ("Retry counter", 0), ("RNR retry", 0), ("Alt. port number", 0), ("Alt. timeout", 0),
            ("Rate limit", 0))))


def test_qp_attr_names_states_flags_and_a_global_address():
    attr = qpmod.QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_RTR, path_mtu=e.IBV_MTU_4096)
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    attr.path_mig_state, attr.dest_qp_num = 1, 18
    attr.ah_attr = addr.AHAttr(port_num=1, is_global=1, gr=addr.GlobalRoute(dgid=addr.GID(GID), sgid_index=1,
                                                                            hop_limit=64))
    text = str(attr)
    for expected in (line("QP state", "RTS"), line("QP current state", "RTR"), line("Path MTU", 4096),
                     line("Path mig. state", "Re-arm"), line("Dest QP number", 18),
                     line("QP access flags", "Local write Remote write "),
                     line("is global", 1, 22, "  ") + line("dgid", GID, 22, "    ") +
                     line("flow label", 0, 22, "    ") + line("sgid index", 1, 22, "    ") +
                     line("hop limit", 64, 22, "    ") + line("traffic_class", 0, 22, "    ") + "Alt. AH Attr:\n"):
        assert expected in text


def test_qp(ctx):
    pd, cq = pdmod.PD(ctx), cqmod.CQ(ctx, 8)
    qp = qpmod.QP(pd, qpmod.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq))
    assert str(qp) == line("QP type", "UD") + line("  number", qp.qp_num) + line("  state", "Reset")


# ------------------------------------------------------------------ addresses

def test_gid_global_route_and_ah_attr():
    gid = addr.GID(GID)
    assert str(gid) == GID
    gr = addr.GlobalRoute(dgid=gid, flow_label=5, sgid_index=1, hop_limit=64, traffic_class=3)
    assert str(gr) == (line("DGID", GID) + line("flow label", 5) + line("sgid index", 1) + line("hop limit", 64) +
                       line("traffic class", 3))
    local = (line("port num", 1, 22, "  ") + line("sl", 2, 22, "  ") + line("source path bits", 0, 22, "  ") +
             line("dlid", 0, 22, "  ") + line("static rate", 0, 22, "  "))
    assert str(addr.AHAttr(sl=2)) == local + line("is global", 0, 22, "  ")
    assert str(addr.AHAttr(sl=2, is_global=1, gr=gr)) == local + line("is global", 1, 22, "  ") + (
        line("dgid", GID, 22, "  ") + line("flow label", 5, 22, "  ") + line("sgid index", 1, 22, "  ") +
        line("hop limit", 64, 22, "  ") + line("traffic_class", 3, 22, "  "))


# ------------------------------------------------------------------ the device

def test_device_and_device_attr(ctx):
    assert str(device.get_device_list()[0]) == \
        "Device soft0, node type CA, transport type IB, guid 2c9fffe5ab000, index 0"
    text = str(ctx.query_device())
    assert text.startswith(line("FW version", "0.1.0 (rdmalab emulated NIC)") + line("Node guid", "0002:c9ff:fe5a:b000")
                           + line("Sys image GUID", "0002:c9ff:fe5a:b000") + line("Max MR size", "0xffffffffffffffff")
                           + line("Page size cap", "0xfffff000") + line("Vendor ID", "0xffffff"))
    assert line("Max QP WR", 16384) + "Device cap flags      : \n  IBV_DEVICE_RC_RNR_NAK_GEN\n  IBV_DEVICE_SRQ_RESIZE\n" \
        "  IBV_DEVICE_MEM_WINDOW\n  IBV_DEVICE_MEM_MGT_EXTENSIONS\n  IBV_DEVICE_MEM_WINDOW_TYPE_2B\n  \n" \
        + line("Max SGE", 32) in text
    assert line("Max raw IPv6 QPs", 0) + line("Max raw ethy QP", 0) in text
    assert text.endswith(line("local CA ack delay", 15) + line("Phys port count", 1))
    assert [row.split(":")[0].strip() for row in text.splitlines() if ": " in row] == [
        "FW version", "Node guid", "Sys image GUID", "Max MR size", "Page size cap", "Vendor ID", "Vendor part ID",
        "HW version", "Max QP", "Max QP WR", "Device cap flags", "Max SGE", "Max SGE RD", "MAX CQ", "Max CQE", "Max MR", "Max PD",
        "Max QP RD atom", "Max EE RD atom", "Max res RD atom", "Max QP init RD atom", "Max EE init RD atom",
        "Atomic caps", "Max EE", "Max RDD", "Max MW", "Max raw IPv6 QPs", "Max raw ethy QP", "Max mcast group",
        "Max mcast QP attach", "Max AH", "Max FMR", "Max map per FMR", "Max SRQ", "Max SRQ WR", "Max SRQ SGE",
        "Max PKeys", "local CA ack delay", "Phys port count"]


def test_port_attr():
    port = device.PortAttr(**dict(device.PORT_ATTR, active_mtu=e.IBV_MTU_1024))
    assert str(port) == "".join(line(name, value, 24) for name, value in (
        ("Port state", "Active (4)"), ("Max MTU", "4096 (5)"), ("Active MTU", "1024 (3)"), ("SM lid", 0),
        ("Port lid", 0), ("lmc", "0x0"), ("Link layer", "Ethernet"), ("Max message size", "0x800000"),
        ("Port cap flags", "\n  IBV_PORT_CM_SUP\n  "), ("Port cap flags 2", "\n  "), ("max VL num", 1),
        ("Bad Pkey counter", 0), ("Qkey violations counter", 0), ("GID table len", 1024), ("Pkey table len", 1),
        ("SM sl", 0), ("Subnet timeout", 0), ("Init type reply", 0), ("Active width", "1X (1)"),
        ("Active speed", "2.5 Gbps (1)"), ("Phys state", "Link up (5)"), ("Flags", 1)))


def test_gid_entry(ctx):
    entry = ctx.query_gid_ex(1, 1)
    assert str(entry) == (line("GID", ctx.query_gid(1, 1).gid, 24) + line("GID Index", 1, 24) +
                          line("Port number", 1, 24) + line("GID type", "RoCEv2", 24) + line("Ndev ifindex", socket.if_nametoindex("lo"), 24))


# ------------------------------------------------------------------ work requests and memory

def test_sge_and_work_requests():
    sge = wrmod.SGE(0x2c0fd000, 64, 0x23c)
    assert str(sge) == line("Address", "0x2c0fd000") + line("Length", 64) + line("Key", "0x23c")
    assert str(wrmod.RecvWR(3, 1, [sge])) == line("WR ID", 3) + line("Num SGE", 1)
    # pyverbs' SendWR printout puts the Imm Data line inside the send flags' value: so does soft0's
    assert str(wrmod.SendWR(wr_id=9, num_sge=1, sg=[sge])) == (
        line("WR ID", 9) + line("Num SGE", 1) + line("Opcode", 2) +
        "Send flags            : IBV_SEND_SIGNALED Imm Data              : 0                   \n\n")
    wr = wrmod.SendWR(wr_id=9, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1, sg=[sge], send_flags=0, imm_data=77)
    assert str(wr).endswith(line("Opcode", 3) + "Send flags            : Imm Data              : 77                  \n\n")
    assert wrmod.send_flags_to_str(e.IBV_SEND_FENCE | e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE) == \
        "IBV_SEND_FENCE IBV_SEND_SIGNALED IBV_SEND_INLINE "


def test_mr_and_mw(ctx):
    pd = pdmod.PD(ctx)
    mr = mrmod.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    assert str(mr) == "MR:\n" + line("lkey", mr.lkey) + line("rkey", 0) + line("length", 64) + line("buf", mr.buf) + \
        line("handle", mr.handle)
    mw = mrmod.MW(pd, e.IBV_MW_TYPE_2)
    assert str(mw) == "MW:\n" + line("Rkey", mw.rkey) + line("Handle", mw.handle) + line("MW Type", "IBV_MW_TYPE_2")
    info = mrmod.MWBindInfo(mr, mr.buf, 16, e.IBV_ACCESS_REMOTE_READ)
    assert str(info) == "MWBindInfo:\n" + line("Addr", mr.buf) + line("Length", 16) + line("MW access flags", 4)
    assert str(mrmod.MWBind(info, e.IBV_SEND_SIGNALED, 5)) == "MWBind:\n" + line("WR id", 5) + line("Send flags", 2)


# ------------------------------------------------------------------ the helpers pyverbs.utils has

def test_utils_words_are_pyverbs():
    assert utils.access_flags_to_str(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ) == "Local write Remote read "
    assert utils.access_flags_to_str(0) == ""
    assert [utils.mig_state_to_str(m) for m in range(3)] == ["Migrated", "Re-arm", "Armed"]
    assert [utils.mtu_to_str(m) for m in (1, 3, 5, 9)] == [256, 1024, 4096, 0]
    assert [utils.qp_state_to_str(s) for s in range(7)] == ["Reset", "Init", "RTR", "RTS", "SQD", "SQE", "Error"]


def test_printable_classes_keep_their_fixed_fields():
    for obj, typo in ((qpmod.QPAttr(), "timout"), (qpmod.QPCap(), "max_send_wrs"), (addr.AHAttr(), "is_globl"),
                      (addr.GlobalRoute(), "sgid_idx"), (cqmod.WC(), "stauts"), (wrmod.SGE(0, 1, 0), "lenght")):
        with pytest.raises(AttributeError):
            setattr(obj, typo, 1)
