"""The layout docs/architecture.md describes: no import circle in rdmalab/ (every import counted, those
inside functions too) but the two re-exports that mirror pyverbs' modules, no part of the lab loads
the emulated NIC unless it uses it, and none reaches it but through the provider switch or
rdmalab.verbs.emulated."""
import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = [{"rdmalab.verbs.soft.cq", "rdmalab.verbs.soft.cqex"}, {"rdmalab.verbs.soft.qp", "rdmalab.verbs.soft.qpex"}]


def modules():
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "rdmalab")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def imports(found):
    """module -> the modules of rdmalab it imports, anywhere in it."""
    edges = {m: set() for m in found}
    for module, path in found.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges[module].add(target)
    return edges


def circles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_but_pyverbs_own_module_pairs():
    assert [c for c in circles(imports(modules())) if c not in ALLOWED] == []


def loaded_by(statement):
    probe = f"import sys; {statement}; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_errors_load_neither_the_emulator_nor_numpy_and_a_cluster_not_the_emulator():
    errors = loaded_by("import rdmalab.errors")
    assert "rdmalab.verbs.soft" not in errors and "'numpy'" not in errors
    assert "rdmalab.verbs.soft" not in loaded_by("import rdmalab.allreduce.cluster, rdmalab.bench.sides")


def test_importing_the_lessons_picks_no_provider():
    """A program may set RDMALAB_SOFT_LINK (lesson 08's wire_demo does) after importing rdmalab.lessons: soft0
    reads its link as it loads, so importing the lessons must not load it (nor choose a provider)."""
    loaded = loaded_by("import rdmalab.lessons, rdmalab.lessons.failures, rdmalab.lessons.nic_view")
    assert "rdmalab.verbs.soft.hardware" not in loaded and "'pyverbs" not in loaded, loaded


# Who imports soft0 (rdmalab.verbs.soft) besides its own modules: the provider switch (provider.py, by name
# through importlib), the one door for the rest of the lab (verbs.emulated), what runs a program's `import
# pyverbs` on soft0 (run.py, rdmacore.py), and `rdmalab capture`, a command of soft0's udp link (through
# emulated it would make a circle: capture stops its child through proc.children, which reaps through emulated).
SOFT_IMPORTERS = {"rdmalab.verbs.emulated": None, "rdmalab.verbs.run": {"rdmalab.verbs.soft.pyverbs_generation"},
                  "rdmalab.verbs.rdmacore": {"rdmalab.verbs.soft.device"}, "rdmalab.cli": {"rdmalab.verbs.soft.link.capture"}}
# The lessons' imports of soft0 that issue 36 leaves to their rewrite: these may shrink, never grow.
LESSONS_NOT_YET = {
    "rdmalab.lessons.checks.on_the_wire": {"rdmalab.verbs.soft.wire"},
    "rdmalab.lessons.failures": {"rdmalab.verbs.soft.counters", "rdmalab.verbs.soft.hardware",
                                 "rdmalab.verbs.soft.link.doorbell"},
    "rdmalab.lessons.packets": {"rdmalab.verbs.soft.wire", "rdmalab.verbs.soft.wire.encap",
                                "rdmalab.verbs.soft.wire.headers"},
    "rdmalab.lessons.wire_demo": {"rdmalab.verbs.soft.link.doorbell"},
}


def test_only_the_provider_switch_and_verbs_emulated_import_soft0():
    wrong = {}
    for module, targets in imports(modules()).items():
        if module == "rdmalab.verbs.soft" or module.startswith("rdmalab.verbs.soft."):
            continue
        soft = {t for t in targets if t == "rdmalab.verbs.soft" or t.startswith("rdmalab.verbs.soft.")}
        allowed = SOFT_IMPORTERS.get(module, LESSONS_NOT_YET.get(module, set()))
        if allowed is not None and soft - allowed:
            wrong[module] = sorted(soft - allowed)
    assert wrong == {}, f"import these through rdmalab.verbs.emulated: {wrong}"


def test_importing_rc_bench_allreduce_or_their_plumbing_chooses_no_provider():
    """rdmalab.verbs.rc reads the provider's modules when called, so that these import it at their top."""
    loaded = loaded_by("import rdmalab.verbs.rc, rdmalab.bench, rdmalab.bench.sides, rdmalab.allreduce, "
                       "rdmalab.allreduce.cluster, rdmalab.allreduce.transports, rdmalab.allreduce.ranks, "
                       "rdmalab.doctor, rdmalab.cli, rdmalab.proc.children, rdmalab.proc.watchdog, "
                       "rdmalab.verbs.emulated, rdmalab.verbs.provider as p; assert not p._chosen, p._chosen")
    assert "rdmalab.verbs.soft" not in loaded and "'pyverbs" not in loaded, loaded
