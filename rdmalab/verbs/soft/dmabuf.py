"""pyverbs.dmabuf: GPU (DRM) dma-buf allocation, for dma-buf MRs: neither soft0 nor Soft-RoCE has them."""
from .base import absent

DmaBuf = absent("DmaBuf", "dma-buf memory", rxe_has=False, base=object)
