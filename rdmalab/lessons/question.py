"""The series' question: its choices, which one is the answer, and why each is or is not (indexes as
CHOICES). The welcome lesson asks it (quiz.py), the last lesson (the-answer) answers it with the learner's
own numbers (answer.py), the instructor's view shows who chose what (classroom.py)."""

QUESTION = "Which property of RDMA matters most for AllReduce in a training cluster?"
CHOICES = [
    "lower latency than TCP",
    "more link bandwidth than Ethernet offers",
    "kernel and CPU bypass: the NIC moves data memory to memory, with no copy and no remote CPU",
    "reliable delivery, implemented in the NIC",
    "a socket-compatible API, so existing programs run unchanged",
]
ANSWER = 2   # revealed with evidence in the last lesson (the-answer)
# Why each choice is, or is not, THE answer (indexes as CHOICES).
WHY = [
    "Latency matters for small messages (the alpha term, 2(p-1) of them per ring AllReduce), but the "
    "AllReduce of gradients moves megabytes to gigabytes per step: it is bandwidth-bound, and its time is "
    "set by what each byte costs, not by the first byte's delay.",
    "Not a property of RDMA: RoCE runs over the same Ethernet links as TCP (100 GbE, 400 GbE), and "
    "InfiniBand and Ethernet ship the same link speeds. On the same wire RDMA still wins, and on this "
    "machine there is no wire at all.",
    "Right. The NIC places the bytes straight into registered memory on the other side: no system call, "
    "no copy through a kernel, no context switch, and the remote CPU does nothing. On a hardware NIC no CPU "
    "touches a ring step's bytes at all, so the CPUs cannot slow the link down however many steps there are.",
    "TCP is reliable too (the kernel retransmits). RC's reliability in the NIC helps because the NIC, not "
    "the CPU, does the work: that is the bypass again, not reliability as such.",
    "Socket wrappers over RDMA (SDP, rsocket in rdma-core's librdmacm) give back some of the gain, but keep "
    "send/receive semantics: the receiver must post buffers and be told, and the one-sided writes a ring "
    "uses are hidden. They help port programs; they are not what makes AllReduce fast.",
]
