"""soft0's classes are as strict as pyverbs': the names a program may use on them are pyverbs' names, the
read-only ones cannot be written, an unknown one is an AttributeError, and an argument of the wrong type
is a TypeError at once. A program that runs on soft0 must run on a real device; one that sets or reads
`wr.remote_addr`, writes `mr.lkey` or passes a dict for `cap` would not.

pyverbs is not installed here: its names are recorded below from its Cython sources."""
import gc

import pytest

from rdmalab.verbs.soft import addr, base, cmid as cm, cq as cqmod, device, mr as mrmod, pd as pdmod, qp as qpmod
from rdmalab.verbs.soft import srq as srqmod, wr as wrmod
from rdmalab.verbs.soft import libibverbs_enums as e
from rdmalab.verbs.soft.hardware import GIDS
from rdmalab.verbs.soft.librdmacm_enums import RAI_PASSIVE, rdma_port_space

# ------------------------------------------------------------------ pyverbs' names, from its sources
#
# The public names of each pyverbs class as rdma-core writes them at the tag v59.0 (pyverbs/<file>.pyx and
# .pxd: none declares a `cdef public` or `cdef readonly` attribute, so a class's names are its properties
# and its def/cpdef methods, with its bases': PyverbsObject's set_log_level, PyverbsCM's close). rw: a
# property with a setter; ro: without one (writing it raises "attribute 'x' of 'pyverbs.m.C' objects is not
# writable"); wo: a setter only. NOT_IN_44 lists what v44.0's files lack (Debian 12's pyverbs); v44.0 has no
# name v59.0 lacks for these classes.
PYVERBS = {   # class: (file, methods, rw, ro, wo)
    "Context": ("device.pyx", "close get_async_event get_pkey_index query_device query_device_ex query_gid "
                "query_gid_ex query_gid_table query_gid_type query_pkey query_port query_rt_values_ex",
                "", "cmd_fd context name num_comp_vectors", ""),
    "PD": ("pd.pyx", "advise_mr close unimport", "", "handle pd", ""),
    "MR": ("mr.pyx", "close read rereg unimport write", "", "buf handle length lkey rkey", ""),
    "MW": ("mr.pyx", "close", "", "handle rkey type", ""),
    "MWBindInfo": ("mr.pyx", "close", "", "addr length mw_access_flags", ""),
    "MWBind": ("mr.pyx", "close", "", "", ""),
    "CompChannel": ("cq.pyx", "close get_cq_event", "", "fd", ""),
    "CQ": ("cq.pyx", "ack_events close poll req_notify resize", "", "comp_channel cq cqe", ""),
    "QPCap": ("qp.pyx", "", "max_inline_data max_recv_sge max_recv_wr max_send_sge max_send_wr", "", ""),
    "QPInitAttr": ("qp.pyx", "", "cap max_inline_data max_recv_sge max_recv_wr max_send_sge max_send_wr qp_type "
                   "recv_cq send_cq sq_sig_all srq", "", ""),
    "QPAttr": ("qp.pyx", "", "ah_attr alt_ah_attr alt_pkey_index alt_port_num alt_timeout cap cur_qp_state dest_qp_num "
               "en_sqd_async_notify max_dest_rd_atomic max_rd_atomic min_rnr_timer path_mig_state path_mtu pkey_index "
               "port_num qkey qp_access_flags qp_state rate_limit retry_cnt rnr_retry rq_psn sq_draining sq_psn "
               "timeout", "", ""),
    "QP": ("qp.pyx", "bind_mw close modify post_recv post_send query query_data_in_order query_ece set_ece to_init "
           "to_rtr to_rts", "", "qp_num qp_state qp_type", ""),
    "SGE": ("wr.pyx", "close read", "addr length lkey", "", ""),
    "RecvWR": ("wr.pyx", "close", "next_wr num_sge wr_id", "", ""),
    "SendWR": ("wr.pyx", "close set_bind_wr set_qp_type_xrc set_wr_atomic set_wr_rdma set_wr_ud",
               "imm_data next_wr num_sge opcode send_flags wr_id", "rkey", "sg_list"),
    "GlobalRoute": ("addr.pyx", "", "dgid flow_label hop_limit sgid_index traffic_class", "", ""),
    "AHAttr": ("addr.pyx", "", "dgid dlid flow_label hop_limit is_global port_num sgid_index sl src_path_bits "
               "static_rate traffic_class", "", ""),
    "AH": ("addr.pyx", "close", "", "", ""),
    "SrqAttr": ("srq.pyx", "", "max_sge max_wr srq_limit", "", ""),
    "SrqInitAttr": ("srq.pyx", "", "", "max_sge max_wr srq_limit", ""),
    "SRQ": ("srq.pyx", "close get_srq_num modify post_recv post_srq_ops query", "", "", ""),
    "AddrInfo": ("cmid.pyx", "close", "", "", ""),
    "ConnParam": ("cmid.pyx", "set_private_data", "qpn", "private_data", ""),
    "CMEventChannel": ("cmid.pyx", "close", "", "", ""),
    "CMEvent": ("cmid.pyx", "ack_cm_event close event_str", "", "event_type private_data", ""),
    "CMID": ("cmid.pyx", "accept bind_addr close connect create_qp disconnect establish get_recv_comp get_remote_ece "
             "get_request get_send_comp init_qp_attr join_multicast leave_multicast listen post_read post_recv "
             "post_send post_ud_send post_write query_qp reg_msgs reg_read reg_write reject resolve_addr "
             "resolve_route set_local_ece set_option", "", "context dev_name event_channel pd port_num qpn", ""),
}
NOT_IN_44 = {"Context": {"get_pkey_index"}, "CompChannel": {"fd"}, "CQ": {"cq"}}

