"""The functional core stays pure: the learning algorithms, the simulator and the
energy-time model take data and give decisions, without I/O, clocks or the OS
adapters (the project's shape: functional core, imperative shell). A module of the core
that imports one of these has let the shell in; this says which, and where."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import parlschedd

ROOT = Path(parlschedd.__file__).parent
CORE = [*sorted((ROOT / "learning").glob("*.py")), *sorted((ROOT / "sim").glob("*.py")),
        *(ROOT / "energy" / f"{name}.py" for name in
          ("distribution", "model", "metrics", "fitting", "baseline", "fit_report", "validation", "recommendation"))]
# I/O, clocks, processes and the shell's own packages
SHELL = {"os", "sys", "io", "time", "datetime", "socket", "subprocess", "pathlib", "shutil", "signal", "threading",
         "logging", "structlog", "json", "csv", "yaml", "parlschedd.host", "parlschedd.daemon", "parlschedctl"}


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of each import; a relative one as seen from a core package
    (``from ..host import x`` is parlschedd.host, ``from .. import host`` too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 1 and node.module is None:
            found += [(node.lineno, f"parlschedd.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.append((node.lineno, f"parlschedd.{module}" if node.level > 1 else module))
    return found


def _shell(module: str) -> bool:
    return any(module == s or module.startswith(s + ".") for s in SHELL)


def _leaks(tree: ast.AST, name: str) -> list[str]:
    leaks = [f"{name}:{line} imports {module}" for line, module in _imports(tree) if _shell(module)]
    return leaks + [f"{name}:{node.lineno} calls open()" for node in ast.walk(tree)
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"]


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_core_module_imports_no_io_clock_or_adapter(path: Path) -> None:
    assert not _leaks(ast.parse(path.read_text(), filename=str(path)), path.name)


def test_the_check_finds_what_it_looks_for() -> None:
    """The test above would pass on modules it cannot read right; each kind of leak is caught."""
    tree = ast.parse("import time\nfrom parlschedd.host import procfs\nfrom os.path import join\n"
                     "from ..daemon import engine\nopen('x')\nfrom .. import host\n")
    assert _leaks(tree, "m.py") == ["m.py:1 imports time", "m.py:2 imports parlschedd.host", "m.py:3 imports os.path",
                                    "m.py:4 imports parlschedd.daemon", "m.py:6 imports parlschedd.host",
                                    "m.py:5 calls open()"]
    assert len(CORE) >= 15 and all(p.exists() for p in CORE)
