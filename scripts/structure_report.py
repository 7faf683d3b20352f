#!/usr/bin/env python3
"""Numbers anyone can print from the source: long modules, long functions, import cycles, and how
many files and folders each concept of the table core is spread over.

    python scripts/structure_report.py            # the report
    python scripts/structure_report.py --json     # the same, as JSON

Only the standard library: it reads the source (``ast``), it never imports the package, so it runs
on any checkout. ``tests/unit/test_architecture.py`` uses the same functions for its limits.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("airflow_lake_provider",)
CORE = "airflow_lake_provider.lake"
MODULE_LINES = 500
FUNCTION_LINES = 80

# A concept of the core, and the module names (dotted, below ``lake.``) that hold it: by folder or
# by file name, so the same pattern finds it before and after a move.
CONCEPTS = {
    "storage": r"(^|\.)storage",
    "timeline": r"timeline|(^|\.)instant$|commit_metadata|heartbeat|marker",
    "file group": r"fs_view|file_group|file_names|data_files",
    "log file": r"log_block|log_format|data_block|delete_block|block_keys|log_file",
    "write": r"writer|write_input|(^|\.)write(\.|$)",
    "index": r"(^|(?<!metadata)\.)index(\.|$)",
    "compaction": r"(?<!metadata[._])compaction",
    "clean": r"(^|(?<!metadata)\.)clean",
    "partition commit": r"partition_commit",
    "rollback": r"rollback",
    # Hudi's metadata table: table/metadata_*.py until 2026-11-27, then the table/metadata/ package.
    "metadata table": (
        r"(^|\.)metadata(\.|_(table|archival|clean|commit|compaction|files|index|merge|records|services|stats)$)"
    ),
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(tree: ast.AST, module: str, known: dict[str, Path]) -> Iterator[str]:
    """Every module an import statement names, wherever it stands (top level, function, TYPE_CHECKING)."""
    package = module if known[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            for alias in node.names:  # ``from pkg import module`` names a module too
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    return {m: set(imports(ast.parse(p.read_text("utf-8")), m, known)) for m, p in known.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components over our own modules: those of more than one module."""
    own = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(own[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(own):
        if node not in index:
            visit(node)
    return sorted(cycles)


def module_lines(known: dict[str, Path]) -> dict[str, int]:
    return {m: len(p.read_text("utf-8").splitlines()) for m, p in known.items()}


def function_lines(known: dict[str, Path]) -> dict[str, int]:
    """Lines of every function and method (nested ones too, counted on their own), ``module:Qual.name``."""
    found: dict[str, int] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text("utf-8"))

        def walk(node: ast.AST, prefix: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        found[f"{module}:{name}"] = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        walk(tree, "")
    return found


def concepts(known: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """Per concept: the folders (below ``lake``) holding its modules, and those modules."""
    out: dict[str, dict[str, list[str]]] = {}
    core = [m[len(CORE) + 1 :] for m in known if m.startswith(CORE + ".")]
    for concept, pattern in CONCEPTS.items():
        folders: dict[str, list[str]] = {}
        for name in core:
            if known[f"{CORE}.{name}"].name == "__init__.py" or not re.search(pattern, name):
                continue
            folder, _, leaf = name.rpartition(".")
            folders.setdefault(folder or ".", []).append(leaf)
        out[concept] = folders
    return out


def report(root: Path = ROOT) -> dict[str, object]:
    known = modules(root)
    lines = module_lines(known)
    functions = function_lines(known)
    return {
        "modules": len(known),
        "modules_over_limit": {
            m: n for m, n in sorted(lines.items(), key=lambda i: -i[1]) if n > MODULE_LINES
        },
        "functions_over_limit": {
            f: n for f, n in sorted(functions.items(), key=lambda i: -i[1]) if n > FUNCTION_LINES
        },
        "import_cycles": import_cycles(import_graph(known)),
        "concepts": concepts(known),
    }


def main(argv: list[str]) -> int:
    data = report()
    if "--json" in argv:
        print(json.dumps(data, indent=2))
        return 0
    over_m, over_f = data["modules_over_limit"], data["functions_over_limit"]
    print(f"modules: {data['modules']} (packages: {', '.join(PACKAGES)})")
    print(f"modules over {MODULE_LINES} lines: {len(over_m)}")  # type: ignore[arg-type]
    for name, n in over_m.items():  # type: ignore[attr-defined]
        print(f"  {n:5d}  {name}")
    print(f"functions over {FUNCTION_LINES} lines: {len(over_f)}")  # type: ignore[arg-type]
    for name, n in over_f.items():  # type: ignore[attr-defined]
        print(f"  {n:5d}  {name}")
    cycles = data["import_cycles"]
    print(f"import cycles: {len(cycles)}")  # type: ignore[arg-type]
    for cycle in cycles:  # type: ignore[attr-defined]
        print("  " + " <-> ".join(cycle))
    print("files per concept (core, below lake/):")
    for concept, folders in data["concepts"].items():  # type: ignore[attr-defined]
        files = sum(len(v) for v in folders.values())
        print(f"  {concept}: {files} files in {len(folders)} folders")
        for folder, leaves in sorted(folders.items()):
            shown = folder.replace(".", "/") + "/" if folder != "." else "./"
            print(f"      {shown}: {', '.join(sorted(leaves))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
