"""The shipped type stubs (flashbits/__init__.pyi, with py.typed) against the code they describe.

Found by the Python audit: the stub's exact_attention lacked the documented ``rounded_as`` and
``recipe`` keywords and AttentionResult its ``delta_unit``, so a type checker rejected calls the
docs show. The reference is the running module (inspect.signature) and the source's own
attribute assignments, read independently of the stub.
"""
import ast
import inspect
import os

import flashbits as fb

PACKAGE = os.path.dirname(fb.__file__)


def _tree(name):
    with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
        return ast.parse(f.read())


def _stub_parameters(fn: ast.FunctionDef):
    a = fn.args
    out = [(p.arg, "POSITIONAL_ONLY") for p in a.posonlyargs]
    out += [(p.arg, "POSITIONAL_OR_KEYWORD") for p in a.args]
    out += [(a.vararg.arg, "VAR_POSITIONAL")] if a.vararg else []
    out += [(p.arg, "KEYWORD_ONLY") for p in a.kwonlyargs]
    out += [(a.kwarg.arg, "VAR_KEYWORD")] if a.kwarg else []
    # Which parameters have a default: the stub's "= ..." must sit where the code has one.
    defaults = [None] * (len(a.posonlyargs) + len(a.args) - len(a.defaults)) + list(a.defaults)
    defaults += [None] * bool(a.vararg) + list(a.kw_defaults) + [None] * bool(a.kwarg)
    return [(n, k, d is not None) for (n, k), d in zip(out, defaults)]


def _real_parameters(obj):
    return [(n, p.kind.name, p.default is not inspect.Parameter.empty)
            for n, p in inspect.signature(obj).parameters.items()]


def _is_property(fn: ast.FunctionDef):
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def test_every_public_function_and_method_has_the_codes_parameters():
    stubbed = set()
    for node in _tree("__init__.pyi").body:
        if isinstance(node, ast.FunctionDef):
            stubbed.add(node.name)
            assert hasattr(fb, node.name), f"the stub declares {node.name}, which flashbits lacks"
            assert _stub_parameters(node) == _real_parameters(getattr(fb, node.name)), node.name
        elif isinstance(node, ast.ClassDef):
            stubbed.add(node.name)
            cls = getattr(fb, node.name, None)
            assert cls is not None, f"the stub declares class {node.name}, which flashbits lacks"
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not _is_property(item):
                    real = getattr(cls, item.name, None)
                    assert real is not None, f"{node.name}.{item.name}: in the stub only"
                    try:
                        want = _real_parameters(real)
                    except (TypeError, ValueError):  # a builtin slot without a signature
                        continue
                    assert _stub_parameters(item) == want, f"{node.name}.{item.name}"
    public = [n for n in dir(fb) if not n.startswith("_") and (inspect.isfunction(getattr(fb, n))
                                                               or inspect.isclass(getattr(fb, n)))
              and getattr(getattr(fb, n), "__module__", "").startswith("flashbits")]
    assert [n for n in public if n not in stubbed] == []


def test_every_public_attribute_a_class_sets_is_declared():
    declared = {}
    for node in _tree("__init__.pyi").body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.FunctionDef):
                    names.add(item.name)
            declared[node.name] = names
    checked = 0
    for node in _tree("__init__.py").body:
        if not isinstance(node, ast.ClassDef) or node.name not in declared:
            continue
        init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            continue
        for stmt in ast.walk(init):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                        and not t.attr.startswith("_"):
                    assert t.attr in declared[node.name], f"{node.name}.{t.attr} is set but not in the stub"
                    checked += 1
    assert checked > 20  # AttentionResult, Trace, ... were read
