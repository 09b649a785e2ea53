"""pyverbs.dma_util: barriers and MMIO writes for provider-specific (mlx5 DevX) tests. soft0 has no
device memory to write to; the barriers are no-ops here, as they order nothing a Python NIC sees."""
from .base import not_supported


def udma_to_dev_barrier():
    pass


def udma_from_dev_barrier():
    pass


def mmio_write64_as_be(addr, val):
    raise not_supported("MMIO writes (device doorbells)")


def mmio_write32_as_be(addr, val):
    raise not_supported("MMIO writes (device doorbells)")
