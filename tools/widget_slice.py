"""The cells a lesson's widgets need, and nothing else: the browser test runs these slices.

Strict nbval already runs every lesson top to bottom; the browser test only has to prove that
the widgets work live in JupyterLab. A *widget slice* of a lesson keeps its widget cells (the
code cells whose saved widgets hold the hidden state element the browser test reads) and,
walking back from them, every earlier cell that binds a name they need or changes an object they
use (a statement-level call or an attribute or item assignment on such a name), with the names
that cell needs in turn. Names are read with :mod:`ast`; IPython magics count as ``pass``.

Hand-written because no library slices notebooks by data flow; the rule is deliberately coarse
(whole cells, any use of a name): a missed dependency makes the browser test fail, it cannot
make it pass wrongly.
"""

from __future__ import annotations

import ast
import copy

import nbformat

STATE_MARK = "lmlessons-state"  # the class of the hidden state element
# Calls that only read their arguments.
READ_ONLY = {"print", "display", "len", "repr", "str", "isinstance", "sorted", "list"}
VIEW = "application/vnd.jupyter.widget-view+json"
STATE_KEY = "application/vnd.jupyter.widget-state+json"


def parse_cell(source: str) -> ast.Module:
    """``source`` as Python, each IPython magic line (``%...``) read as ``pass``."""
    lines = [
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith("%") else line
        for line in source.split("\n")
    ]
    return ast.parse("\n".join(lines))


def _comprehension_targets(tree: ast.AST) -> set[str]:
    """Names bound by comprehensions and lambdas: local to them, never the cell's."""
    comps = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, comps):
            names |= {
                n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
            }
        elif isinstance(node, ast.Lambda):
            names |= {a.arg for a in node.args.args}
    return names


def loads(tree: ast.Module) -> set[str]:
    """Every name the cell reads, at any depth (function bodies read globals when called)."""
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - _comprehension_targets(tree)


def binds(tree: ast.Module) -> set[str]:
    """The names the cell binds at the top level: assignments, loops, imports, defs."""
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            stored = {
                n.id
                for n in ast.walk(stmt)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            names |= stored - _comprehension_targets(stmt)
    return names


def modules(tree: ast.Module) -> set[str]:
    """The names the cell binds to modules (``import torch``, ``import numpy as np``)."""
    return {
        (a.asname or a.name).split(".")[0]
        for stmt in tree.body
        if isinstance(stmt, ast.Import)
        for a in stmt.names
    }


def _changed_by_call(call: ast.Call) -> set[str]:
    """The names a statement-level call may change: the object of a method call
    (``model.eval()``), the bare names passed to a function that is not a builtin."""
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        return {call.func.value.id}
    if isinstance(call.func, ast.Name) and call.func.id not in READ_ONLY:
        args = [*call.args, *(k.value for k in call.keywords)]
        return {a.id for a in args if isinstance(a, ast.Name)}
    return set()


def _stored_into(node: ast.AST) -> str | None:
    """The name an attribute or item assignment writes into (``model.x = 1``: ``model``)."""
    stores = isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store)
    if stores and isinstance(node.value, ast.Name):  # type: ignore[attr-defined]
        return node.value.id  # type: ignore[attr-defined]
    return None


def changes(tree: ast.Module, names: set[str]) -> bool:
    """Whether a top-level statement may change an object named in ``names`` (modules aside):
    a method call on it, a function call it is passed to, an attribute or item assigned in it."""
    for node in ast.walk(tree):
        called = isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
        if called and _changed_by_call(node.value) & names:  # type: ignore[attr-defined]
            return True
        if _stored_into(node) in names:
            return True
    return False


def _models(value: object) -> list[str]:
    """The widget model ids a saved widget state refers to (``"IPY_MODEL_<id>"``)."""
    text = str(value)
    return [part[:32] for part in text.split("IPY_MODEL_")[1:]]


def _holds_state(model_id: str, state: dict, seen: set[str]) -> bool:
    """Whether the saved widget ``model_id`` or a widget inside it shows a state element."""
    if model_id in seen or model_id not in state:
        return False
    seen.add(model_id)
    saved = state[model_id].get("state", {})
    return STATE_MARK in str(saved.get("outputs", "")) or any(
        _holds_state(child, state, seen) for child in _models(saved)
    )


def is_widget_cell(cell: nbformat.NotebookNode, state: dict) -> bool:
    """Whether ``cell`` shows a widget that holds a state element (in the saved widget state);
    a predict-then-reveal cell (tagged ``predict``) is not a lesson widget."""
    if "predict" in cell.metadata.get("tags", []):
        return False
    views = [
        out["data"][VIEW]["model_id"]
        for out in cell.get("outputs", [])
        if VIEW in out.get("data", {})
    ]
    return any(_holds_state(view, state, set()) for view in views)


def widget_slice(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` with only its widget cells and the code cells they need, in order."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    trees = [parse_cell(c.source) for c in code]
    state = nb.metadata.get("widgets", {}).get(STATE_KEY, {}).get("state", {})
    widgets = [i for i, c in enumerate(code) if is_widget_cell(c, state)]
    if not widgets:
        raise ValueError("the notebook has no widget cell (no saved widget shows a state element)")
    keep, needed = set(widgets), set().union(*(loads(trees[i]) for i in widgets))
    imported = set().union(*(modules(t) for t in trees))
    for i in range(max(widgets) - 1, -1, -1):
        if i not in keep and (binds(trees[i]) & needed or changes(trees[i], needed - imported)):
            keep.add(i)
            needed |= loads(trees[i])
    out = copy.deepcopy(nb)
    out.cells = [copy.deepcopy(code[i]) for i in sorted(keep)]
    for cell in out.cells:
        cell.outputs, cell.execution_count = [], None
    return out
