"""Shrinks a program that shows a difference to a minimal one that still shows it (delta debugging).

    smallest = shrink(program, differs)      # differs(program) -> bool: still the difference?

No hypothesis needed (it runs in the Soft-RoCE guest): first drop steps, in halves, quarters, ...
down to one at a time; then drop WRs from chains and SGEs from WRs; then replace each value by a
simpler one from SIMPLER (a valid key for a bogus one, offset 0, 8 bytes, signaled, the default
setup ...), keeping every change after which `differs` still holds, until nothing changes.
Each list in SIMPLER is ordered simplest first and a value only moves towards its front, so the
loop ends.
"""
import copy

from tests.fuzz.interpreter import ACCESS, DEFAULT_SETUP

SIMPLER = {
    "state": ["RTS", "ERR", "RTR", "INIT", "RESET"], "sq_sig_all": [1], "max_send_wr": [8], "max_recv_wr": [8],
    "access_b": [list(ACCESS)], "max_dest_rd_atomic_b": [1],
    "signaled": [True], "imm": [0], "lkey": ["own"], "rkey": ["own"], "off": [0, 8], "len": [8, 0, 1],
    "mr": [0, 1], "size": [4096], "access": [list(ACCESS)], "mask": ["right"], "n": [1], "cqe": [1],
    "opcode": ["RDMA_WRITE", "SEND", "RDMA_READ"], "cq": ["a", 0], "qp": ["a"],
}


def shrink(program, differs, budget=400):
    """The smallest variant of `program` found for which differs() holds (`program` itself must);
    at most `budget` calls of differs()."""
    calls = [0]

    def check(candidate):
        if calls[0] >= budget:
            return False
        calls[0] += 1
        return differs(candidate)

    best = copy.deepcopy(program)
    best["setup"] = {**DEFAULT_SETUP, **best.get("setup", {})}
    changed = True
    while changed and calls[0] < budget:
        changed = False
        for candidate in variants(best):
            if check(candidate):
                best, changed = candidate, True
                break
    return best


def variants(program):
    """Smaller or simpler programs than `program`, the biggest cuts first."""
    steps = program["steps"]
    size = len(steps) // 2
    while size >= 1:
        for start in range(0, len(steps), size):
            if len(steps) > 1:
                yield {**program, "steps": steps[:start] + steps[start + size:]}
        size //= 2
    for i, step in enumerate(steps):
        for field in ("wrs", "sges"):
            for path, items in lists_named(step, field):
                for j in range(len(items)):
                    if field == "wrs" and len(items) == 1:
                        continue
                    smaller = copy.deepcopy(program)
                    target = smaller["steps"][i]
                    for key in path:
                        target = target[key]
                    del target[field][j]
                    yield smaller
    for path, value in leaves(program):
        options = [o for o in SIMPLER[path[-1]] if type(o) is type(value)]
        for option in options[:options.index(value)] if value in options else options:
            simpler = copy.deepcopy(program)
            target = simpler
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = option
            yield simpler


def lists_named(node, name, path=()):
    """(path to the dict, the list) for every list under key `name` in node."""
    if isinstance(node, dict):
        if isinstance(node.get(name), list):
            yield path, node[name]
        for key, child in node.items():
            yield from lists_named(child, name, path + (key,))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from lists_named(child, name, path + (i,))


def leaves(node, path=()):
    """(path, value) for every value under a key SIMPLER names (a list of access flags is one value)."""
    if isinstance(node, dict):
        for key, child in node.items():
            if key in SIMPLER:
                yield path + (key,), child
            else:
                yield from leaves(child, path + (key,))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from leaves(child, path + (i,))
