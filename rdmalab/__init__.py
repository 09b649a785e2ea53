"""rdmalab: hands-on RDMA for distributed AI training (see README.md)."""
__version__ = "0.1.0"

from rdmalab.doctor import doctor as doctor  # noqa: E402  (rdmalab.doctor(): what this machine offers for RDMA)
