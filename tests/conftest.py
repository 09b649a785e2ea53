"""Fixtures shared by the tests at this level and below (tests/conformance has its own, as rdma-core's)."""
import pytest


@pytest.fixture(scope="module")
def ctx_pd():
    """A context on the device this machine uses (soft0, or rxe0 in the guest) and a PD on it."""
    from rdmalab import verbs as v
    ctx = v.device.Context(name=v.choose_route().device)
    pd = v.pd.PD(ctx)
    yield ctx, pd
    pd.close()
    ctx.close()
