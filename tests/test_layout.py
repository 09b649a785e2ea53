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
    """A program may set RDMALAB_SOFT_LINK (lesson 13's wire_demo does) after importing rdmalab.lessons: soft0
    reads its link as it loads, so importing the lessons must not load it (nor choose a provider)."""
    every = [m for m in modules() if m.startswith("rdmalab.lessons")]
    loaded = loaded_by("import " + ", ".join(every))
    assert "rdmalab.verbs.soft" not in loaded and "'pyverbs" not in loaded, loaded   # (no module of soft0 at all)


def test_the_lessons_import_rdmalab_verbs_at_their_top():
    """Importing rdmalab.verbs, rc and emulated chooses no provider, so the lessons import them where a reader
    looks, at the top; a provider's module is read when used (v.enums, v.wr)."""
    hidden = []
    for module, path in modules().items():
        if module.startswith("rdmalab.lessons"):
            tree = ast.parse(open(path).read())
            top = {id(node) for node in tree.body}
            hidden += [f"{module}:{node.lineno}" for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and id(node) not in top and names_verbs(node)]
    assert hidden == []


def names_verbs(node):
    """Whether `from X import a, b` imports rdmalab.verbs or a module of it."""
    named = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
    return any(n == "rdmalab.verbs" or n.startswith("rdmalab.verbs.") for n in named)


# docs/architecture.md's table "Who may import whom", by package (a module at the top, or a folder)
MAY_IMPORT = {
    "errors": set(), "sockets": set(), "settings": set(), "wire": set(),
    "proc": {"errors", "settings"},
    "verbs": {"errors", "proc", "settings", "wire"},
    "bench": {"verbs", "proc", "sockets", "errors"},
    "allreduce": {"verbs", "proc", "sockets", "errors", "settings"},
}


def test_each_package_imports_only_what_the_architecture_page_allows():
    def package(module):
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else module
    wrong = []
    for module, targets in imports(modules()).items():
        allowed = MAY_IMPORT.get(package(module))
        if allowed is None:   # lessons, cli, doctor, lab: everything
            continue
        for target in targets:
            if package(target) != package(module) and package(target) not in allowed:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_wire_codec_imports_nothing_of_the_lab_but_itself():
    """rdmalab.wire is read by soft0's udp link and by the lessons alike: a codec that chooses no provider."""
    outside = {module: sorted(t for t in targets if t.startswith("rdmalab") and not t.startswith("rdmalab.wire"))
               for module, targets in imports(modules()).items() if module.startswith("rdmalab.wire")}
    assert {m: t for m, t in outside.items() if t} == {}


# Who imports soft0 (rdmalab.verbs.soft) besides its own modules: the provider switch (provider.py, by name
# through importlib), the one door for the rest of the lab (verbs.emulated), what runs a program's `import
# pyverbs` on soft0 (run.py, rdmacore.py), and `rdmalab capture`, a command of soft0's udp link (through
# emulated it would make a circle: capture stops its child through proc.children, which reaps through emulated).
SOFT_IMPORTERS = {"rdmalab.verbs.emulated": None, "rdmalab.verbs.run": {"rdmalab.verbs.soft.pyverbs_generation"},
                  "rdmalab.verbs.rdmacore": {"rdmalab.verbs.soft.device"}, "rdmalab.cli": {"rdmalab.verbs.soft.link.capture"}}


def test_only_the_provider_switch_and_verbs_emulated_import_soft0():
    wrong = {}
    for module, targets in imports(modules()).items():
        if module == "rdmalab.verbs.soft" or module.startswith("rdmalab.verbs.soft."):
            continue
        soft = {t for t in targets if t == "rdmalab.verbs.soft" or t.startswith("rdmalab.verbs.soft.")}
        allowed = SOFT_IMPORTERS.get(module, set())
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
