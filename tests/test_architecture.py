"""The package's structure: one definition per algorithm, no import cycles.

* No import cycle among the package's Python modules, counting the imports
  inside functions too (they defer a cycle to run time, they do not remove
  it); the package's ``__init__`` files re-export and are left out as
  targets only where a module imports the package root.  Nor among its
  subpackages, each taken whole.
* Every sampler and subsampling has exactly one definition (its spec in
  ``_sampling/_specs.py``); each engine's registry covers exactly the specs
  that name it, and the estimators' constraints, "does not act" rules and
  docstrings are read from them.
* One vocabulary for the two engines: a parameter both estimators have
  accepts on the network a subset of what it accepts on the linear models
  (the network may offer fewer values, never other ones), and every
  subsampling the network lacks carries the reason it gives the user.
"""
import ast
import inspect
import re
import sys
import textwrap
from pathlib import Path

import pytest

import skbayes_sg
from sklearn.utils._param_validation import make_constraint

from skbayes_sg import SGMCMCMLPClassifier, linear_model
from skbayes_sg._sampling import _error_model, _schedule, _specs, samplers
from skbayes_sg._sampling._glm import MODELS
from skbayes_sg._sampling._models import C_MAX_MODEL_PARAMS, C_MODEL_KINDS
from skbayes_sg._sampling._registry import SAMPLERS, SUBSAMPLINGS

PACKAGE = Path(skbayes_sg.__file__).resolve().parent
LINEAR_ESTIMATORS = [getattr(linear_model, name) for name in linear_model.__all__]


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph():
    """``{module: {modules it imports}}`` over the package's .py files."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                candidates = [module] + [f"{module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            targets.update(c for c in candidates if c in modules and c != name)
        graph[name] = targets
    return graph


def _find_cycle(graph):
    """One cycle of ``graph`` as a list of modules, or None (depth-first search)."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_the_cycle_finder_sees_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package():
    graph = _import_graph()
    assert "skbayes_sg._base" in graph and graph["skbayes_sg._base"]
    cycle = _find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_no_import_cycle_between_the_subpackages():
    """The engine (``_sampling``) reads the diagnostics' numbers; the
    diagnostics know no sampler (each estimator writes its own hint), so the
    two packages do not import each other (nor do any others)."""
    graph = _import_graph()

    def unit(module):       # a subpackage is one node, a top-level module another
        return ".".join(module.split(".")[:2])

    units = {}
    for module, targets in graph.items():
        units.setdefault(unit(module), set()).update(
            unit(t) for t in targets if unit(t) != unit(module) and t != "skbayes_sg")
    assert "skbayes_sg.diagnostics" in units["skbayes_sg._sampling"]
    cycle = _find_cycle(units)
    assert cycle is None, " -> ".join(cycle)


def test_registries_cover_exactly_their_specs():
    assert set(SAMPLERS) == set(_specs.dynamics_for(_specs.LINEAR))
    assert set(SUBSAMPLINGS) == set(_specs.estimators_for(_specs.LINEAR))
    for name, entry in SAMPLERS.items():
        assert entry.definition is _specs.DYNAMICS[name]
    for name, entry in SUBSAMPLINGS.items():
        assert entry.definition is _specs.ESTIMATORS[name]


@pytest.mark.parametrize("Est", LINEAR_ESTIMATORS)
def test_linear_estimators_read_the_specs(Est):
    """Sampler names, hyperparameters (constraints, defaults, docs) and the
    owners that decide which settings act come from the specs."""
    params = inspect.signature(Est.__init__).parameters
    for hp in _specs.HYPERPARAMETERS.values():
        assert params[hp.name].default == hp.default
        assert Est._parameter_constraints[hp.name] == list(hp.constraints)
    assert Est._SAMPLER_PARAMETERS == _specs.sampler_owners()
    for name in _specs.dynamics_for(_specs.LINEAR):
        assert f'``"{name}"``' in " ".join(Est.__doc__.split())
        first_words = " ".join(_specs.DYNAMICS[name].doc.split()[:4])
        assert first_words in " ".join(Est.__doc__.split()), name


#: the house rule: no function over 80 lines, no class over 400 (docstrings
#: included), in the Python and the Cython files.  A function or class over
#: it is recorded here at its size while it waits to be split (none now)
MAX_FUNCTION_LINES, MAX_CLASS_LINES = 80, 400
OVERSIZED = {}


