"""The shape of the code, checked on every run, so that it stays a house a
newcomer can find their way in:

(a) no module under leases/, engines/, serving/, config/ or client/leasehold_client/
    is over MAX_LINES lines (migrations excepted: Django writes them), and
    config/ (wiring) is under CONFIG_LINES in all;
(b) no import reaches up a layer: the pure state machine and its pure
    helpers < the database engines (engines/, which import nothing of
    Leasehold) < models and storage < services and selectors < the doors <
    serving (serving/: the server, its lanes and front) < the wiring
    (config/, leases/apps.py); the doors never import each other, serving
    imports no door, storage module or engine (the wiring hands it the
    doors' lean paths and the database's bounds: serving/doors.py), and no
    modules import each other in a circle;
(c) no private Django name (an underscore name Django defines, or its
    internal SQL compiler and database backend modules) outside the storage
    layer, so that a Django upgrade breaks in one place;
(d) every module of those packages says what it is and why in a docstring of
    one paragraph (the longer story is docs/development/architecture.md's),
    and no comment or docstring carries the history of a choice or a
    benchmark figure (NOT_IN_COMMENTS: they belong in docs/decisions/ and
    bench/);
(e) one HTTP front, uvicorn: granian (removed, docs/decisions/0002) is
    named in no code, test, bench script or pyproject.toml;
(f) Django's check against database calls from async code is never
    switched off (DJANGO_ALLOW_ASYNC_UNSAFE) by the server's code: the loop
    reaches the database through threads, but for the one write it lends
    its thread to (leases/storage/queue_intake.py, docs/decisions/0008);
(g) every write transaction is the write queue's, and the write queue is
    the only batcher: serving/ names none of its batching or "do not wait"
    names (BATCHING_NAMES), which outside storage and the engines appear
    only where QUEUE_NAMES_ALLOWED says why;
(h) serving builds no door's error body: it decides that a request is
    refused and with what (leases/domain/refusals.py), the door renders it
    (serving/doors.py, ``Door.refusal``): no JSON encoding, XML error
    literal, door content type or message table in serving/ (ERROR_BODY_MARKS);
(i) no module imports another module's private (underscore) name: what
    crosses modules has a public name, but in the fences of private APIs
    (PRIVATE_IMPORTS_ALLOWED).

Today's exceptions are listed in the allowlists below, each with its reason.
A new violation fails with the file, the line and what to do; an allowlist
entry that no longer occurs fails too, so the lists only shrink.

Everything is read from the source with ``ast``; none of it is imported.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import django
import pytest

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ (a) module size

MAX_LINES = 400
SIZED = ("leases", "engines", "serving", "config", "client/leasehold_client")
CONFIG_LINES = 400  # config/ is wiring: settings, URLs, entry points of a few lines

# Over MAX_LINES today.
OVERSIZED_ALLOWED = {
    # 418: the whole pure state machine (states, actions, legacy versions,
    # reads and writes under a lease) in one file a reader checks against
    # Azure's tables; "about 400", not worth splitting the table.
    "leases/domain/machine.py",
}

# ------------------------------------------------------------------ (b) layers

PURE, ENGINE, MODELS, SERVICES, DOOR, SERVING, WIRING = range(7)
LAYER_NAMES = ("pure", "engine", "models/storage", "services/selectors", "door", "serving", "wiring")

# Every package under leases/ is one layer, and so are the few modules at its
# root: the folder a module is in decides its layer (the longest matching
# prefix of whole dotted components). A new folder fails the test until it is
# placed here; a new module needs no entry.
LAYERS = {
    # The state machine and helpers as pure as it: no Django.
    "leases.domain": PURE,  # lease rules, names, numbers, conditions, errors, the clock
    "leases.conf": PURE,  # the settings object: every LEASEHOLD_* variable, read once
    # The database engines: Django backends that import nothing of Leasehold.
    "engines": ENGINE,
    # The database: models, their schema and the storage underneath.
    "leases.models": MODELS,
    "leases.migrations": MODELS,
    "leases.storage": MODELS,  # the SQL beneath the services: statements, lease time, transactions, content
    # Services (write transactions), selectors (reads), who calls, and what runs beside them.
    "leases.services": SERVICES,
    "leases.auth": SERVICES,  # bearer tokens, SAS, SharedKey: who calls, checked before the lease lane
    "leases.operations": SERVICES,  # metrics, logs, retention, duties, start-up checks, the clock watch
    # The doors, each its own: none imports another.
    "leases.azure": DOOR,
    "leases.api": DOOR,  # the JSON API, and /health and /metrics
    "leases.admin": DOOR,
    "leases.management": DOOR,
    # The server: processes, the ASGI front, lanes, batches, waiting acquires.
    "serving": SERVING,
    # What puts it together.
    "leases.apps": WIRING,
    "config": WIRING,
}
# At most this many modules at the root of leases/: the rest live in the
# package that names their layer.
MAX_ROOT_MODULES = 12
# What the pure layer may take from Django: exception classes only (a pure
# settings helper may raise ImproperlyConfigured).
PURE_MAY_IMPORT = ("django.core.exceptions",)
PACKAGES = ("leases", "engines", "serving", "config")
# The storage module(s) beneath the services (leases/storage/, ...).
STORAGE_MODULE = re.compile(r"leases\.storage(\.|$)")

# Imports against the layers today: (importer, imported module).
LAYERING_ALLOWED: set[tuple[str, str]] = set()

# ------------------------------------------------------------------ (c) private Django names

# The storage layer: the only place allowed Django's internals.
STORAGE_PATHS = ("engines/", "leases/storage/")
# Django's internal modules (besides any with a _private component).
DJANGO_INTERNAL_MODULES = ("django.db.models.sql", "django.db.backends")
DJANGO_PUBLIC_MODULES = ("django.db.backends.signals",)  # connection_created, documented
# Underscore names that are documented API, not private.
DJANGO_DOCUMENTED = {
    "_meta", "_default_manager", "_base_manager", "_state",  # the Model API (docs: Model _meta API, managers)
    "_request",  # rest_framework's Request._request (the Django request it wraps): DRF's, not Django's
}

# Private Django names outside the storage layer today: (path, name).
PRIVATE_DJANGO_ALLOWED = {
    # The history's QuerySet refuses Django's raw bulk delete too.
    ("leases/models/__init__.py", "_raw_delete"),
    ("leases/models/tenure.py", "_raw_delete"),  # and the tenures' QuerySet

}


# ------------------------------------------------------------------ reading the source

@dataclass(frozen=True)
class Import:
    module: str  # the module imported (resolved: "from leases import services" -> leases.services)
    names: tuple[str, ...]  # the names taken from it ("from m import a, b"), or ()
    line: int


def source_files(root: Path, *tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (root / top).rglob("*.py"))


def rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def is_module(dotted: str, root: Path) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imports(path: Path, root: Path) -> list[Import]:
    """Every import in the file, at any depth (a lazy import inside a
    function is a dependency all the same)."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module_name(path, root)
                package = package if path.name == "__init__.py" else package.rpartition(".")[0]
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                assert node.module is not None  # an absolute import names its module
                module = node.module
            names = tuple(alias.name for alias in node.names)
            # "from leases import services": the module leases.services.
            submodules = [n for n in names if is_module(f"{module}.{n}", root)]
            found += [Import(f"{module}.{n}", (), node.lineno) for n in submodules]
            rest = tuple(n for n in names if n not in submodules)
            if rest or not submodules:
                found.append(Import(module, rest, node.lineno))
    return found