# pyverbs' names soft0 does not have (yet): each is a fidelity gap, listed so that adding one updates this
SOFT0_LACKS = {
    "Context": {"context"},             # the ibv_context pointer, as an integer
    "PD": {"pd", "advise_mr", "unimport"},   # the ibv_pd pointer; ibv_advise_mr (ODP), ibv_unimport_pd
    "MR": {"unimport"},
    "CompChannel": {"fd"},              # the channel's file descriptor (v59)
    "CQ": {"cq"},                       # the ibv_cq pointer (v59)
    "SendWR": {"set_qp_type_xrc"},      # XRC: neither soft0 nor rxe has it
}

# soft0's own public names beyond pyverbs': how its objects work together (the NIC's side), never data a
# program could mistake for pyverbs'. Every other name is pyverbs'.
RESOURCE = {"adopt", "check_open", "closed"}   # base.Resource: dependants close first; closed objects refuse
SOFT0_OWN = {
    "Context": RESOURCE | {"raise_async_event"},
    "CQ": RESOURCE | {"push", "watch_receives", "watch_nic", "forget_receives", "wait_for_timer", "tend",
                      "next_timer", "take_event"},
}
for _name in ("PD", "MR", "MW", "CompChannel", "QP", "AH", "SRQ", "AddrInfo", "CMEventChannel", "CMID"):
    SOFT0_OWN.setdefault(_name, RESOURCE)


def pyverbs_names(name, version="59"):
    _, methods, rw, ro, wo = PYVERBS[name]
    names = set(f"{methods} {rw} {ro} {wo} set_log_level".split())
    return names - NOT_IN_44.get(name, set()) if version == "44" else names


def split(name):
    _, methods, rw, ro, wo = PYVERBS[name]
    return set(rw.split()), set(ro.split()), set(wo.split())


# ------------------------------------------------------------------ one object of each class

