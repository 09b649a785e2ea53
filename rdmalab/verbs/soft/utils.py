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
    """The MTU in bytes (an int, as pyverbs gives it), 0 for a value no IBV_MTU_* names."""
    return {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}.get(mtu, 0)


def flags_to_str(flags, names):
    """The names of the bits set in `flags`, in `names`' order, each followed by a space, as pyverbs
    writes them (its cq.flags_to_str; access and send flags are named so too)."""
    return "".join(name + " " for bit, name in names.items() if flags & bit)


def access_flags_to_str(flags):
    return flags_to_str(flags, {1: "Local write", 2: "Remote write", 4: "Remote read", 8: "Remote atomic",
                                16: "MW bind", 32: "Zero based", 64: "On demand"})


def mig_state_to_str(mig):
    return {0: "Migrated", 1: "Re-arm", 2: "Armed"}.get(mig, f"Unknown ({mig})")


def field_lines(rows, width=22, indent=""):
    """An object's printout as pyverbs' __str__ methods write it: a line per (name, value), the name
    padded to `width` and the value to 20 characters (a value with no such format, None say, raises
    TypeError there and here)."""
    return "".join(f"{indent}{name:{width}}: {value:<20}\n" for name, value in rows)


def rereg_error_to_str(error):
    return {-1: "IBV_REREG_MR_ERR_INPUT", -2: "IBV_REREG_MR_ERR_DONT_FORK_NEW",
            -3: "IBV_REREG_MR_ERR_DO_FORK_OLD", -4: "IBV_REREG_MR_ERR_CMD",
            -5: "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW"}.get(error, f"Unknown error ({error})")