def layer_of(module: str) -> int | None:
    if STORAGE_MODULE.match(module):
        return MODELS
    if module == "leases":  # the package's empty __init__
        return WIRING
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in LAYERS:
            return LAYERS[".".join(parts[:end])]
    return None


def door_of(module: str) -> str:
    """The door a door module belongs to: leases.api.base -> leases.api."""
    return ".".join(module.split(".")[:2])


# ------------------------------------------------------------------ (a)

def oversized(root: Path = REPO) -> dict[str, int]:
    sizes = {rel(p, root): len(p.read_text(encoding="utf-8").splitlines()) for p in source_files(root, *SIZED)}
    return {path: n for path, n in sizes.items() if n > MAX_LINES and "/migrations/" not in path}


def test_no_module_is_over_the_size_limit():
    found = oversized()
    new = {path: n for path, n in found.items() if path not in OVERSIZED_ALLOWED}
    assert not new, (f"modules over {MAX_LINES} lines; split them by what they do:\n"
                     + "\n".join(f"  {path}: {n} lines" for path, n in sorted(new.items())))
    stale = OVERSIZED_ALLOWED - set(found)
    assert not stale, f"no longer over {MAX_LINES} lines; remove from OVERSIZED_ALLOWED: {sorted(stale)}"


# ------------------------------------------------------------------ (b)

def layering_violations(root: Path = REPO) -> list[tuple[str, str, str]]:
    """(importer, imported, why) for every import against the layers."""
    found = []
    for path in source_files(root, *PACKAGES):
        importer, where = module_name(path, root), rel(path, root)
        own = layer_of(importer)
        if own is None:
            found.append((importer, "", f"{where} is in no layer: place it in LAYERS"))
            continue
        for imp in imports(path, root):
            if (own == PURE and imp.module.split(".")[0] in ("django", "rest_framework", "django_filters")
                    and imp.module not in PURE_MAY_IMPORT):
                found.append((importer, imp.module, f"{where}:{imp.line}: the pure layer imports {imp.module}"))
            if imp.module.split(".")[0] not in PACKAGES:
                continue
            theirs = layer_of(imp.module)
            if theirs is None:
                continue  # reported as unplaced when its own file is checked
            if own == ENGINE and theirs != ENGINE:
                why = "an engine imports Leasehold (report through engines.hooks instead)"
            elif theirs > own:
                why = f"{LAYER_NAMES[own]} imports {LAYER_NAMES[theirs]}"
            elif own == theirs == DOOR and door_of(importer) != door_of(imp.module):
                why = "one door imports another"
            elif own == SERVING and theirs == DOOR:
                why = "serving imports a door (the wiring hands it what it needs: serving/doors.py)"
            elif own == SERVING and theirs in (ENGINE, MODELS) and imp.module.split(".")[:2] != ["leases", "models"]:
                why = "serving reaches the storage layer or an engine (the wiring hands it the database: serving/doors.py)"
            else:
                continue
            found.append((importer, imp.module, f"{where}:{imp.line}: {importer} -> {imp.module} ({why})"))
    return found


def test_no_import_reaches_up_a_layer_or_across_doors():
    found = layering_violations()
    new = [why for importer, imported, why in found if (importer, imported) not in LAYERING_ALLOWED]
    assert not new, "imports against the layers (see LAYERS in this file):\n" + "\n".join(f"  {w}" for w in new)
    stale = LAYERING_ALLOWED - {(importer, imported) for importer, imported, _ in found}
    assert not stale, f"no longer imported; remove from LAYERING_ALLOWED: {sorted(stale)}"


def import_circles(root: Path = REPO) -> list[list[str]]:
    """Modules of ours that import each other in a circle, at any depth of
    the file (strongly connected components of the import graph)."""
    graph: dict[str, set[str]] = {}
    for path in source_files(root, *PACKAGES):
        importer = module_name(path, root)
        graph[importer] = {imp.module for imp in imports(path, root)
                           if imp.module.split(".")[0] in PACKAGES and imp.module != importer}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_modules_import_each_other_in_a_circle():
    circles = import_circles()
    assert not circles, "modules importing each other in a circle:\n" + "\n".join(
        "  " + " <-> ".join(circle) for circle in circles)


def test_the_long_read_helper_imports_the_application_it_serves():
    """The helper process (config/long_reads.py) serves config.asgi's
    application by an import the graph above sees, not by a module named in
    a string."""
    assert "config.asgi" in {imp.module for imp in imports(REPO / "config/long_reads.py", REPO)}
    assert "import_module" not in (REPO / "serving/long_reads.py").read_text(encoding="utf-8")


def test_config_is_wiring():
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in source_files(REPO, "config"))
    assert lines < CONFIG_LINES, f"config/ is {lines} lines: it wires the project together; move the rest out"


