"""RoCEv2 packets, byte for byte, as Linux's rxe and real NICs send them: the codec soft0's udp link sends
and receives with, and the lessons read captures with. It imports nothing of the lab but itself: a codec,
it chooses no provider and opens no device.

Read it next to a Wireshark capture, top to bottom as Wireshark shows a packet:

    encap.py     IPv4 + UDP (destination port 4791) around the packet, with their checksums
    headers.py   BTH, then the extension headers: RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH
    opcodes.py   which opcode carries which headers, named as Wireshark names them
    packet.py    a whole packet: encode from opcode + fields + payload, decode into a Packet
    icrc.py      the end-to-end CRC that closes every packet
    psn.py       RC's packet arithmetic: a message's packets and their positions, 24-bit PSNs, the ACK
                 timeout (soft0's requester and responder use it too)
    segment.py   a message cut into packets at the path MTU, by psn.py's arithmetic
    pcap.py      pcap files that tshark and Wireshark open

Anything malformed raises WireError (a ValueError), never another exception.
Checked against tshark's dissector and a real rxe device: docs/emulated-nic.md, "On the wire".
"""
from .encap import ROCEV2_PORT, Flow, ipv4_udp, parse_ipv4_udp
from .headers import (ACK, AETH, BTH, DETH, IETH, NAK, NAK_INVALID_REQUEST, NAK_PSN_SEQUENCE_ERROR,
                      NAK_REMOTE_ACCESS_ERROR, NAK_REMOTE_OPERATIONAL_ERROR, RETH, RNR_NAK, AtomicAckETH,
                      AtomicETH, ImmDt, WireError)
from .icrc import compute_icrc
from .opcodes import OPCODES, Op, opcode
from .packet import BadICRC, Packet, decode_ipv4, encode_ipv4, verify_icrc
from .pcap import LINKTYPE_ETHERNET, LINKTYPE_IPV4, PcapWriter, read_pcap
from .segment import MTUS, message_opcodes, packet_count, psn_add, psn_compare, psn_diff, segments
