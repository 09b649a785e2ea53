"""pyverbs.utils: names for numbers, for messages."""
import struct

from .pyverbs_error import PyverbsUserError


def be64toh(num):
    return struct.unpack("Q", struct.pack("!Q", num))[0]


def gid_str(subnet_prefix, interface_id):
    h = "%016x%016x" % (be64toh(subnet_prefix), be64toh(interface_id))
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


def gid_str_to_array(val):
    words = val.split(":")
    if len(words) != 8 or any(len(w) != 4 for w in words):
        raise PyverbsUserError(f"Invalid GID value ({words})")
    return [half for w in words for half in (w[0:2], w[2:4])]


def qp_type_to_str(qp_type):
    return {2: "RC", 3: "UC", 4: "UD", 8: "Raw Packet", 9: "XRCD_SEND", 10: "XRCD_RECV",
            0xff: "Driver QP"}.get(qp_type, f"Unknown ({qp_type})")


def qp_state_to_str(qp_state):
    return {0: "Reset", 1: "Init", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "Error",
            7: "Unknown"}.get(qp_state, f"Unknown ({qp_state})")


def mtu_to_str(mtu):
    return {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}.get(mtu, f"Unknown ({mtu})")


def access_flags_to_str(flags):
    names = {1: "Local write", 2: "Remote write", 4: "Remote read", 8: "Remote atomic", 16: "MW bind",
             32: "Zero based", 64: "On demand", 128: "Huge", 1 << 20: "Relaxed ordering"}
    return " ".join(name for bit, name in names.items() if flags & bit)


def mig_state_to_str(mig):
    return {0: "Migrated", 1: "Rearm", 2: "Armed"}.get(mig, f"Unknown ({mig})")


def rereg_error_to_str(error):
    return {-1: "IBV_REREG_MR_ERR_INPUT", -2: "IBV_REREG_MR_ERR_DONT_FORK_NEW",
            -3: "IBV_REREG_MR_ERR_DO_FORK_OLD", -4: "IBV_REREG_MR_ERR_CMD",
            -5: "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW"}.get(error, f"Unknown error ({error})")