def test_every_layer_is_placed():
    """The layer table names real modules (a renamed one would silently
    leave its imports unchecked)."""
    missing = [name for name in LAYERS if not is_module(name, REPO)]
    assert not missing, f"LAYERS names modules that do not exist: {missing}"


def root_modules(root: Path = REPO) -> list[str]:
    return sorted(p.name for p in (root / "leases").glob("*.py"))


def test_the_root_of_leases_holds_few_modules():
    """The folders show the layers: a module goes in the package of its
    layer, not beside them at the root."""
    found = root_modules()
    assert len(found) <= MAX_ROOT_MODULES, (
        f"{len(found)} modules at the root of leases/ (at most {MAX_ROOT_MODULES}): {found}; "
        "move them into the package of their layer (see LAYERS)")


def test_the_layers_are_folders():
    """Below leases/, the layer table names packages, not files: a module's
    folder decides its layer."""
    files = [name for name in LAYERS if name.startswith("leases.")
             and not (REPO.joinpath(*name.split(".")) / "__init__.py").exists()
             and f"{name.split('.')[1]}.py" not in root_modules()]
    assert not files, f"LAYERS names modules below leases/ that are not packages: {files}"


# ------------------------------------------------------------------ (c)

@cache
def django_private_names() -> frozenset[str]:
    """Every underscore name Django's own source uses as an attribute or
    defines as a method (read once per run)."""
    pattern = re.compile(r"(?:\.|\bdef )(_[A-Za-z]\w*)")
    found = set()
    for path in Path(django.__file__).parent.rglob("*.py"):
        found.update(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
    return frozenset(found)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_internal_module(module: str) -> bool:
    if module.split(".")[0] != "django" or module.startswith(DJANGO_PUBLIC_MODULES):
        return False
    return any(is_private(part) for part in module.split(".")) or module.startswith(DJANGO_INTERNAL_MODULES)


def django_locals(tree: ast.Module) -> set[str]:
    """Names this module binds to something imported from Django."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "django"}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "django":
            bound |= {a.asname or a.name for a in node.names}
    return bound


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def private_django_uses(path: Path, root: Path) -> list[tuple[str, int, str]]:
    """(name, line, how) for each private Django name the file uses."""
    tree = parsed(path)
    uses = []
    for imp in imports(path, root):
        if is_internal_module(imp.module):
            uses.append((imp.module, imp.line, f"imports {imp.module}"))
        elif imp.module.split(".")[0] == "django":
            uses += [(n, imp.line, f"imports {n} from {imp.module}") for n in imp.names if is_private(n)]
    from_django = django_locals(tree)
    # Classes built on a Django class: their self._x and def _x may be Django's.
    django_classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                      and any(root_name(base) in from_django for base in node.bases)]
    in_django_class = {id(n) for cls in django_classes for n in ast.walk(cls)}
    candidates = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in DJANGO_DOCUMENTED:
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not on_self or id(node) in in_django_class:
                candidates.append((node.attr, node.lineno, f"uses .{node.attr}"))
        elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_private(node.name)
              and id(node) in in_django_class):
            candidates.append((node.name, node.lineno, f"overrides {node.name}"))
    return uses + [c for c in candidates if c[0] in django_private_names()]


def private_django_outside_storage(root: Path = REPO) -> list[tuple[str, str, str]]:
    """(path, name, where and how) outside the storage layer."""
    found = []
    for path in source_files(root, "leases", "engines", "config"):
        where = rel(path, root)
        if where.startswith(STORAGE_PATHS):
            continue
        found += [(where, name, f"{where}:{line}: {how}") for name, line, how in private_django_uses(path, root)]
    return found


def test_no_private_django_name_outside_the_storage_layer():
    found = private_django_outside_storage()
    new = [how for path, name, how in found if (path, name) not in PRIVATE_DJANGO_ALLOWED]
    assert not new, ("private Django names outside the storage layer (" + ", ".join(STORAGE_PATHS)
                     + "); move them there or use public API:\n" + "\n".join(f"  {h}" for h in new))
    stale = PRIVATE_DJANGO_ALLOWED - {(path, name) for path, name, _ in found}
    assert not stale, f"no longer used; remove from PRIVATE_DJANGO_ALLOWED: {sorted(stale)}"


# ------------------------------------------------------------------ (e) one front

GONE_FRONT = "granian"
CODE = ("leases", "engines", "serving", "config", "client", "bench", "tests")


def code_files(root: Path) -> list[Path]:
    """Every Python file of the tree's code, tests and bench scripts (not
    this file, which names what it looks for), and pyproject.toml."""
    files = [p for p in source_files(root, *CODE)
             if "node_modules" not in p.parts and p.resolve() != Path(__file__).resolve()]
    return files + [p for p in (root / "pyproject.toml", root / "client" / "pyproject.toml") if p.exists()]


def mentions(word: str, root: Path = REPO) -> list[str]:
    return [f"{rel(path, root)}:{n}" for path in code_files(root)
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if word in line.lower()]


def test_one_front_granian_is_named_nowhere():
    found = mentions(GONE_FRONT)
    assert not found, f"granian was removed (uvicorn is the only front, docs/decisions/0002): {found}"


# ------------------------------------------------------------------ (f) Django's async check stays on

ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"
SERVER_CODE = ("leases", "serving", "config", "engines")
LOOP_LENDER = "_set_running_loop"  # marks a thread as running no event loop
LOOP_LENT_IN = {"leases/storage/queue_intake.py"}  # the write queue's one write on the loop (decision 0008)
LOOP_LENT_IN |= {"serving/uvicorn_internals.py"}  # the fence that lists it (tests/serving/test_uvicorn_contract.py)


def async_check_off(root: Path = REPO) -> list[str]:
    """Where the server's code names the variable that switches Django's
    check off, or marks the loop's thread as running no loop, outside the
    one place allowed."""
    found = []
    for path in source_files(root, *SERVER_CODE):
        text = path.read_text(encoding="utf-8")
        if ASYNC_UNSAFE in text:
            found.append(f"{rel(path, root)}: {ASYNC_UNSAFE}")
        if LOOP_LENDER in text and rel(path, root) not in LOOP_LENT_IN:
            found.append(f"{rel(path, root)}: {LOOP_LENDER}")
    return found


def test_django_async_check_is_never_switched_off():
    found = async_check_off()
    assert not found, ("async code reaches the database through a thread (asyncio.to_thread, an executor), "
                       f"never with Django's check off: {found}")


# ------------------------------------------------------------------ (g) one write path

# Every write transaction is the write queue's (leases/storage/write_queue.py: write_transaction,
# write_together), so that the doors' lease writes are made together and each fails alone: outside
# the storage layer a transaction is opened (transaction.atomic) only where listed here, as a
# savepoint inside a queued write or for a write that is no lease's. (path, function): why.
ATOMIC_ALLOWED = {
    ("leases/services/access.py", "refuse"): "a savepoint of the caller's queued write; for a read, its refusal's event",
    ("leases/services/blobs.py", "_blob_put_swap"): "a savepoint inside the queued write (a concurrent create)",
    ("leases/services/blocks.py", "_block_record"): "a savepoint inside the queued write (a concurrent stage)",
    ("leases/services/blocks.py", "write_blob"): "a savepoint inside the queued write (a concurrent create)",
    ("leases/api/throttling.py", "counted"): "the throttle database's counter, no lease",
    ("leases/api/health.py", "readiness_problems"): "the readiness check's probe, no lease",
    ("leases/operations/retention.py", "_prune_batch"): "pruning old history, no lease",
    ("leases/operations/clockwatch.py", "_report"): "a clock step's count, no lease",
}


def transactions_outside_the_queue(root: Path = REPO) -> list[tuple[str, str, str]]:
    """(path, function, where) for every use of transaction.atomic outside the storage layer."""
    found = []
    for path in source_files(root, "leases", "serving", "config"):
        where = rel(path, root)
        if where.startswith(STORAGE_PATHS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes: list[tuple[ast.AST, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scopes += [(inner, node.name) for inner in ast.walk(node) if inner is not node]
        owner = {id(node): name for node, name in reversed(scopes)}  # named by its outermost function
        for node in ast.walk(tree):
            named = (isinstance(node, ast.Attribute) and node.attr == "atomic") or (
                isinstance(node, ast.Name) and node.id == "atomic" and isinstance(node.ctx, ast.Load)) or (
                isinstance(node, ast.alias) and node.name == "atomic")  # not a migration's "atomic = False"
            if named:
                function = owner.get(id(node), "<module>")
                line = getattr(node, "lineno", 0)
                found.append((where, function, f"{where}:{line}: transaction.atomic in {function}()"))
    return found


def test_every_write_transaction_is_the_write_queues():
    found = transactions_outside_the_queue()
    new = [how for path, function, how in found if (path, function) not in ATOMIC_ALLOWED]
    assert not new, ("a transaction opened outside the write queue: use leases.storage.transactions."
                     "write_transaction (or list a savepoint or a write that is no lease's in ATOMIC_ALLOWED):\n"
                     + "\n".join(f"  {h}" for h in new))
    stale = set(ATOMIC_ALLOWED) - {(path, function) for path, function, _ in found}
    assert not stale, f"no longer there; remove from ATOMIC_ALLOWED: {sorted(stale)}"


# The write queue is the only batcher (leases/storage/write_queue.py, queue_intake.py; decision 0048):
# serving names none of these, and the "do not wait" rule (at_once, WouldWait, must_not_wait) and the
# batch's retry (RetryAlone) live in storage and the engines. (path, name): why elsewhere.
BATCHING_NAMES = frozenset({"at_once", "WouldWait", "must_not_wait", "RetryAlone", "write_together", "run_all",
                            "fair_share", "MAX_BATCH", "LeaseBatcher", "Intake", "queue_intake", "write_queue"})
DO_NOT_WAIT = frozenset({"at_once", "WouldWait", "must_not_wait", "RetryAlone"})
QUEUE_HOMES = ("leases/storage/", "engines/")
QUEUE_NAMES_ALLOWED = {
    ("leases/operations/timing.py", "must_not_wait"): "bench only: which thread wrote a batch",
}


def batching_outside_the_queue(root: Path = REPO) -> list[tuple[str, str, str]]:
    """(path, name, where) for every batching name serving/ uses, and every
    "do not wait" name used outside storage and the engines."""
    found = []
    for path in source_files(root, "leases", "serving", "config", "engines"):
        where = rel(path, root)
        if where.startswith(QUEUE_HOMES):
            continue
        names = BATCHING_NAMES if where.startswith("serving/") else DO_NOT_WAIT
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for name in _names_of(node):
                if name in names:
                    found.append((where, name, f"{where}:{getattr(node, 'lineno', 0)}: {name}"))
    return found


def _names_of(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return node.name.split(".") + ([node.asname] if node.asname else [])
    if isinstance(node, ast.ImportFrom) and node.module:
        return node.module.split(".")
    return []


def test_the_write_queue_is_the_only_batcher():
    found = batching_outside_the_queue()
    new = sorted({how for path, name, how in found if (path, name) not in QUEUE_NAMES_ALLOWED})
    assert not new, ("batching is the write queue's (leases/storage/queue_intake.py): serving hands a door's "
                     "request to the door, which submits it there; the do-not-wait rule is storage's and the "
                     "engines':\n" + "\n".join(f"  {h}" for h in new))
    stale = set(QUEUE_NAMES_ALLOWED) - {(path, name) for path, name, _ in found}
    assert not stale, f"no longer there; remove from QUEUE_NAMES_ALLOWED: {sorted(stale)}"


# ------------------------------------------------------------------ (h) serving builds no door's error body

# What building a door's error body takes: each door renders its refusals (leases/azure/refusals.py,
# leases/api/refusals.py), serving says what with (leases/domain/refusals.py).
ERROR_BODY_NAMES = frozenset({"MESSAGES", "error_document", "error_body"})
ERROR_BODY_TEXTS = ("<Error>", "<?xml", "application/json", "application/xml")


def error_bodies_in_serving(root: Path = REPO) -> list[str]:
    found = []
    for path in source_files(root, "serving"):
        where = rel(path, root)
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings(path):
                found += [f"{where}:{node.lineno}: {text!r}" for text in ERROR_BODY_TEXTS if text in node.value]
            found += [f"{where}:{getattr(node, 'lineno', 0)}: {name}" for name in _names_of(node)
                      if name in ERROR_BODY_NAMES]
            if (isinstance(node, ast.Attribute) and node.attr == "dumps" and isinstance(node.value, ast.Name)
                    and node.value.id == "json") or (isinstance(node, ast.ImportFrom) and node.module == "json"
                                                     and "dumps" in (a.name for a in node.names)):
                found.append(f"{where}:{node.lineno}: json.dumps")
    return found


def test_serving_builds_no_doors_error_body():
    found = error_bodies_in_serving()
    assert not found, ("serving decides that a request is refused (leases/domain/refusals.py: Refusal); its door "
                       "renders it (serving/doors.py: Door.refusal):\n" + "\n".join(f"  {hit}" for hit in found))


def test_an_error_body_built_in_serving_is_found(tmp_path):
    root = source_tree(tmp_path, {
        "serving/admission.py": 'import json\nfrom leases.domain.errors import MESSAGES\n\n\ndef busy():\n'
                                '    """Answers in application/json."""\n    return json.dumps({"code": "x"})\n',
        "serving/front.py": 'HEAD = "<?xml version=\'1.0\'?><Error><Code>"\n',
        "leases/azure/refusals.py": 'BODY = "<Error></Error>"\n'})
    assert error_bodies_in_serving(root) == [
        "serving/admission.py:2: MESSAGES", "serving/admission.py:7: json.dumps",
        "serving/front.py:1: '<Error>'", "serving/front.py:1: '<?xml'"]


# ------------------------------------------------------------------ (i) private names stay in their module

PRIVATE_CHECKED = ("leases", "serving", "config", "engines", "client/leasehold_client")
# The modules that fence a library's private names, listing each with a contract test
# (tests/serving/test_uvicorn_contract.py, tests/storage/test_storage_contract.py).
PRIVATE_FENCES = ("serving/uvicorn_internals.py", "leases/storage/django_internals.py")
# Another module's private name used elsewhere on purpose: (path, module.name): why.
PRIVATE_IMPORTS_ALLOWED = {
    ("leases/storage/queue_intake.py", "asyncio._set_running_loop"):
        "the loop lent to the write queue's one write (f); storage may not import serving's fence",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DJANGO_DOCUMENTED


def private_imports(root: Path = REPO) -> list[tuple[str, str, str]]:
    """(path, module.name, where) for every private name a module takes from
    another: ``from m import _name``, or ``m._name`` of a module it imported."""
    found = []
    for path in source_files(root, *PRIVATE_CHECKED):
        where = rel(path, root)
        if where in PRIVATE_FENCES:
            continue
        imported: dict[str, str] = {}  # a name bound by an import -> what it names
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                for alias in node.names:
                    if _private(alias.name):
                        found.append((where, f"{module}.{alias.name}", f"{where}:{node.lineno}: from {module} "
                                      f"import {alias.name}"))
                    imported[alias.asname or alias.name] = f"{module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    imported[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        for node in ast.walk(parsed(path)):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in imported):
                found.append((where, f"{imported[node.value.id]}.{node.attr}",
                              f"{where}:{node.lineno}: {node.value.id}.{node.attr}"))
    return found


def test_no_module_takes_another_modules_private_name():
    found = private_imports()
    new = sorted({how for path, name, how in found if (path, name) not in PRIVATE_IMPORTS_ALLOWED})
    assert not new, ("a name another module uses is public: rename it (no underscore) or move it to where it is "
                     "used; a library's private names go in its fence (PRIVATE_FENCES):\n"
                     + "\n".join(f"  {h}" for h in new))
    stale = set(PRIVATE_IMPORTS_ALLOWED) - {(path, name) for path, name, _ in found}
    assert not stale, f"no longer there; remove from PRIVATE_IMPORTS_ALLOWED: {sorted(stale)}"


def test_a_private_name_taken_from_another_module_is_found(tmp_path):
    root = source_tree(tmp_path, {
        "leases/services/access.py": "from leases.services.history import _record, record_refusal\n",
        "leases/auth/delegation.py": "from leases.auth import sas\n\n\ndef f(p):\n    return sas._times(p), sas.__name__\n",
        "serving/uvicorn_internals.py": "from uvicorn.protocols.http.httptools_impl import _get_status_line\n",
        "serving/asgi.py": "from serving.environ import wsgi_environ as _environ\n"})
    assert sorted(how for _, _, how in private_imports(root)) == [
        "leases/auth/delegation.py:5: sas._times",
        "leases/services/access.py:1: from leases.services.history import _record"]


# ------------------------------------------------------------------ the checks catch what they are for

def source_tree(root: Path, files: dict[str, str]) -> Path:
    """A small source tree: {"leases/domain/machine.py": source, ...}."""
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for package in path.relative_to(root).parents:
            if package.parts:
                (root / package / "__init__.py").touch()
        path.write_text(source)
    return root


def test_a_transaction_outside_the_write_queue_is_found(tmp_path):
    root = source_tree(tmp_path, {
        "leases/services/containers.py": "from django.db import transaction\n\n\ndef container_delete():\n"
                                         "    with transaction.atomic():\n        pass\n",
        "leases/api/views.py": "from django.db.transaction import atomic\n\n\n@atomic\ndef break_lease():\n"
                               "    pass\n",
        "leases/storage/transactions.py": "from django.db import transaction\n\n\ndef write_transaction():\n"
                                          "    with transaction.atomic():\n        pass\n",
    })
    assert sorted(how for _, _, how in transactions_outside_the_queue(root)) == [
        "leases/api/views.py:1: transaction.atomic in <module>()", "leases/api/views.py:4: transaction.atomic in break_lease()",
        "leases/services/containers.py:5: transaction.atomic in container_delete()"]


def test_an_oversized_module_is_found(tmp_path):
    root = source_tree(tmp_path, {"leases/services/selectors.py": "x = 1\n" * (MAX_LINES + 1),
                           "leases/migrations/0001_initial.py": "x = 1\n" * (MAX_LINES + 1),
                           "config/settings.py": "x = 1\n" * MAX_LINES})
    assert oversized(root) == {"leases/services/selectors.py": MAX_LINES + 1}


@pytest.mark.parametrize("files, expected", [
    ({"leases/domain/machine.py": "from leases.models import Blob\n", "leases/models/__init__.py": ""},
     "leases/domain/machine.py:1: leases.domain.machine -> leases.models (pure imports models/storage)"),
    ({"leases/domain/machine.py": "def f():\n    from django.db import connection\n"},
     "leases/domain/machine.py:2: the pure layer imports django.db"),
    ({"leases/domain/names.py": "from rest_framework.exceptions import ValidationError\n"},
     "leases/domain/names.py:1: the pure layer imports rest_framework.exceptions"),
    ({"leases/models/__init__.py": "from leases import services\n", "leases/services/__init__.py": ""},
     "leases/models/__init__.py:1: leases.models -> leases.services (models/storage imports services/selectors)"),
    ({"leases/services/__init__.py": "", "leases/services/lease_actions.py": "from ..azure import wire\n",
      "leases/azure/wire.py": ""},
     "leases/services/lease_actions.py:1: leases.services.lease_actions -> leases.azure.wire "
     "(services/selectors imports door)"),
    ({"leases/api/serializers.py": "from leases.admin.display import state\n", "leases/admin/display.py": ""},
     "leases/api/serializers.py:1: leases.api.serializers -> leases.admin.display (one door imports another)"),
    ({"leases/storage/blob_content.py": "from leases.services import Actor\n", "leases/services/__init__.py": ""},
     "leases/storage/blob_content.py:1: leases.storage.blob_content -> leases.services (models/storage imports services/selectors)"),
    ({"leases/newthing.py": ""}, "leases/newthing.py is in no layer: place it in LAYERS"),
    ({"serving/asgi.py": "from leases.storage.transactions import RetryAlone\n",
      "leases/storage/transactions.py": ""},
     "serving/asgi.py:1: serving.asgi -> leases.storage.transactions "
     "(serving reaches the storage layer or an engine (the wiring hands it the database: serving/doors.py))"),
    ({"serving/asgi.py": "from engines import postgres\n", "engines/postgres/__init__.py": ""},
     "serving/asgi.py:1: serving.asgi -> engines.postgres "
     "(serving reaches the storage layer or an engine (the wiring hands it the database: serving/doors.py))"),
    ({"serving/asgi.py": "from leases.azure import lean\n", "leases/azure/lean.py": ""},
     "serving/asgi.py:1: serving.asgi -> leases.azure.lean "
     "(serving imports a door (the wiring hands it what it needs: serving/doors.py))"),
    ({"serving/waiting.py": "def f():\n    from leases.api.lean import takes\n", "leases/api/lean.py": ""},
     "serving/waiting.py:2: serving.waiting -> leases.api.lean "
     "(serving imports a door (the wiring hands it what it needs: serving/doors.py))"),
    ({"engines/sqlite/base.py": "from leases.operations import timing\n", "leases/operations/timing.py": ""},
     "engines/sqlite/base.py:1: engines.sqlite.base -> leases.operations.timing "
     "(an engine imports Leasehold (report through engines.hooks instead))"),
])
def test_an_import_against_the_layers_is_found(tmp_path, files, expected):
    assert expected in [why for _, _, why in layering_violations(source_tree(tmp_path, files))]


def test_imports_down_the_layers_and_within_a_door_pass(tmp_path):
    root = source_tree(tmp_path, {
        "leases/domain/machine.py": "from .errors import LeaseholdError\n",
        "leases/domain/errors.py": "from django.core.exceptions import ImproperlyConfigured\n",
        "leases/models/__init__.py": "from django.db import models\nfrom leases.domain import machine\n",
        "leases/storage/statements.py": "from django.db.models.sql.subqueries import InsertQuery\n"
                                        "from leases.models import Blob\n",
        "leases/services/__init__.py": "from leases.domain import machine\nfrom leases import storage\n"
                                       "from leases.models import Blob\n",
        "leases/api/views.py": "from leases import services\nfrom .serializers import S\n",
        "leases/api/serializers.py": "",
        "config/urls.py": "from leases.api import views\n",
    })
    assert layering_violations(root) == []
    assert private_django_outside_storage(root) == []


@pytest.mark.parametrize("source, expected", [
    ("from django.db.models.sql.subqueries import InsertQuery\n", "django.db.models.sql.subqueries"),
    ("from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX\n", "django.db.backends.sqlite3.base"),
    ("from django.db.models.sql import compiler\n", "django.db.models.sql"),
    ("from django.db.transaction import _transaction_func\n", "_transaction_func"),
    ("from django.db import connection\nconnection._start_transaction_under_autocommit()\n",
     "_start_transaction_under_autocommit"),
    ("from django.core.handlers.wsgi import WSGIHandler\n"
     "class H(WSGIHandler):\n    def load_middleware(self):\n        self._middleware_chain = None\n",
     "_middleware_chain"),
    ("from django.db.backends.sqlite3 import base\n"
     "class W(base.DatabaseWrapper):\n    def _commit(self):\n        pass\n", "_commit"),
])
def test_a_private_django_name_is_found(tmp_path, source, expected):
    root = source_tree(tmp_path, {"leases/services.py": source})
    assert expected in [name for _, name, _ in private_django_outside_storage(root)]
    # ... and allowed in the storage layer.
    root = source_tree(tmp_path / "storage", {"leases/storage/statements.py": source, "engines/sqlite/base.py": source})
    assert private_django_outside_storage(root) == []


@pytest.mark.parametrize("source", [
    "from django.db import connection, transaction\nfrom django.db.backends.signals import connection_created\n",
    "class Counter:\n    def _commit(self):\n        self._close = None\n",  # our own names, not Django's
    "def f(model, request):\n    return model._meta, model._default_manager, request._request\n",
])
def test_public_django_and_our_own_names_pass(tmp_path, source):
    root = source_tree(tmp_path, {"leases/services.py": source})
    assert private_django_outside_storage(root) == []


# ------------------------------------------------------------------ one routing source

ROUTING_SOURCE = "leases/domain/paths.py"
# What only the routing source spells: the account name's pattern, the
# site's reserved first segments, the JSON API's prefix.
ROUTING_SPELLINGS = ("{3,24}", "admin|api", "api/v1/")


def routing_spelled_elsewhere(root: Path = REPO) -> list[str]:
    found = []
    for path in source_files(root, *PACKAGES):
        where = rel(path, root)
        if where == ROUTING_SOURCE:
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [f"{where}:{node.lineno}: {spelling!r}" for spelling in ROUTING_SPELLINGS
                          if spelling in node.value and id(node) not in docstrings(path)]
    return found


@cache
def docstrings(path: Path) -> frozenset[int]:
    """The ids of the file's docstring constants (prose may name a path)."""
    return frozenset(id(body.body[0].value) for body in ast.walk(parsed(path))  # type: ignore[attr-defined]
                     if isinstance(body, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and ast.get_docstring(body, clean=False) is not None)


def test_routing_is_spelled_in_one_place():
    found = routing_spelled_elsewhere()
    assert not found, f"routing spelled outside {ROUTING_SOURCE}; build it from there:\n" + "\n".join(
        f"  {hit}" for hit in found)


def test_routing_spelled_twice_is_found(tmp_path):
    root = source_tree(tmp_path, {"leases/azure/handler.py": 'import re\nP = re.compile(r"^/[a-z0-9]{3,24}/")\n',
                                  "config/urls.py": 'X = "api/v1/"\n', ROUTING_SOURCE: 'A = "[a-z0-9]{3,24}"\n'})
    assert routing_spelled_elsewhere(root) == ["config/urls.py:1: 'api/v1/'",
                                               "leases/azure/handler.py:2: '{3,24}'"]


# ------------------------------------------------------------------ which engine: one test

ENGINE_TEST = "engines/postgres/__init__.py"  # postgres.in_use(): Leasehold's one test of "is it PostgreSQL"


def engine_tested_elsewhere(root: Path = REPO) -> list[str]:
    """(path:line) of every comparison with a connection's ``vendor`` in the
    running code, outside ``postgres.in_use()``; migrations, frozen as they
    were written, keep theirs."""
    found = []
    for path in source_files(root, "leases", "engines", "serving", "config"):
        where = rel(path, root)
        if where == ENGINE_TEST or where.startswith("leases/migrations/"):
            continue
        found += [f"{where}:{node.lineno}" for node in ast.walk(parsed(path)) if isinstance(node, ast.Compare)
                  and any(isinstance(side, ast.Attribute) and side.attr == "vendor"
                          for side in (node.left, *node.comparators))]
    return found


def test_is_it_postgresql_is_asked_one_way():
    found = engine_tested_elsewhere()
    assert not found, "ask engines.postgres.in_use(connection), not connection.vendor:\n" + "\n".join(
        f"  {hit}" for hit in found)


def test_a_vendor_comparison_is_found(tmp_path):
    root = source_tree(tmp_path, {"leases/admin/queries.py": 'def f(c):\n    return c.vendor == "sqlite"\n',
                                  "leases/migrations/0001_x.py": 'def f(c):\n    return c.vendor == "sqlite"\n',
                                  ENGINE_TEST: 'def in_use(c):\n    return c.vendor == "postgresql"\n'})
    assert engine_tested_elsewhere(root) == ["leases/admin/queries.py:2"]


# ------------------------------------------------------------------ the diagram in docs/development/architecture.md

DIAGRAM_DOC = REPO / "docs" / "development" / "architecture.md"
DIAGRAM_BEGIN, DIAGRAM_END = "<!-- layers: generated by `python tests/test_structure.py` -->", "<!-- layers: end -->"


def unit_of(module: str) -> str:
    """The box a module is drawn in: its package below leases/, else its top package."""
    parts = module.split(".")
    if parts[0] == "leases" and len(parts) > 1:
        return f"leases/{parts[1]}" + ("/" if (REPO / "leases" / parts[1]).is_dir() else ".py")
    return parts[0] + "/"


def layer_diagram(root: Path = REPO) -> str:
    """Each package, by layer from the top, and the packages its modules import."""
    uses: dict[str, set[str]] = {}
    layer: dict[str, int] = {}
    for path in source_files(root, *PACKAGES):
        importer = module_name(path, root)
        if importer == "leases" or "migrations" in importer.split("."):
            continue
        unit = unit_of(importer)
        layer[unit] = layer_of(importer) or 0
        uses.setdefault(unit, set()).update(
            unit_of(imp.module) for imp in imports(path, root)
            if imp.module.split(".")[0] in PACKAGES and imp.module != "leases")
    lines = ["```"]
    for own in sorted(set(layer.values()), reverse=True):
        for i, unit in enumerate(sorted(u for u in layer if layer[u] == own)):
            below = sorted(uses[unit] - {unit}, key=lambda u: (-layer.get(u, 0), u))
            name = LAYER_NAMES[own] if i == 0 else ""
            lines.append(f"{name:<19}{unit:<20}-> {', '.join(below) or '(nothing of ours)'}")
    return "\n".join(lines + ["```"])


def documented_diagram() -> str:
    text = DIAGRAM_DOC.read_text(encoding="utf-8")
    return text.split(DIAGRAM_BEGIN, 1)[1].split(DIAGRAM_END, 1)[0].strip()


def test_the_architecture_diagram_matches_the_imports():
    assert documented_diagram() == layer_diagram(), (
        "docs/development/architecture.md's layer diagram no longer matches the imports: "
        "run `python tests/test_structure.py` to write it again")


# ------------------------------------------------------------------ (d) docstrings and comments

# What a comment or docstring may not carry: the history of a choice and benchmark figures belong in
# docs/decisions/ and bench/, where they are told whole; code says what it does and why.
NOT_IN_COMMENTS = {
    "history": re.compile(r"\b(stop|issue|session) \d+|\bsince session\b|\bpreviously\b|\bdays? ago\b"
                          r"|\bas before\b", re.IGNORECASE),
    "a figure": re.compile(r"\d\s*%|\brequests?/s\b|\bmeasured\b|\b\d+(\.\d+)?\s*(ms|µs)\b"
                           r"|\b\d+(\.\d+)?\s*(x|×)\s+(faster|slower|more|less|fewer)\b", re.IGNORECASE),
}


def module_docstring(path: Path) -> str | None:
    return ast.get_docstring(parsed(path), clean=False)


def docstrings_and_comments(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment (``tokenize``: code and strings that are data stay out) and every
    line of every docstring of the file."""
    source = path.read_text(encoding="utf-8")
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                first = node.body[0].lineno
                found += [(first + i, line) for i, line in enumerate(doc.splitlines())]
    return found


def essays(root: Path = REPO) -> list[str]:
    """Modules (empty ones aside) whose docstring is missing or longer than one paragraph."""
    found = []
    for path in source_files(root, *PACKAGES):
        if "migrations" in path.parts or not path.read_text(encoding="utf-8").strip():
            continue  # an empty __init__.py only makes a package
        doc = module_docstring(path)
        if doc is None or not doc.strip():
            found.append(f"{rel(path, root)}: no module docstring (one paragraph: what the module is and why)")
        elif re.search(r"\n\s*\n", doc.strip()):
            found.append(f"{rel(path, root)}: a module docstring of more than one paragraph "
                         "(the longer story goes to docs/development/architecture.md)")
    return found


def test_module_docstrings_are_one_paragraph():
    found = essays()
    assert not found, "\n".join(found)


def history_and_figures(root: Path = REPO) -> list[str]:
    found = []
    for path in source_files(root, *PACKAGES):
        if "migrations" in path.parts:
            continue
        for line, text in docstrings_and_comments(path):
            for what, pattern in NOT_IN_COMMENTS.items():
                if match := pattern.search(text):
                    found.append(f"{rel(path, root)}:{line}: {what} ({match.group(0)!r}) in: {text.strip()}")
    return found


def test_no_comment_carries_history_or_figures():
    found = history_and_figures()
    assert not found, ("history and benchmark figures go to docs/decisions/ (and bench/), not into code:\n"
                       + "\n".join(found))


def test_essays_history_and_figures_are_found(tmp_path):
    root = source_tree(tmp_path, {
        "leases/domain/a.py": '"""One.\n\nTwo."""\n',
        "leases/domain/b.py": "x = 1\n",
        "leases/domain/c.py": '"""Fine, one paragraph\nover two lines."""\nx = "%d%% done" % 5  # why, not when\n',
        "engines/d.py": '"""Fast (stop 21)."""\n',
        "serving/e.py": '"""E."""\n# +12-16% lease requests/s\ny = 2  # 0.18 ms\n',
        "config/f.py": '"""F."""\ndef f():\n    """As before, but 3x faster."""\n',
    })
    assert essays(root) == [
        "leases/domain/a.py: a module docstring of more than one paragraph "
        "(the longer story goes to docs/development/architecture.md)",
        "leases/domain/b.py: no module docstring (one paragraph: what the module is and why)"]
    assert [hit.split(" in: ")[0] for hit in history_and_figures(root)] == [
        "config/f.py:3: history ('As before')", "config/f.py:3: a figure ('3x faster')",
        "engines/d.py:1: history ('stop 21')",
        "serving/e.py:2: a figure ('6%')", "serving/e.py:3: a figure ('0.18 ms')"]


def test_a_mention_of_granian_is_found(tmp_path):
    root = source_tree(tmp_path, {"serving/server.py": "x = 1\ndef f():\n    from granian import Granian\n",
                                  "bench/run.py": "# behind Granian\n", "leases/domain/machine.py": "x = 1\n"})
    (root / "pyproject.toml").write_text('dependencies = [\n    "granian>=2.5",\n]\n')
    assert mentions(GONE_FRONT, root) == ["bench/run.py:1", "serving/server.py:3", "pyproject.toml:2"]


def test_a_batcher_in_serving_is_found(tmp_path):
    root = source_tree(tmp_path, {
        "serving/asgi.py": "from serving.lease_batch import LeaseBatcher\n",
        "serving/lease_batch.py": "MAX_BATCH = 64\n\n\ndef submit(writer):\n    with writer.at_once():\n        pass\n",
        "leases/api/lean.py": "from leases.storage.write_queue import RetryAlone\n",
        "leases/storage/write_queue.py": "class RetryAlone(Exception):\n    pass\n",
        "engines/writer_wait.py": "def at_once():\n    pass\n"})
    assert sorted(how for _, _, how in batching_outside_the_queue(root)) == [
        "leases/api/lean.py:1: RetryAlone",
        "serving/asgi.py:1: LeaseBatcher",
        "serving/lease_batch.py:1: MAX_BATCH", "serving/lease_batch.py:5: at_once"]


def test_switching_the_async_check_off_is_found(tmp_path):
    root = source_tree(tmp_path, {"serving/asgi.py": 'import os\nos.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "1")\n',
                                  "leases/domain/waiting.py": "import asyncio\nasyncio._set_running_loop(None)\n",
                                  "leases/storage/queue_intake.py": "import asyncio\nasyncio._set_running_loop(None)\n",
                                  "tests/browser.py": 'DJANGO_ALLOW_ASYNC_UNSAFE = "1"\n'})
    assert async_check_off(root) == ["leases/domain/waiting.py: _set_running_loop", f"serving/asgi.py: {ASYNC_UNSAFE}"]


if __name__ == "__main__":  # python tests/test_structure.py: write the diagram into the architecture page
    doc = DIAGRAM_DOC.read_text(encoding="utf-8")
    head, rest = doc.split(DIAGRAM_BEGIN, 1)
    DIAGRAM_DOC.write_text(head + DIAGRAM_BEGIN + "\n" + layer_diagram() + "\n" + DIAGRAM_END + rest.split(DIAGRAM_END, 1)[1],
                           encoding="utf-8")
