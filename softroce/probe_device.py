"""Dump what a device reports (query_device, query_device_ex, query_port, GIDs, a CQ's size) as JSON, to
set soft0's figures from rxe0's:   python softroce/probe_device.py [DEVICE]
(on soft0: python -m rdmalab.verbs.run softroce/probe_device.py soft0)."""
import json
import sys

import pyverbs.device as d
from pyverbs.cq import CQ


def fields(obj, depth=0):
    if isinstance(obj, (int, float, str, bytes, type(None))):
        return obj.decode(errors="replace") if isinstance(obj, bytes) else obj
    if depth > 2:
        return str(obj)
    out = {}
    for name in dir(obj):
        if name.startswith("_") or name in ("set_log_level", "logger"):
            continue
        try:
            value = getattr(obj, name)
        except Exception as error:
            out[name] = f"<{type(error).__name__}: {error}>"
            continue
        if callable(value):
            continue
        out[name] = fields(value, depth + 1)
    return out


def safe(call):
    try:
        return fields(call())
    except Exception as error:
        return f"<{type(error).__name__}: {error}>"


name = sys.argv[1] if len(sys.argv) > 1 else d.get_device_list()[0].name.decode()
ctx = d.Context(name=name)
report = {
    "query_device": safe(ctx.query_device),
    "query_device_ex": safe(ctx.query_device_ex),
    "query_port": safe(lambda: ctx.query_port(1)),
    "gids": [safe(lambda i=i: ctx.query_gid_ex(1, i)) for i in range(3)],
    "gid_table": safe(lambda: [fields(e) for e in ctx.query_gid_table(4)]),
    "cq_cqe": {n: safe(lambda n=n: CQ(ctx, n).cqe) for n in (1, 2, 3, 100, 1000, 32767, 32768)},
    "num_comp_vectors": safe(lambda: ctx.num_comp_vectors),
}
json.dump(report, sys.stdout, indent=1, sort_keys=True)
print()
