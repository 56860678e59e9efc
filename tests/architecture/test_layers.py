"""The import order of docs/architecture.md, checked on the source (ast): layers import
one way, and no module imports one that imports it back, function-local imports
included."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCH = REPO / "docs" / "architecture.md"

#: Which layers each layer may import (besides itself). Mirrors docs/architecture.md.
ALLOWED: dict[str, set[str]] = {
    "isa": set(),
    "hw": {"isa"},
    "sim": {"isa", "hw"},
    "runtime": {"isa", "sim"},
    "compiler": {"isa", "sim", "runtime"},
    "models": {"isa", "sim", "runtime", "compiler"},
    "fpga_builds": {"isa", "hw", "sim"},
    "hil": {"isa", "hw", "sim", "fpga_builds"},
    "dse": {"isa", "hw", "sim", "runtime", "compiler", "models", "fpga_builds", "hil"},
    "benches": {"isa", "hw", "sim", "runtime", "compiler", "models", "fpga_builds", "hil",
                "dse"},
    "cli": {"isa", "hw", "sim", "runtime", "compiler", "models", "fpga_builds", "hil",
            "dse", "benches"},
}


def package_dirs() -> dict[str, Path]:
    """Every package of pyproject's list → its folder (through the package-dir map)."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = cfg["package-dir"]
    out = {}
    for pkg in cfg["packages"]:
        root = max((p for p in mapping if pkg == p or pkg.startswith(p + ".")), key=len)
        rest = pkg[len(root):].lstrip(".").split(".") if pkg != root else []
        out[pkg] = REPO.joinpath(mapping[root], *rest)
    return out


def modules() -> dict[str, Path]:
    """Every module of the installed namespace, by dotted name."""
    out: dict[str, Path] = {}
    dirs = package_dirs()
    for pkg, folder in dirs.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            # a sub-folder mapped to its own package is that package's
            owner = max((p for p, f in dirs.items() if path.is_relative_to(f)),
                        key=lambda p: len(str(dirs[p])))
            if owner == pkg:
                out[name] = path
    return out


def layer(module: str) -> str:
    """The layer of a ``tensorfab.*`` module name."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] not in ALLOWED:
        return "cli"
    return parts[1]


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """``(imported tensorfab module, line)`` for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tensorfab"):
                    yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("tensorfab"):
                for a in node.names:
                    yield target, node.lineno
                    yield f"{target}.{a.name}", node.lineno


MODULES = modules()


def resolve(target: str) -> str | None:
    """The module a dotted import target names (a name inside a module → the module)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for target, _ in imports(name, path):
            mod = resolve(target)
            if mod is not None and mod != name and not name.startswith(mod + "."):
                g[name].add(mod)
    return g


def test_layers_import_one_way() -> None:
    bad = []
    for name, path in MODULES.items():
        src = layer(name)
        for target, line in imports(name, path):
            dst = layer(target)
            if dst != src and dst not in ALLOWED[src]:
                bad.append(f"{path.relative_to(REPO)}:{line}: {src} imports {target} ({dst})")
    assert not bad, "imports against the layer order:\n" + "\n".join(sorted(set(bad)))


def test_no_import_cycles() -> None:
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    assert not cycles, "import cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_architecture_doc_tree_matches_packages() -> None:
    """docs/architecture.md's layout table names every package folder, and no other."""
    text = ARCH.read_text()
    block = re.search(r"<!-- layout -->\n```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md lacks the ```-fenced tree after <!-- layout -->"
    documented = {line.split()[0].rstrip("/") for line in block.group(1).splitlines()
                  if line.strip() and not line.startswith(" ") and line.split()[0].endswith("/")}
    actual = {str(f.relative_to(REPO)) for f in package_dirs().values()}
    assert documented == actual


def test_architecture_doc_import_order_matches_test() -> None:
    """docs/architecture.md's import-order table is :data:`ALLOWED`."""
    text = ARCH.read_text().split("<!-- import-order -->", 1)[-1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|$", text, re.M)
    doc = {r[0]: {x.strip(" `") for x in r[1].split(",") if x.strip(" `—-")} for r in rows}
    assert doc == ALLOWED


@pytest.mark.parametrize("module", sorted(m for m in MODULES if ".compiler." in m))
def test_compiler_raises_project_errors(module: str) -> None:
    """The compiler raises its own errors (CompileError...), never a bare ValueError."""
    tree = ast.parse(MODULES[module].read_text())
    bare = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Raise)
            and isinstance(n.exc, ast.Call) and isinstance(n.exc.func, ast.Name)
            and n.exc.func.id in ("ValueError", "TypeError", "RuntimeError", "KeyError")]
    assert not bare, f"{module}: bare builtin errors raised at lines {bare}"


def test_every_package_folder_is_installed() -> None:
    """A folder with ``__init__.py`` under a mapped folder is in pyproject's package list
    (otherwise a wheel would leave it out)."""
    dirs = package_dirs()
    listed = {d.resolve() for d in dirs.values()}
    found = {p.parent.resolve() for d in dirs.values() for p in d.rglob("__init__.py")}
    assert not found - listed, sorted(str(p.relative_to(REPO)) for p in found - listed)


def test_every_project_exception_derives_from_tensorfab_error() -> None:
    """Each exception class the packages define has TensorfabError as a base, so the
    command line reports it in one line (checked on the source: any class whose bases
    name an Error/Exception/Failure must reach TensorfabError)."""
    import importlib
    import inspect

    from tensorfab.isa import TensorfabError

    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if not classes:
            continue
        mod = importlib.import_module(name)
        for cls_name in classes:
            cls = getattr(mod, cls_name, None)
            if inspect.isclass(cls) and issubclass(cls, BaseException) \
                    and not issubclass(cls, TensorfabError):
                bad.append(f"{name}.{cls_name}")
    assert not bad, bad
