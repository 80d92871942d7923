"""A mutation run over the pure state machine (leases/domain/machine.py): each
mutant is one small change to its source (a comparison turned round or made
strict, `and` for `or`, a `not` dropped, a number off by one, + for -),
and the machine's tests (tests/machine/) are run against it, in a process of
their own. A mutant is killed when a test fails. Prints, per mutant, what it
changed and whether the whole folder and the property tests alone killed
it, then both scores (docs/development/tests.md, "Properties and the bugs
they catch"; figures in bench/README.md).

    .venv/bin/python bench/mutate_machine.py [--sample N] [--seed S] [--properties-only]

No mutant is written to the tree: each is compiled from the mutated source
into the imported module before pytest runs (tests reach the machine through
``leases.domain.machine``)."""

from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "leases" / "domain" / "machine.py"
PROPERTIES = ("test_every_outcome_is_consistent or test_two_clients_never_both_hold_the_lease or "
              "test_legacy_and_current_agree or test_current_clients_cannot_tell or "
              "test_old_and_new_clients_never_both_hold_the_lease")
SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def mutation_points(tree: ast.AST) -> list[tuple[int, str]]:
    """(index of the node in ast.walk order, what the mutation does)."""
    skip = _docstring_ids(tree)
    points = []
    for i, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS:
            points.append((i, f"line {line}: {type(node.ops[0]).__name__} -> {SWAPS[type(node.ops[0])].__name__}"))
        elif isinstance(node, ast.BoolOp):
            points.append((i, f"line {line}: {type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            points.append((i, f"line {line}: not dropped"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            points.append((i, f"line {line}: {type(node.op).__name__} -> {'Sub' if isinstance(node.op, ast.Add) else 'Add'}"))
        elif (isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in skip):
            points.append((i, f"line {line}: {node.value} -> {node.value + 1}"))
    return points


class _Mutate(ast.NodeTransformer):
    def __init__(self, target: int, order: dict[int, int]):
        self.target, self.order = target, order

    def visit(self, node: ast.AST) -> ast.AST:
        node = self.generic_visit(node)
        if self.order.get(id(node)) != self.target:
            return node
        if isinstance(node, ast.Compare):
            node.ops = [SWAPS[type(node.ops[0])](), *node.ops[1:]]
        elif isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif isinstance(node, ast.UnaryOp):
            return node.operand
        elif isinstance(node, ast.BinOp):
            node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        elif isinstance(node, ast.Constant) and isinstance(node.value, int):  # the only constants targeted
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node


def mutant_source(tree: ast.AST, target: int) -> str:
    tree = copy.deepcopy(tree)
    order = {id(node): i for i, node in enumerate(ast.walk(tree))}
    return ast.unparse(ast.fix_missing_locations(_Mutate(target, order).visit(tree)))


RUNNER = """
import sys
import leases.domain.machine as m
exec(compile(open(sys.argv[1]).read(), m.__file__, "exec"), m.__dict__)
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def killed(source: str, selection: list[str], path: Path) -> bool:
    path.write_text(source)
    run = subprocess.run([sys.executable, "-c", RUNNER, str(path), "-x", "-q", "-p", "no:xdist",
                          "-p", "no:cacheprovider", "-p", "no:randomly", *selection], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                         timeout=600)
    return run.returncode != 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=0, help="run this many mutants, drawn at random (0: all)")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--properties-only", action="store_true", help="run the property tests only")
    args = parser.parse_args()
    tree = ast.parse(SOURCE.read_text())
    points = mutation_points(tree)
    if args.sample:
        points = sorted(random.Random(args.seed).sample(points, min(args.sample, len(points))))
    path = ROOT / "var" / "mutant_machine.py"
    path.parent.mkdir(exist_ok=True)
    folder = ["tests/machine"]
    props = ["tests/machine", "-k", PROPERTIES]
    all_killed = prop_killed = 0
    started = time.monotonic()
    for n, (target, what) in enumerate(points, 1):
        source = mutant_source(tree, target)
        by_props = killed(source, props, path)
        by_folder = True if by_props else (False if args.properties_only else killed(source, folder, path))
        all_killed += by_folder
        prop_killed += by_props
        print(f"{n:3d}/{len(points)} {what:40s} folder: {'killed' if by_folder else 'SURVIVED':8s} "
              f"properties: {'killed' if by_props else 'survived'}", flush=True)
    path.unlink(missing_ok=True)
    total = len(points)
    if not args.properties_only:
        print(f"score, tests/machine: {all_killed}/{total} killed ({100 * all_killed / total:.0f}%)")
    print(f"score, the property tests alone: {prop_killed}/{total} killed ({100 * prop_killed / total:.0f}%)")
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