@pytest.fixture(scope="module")
def objects():
    """One of each class, made as a program makes them (a CM event too: an id's ADDR_RESOLVED)."""
    ctx = device.Context(name="soft0")
    pd = pdmod.PD(ctx)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_MW_BIND
    mr = mrmod.MR(pd, 4096, access)
    channel = cqmod.CompChannel(ctx)
    cq = cqmod.CQ(ctx, 16, None, channel, 0)
    init = qpmod.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=qpmod.QPCap(4, 4))
    qp = qpmod.QP(pd, init)
    sge = wrmod.SGE(mr.buf, 8, mr.lkey)
    gr = addr.GlobalRoute(dgid=addr.GID(GIDS[1]), sgid_index=1)
    ah_attr = addr.AHAttr(port_num=1, is_global=1, gr=gr)
    info = mrmod.MWBindInfo(mr, mr.buf, 64, e.IBV_ACCESS_REMOTE_WRITE)
    events = cm.CMEventChannel()
    cmid = cm.CMID(creator=events, port_space=rdma_port_space.RDMA_PS_TCP)
    cmid.resolve_addr(cm.AddrInfo(dst="127.0.0.1", dst_service="7471"))
    made = dict(Context=ctx, PD=pd, MR=mr, MW=mrmod.MW(pd, e.IBV_MW_TYPE_2), MWBindInfo=info,
                MWBind=mrmod.MWBind(info, e.IBV_SEND_SIGNALED), CompChannel=channel, CQ=cq,
                QPCap=qpmod.QPCap(), QPInitAttr=init, QPAttr=qpmod.QPAttr(), QP=qp, SGE=sge,
                RecvWR=wrmod.RecvWR(1, 1, [sge]), SendWR=wrmod.SendWR(2, e.IBV_WR_RDMA_WRITE, 1, sg=[sge]),
                GlobalRoute=gr, AHAttr=ah_attr, AH=addr.AH(pd, attr=ah_attr), SrqAttr=srqmod.SrqAttr(),
                SrqInitAttr=srqmod.SrqInitAttr(srqmod.SrqAttr(max_wr=8)),
                SRQ=srqmod.SRQ(pd, srqmod.SrqInitAttr(srqmod.SrqAttr(max_wr=8))),
                AddrInfo=cm.AddrInfo(src="127.0.0.1", src_service="7472", flags=RAI_PASSIVE),
                ConnParam=cm.ConnParam(data_len=8), CMEventChannel=events, CMEvent=cm.CMEvent(events), CMID=cmid)
    made["SendWR"].set_wr_rdma(mr.rkey, mr.buf)
    yield made
    cmid.close()
    events.close()
    ctx.close()


def public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


# ------------------------------------------------------------------ names

@pytest.mark.parametrize("name", sorted(PYVERBS))
def test_soft0_has_pyverbs_names_and_only_its_own_besides(objects, name):
    names = public(objects[name])
    assert names - pyverbs_names(name) == SOFT0_OWN.get(name, set()), "a public name pyverbs does not have"
    assert pyverbs_names(name) - names == SOFT0_LACKS.get(name, set()), "pyverbs' names soft0 lacks"
    assert pyverbs_names(name, "44") <= pyverbs_names(name)   # (so a program for 44 finds nothing missing either)


@pytest.mark.parametrize("name", sorted(PYVERBS))
def test_an_unknown_name_is_an_attribute_error_to_set_and_to_read(objects, name):
    obj = objects[name]
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        obj.no_such_name = 1
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        obj.no_such_name


@pytest.mark.parametrize("name, attribute", [
    ("AHAttr", "gr"), ("SRQ", "max_wr"), ("SRQ", "max_sge"), ("SendWR", "remote_addr"), ("SendWR", "sges"),
    ("SendWR", "ah"), ("RecvWR", "sges"), ("CMID", "qp"), ("CMID", "state"), ("ConnParam", "qp_num"),
    ("ConnParam", "responder_resources"), ("ConnParam", "retry_count"), ("MR", "data"), ("MR", "pd"),
    ("QP", "cap"), ("QP", "pd"), ("CQ", "channel"), ("CQ", "context"), ("AH", "dgid"), ("QPInitAttr", "qp_context"),
    ("CMEvent", "status"), ("AddrInfo", "src_addr"), ("Context", "srqs"), ("PD", "ctx"),
])
def test_what_soft0_kept_under_its_own_names_is_no_pyverbs_name(objects, name, attribute):
    """These were public on soft0, and are not pyverbs' ("'pyverbs.wr.SendWR' object has no attribute
    'remote_addr'"): the NIC reads them under private names now."""
    obj = objects[name]
    with pytest.raises(AttributeError, match=f"object has no attribute '{attribute}'"):
        getattr(obj, attribute)
    with pytest.raises(AttributeError):
        setattr(obj, attribute, 1)


def test_setting_an_unknown_name_says_what_pyverbs_says(objects):
    """Setting: pyverbs' message, naming its module. Reading: Python's, naming the class alone (a __getattr__
    that named the module would slow every read of the object: base.PyverbsObject)."""
    with pytest.raises(AttributeError, match=r"^'pyverbs\.mr\.MR' object has no attribute 'lenght'$"):
        objects["MR"].lenght = 8
    with pytest.raises(AttributeError, match=r"^'pyverbs\.cmid\.CMID' object has no attribute 'qp'$"):
        objects["CMID"].qp = None
    with pytest.raises(AttributeError, match=r"^'CMID' object has no attribute 'qp'$"):
        objects["CMID"].qp
    with pytest.raises(AttributeError, match=r"^'AHAttr' object has no attribute 'gr'$"):
        objects["AHAttr"].gr