def _sizes():
    """``{module.name: lines}`` of every function over MAX_FUNCTION_LINES and
    class over MAX_CLASS_LINES in the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path).removeprefix("skbayes_sg.")
        for node in ast.walk(ast.parse(path.read_text())):
            limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                found[f"{module}.{node.name}"] = node.end_lineno - node.lineno + 1
    for path in PACKAGE.rglob("*.pyx"):
        found.update(_pyx_sizes(path))
    return found


_PYX_DEFINITION = re.compile(r"^(\s*)(?:(cdef\s+class|class)\s+(\w+)"
                             r"|(?:cpdef|cdef|def)\s+[^=(]*?(\w+)\s*\()")


def _pyx_sizes(path):
    """As :func:`_sizes` for a Cython file (no AST: a ``def``/``cdef``/``cpdef``
    function or a class runs until the next non-blank line indented no
    deeper than its header, a signature's closing bracket excepted)."""
    module = _module_name(path).removeprefix("skbayes_sg.")
    lines = path.read_text().split("\n")
    found, classes = {}, []
    for i, line in enumerate(lines):
        match = _PYX_DEFINITION.match(line)
        if match is None:
            continue
        indent = len(match.group(1))
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith(")")
                                    or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        name = match.group(3) or match.group(4)
        if match.group(3):
            classes.append((indent, end, name))
            limit = MAX_CLASS_LINES
        else:
            owner = [c for c in classes if c[0] < indent and i < c[1]]
            name = f"{owner[-1][2]}.{name}" if owner else name
            limit = MAX_FUNCTION_LINES
        if end - i > limit:
            found[f"{module}.{name}"] = end - i
    return found


def test_no_new_oversized_function_or_class_and_none_grows():
    found = _sizes()
    new = {k: v for k, v in found.items() if k not in OVERSIZED}
    assert not new, f"over {MAX_FUNCTION_LINES} lines (function) / {MAX_CLASS_LINES} (class): {new}"
    grown = {k: (v, OVERSIZED[k]) for k, v in found.items() if v > OVERSIZED.get(k, v)}
    assert not grown, f"grew past their recorded size: {grown}"
    split = set(OVERSIZED) - set(found)
    assert not split, f"now within the rule: remove {split} from OVERSIZED"
    assert not {"_base.BaseSGMCMC", "_setup.SetupPolicy", "_sampling._context.FitContext",
                "neural_network._mlp.SGMCMCMLPClassifier"} & set(found)


def test_templates_are_rendered_by_the_build_and_never_committed():
    """Every ``X.tp`` (Tempita: the float32 and float64 kernels written once)
    is rendered into ``X`` by setup.py, that file is current, and it is
    ignored by git (a rendered file is generated, like the ``.c`` files)."""
    from Cython import Tempita
    templates = sorted(PACKAGE.rglob("*.tp"))
    assert templates, "the flat kernels' template is gone"
    gitignore = PACKAGE.parent / ".gitignore"
    ignored = gitignore.read_text().split() if gitignore.exists() else None
    for template in templates:
        rendered = template.with_suffix("")
        assert rendered.read_text() == Tempita.sub(template.read_text(), name=str(template))
        if ignored is not None:
            assert str(rendered.relative_to(PACKAGE.parent)) in ignored


#: where each dynamics' update law is written (the moves), and the kernels
#: that advance a chain's coordinates: the eager loops and the fused sweeps
LAW_FILE = PACKAGE / "_sampling" / "laws.h.tp"
EAGER_KERNELS = ("_sampling/_dynamics.pyx", "_sampling/flat_dynamics_kernel.h.tp")
#: a chain's coordinate written: position, momentum or velocity, pSGLD's
#: accumulator, a Metropolis proposal (the fused sweeps' th, pp, rr, v)
_STATE_WRITE = re.compile(r"^\s*(?:self\.)?(theta|momentum|velocity|V|proposal|th|pp|rr|v)"
                          r"\[j\]\s*([-+*/]?=)\s*(.*)$")


def _law_names():
    names = re.findall(r"static inline [^(]*?\bskb_(\w+?)_(?:\{\{SUF\}\}|f64)\s*\(",
                       LAW_FILE.read_text())
    assert {"langevin_move", "sghmc_move", "uld_move", "kick", "ou_move"} <= set(names)
    return set(names)


def test_each_update_law_is_written_once():
    """The moves are defined in ``laws.h.tp`` only; the eager loops and the
    fused sweeps write a coordinate only through a move (or scale a fresh
    draw); the lazy kernel reads no step coefficient a move carries (it
    reads its one-step maps off the moves, ``_laws.one_step_law``)."""
    names = _law_names()
    defined = re.compile(r"(?:cdef\s+inline|static\s+inline|cdef|cpdef|def)\s[^(=]*?"
                         r"\b(?:skb_)?(%s)(?:_f32|_f64|_\{\{SUF\}\})?\s*\("
                         % "|".join(sorted(names)))
    for path in [*PACKAGE.rglob("*.pyx"), *PACKAGE.rglob("*.pxd"), *PACKAGE.rglob("*.tp")]:
        if path != LAW_FILE:
            found = defined.findall(path.read_text())
            assert not found, f"{path.name} defines a move of laws.h.tp again: {found}"
    call = re.compile(r"(?:skb_)?(%s)(?:_\{\{SUF\}\})?\(" % "|".join(sorted(names)))
    for rel in EAGER_KERNELS:
        for line in (PACKAGE / rel).read_text().split("\n"):
            match = _STATE_WRITE.match(line)
            if match is None:
                continue
            op, rhs = match.group(2), match.group(3).strip()
            assert call.match(rhs) or (op == "*=" and re.fullmatch(r"\w+", rhs)), (
                f"{rel} writes a coordinate's update by hand (call its move in laws.h.tp): "
                f"{line.strip()}")
    lazy = (PACKAGE / "_sampling" / "_lazy.pyx").read_text()
    assert set(re.findall(r"\bq\.law\.(\w+)", lazy)) <= {"kind", "h", "kappa", "s"}


def test_the_law_rule_sees_a_hand_written_update(tmp_path):
    """The state-write rule flags a step written outside the moves."""
    line = "            theta[j] += -c * self.grad[j] + s * self.noise[j]"
    match = _STATE_WRITE.match(line)
    assert match is not None and match.group(2) == "+="
    assert not re.match(r"(?:skb_)?(%s)\(" % "|".join(_law_names()), match.group(3))


def _private_reads(path):
    """``(line, text)`` of every ``obj._name`` in ``path`` whose object is
    not ``self``, ``cls`` or an imported module: another object's private
    state."""
    tree = ast.parse(path.read_text())
    modules = {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
               if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            owner = node.value
            if not (isinstance(owner, ast.Name) and (owner.id in ("self", "cls")
                                                     or owner.id in modules)):
                found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and node.args[1].value.startswith("_") and not node.args[1].value.startswith("__")
              and not (isinstance(node.args[0], ast.Name)
                       and node.args[0].id in ("self", "cls"))):
            # the same read spelled as a string: getattr(est, "_name", default)
            found.append((node.lineno, ast.unparse(node)))
    return found


#: the modules that decide a fit's settings: the package's own modules and
#: the sampling package's policy (the schedule, the specs, the error model)
POLICY_MODULES = sorted(PACKAGE.glob("*.py")) + [
    PACKAGE / "_sampling" / f"{name}.py"
    for name in ("_schedule", "_specs", "_definitions", "_error_model", "_context")]


def _names_from_compiled_modules(path):
    """``[(module, name)]`` that ``path`` imports from a compiled (``.pyx``) module."""
    compiled = {p.stem for p in PACKAGE.rglob("*.pyx")}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[-1] in compiled:
                found += [(node.module, a.name) for a in node.names]
    return found


def _is_a_type(name):
    return name[:1].isupper() and not name.isupper()


def test_the_policy_takes_no_rule_or_message_from_a_compiled_kernel(tmp_path):
    """A rule, a constant or a message the kernels enforce is written in a
    Python module (``_sampling/_kernel_rules.py``) that both the kernels and
    the policy read; the policy imports only types (``Metric``) from a
    compiled module."""
    for path in POLICY_MODULES:
        taken = [(m, n) for m, n in _names_from_compiled_modules(path) if not _is_a_type(n)]
        assert not taken, f"{path.name} takes {taken} from a compiled module"
    old = tmp_path / "old_setup.py"
    old.write_text("from ._sampling._chain import EWSG_CYCLIC_MESSAGE\n"
                   "from ._sampling._lazy import on_lazy_grid\n")
    assert [n for _, n in _names_from_compiled_modules(old)
            if not _is_a_type(n)] == ["EWSG_CYCLIC_MESSAGE", "on_lazy_grid"]


def test_no_module_reads_another_objects_private_names():
    """The diagnostics (KSD, ArviZ export, LOO, summaries) and the command
    line use the estimators' public methods (``grad_log_posterior``,
    ``log_likelihood``, ``sample_y``, ``likelihood_params_``,
    ``convergence_quantities``), and the set-up's modules one another's
    public names (``BaseSGMCMC`` asks the fit's context through its methods,
    the mode and the Laplace covariance, never through its cache).  The two
    fits that drive an estimator's own stages (on a
    dask array, ``temperature="auto"``) are its methods (``DaskFitMixin``,
    ``NetworkTemperatureMixin``), run on ``self`` under the settings they
    need (``parameters_set``); their clones are fitted through ``fit``.  No
    module of the package reads a private name of an object other than
    ``self``, ``cls`` or a module."""
    found = {str(path.relative_to(PACKAGE)): _private_reads(path)
             for path in sorted(PACKAGE.rglob("*.py"))}
    assert {rel: reads for rel, reads in found.items() if reads} == {}


def test_the_private_read_rule_sees_a_read(tmp_path):
    path = tmp_path / "driver.py"
    path.write_text(textwrap.dedent("""
        import numpy as np
        def run(self, est):
            self._own(np._NoValue)
            est._fit_encoded(1)
            return getattr(est, "_chain_states", None), est.__class__
    """))
    assert [text for _, text in sorted(_private_reads(path))] == [
        "est._fit_encoded", "getattr(est, '_chain_states', None)"]


def test_each_dynamics_is_one_file_and_the_registries_read_it():
    """Every file in ``samplers/`` is a dynamics in ``MODULES``, and the
    registries (definitions, the linear engine's builders, the error
    model's largest steps, the schedule's target acceptances) are read
    from those files, not written a second time."""
    files = {p.stem for p in (PACKAGE / "_sampling" / "samplers").glob("*.py")
             if not p.stem.startswith("_")}
    assert files == {m.__name__.rpartition(".")[2] for m in samplers.MODULES}
    for name, module in samplers.BY_NAME.items():
        assert _specs.DYNAMICS[name] is module.DEFINITION
        if name in SAMPLERS:
            assert SAMPLERS[name].build is module.build
            assert SAMPLERS[name].prepare is module.prepare
        assert _error_model.MAX_STEP.get(name) == module.MAX_STEP
        rule = module.METROPOLIS
        assert _schedule.MH_TARGET_ACCEPT.get(name) == (rule and rule.target_accept)
        assert (rule is not None) == module.DEFINITION.metropolis
    assert list(_specs.DYNAMICS) == [m.DEFINITION.name for m in samplers.MODULES]


def test_a_new_dynamics_file_is_found_without_a_registration_line(tmp_path):
    """``samplers.MODULES`` is discovered, not listed: a file put beside the
    others (here through the package's search path) is a dynamics, in its
    ``LISTED`` place; a file missing a required name, or two files in one
    place, refuse to import; a network class registers itself by its name."""
    (tmp_path / "mydyn.py").write_text(textwrap.dedent("""
        import dataclasses
        from skbayes_sg._sampling.samplers.sgld import *  # noqa: F401,F403
        from skbayes_sg._sampling.samplers.sgld import DEFINITION as _D
        LISTED = 99
        DEFINITION = dataclasses.replace(_D, name="mydyn")
    """))
    samplers.__path__.append(str(tmp_path))
    try:
        found = samplers._discover()
        assert found[-1].DEFINITION.name == "mydyn"
        assert found[:-1] == samplers.MODULES
        (tmp_path / "mydyn.py").write_text(
            (tmp_path / "mydyn.py").read_text().replace("LISTED = 99", "LISTED = 1"))
        sys.modules.pop(f"{samplers.__name__}.mydyn")
        with pytest.raises(ImportError, match="LISTED place"):
            samplers._discover()
        (tmp_path / "mydyn.py").write_text("DEFINITION = None\n")
        sys.modules.pop(f"{samplers.__name__}.mydyn")
        with pytest.raises(ImportError, match="does not define"):
            samplers._discover()
    finally:
        samplers.__path__.remove(str(tmp_path))
        sys.modules.pop(f"{samplers.__name__}.mydyn", None)
    torch = pytest.importorskip("torch")  # noqa: F841
    from skbayes_sg.neural_network import _net_dynamics
    before = dict(_net_dynamics.NETWORK_DYNAMICS)
    try:
        class MyDyn(_net_dynamics.SGLD):
            name = "mydyn"
        assert _net_dynamics.NETWORK_DYNAMICS["mydyn"] is MyDyn
    finally:
        _net_dynamics.NETWORK_DYNAMICS.clear()
        _net_dynamics.NETWORK_DYNAMICS.update(before)


def test_every_model_is_compiled_and_has_its_estimator():
    """A model is one registry entry (its parameters a vector the kernel
    reads), one branch of the compiled kernel and one estimator."""
    assert {name: spec.kind for name, spec in MODELS.items()} == C_MODEL_KINDS
    owners = {}
    for Est in LINEAR_ESTIMATORS:
        owners.setdefault(Est.likelihood, []).append(Est.__name__)
    # softmax is the multinomial face of the logistic estimator
    assert set(owners) | {"softmax"} == set(MODELS), owners
    assert all(len(names) == 1 for names in owners.values()), owners
    for spec in MODELS.values():
        assert len(spec.param_names) == len(spec.param_defaults)
        assert len(spec.kernel_params(spec.param_defaults)) <= C_MAX_MODEL_PARAMS


def _accepted(constraints):
    """The values a list of scikit-learn constraints accepts, as words."""
    words = set()
    for c in constraints:
        c = make_constraint(c)
        options = getattr(c, "options", None)
        words |= {repr(v) for v in options} if options is not None else {str(c)}
    return words


@pytest.mark.parametrize("Linear", LINEAR_ESTIMATORS)
def test_the_engines_share_one_vocabulary(Linear):
    linear, network = Linear._parameter_constraints, SGMCMCMLPClassifier._parameter_constraints
    shared = set(linear) & set(network) - {"class_weight"}   # a classifier's own
    assert {"sampler", "subsampling", "snapshot_period", "ewsg_chain_length"} <= shared
    # the network's own model choice (issue 40): its two candidates are
    # network models, and a linear posterior has no basins to choose between
    network_only = {"temperature": {"'auto'"}}
    for name in shared:
        extra = _accepted(network[name]) - _accepted(linear[name]) - network_only.get(name, set())
        assert not extra, f"{name}: the network accepts {extra}, the linear models do not"


def test_the_network_takes_the_linear_constraints_it_shares():
    """One source: a parameter the network shares with the linear estimators
    takes their constraint object itself, unless NETWORK_OWN_CONSTRAINTS says
    why its values differ (and then they do differ: no stale reason)."""
    from skbayes_sg._base import BASE_CONSTRAINTS
    from skbayes_sg.neural_network._mlp import NETWORK_OWN_CONSTRAINTS

    network = SGMCMCMLPClassifier._parameter_constraints
    shared = set(network) & set(BASE_CONSTRAINTS)
    assert len(shared) >= 19
    copied = sorted(name for name in shared - set(NETWORK_OWN_CONSTRAINTS)
                    if network[name] is not BASE_CONSTRAINTS[name])
    assert not copied, f"written twice: {copied}"
    for name in NETWORK_OWN_CONSTRAINTS:
        assert name in shared, name
        assert _accepted(network[name]) != _accepted(BASE_CONSTRAINTS[name]), name


def test_every_subsampling_the_network_lacks_says_why():
    for name, spec in _specs.ESTIMATORS.items():
        on_network = _specs.NETWORK in spec.engines
        assert on_network == (spec.network_refusal is None), name
        if not on_network:
            with pytest.raises(ValueError, match=f"subsampling={name!r} is not available"):
                SGMCMCMLPClassifier(subsampling=name)._check_params()
