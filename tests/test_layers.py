"""The house's layers, read from the package's own imports (ast): entities at the bottom, the catalog below
the storage wing, both and the query layer below the analysis, no cycle, nothing that reaches up into the
package's facade."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "frlake"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(module: str) -> set[str]:
    """The frlake modules ``module`` imports, anywhere in it (a function's lazy import counts): ``from
    frlake.x import y`` is frlake.x.y where that is a module, else frlake.x."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "frlake":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "frlake")
    return out - {module}


GRAPH = {m: _imports(m) for m in MODULES}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_catalog_and_the_query_layer_import_nothing_of_the_analysis():
    wrong = sorted((m, i) for m, deps in GRAPH.items() for i in deps
                   if (_under(m, "frlake.catalog") or _under(m, "frlake.query")) and _under(i, "frlake.diagnose"))
    assert wrong == []


def test_the_catalog_imports_nothing_of_the_storage_wing():
    """The storage wing (frlake.storage) sits above the catalog: a catalog transaction that also switches lake
    files takes the switch as a callback from the wing (``also``)."""
    wrong = sorted((m, i) for m, deps in GRAPH.items() for i in deps
                   if _under(m, "frlake.catalog") and _under(i, "frlake.storage"))
    assert wrong == []


def test_the_storage_wing_imports_nothing_above_it():
    """How bytes become committed files and leave again knows the catalog, the schema and the entities, not
    who writes (ingest, the session, the server, the command line), what reads (the query layer) or what
    analyses: the session computes an attempt's summary rows and hands them to the wing's SummaryWriter."""
    above = ("frlake.query", "frlake.diagnose", "frlake.ingest", "frlake.session", "frlake.server", "frlake.cli")
    wrong = sorted((m, i) for m, deps in GRAPH.items() for i in deps
                   if _under(m, "frlake.storage") and any(_under(i, a) for a in above))
    assert wrong == []


def test_the_entities_import_nothing_of_frlake():
    assert GRAPH["frlake.entities"] == set()


def test_nothing_imports_the_package_facade():
    """frlake/__init__.py is for users (``frlake.Frlake``); the parts import the module they need."""
    assert sorted(m for m, deps in GRAPH.items() if "frlake" in deps and m != "frlake") == []


def test_no_module_imports_itself_back():
    """No cycle among the modules, lazy imports included."""
    facade = {"frlake"}  # its lazy attributes (Frlake, Settings) are the user's door, not a dependency
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        seen[module] = 1
        for dep in sorted(GRAPH.get(module, ()) - facade):
            if seen.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in seen:
                visit(dep, path + [dep])
        seen[module] = 2

    for module in sorted(GRAPH):
        if module not in seen and module not in facade:
            visit(module, [module])
    assert cycles == []


def test_the_server_reads_through_the_session_only():
    """No view or API of the web service reaches the catalog or opens DuckDB itself: frlake.Frlake is its
    one door (per-thread connections and the caches are the session's)."""
    wrong = sorted((m, i) for m, deps in GRAPH.items() for i in deps
                   if _under(m, "frlake.server") and (_under(i, "frlake.catalog") or i == "frlake.query.connect"))
    assert wrong == []


def _returns_a_record_as_a_dict(annotation: ast.expr | None) -> bool:
    """``-> dict``, ``-> dict | None``, ``-> list[dict]``: a record handed out as a bare dict. A mapping keyed
    by something (``dict[str, pa.Table]``, frames by stack id) is a lookup, not a record."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace(" ", "")
    return text in ("dict", "dict|None", "list[dict]", "tuple[dict,...]", "list[dict]|None")


def test_the_session_and_the_query_layer_hand_out_typed_records():
    """What the CLI and the server read (histories, facets, arrivals, entries, progress) are frozen
    dataclasses, not dicts read by key. Report rows are the exception: their columns are the SQL's."""
    wrong = []
    for module, path in MODULES.items():
        if not (_under(module, "frlake.query") or module == "frlake.session"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.name != "to_dict" \
                    and _returns_a_record_as_a_dict(node.returns):
                wrong.append(f"{module}.{node.name}")
    assert sorted(wrong) == []