# ------------------------------------------------------------------ read-only and write-only names

@pytest.mark.parametrize("name", sorted(n for n in PYVERBS if split(n)[1]))
def test_a_read_only_name_cannot_be_written_and_keeps_its_value(objects, name):
    obj = objects[name]
    for attribute in sorted(split(name)[1] - SOFT0_LACKS.get(name, set())):
        before = getattr(obj, attribute)
        with pytest.raises(AttributeError, match=f"^attribute '{attribute}' of 'pyverbs\\.\\w+\\.{name}' objects is "
                                                 f"not writable$"):
            setattr(obj, attribute, 12345)
        assert getattr(obj, attribute) == before, attribute


def test_the_keys_and_numbers_a_program_is_told_stay_what_the_nic_uses(objects):
    mr, qp = objects["MR"], objects["QP"]
    lkey, rkey, qp_num = mr.lkey, mr.rkey, qp.qp_num
    for obj, attribute in ((mr, "lkey"), (mr, "rkey"), (mr, "buf"), (mr, "length"), (qp, "qp_num"), (qp, "qp_state")):
        with pytest.raises(AttributeError, match="not writable"):
            setattr(obj, attribute, 7)
    assert (mr.lkey, mr.rkey, qp.qp_num) == (lkey, rkey, qp_num) and mrmod.REGISTERED[lkey] is mr


@pytest.mark.parametrize("name", sorted(PYVERBS))
def test_a_read_write_name_reads_back_what_it_was_given(objects, name):
    obj = objects[name]
    for attribute in sorted(split(name)[0]):
        value = getattr(obj, attribute)
        if value is None and attribute in ("next_wr", "srq"):   # (pyverbs' setters take a WR, an SRQ)
            continue
        setattr(obj, attribute, value)
        assert str(getattr(obj, attribute)) == str(value), attribute


def test_sg_list_is_write_only_and_rkey_is_the_binds_key():
    """pyverbs' SendWR has a setter for sg_list and a getter for rkey only, and its rkey is a BIND_MW's new
    key: the one given to set_wr_rdma is not readable (it reads 0, the bind's field)."""
    w = wrmod.SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[wrmod.SGE(0, 8, 1)])
    w.sg_list = wrmod.SGE(0, 16, 2)
    with pytest.raises(AttributeError, match="^attribute 'sg_list' of 'pyverbs.wr.SendWR' objects is not readable$"):
        w.sg_list
    w.set_wr_rdma(0x1234, 0x1000)
    assert w.rkey == 0
    with pytest.raises(AttributeError, match="not writable"):
        w.rkey = 0x1234


def test_a_cap_or_ah_attr_read_is_a_copy_as_in_pyverbs():
    """pyverbs builds a new QPCap (AHAttr) each time cap (ah_attr) is read: changing it changes nothing."""
    init = qpmod.QPInitAttr(cap=qpmod.QPCap(max_send_wr=4))
    init.cap.max_send_wr = 9
    assert init.max_send_wr == init.cap.max_send_wr == 4
    init.max_send_wr = 9   # (the flat names set it)
    assert init.cap.max_send_wr == 9
    attr = qpmod.QPAttr()
    attr.ah_attr = addr.AHAttr(port_num=1, is_global=1, gr=addr.GlobalRoute(dgid=addr.GID(GIDS[1]), sgid_index=1))
    attr.ah_attr.sgid_index = 0
    assert attr.ah_attr.sgid_index == 1 and attr.ah_attr.dgid == GIDS[1]


def test_an_ah_attr_copies_its_route_and_shows_it_flat():
    gr = addr.GlobalRoute(dgid=addr.GID(GIDS[1]), sgid_index=1)
    ah = addr.AHAttr(is_global=1, gr=gr)
    gr.sgid_index = 0
    assert ah.sgid_index == 1 and ah.dgid == gr.dgid == GIDS[1] and isinstance(ah.dgid, str)
    assert addr.AHAttr(is_global=0, gr=gr).dgid is None   # (None unless global, as pyverbs reads them)
    with pytest.raises(base.PyverbsUserError, match="gr parameter is None"):
        addr.AHAttr(is_global=1)


# ------------------------------------------------------------------ argument types

