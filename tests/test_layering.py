"""The package layers hold: every import points down or sideways, and no import cycle.

Read from the source with `ast`, as a reviewer reads the imports: every `import` and
`from ... import` of a `trio_broker` module, at module level or inside a function (a lazy
import is a dependency all the same), and those under `if TYPE_CHECKING:` apart.

    entry points    trio_broker/__init__, cli, admin_cli, report_cli, perf, testing, ...
    broker          broker.py (the lifecycle that builds every part), metrics, request_log
    apis            one module per Kafka API
    services        cluster/ and security/ (authorizer, quotas, connections' SASL)
    network         server/ (the socket server) and client/ (outgoing connections), and
                    the security of connections (security's listener, connection and
                    inter_broker modules)
    mechanisms      security's SASL, TLS, ACL and rate pieces, which the client uses too
    log             log/
    base            protocol/, config, errors, crash_points

Inside `cluster/` the subpackages have layers of their own (cluster/__init__.py).

Type-only imports obey the same layers, with one exception: `trio_broker.broker`, the
composition root that hands itself to the parts it builds, may be named by any of them for
type checking. Cycles: none among the imports Python runs when a module is imported, and
none at all (type-only included) across packages.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]

# The top-level folders and the import names they are installed under (pyproject.toml).
FOLDERS = {
    "trio_broker": "trio_broker",
    "apis": "trio_broker.apis",
    "log": "trio_broker.log",
    "cluster": "trio_broker.cluster",
    "analytics": "trio_broker.analytics",
}

BASE, LOG, MECHANISMS, NETWORK, SERVICES, APIS, BROKER, ENTRY = range(8)

# Module name prefix -> layer; the longest matching prefix decides.
LAYERS = {
    "trio_broker": ENTRY,
    "trio_broker.__main__": ENTRY,
    "trio_broker.analytics": ENTRY,
    "trio_broker.broker": BROKER,
    "trio_broker.metrics": BROKER,
    "trio_broker.metrics_http": BROKER,
    "trio_broker.request_log": BROKER,
    "trio_broker.apis": APIS,
    "trio_broker.cluster": SERVICES,
    "trio_broker.security": SERVICES,
    "trio_broker.server": NETWORK,
    "trio_broker.client": NETWORK,
    # The security of connections: a listener's TLS and SASL handshake beside the socket
    # server's connection, and the client config of the broker's own outgoing connections.
    "trio_broker.security.connection": NETWORK,
    "trio_broker.security.listener": NETWORK,
    "trio_broker.security.inter_broker": NETWORK,
    "trio_broker.security.acl": MECHANISMS,
    "trio_broker.security.credentials": MECHANISMS,
    "trio_broker.security.principal_rules": MECHANISMS,
    "trio_broker.security.rate": MECHANISMS,
    "trio_broker.security.sasl": MECHANISMS,
    "trio_broker.security.tls": MECHANISMS,
    "trio_broker.log": LOG,
    "trio_broker.protocol": BASE,
    "trio_broker.config": BASE,
    "trio_broker.errors": BASE,
    "trio_broker.crash_points": BASE,
}

# Inside cluster/: the floor, then replication and the controller, then the coordinators.
C = "trio_broker.cluster."
CLUSTER_LAYERS = {
    C + "metadata": 0,
    C + "topic_config": 0,
    C + "replica_assignment": 0,
    C + "dynamic_broker_config": 0,
    C + "coordinator_log": 0,
    C + "zookeeper": 1,
    C + "topics": 2,
    C + "zk_topics": 2,
    C + "replication": 3,
    C + "controller": 3,
    C + "groups": 4,
    C + "transactions": 4,
}
# Siblings that must not know each other although they share a layer.
APART = [(C + "groups", C + "transactions"), (C + "replication", C + "controller")]

# The composition root: the parts it builds may name it in type hints.
ROOT_MODULE = "trio_broker.broker"


@attrs.frozen
class Import:
    source: str
    target: str
    line: int
    type_only: bool
    lazy: bool  # inside a function: runs when called, not when the module is imported


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module an imported name lives in (`pkg.mod.Class` -> `pkg.mod`)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports_of(module: str, path: Path) -> list[Import]:
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, type_only: bool, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    visit_one(stmt, True, lazy)
                for stmt in child.orelse:
                    visit_one(stmt, type_only, lazy)
            else:
                visit_one(child, type_only, lazy)

    def visit_one(node: ast.AST, type_only: bool, lazy: bool) -> None:
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(node, type_only, inner)
            return
        for target in targets:
            owner = _owner(target) if target.startswith("trio_broker") else None
            if owner is not None and owner != module:
                found.append(Import(module, owner, node.lineno, type_only, lazy))

    visit(ast.parse(path.read_text(), str(path)), False, False)
    return found


def _imports() -> list[Import]:
    return [imp for module, path in MODULES.items() for imp in _imports_of(module, path)]


IMPORTS = _imports()


def _layer(table: dict[str, int], module: str) -> int | None:
    best = None
    for prefix, layer in table.items():
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, layer)
    return None if best is None else best[1]


def _where(imp: Import) -> str:
    kind = "type-only " if imp.type_only else "lazy " if imp.lazy else ""
    path = MODULES[imp.source].relative_to(ROOT)
    return f"{path}:{imp.line}: {kind}import of {imp.target}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_the_graph_is_read():
    # The checks below would pass on an empty graph: make sure it is the real one.
    assert len(MODULES) > 300
    assert Import("trio_broker.broker", "trio_broker.server.socket_server", 0, False, False) in [
        attrs.evolve(i, line=0) for i in IMPORTS
    ]
    assert any(i.type_only for i in IMPORTS) and any(i.lazy for i in IMPORTS)


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if _layer(LAYERS, m) is None]
    assert not missing


@pytest.mark.parametrize("table", ["packages", "cluster"])
def test_imports_point_down_or_sideways(table):
    layers = LAYERS if table == "packages" else CLUSTER_LAYERS
    wrong = []
    for imp in IMPORTS:
        if imp.type_only and imp.target == ROOT_MODULE:
            continue
        source, target = _layer(layers, imp.source), _layer(layers, imp.target)
        if source is not None and target is not None and target > source:
            wrong.append(_where(imp))
    assert not wrong, "imports that point up a layer:\n" + "\n".join(wrong)


def test_siblings_stay_apart():
    wrong = []
    for imp in IMPORTS:
        for a, b in APART:
            for x, y in ((a, b), (b, a)):
                if imp.source.startswith(x + ".") and imp.target.startswith(y + "."):
                    wrong.append(_where(imp))
    assert not wrong, "\n".join(wrong)


def test_nothing_below_knows_the_cluster():
    wrong = [
        _where(i)
        for i in IMPORTS
        if i.source.startswith(("trio_broker.log", "trio_broker.protocol"))
        and _layer(LAYERS, i.target) > LOG
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_time_cycle():
    # The imports Python runs when it imports a module: a cycle among them breaks as soon
    # as the import order changes.
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in IMPORTS:
        if not imp.type_only and not imp.lazy:
            edges[imp.source].add(imp.target)
    cycles = _cycles(edges)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_no_cycle_between_packages():
    # Every import, type-only included, folded to packages (cluster's subpackages and
    # modules, and security's layers, apart): a circle is a two-way dependency between parts.
    def part(module: str) -> str:
        parts = module.split(".")
        if module.startswith(C) and len(parts) > 3 and parts[2] in _CLUSTER_SUBPACKAGES:
            name = ".".join(parts[:3])
        elif module == C + "zk_topics":
            name = C + "topics"  # the cluster half of one TopicManager, which it delegates to
        elif module.startswith(C):
            name = module  # the modules beside the subpackages each stand on their own
        elif module == "trio_broker.errors":
            # The error registry is the protocol's error table (Kafka keeps its Errors in
            # common.protocol): generated with the codec, and used by it.
            name = "trio_broker.protocol"
        else:
            name = ".".join(parts[:2])
        # A package whose modules sit in two layers (security/) is two parts.
        return f"{name}@{_layer(LAYERS, module)}"

    edges: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in IMPORTS:
        if imp.target == ROOT_MODULE and imp.type_only:
            continue
        a, b = part(imp.source), part(imp.target)
        if a != b and not a.startswith("trio_broker@") and not b.startswith("trio_broker@"):
            edges[a].add(b)
            why[a, b].append(imp)
    report = []
    for cycle in _cycles(edges):
        report.append(" <-> ".join(cycle))
        inside = [
            imp for (a, b), imps in sorted(why.items()) if a in cycle and b in cycle for imp in imps
        ]
        report.extend("    " + _where(imp) for imp in inside[:30])
    assert not report, "import cycles between packages:\n" + "\n".join(report)


_CLUSTER_SUBPACKAGES = {"zookeeper", "controller", "replication", "groups", "transactions"}


def test_every_package_is_installed():
    # pyproject.toml lists the packages a wheel holds; one missing installs a broker that
    # cannot import it.
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {m for m, path in MODULES.items() if path.name == "__init__.py"}
    assert listed == packages
