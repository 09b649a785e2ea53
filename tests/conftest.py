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


@pytest.fixture(scope="module")
def ctx():
    """A context on the device this machine uses (the exercises' checks take it, as the lessons pass theirs)."""
    from rdmalab import verbs as v
    with v.device.Context(name=v.choose_route().device) as c:
        yield c


@pytest.fixture
def pd(ctx):
    from rdmalab import verbs as v
    with v.pd.PD(ctx) as p:
        yield p