def test_a_cm_id_made_with_a_port_space_in_the_wrong_place_is_a_type_error(objects):
    """CMID(creator=None, QPInitAttr qp_init_attr=None, PD pd=None, port_space=..., CMID listen_id=None):
    a port space given second is a qp_init_attr, and pyverbs refuses it before making any id."""
    with pytest.raises(TypeError, match=r"^Argument 'qp_init_attr' has incorrect type \(expected pyverbs\.qp\.QPInitAttr, "
                                        r"got rdma_port_space\)$"):   # (pyverbs >= 59's enum: a Python class)
        cm.CMID(objects["CMEventChannel"], rdma_port_space.RDMA_PS_UDP)
    with pytest.raises(TypeError, match="Argument 'pd' has incorrect type"):
        cm.CMID(objects["CMEventChannel"], None, objects["Context"])


@pytest.mark.parametrize("call, message", [
    (lambda o: qpmod.QPInitAttr(cap={"max_send_wr": 4}),
     r"Argument 'cap' has incorrect type \(expected pyverbs\.qp\.QPCap, got dict\)"),
    (lambda o: setattr(qpmod.QPInitAttr(), "cap", {"max_send_wr": 4}), r"Argument 'src' has incorrect type"),
    (lambda o: qpmod.QPInitAttr(scq="cq"), r"Argument 'scq' has incorrect type"),
    (lambda o: qpmod.QPInitAttr(srq=o["CQ"]), r"Argument 'srq' has incorrect type \(expected pyverbs\.srq\.SRQ, "
                                              r"got pyverbs\.cq\.CQ\)"),
    (lambda o: setattr(qpmod.QPAttr(), "ah_attr", {}), r"Argument 'ah_attr' has incorrect type"),
    (lambda o: addr.GlobalRoute(dgid=GIDS[1]), r"Argument 'dgid' has incorrect type \(expected pyverbs\.addr\.GID, got str\)"),
    (lambda o: addr.AHAttr(is_global=1, gr={"dgid": GIDS[1]}), r"Argument 'gr' has incorrect type"),
    (lambda o: wrmod.SendWR(num_sge=1, sg=[o["SGE"]], next_wr=o["RecvWR"]),
     r"Argument 'next_wr' has incorrect type \(expected pyverbs\.wr\.SendWR, got pyverbs\.wr\.RecvWR\)"),
    (lambda o: setattr(wrmod.SendWR(num_sge=1, sg=[o["SGE"]]), "next_wr", o["RecvWR"]), r"Argument 'val' has incorrect"),
    (lambda o: setattr(wrmod.SendWR(num_sge=1, sg=[o["SGE"]]), "next_wr", None), r"Argument 'val' must not be None"),
    (lambda o: wrmod.RecvWR(next_wr=o["SendWR"]), r"Argument 'next_wr' has incorrect type"),
    (lambda o: wrmod.SendWR(num_sge=1, sg=[o["SGE"]]).set_wr_ud("ah", 1, 2), r"Argument 'ah' has incorrect type"),
    (lambda o: setattr(wrmod.SendWR(num_sge=1, sg=[o["SGE"]]), "sg_list", (0, 8, 1)), r"Argument 'val' has incorrect"),
    (lambda o: o["QP"].post_send(o["RecvWR"]), r"Argument 'wr' has incorrect type \(expected pyverbs\.wr\.SendWR"),
    (lambda o: o["QP"].post_recv(o["SendWR"]), r"Argument 'wr' has incorrect type \(expected pyverbs\.wr\.RecvWR"),
    (lambda o: o["QP"].post_send(None), r"Argument 'wr' must not be None"),
    (lambda o: o["QP"].modify({}, 0), r"Argument 'qp_attr' has incorrect type"),
    (lambda o: o["QP"].to_init(qpmod.QPCap()), r"Argument 'qp_attr' has incorrect type"),
    (lambda o: qpmod.QP(o["PD"], o["QPInitAttr"], qpmod.QPCap()), r"Argument 'qp_attr' has incorrect type"),
    (lambda o: o["SRQ"].post_recv(o["SendWR"]), r"Argument 'wr' has incorrect type"),
    (lambda o: cqmod.CQ(None, 4), r"Argument 'context' must not be None"),
    (lambda o: cqmod.CQ(o["PD"], 4), r"Argument 'context' has incorrect type \(expected pyverbs\.device\.Context"),
    (lambda o: cqmod.CQ(o["Context"], 4, None, o["CQ"]), r"Argument 'channel' has incorrect type"),
    (lambda o: cqmod.CompChannel(o["PD"]), r"Argument 'context' has incorrect type"),
    (lambda o: mrmod.MW(o["Context"], e.IBV_MW_TYPE_2), r"Argument 'pd' has incorrect type"),
    (lambda o: mrmod.MWBindInfo(o["PD"], 0, 8, 0), r"Argument 'mr' has incorrect type"),
    (lambda o: addr.AH(o["Context"], attr=o["AHAttr"]), r"Argument 'pd' has incorrect type"),
    (lambda o: addr.AH(o["PD"], o["AHAttr"]), r"positional argument"),   # (pyverbs: AH(pd, **kwargs))
    (lambda o: pdmod.PD(None), r"Argument 'creator' must not be None"),
    (lambda o: cm.CMEvent(None), r"Argument 'channel' must not be None"),
    (lambda o: o["CMID"].connect({}), r"Argument 'param' has incorrect type \(expected pyverbs\.cmid\.ConnParam"),
    (lambda o: o["CMID"].post_send(o["SGE"]), r"Argument 'mr' has incorrect type \(expected pyverbs\.mr\.MR"),
    (lambda o: o["CMID"].resolve_addr(None), r"Argument 'rai' must not be None"),
    (lambda o: srqmod.SrqInitAttr({"max_wr": 4}), r"Argument 'attr' has incorrect type"),
])
def test_an_argument_of_the_wrong_type_is_a_type_error_as_cython_raises_it(objects, call, message):
    with pytest.raises(TypeError, match=message):
        call(objects)


