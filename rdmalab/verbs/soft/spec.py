"""pyverbs.spec: flow specifications (match fields of a steering flow). They are plain descriptions; the
flows they describe are not supported on soft0 (see flow.py)."""


class Spec:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class EthSpec(Spec):
    pass


class Ipv4ExtSpec(Spec):
    pass


class Ipv4Spec(Spec):
    pass


class Ipv6Spec(Spec):
    pass


class TcpUdpSpec(Spec):
    pass