def test_a_wr_chain_keeps_its_wrs_here_where_pyverbs_keeps_pointers(objects):
    """pyverbs' SendWR(next_wr=w) keeps the address of w's C struct, not w: a chain whose later WR was
    garbage-collected points at freed memory there (undefined). soft0 keeps the WR, so the chain still
    works: a program must keep a name for each WR of a chain anyway (docs/emulated-nic.md)."""
    sge = objects["SGE"]
    head = wrmod.SendWR(1, num_sge=1, sg=[sge], next_wr=wrmod.SendWR(2, num_sge=1, sg=[sge]))
    gc.collect()
    assert head.next_wr.wr_id == 2 and head.next_wr.next_wr is None


# ------------------------------------------------------------------ the device's name

def test_a_soft_roce_tutorials_device_name_says_what_the_device_is_called(monkeypatch):
    monkeypatch.delenv("RDMALAB_DEVICE", raising=False)
    with pytest.raises(base.PyverbsRDMAError, match=r"Failed to find device rxe0: the RDMA device here is soft0.*"
                                                    r"Context\(name='soft0'\).*RDMALAB_DEVICE=rxe0"):
        device.Context(name="rxe0")
    with pytest.raises(base.PyverbsRDMAError, match=r"Failed to find device mlx5_0: .*soft0"):
        device.Context(name="mlx5_0")


def test_rdmalab_device_makes_soft0_answer_to_a_soft_roce_name(monkeypatch):
    monkeypatch.setenv("RDMALAB_DEVICE", "rxe0")
    with device.Context(name="rxe0") as ctx:
        assert ctx.name == "rxe0" and ctx.query_port(1).state == e.IBV_PORT_ACTIVE
    with device.Context(name="soft0") as ctx:   # (its own name still opens it)
        assert ctx.name == "soft0"
    assert [d.name for d in device.get_device_list()] == [b"soft0"]   # (what the device is)
    monkeypatch.setenv("RDMALAB_DEVICE", "mlx5_0")   # soft0 stands in for Soft-RoCE, not for another NIC
    with pytest.raises(base.PyverbsRDMAError, match="Failed to find device mlx5_0"):
        device.Context(name="mlx5_0")


def test_the_lab_routes_through_soft0_when_rdmalab_device_gives_it_a_soft_roce_name(monkeypatch):
    from rdmalab import verbs
    if verbs.PROVIDER != "soft":
        pytest.skip("soft0's alias: the real provider has its own devices")
    monkeypatch.setenv("RDMALAB_DEVICE", "rxe0")
    assert verbs.choose_route().device == "soft0"
    monkeypatch.setenv("RDMALAB_DEVICE", "rxe 0")
    with pytest.raises(SystemExit, match="RDMALAB_DEVICE='rxe 0' is not an RDMA device's name"):
        verbs.choose_route()

