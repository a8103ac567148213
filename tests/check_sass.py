#!/usr/bin/env python3
"""Structural SASS test: every stage's machine code shows the signature its stage.json declares.

    check_sass.py --build-dir build                      every stage, libraries build/libstage_NAME.a
    check_sass.py --stage ampere_01_base=build/libstage_01_base.a --stage ...     (how CTest runs it)
    check_sass.py --build-dir build --only ampere_07_fast_softmax                  one stage (and its parent)
    check_sass.py --check-tools       exit 0 if cuobjdump and nvdisasm are found, else 1

What is checked comes from stages/NN_name/stage.json alone (no stage numbers, nothing read from a
kernel's source):

  "sass": {
    "require": ["HMMA", "LDGSTS", ...],   each must appear in every kernel of the stage
    "forbid":  ["LDG"],                   none may appear in any kernel of the stage
    "versus_parent": [                    per kernel, against the parent stage's kernel of the same
      {"check": "c('FMUL') <= p('FMUL') - 16",    dtype, head_dim and architecture; c(OP) is this
       "why": "the scale is folded into ..."}     stage's count of OP, p(OP) the parent's
    ]
  },
  "spill_budget": {"sm_80": 0, "sm_86": 0, "sm_90": 4, "sm_90a": 0, "why": "..."}

A stage whose kernel has compile-time feature switches (bool template arguments after dtype and
head_dim: attention_kernel<T, D, kAlibi>) names them in order in "sass": {"kernel_flags":
["alibi"]}; a check may then use each name as 0 or 1 for the kernel at hand ("not alibi or
c('FFMA') >= p('FFMA') + 64"), and every kernel is compared with the parent's kernel of the same
dtype and head_dim whose flags are the first of its own: equal, none (the parent's only one), or
the parent's flags followed by those the stage adds (its kernel_flags then start with the parent's).
Two more names may be used by any check: head_dim (the kernel's head dimension, 64 or 128) and
identical (True when the kernel's instructions, guards, opcodes and operands in order, are the
parent's kernel's: "alibi or identical" says that without slopes the stage compiles to its parent's code).
                                          LDL + STL per kernel at most this many on that
                                          architecture; an architecture not listed allows none

A stage with a second kind of kernel besides its attention kernel (decode_01_split_kv's
combine_kernel, which merges the splits' partial results) declares it by name, with a signature of
its own, in "sass": {"other_kernels": {"combine_kernel": {"require": [...], "forbid": [...],
"why": "..."}}}. A kernel whose unqualified name is one of these is held to that entry's require and
forbid instead of the stage's, is not compared with the parent, and keeps the stage's spill budget.

An opcode matches as the base opcode or a dotted prefix: "LDG" counts LDG.E.128 but not LDGSTS,
"MUFU.EX2" counts MUFU.EX2 and not MUFU.RCP. A check is a Python expression over c('OP'), p('OP'),
the names above, numbers, arithmetic, comparisons, and/or/not, nothing else (it is parsed and
refused otherwise, then evaluated without builtins), names an opcode or `identical`, and must give
True or False. For an sm_90a stage whose parent is
an sm_80 stage, the parent's sm_90 kernels are the ones compared.

Every kernel (both dtypes, every head_dim) of every SASS architecture the library contains is
checked; the output is one table row per kernel, says which architectures were and were not in the
build, and prints the failing check's "why". Exit 0 if all hold, 1 if any fails (or a declaration
is malformed), 77 (CTest: skipped, never passed) only if cuobjdump or nvdisasm is missing.
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import sass  # noqa: E402  (tools/sass.py)
import stages  # noqa: E402  (tools/stages.py)

SKIP = 77
OPCODE = re.compile(r"^[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*$")
ARCH_KEY = re.compile(r"^sm_\d+a?$")
# The opcodes shown first in the tables when a declaration names them; the rest follow in the order
# the declarations name them, then the spill instructions.
PREFERRED_COLUMNS = ["HMMA", "LDSM", "LDGSTS", "LDG", "STS", "MUFU.EX2", "FMUL", "FFMA", "SHFL"]
SPILL_OPCODES = ["LDL", "STL"]


class DeclarationError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# The declarations


class Check:
    """One versus_parent entry: a restricted expression over c('OP') and p('OP')."""

    KERNEL_NAMES = ("head_dim", "identical")  # usable in every check, besides the kernel_flags

    OPERATORS = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
                 ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod,
                 ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)

    def __init__(self, expression: str, why: str, where: str, flag_names: tuple = ()):
        self.expression, self.why, self.flag_names = expression, why, tuple(flag_names)
        try:
            tree = ast.parse(expression, mode="eval")
        except SyntaxError as e:
            raise DeclarationError("%s: %r is not an expression (%s)" % (where, expression, e.msg)) from None
        self.opcodes: list[str] = []
        self.names_used: list[str] = []  # of KERNEL_NAMES
        self._validate(tree, where)
        self.code = compile(tree, where, "eval")

    def _validate(self, tree: ast.AST, where: str) -> None:
        calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                if (not isinstance(node.func, ast.Name) or node.func.id not in ("c", "p") or node.keywords
                        or len(node.args) != 1 or not isinstance(node.args[0], ast.Constant)
                        or not isinstance(node.args[0].value, str) or not OPCODE.match(node.args[0].value)):
                    raise DeclarationError("%s: in %r, only c('OPCODE') and p('OPCODE') may be called"
                                           % (where, self.expression))
                if node.args[0].value not in self.opcodes:
                    self.opcodes.append(node.args[0].value)
            elif isinstance(node, ast.Name):
                if id(node) not in calls and node.id not in self.flag_names + self.KERNEL_NAMES:
                    raise DeclarationError("%s: in %r, %r is not allowed (only c(), p(), %s and the kernel_flags %s)"
                                           % (where, self.expression, node.id, " and ".join(self.KERNEL_NAMES),
                                              list(self.flag_names)))
                if id(node) not in calls and node.id in self.KERNEL_NAMES and node.id not in self.names_used:
                    self.names_used.append(node.id)
            elif isinstance(node, ast.Constant):
                if not isinstance(node.value, (int, float, str)) or isinstance(node.value, bool):
                    raise DeclarationError("%s: in %r, the constant %r is not allowed"
                                           % (where, self.expression, node.value))
            elif not isinstance(node, self.OPERATORS + (ast.Load,)):
                raise DeclarationError("%s: in %r, %s is not allowed (c(), p(), numbers, arithmetic, "
                                       "comparisons, and/or/not)" % (where, self.expression, type(node).__name__))
        if not self.opcodes and "identical" not in self.names_used:
            raise DeclarationError("%s: %r names no opcode and not `identical`" % (where, self.expression))

    def holds(self, child: sass.Kernel, parent: sass.Kernel) -> bool:
        if len(child.flags) != len(self.flag_names):
            raise DeclarationError("%s has %d bool template arguments, kernel_flags names %d"
                                   % (child.label, len(child.flags), len(self.flag_names)))
        names = {name: bool(bit) for name, bit in zip(self.flag_names, child.flags)}
        names.update(self.kernel_names(child, parent))
        result = eval(self.code, {"__builtins__": {}}, {"c": child.count, "p": parent.count, **names})
        if not isinstance(result, bool):
            raise DeclarationError("%r gives %r, not True or False" % (self.expression, result))
        return result

    def kernel_names(self, child: sass.Kernel, parent: sass.Kernel) -> dict:
        """head_dim, and identical where this check names it (it compares every instruction)."""
        names = {"head_dim": child.head_dim}
        if "identical" in self.names_used:
            names["identical"] = [(i.guard, i.opcode, i.operands) for i in child.instructions] == \
                                 [(i.guard, i.opcode, i.operands) for i in parent.instructions]
        return names

    def values(self, child: sass.Kernel, parent: sass.Kernel) -> str:
        flags = ["%s=%d" % (name, bit) for name, bit in zip(self.flag_names, child.flags)]
        kernel = self.kernel_names(child, parent)
        used = ["%s=%s" % (name, kernel[name]) for name in self.names_used]
        return ", ".join(flags + used + ["c('%s')=%d p('%s')=%d" % (op, child.count(op), op, parent.count(op))
                                         for op in self.opcodes])


@dataclass
class Declaration:
    stage: stages.Stage
    require: list[str]
    forbid: list[str]
    checks: list[Check]
    spill_budget: dict[str, int]   # arch -> LDL + STL allowed per kernel
    spill_why: str
    other_kernels: dict = field(default_factory=dict)  # name -> (require, forbid, why)

    def other_kernel(self, kernel: sass.Kernel):
        """(require, forbid, why) of the other_kernels entry naming this kernel, or None."""
        name = kernel_named(kernel, self.other_kernels)
        return self.other_kernels[name] if name else None

    @property
    def opcodes(self) -> list[str]:
        out: list[str] = []
        others = [op for require, forbid, _ in self.other_kernels.values() for op in require + forbid]
        for op in self.require + self.forbid + [op for c in self.checks for op in c.opcodes] + others:
            if op not in out:
                out.append(op)
        return out


def kernel_named(kernel: sass.Kernel, names) -> str | None:
    """Which of `names` (other_kernels keys) is this kernel's source name, or None."""
    # The mangled source name, <length><name>, after the stage's namespace and any namespaces
    # nested in it (backward_01_base's kernels are in bwd::, 3bwd15backward_kernel...).
    mangled = [sass.unqualified(kernel.name)]
    while True:
        m = re.match(r"(\d+)", mangled[-1])
        rest = mangled[-1][m.end() + int(m.group(1)):] if m else ""
        if not rest[:1].isdigit():
            break
        mangled.append(rest)
    for name in names:
        if any(n.startswith("%d%s" % (len(name), name)) for n in mangled):
            return name
    return None


def read_declaration(stage: stages.Stage, known: set[str]) -> Declaration:
    where = "%s/stage.json" % stage.path
    extra = set(stage.sass) - {"require", "forbid", "versus_parent", "kernel_flags", "other_kernels"}
    if extra:
        raise DeclarationError("%s: unknown keys in \"sass\": %s" % (where, ", ".join(sorted(extra))))
    lists = {}
    for key in ("require", "forbid"):
        ops = stage.sass.get(key, [])
        bad = [op for op in ops if not isinstance(op, str) or not OPCODE.match(op)]
        if not isinstance(ops, list) or bad:
            raise DeclarationError("%s: sass.%s must be a list of opcodes like \"HMMA\" or \"MUFU.EX2\"%s"
                                   % (where, key, ", not %r" % bad if bad else ""))
        lists[key] = ops
    both = set(lists["require"]) & set(lists["forbid"])
    if both:
        raise DeclarationError("%s: %s both required and forbidden" % (where, ", ".join(sorted(both))))
    other_kernels = {}
    others = stage.sass.get("other_kernels", {})
    if not isinstance(others, dict):
        raise DeclarationError("%s: sass.other_kernels must map a kernel name to its require, forbid and why" % where)
    for name, entry in others.items():
        ok = (isinstance(name, str) and name.isidentifier() and isinstance(entry, dict)
              and set(entry) <= {"require", "forbid", "why"} and str(entry.get("why", "")).strip())
        ops = {key: entry.get(key, []) if isinstance(entry, dict) else None for key in ("require", "forbid")}
        if not ok or not all(isinstance(v, list) and all(isinstance(op, str) and OPCODE.match(op) for op in v)
                             for v in ops.values()):
            raise DeclarationError("%s: sass.other_kernels.%s must be {\"require\": [opcodes], \"forbid\": "
                                   "[opcodes], \"why\": \"...\"} with a why" % (where, name))
        if set(ops["require"]) & set(ops["forbid"]):
            raise DeclarationError("%s: sass.other_kernels.%s: %s both required and forbidden"
                                   % (where, name, ", ".join(sorted(set(ops["require"]) & set(ops["forbid"])))))
        other_kernels[name] = (ops["require"], ops["forbid"], entry["why"])
    flag_names = stage.sass.get("kernel_flags", [])
    if not isinstance(flag_names, list) or not all(isinstance(n, str) and n.isidentifier() for n in flag_names) \
            or len(set(flag_names)) != len(flag_names) or {"c", "p"} & set(flag_names):
        raise DeclarationError("%s: sass.kernel_flags must be a list of distinct names like \"alibi\"" % where)
    checks = []
    entries = stage.sass.get("versus_parent", [])
    if entries and not stage.parent:
        raise DeclarationError("%s: versus_parent checks, but no parent" % where)
    if stage.parent and stage.parent not in known:
        raise DeclarationError("%s: parent %r is not a stage (no stages/<track>/NN_name/stage.json)" % (where, stage.parent))
    parent_flags = stages.load_id(stage.parent, stage.stages_dir).sass.get("kernel_flags", []) if stage.parent else []
    if parent_flags and flag_names[:len(parent_flags)] != parent_flags:
        raise DeclarationError("%s: sass.kernel_flags %s must start with the parent's %s (its kernels are compared "
                               "with the parent's of the same first flags)" % (where, flag_names, parent_flags))
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"check", "why"} or not entry["why"].strip():
            raise DeclarationError("%s: versus_parent[%d] must be {\"check\": ..., \"why\": ...} with a why"
                                   % (where, i))
        checks.append(Check(entry["check"], entry["why"], "%s versus_parent[%d]" % (where, i), flag_names))
    budget, why = {}, ""
    for key, value in stage.spill_budget.items():
        if key == "why":
            why = value
        elif ARCH_KEY.match(key) and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            budget[key] = value
        else:
            raise DeclarationError("%s: spill_budget.%s = %r (keys are sm_NN or sm_NNa with a count >= 0, "
                                   "and \"why\")" % (where, key, value))
    if any(budget.values()) and not why.strip():
        raise DeclarationError("%s: a spill budget above 0 needs its measured reason in spill_budget.why" % where)
    return Declaration(stage, lists["require"], lists["forbid"], checks, budget, why, other_kernels)


# ------------------------------------------------------------------------------------------------
# The checks


class Report:
    def __init__(self):
        self.passed = 0
        self.failures: list[str] = []

    def expect(self, condition: bool, what: str) -> bool:
        if condition:
            self.passed += 1
        else:
            self.failures.append(what)
        return condition


def parent_arch(decl: Declaration, parent: stages.Stage, arch: str) -> str:
    """The architecture of the parent's kernels a kernel for `arch` is compared with."""
    if arch == "sm_90a" and parent.target == "sm_80":
        return "sm_90"
    return arch


def wgmma_groups(kernel: sass.Kernel) -> tuple[int, int]:
    """(HGMMA count, how many of them end a commit group: the ones marked gsb0).

    A stage issues its wgmmas in commit groups of 4-8 (one per 16 of the K dimension), and only each
    group's last HGMMA carries gsb0, the scoreboard its wait reads: at most a quarter of them. When
    ptxas cannot keep the wgmmas asynchronous (its "(C7515)" to "(C7520) Potential Performance Loss:
    wgmma.mma_async instructions are serialized" messages, which a build prints but no test reads),
    it waits after every HGMMA, and every one carries gsb0 (experiments_02_cross_tile's first version: 64 of
    64, launches 20-58% longer). The check allows half, a margin over any grouping we write."""
    hgmma = [i for i in kernel.instructions if i.opcode.startswith("HGMMA")]
    return len(hgmma), sum(1 for i in hgmma if "gsb0" in i.operands)


def check_stage(decl: Declaration, kernels: list[sass.Kernel], parent_kernels: list[sass.Kernel] | None,
                columns: list[str], report: Report, not_evaluated: list[str]) -> set[str]:
    """Checks one stage's kernels, prints its table; returns the architectures it checked."""
    stage = decl.stage
    present = sorted({k.arch for k in kernels})
    expected = set(decl.spill_budget) | {stage.target}
    absent = sorted(expected - set(present))
    print("\n%s (parent %s, target %s): checked %s; not in this build: %s"
          % (stage.name, stage.parent or "none", stage.target, " ".join(present) or "nothing",
             " ".join(absent) or "none"))
    if not report.expect(bool(kernels), "%s: no kernel in the library's SASS" % stage.name):
        print("  FAIL: no kernel in the library's SASS")
        return set()
    print("  %-7s %-14s %s  result" % ("arch", "kernel", " ".join("%*s" % (max(4, len(c)), c) for c in columns)))
    for kernel in sorted(kernels, key=lambda k: (k.arch, k.instantiation, k.flags)):
        where = "%s %s %s" % (stage.name, kernel.arch, kernel.label)
        problems = []
        other = decl.other_kernel(kernel)
        require, forbid = (other[0], other[1]) if other else (decl.require, decl.forbid)
        for op in require:
            if not report.expect(kernel.count(op) > 0, where):
                problems.append("requires %s: none found%s" % (op, " (%s)" % other[2] if other else ""))
        for op in forbid:
            if not report.expect(kernel.count(op) == 0, where):
                problems.append("forbids %s: %d found%s" % (op, kernel.count(op), " (%s)" % other[2] if other else ""))
        spills = sum(kernel.count(op) for op in SPILL_OPCODES)
        allowed = decl.spill_budget.get(kernel.arch, 0)
        if not report.expect(spills <= allowed, where):
            problems.append("spills: %d LDL + %d STL > budget %d for %s%s"
                            % (kernel.count("LDL"), kernel.count("STL"), allowed, kernel.arch,
                               " (%s)" % decl.spill_why if decl.spill_why else " (no budget declared)"))
        hgmma, group_ends = wgmma_groups(kernel)
        if not report.expect(hgmma == 0 or 2 * group_ends <= hgmma, where):
            problems.append("wgmma serialized: %d of %d HGMMA end a group (gsb0); ptxas's C7515-C7520 "
                            "messages say why (a wgmma or its wait in a divergent path, ...)" % (group_ends, hgmma))
        if decl.checks and not other:
            problems += compare_with_parent(decl, kernel, parent_kernels, report, not_evaluated)
        print("  %-7s %-14s %s  %s" % (kernel.arch, kernel.label,
                                      " ".join("%*d" % (max(4, len(c)), kernel.count(c)) for c in columns),
                                      "FAIL" if problems else "ok"))
        for p in problems:
            print("      FAIL: %s" % p)
    return set(present)


def compare_with_parent(decl: Declaration, kernel: sass.Kernel, parent_kernels: list[sass.Kernel] | None,
                        report: Report, not_evaluated: list[str]) -> list[str]:
    stage, parent = decl.stage, stages.load_id(decl.stage.parent, decl.stage.stages_dir)
    where = "%s %s %s" % (stage.name, kernel.arch, kernel.label)
    if parent_kernels is None:
        report.expect(False, where)
        return ["versus %s: the parent's library was not given" % parent.name]
    arch = parent_arch(decl, parent, kernel.arch)
    if not any(k.arch == arch for k in parent_kernels):
        not_evaluated.append("%s: %s has no %s code in this build" % (where, parent.name, arch))
        return []
    # The parent's main kernels only: its other_kernels (a backward's, a combine) are checked on their own.
    parent_others = parent.sass.get("other_kernels", {})
    matches = [k for k in parent_kernels if k.arch == arch and k.instantiation == kernel.instantiation
               and k.flags == kernel.flags[:len(k.flags)] and kernel_named(k, parent_others) is None]
    if not report.expect(len(matches) == 1, where):
        return ["versus %s: %d kernels of %s %s in the parent (need exactly one)"
                % (parent.name, len(matches), arch, kernel.label)]
    problems = []
    for check in decl.checks:
        try:
            holds = check.holds(kernel, matches[0])
        except (DeclarationError, ArithmeticError) as e:
            report.expect(False, where)
            problems.append("versus %s %s: %s cannot be evaluated: %s" % (parent.name, arch, check.expression, e))
            continue
        if not report.expect(holds, where):
            problems.append("versus %s %s: %s is false (%s)\n            why: %s"
                            % (parent.name, arch, check.expression, check.values(kernel, matches[0]), check.why))
    return problems


def table_columns(declarations: list[Declaration]) -> list[str]:
    named: list[str] = []
    for decl in declarations:
        named += [op for op in decl.opcodes if op not in named]
    first = [op for op in PREFERRED_COLUMNS if op in named]
    return first + [op for op in named if op not in first and op not in SPILL_OPCODES] + SPILL_OPCODES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", type=Path, help="find every stage's library as DIR/libstage_NAME.a")
    parser.add_argument("--stage", action="append", default=[], metavar="NAME=LIBRARY",
                        help="a stage and its kernel library (repeatable; instead of --build-dir)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="check only this stage (repeatable); its parent's library is still read")
    parser.add_argument("--stages-dir", type=Path, default=stages.STAGES_DIR,
                        help="where the stage.json declarations are (default: the repository's stages/)")
    parser.add_argument("--check-tools", action="store_true",
                        help="only say whether cuobjdump and nvdisasm are found (exit 0) or not (exit 1)")
    args = parser.parse_args(argv)
    if args.check_tools:
        tools = sass.find_tools()
        print("cuobjdump: %s\nnvdisasm:  %s" % (tools.cuobjdump, tools.nvdisasm) if tools
              else sass.missing_tools_message())
        return 0 if tools else 1

    declared = {s.name: s for s in stages.all_stages(args.stages_dir)}
    libraries: dict[str, Path] = {}
    for item in args.stage:
        name, _, lib = item.partition("=")
        if not lib:
            parser.error("--stage wants NAME=LIBRARY, got %r" % item)
        libraries[name] = Path(lib)
    if args.build_dir:
        for name in declared:
            libraries.setdefault(name, sass.library_of(args.build_dir, name))
    if not libraries:
        parser.error("give --build-dir or --stage NAME=LIBRARY")
    undeclared = sorted(set(libraries) - set(declared))
    if undeclared:
        print("FAIL: no stages/<name>/stage.json for %s" % ", ".join(undeclared))
        return 1
    checked = [n for n in declared if n in libraries and (not args.only or n in args.only)]
    unknown = sorted(set(args.only) - set(checked))
    if unknown:
        parser.error("--only %s: not a stage with a library" % ", ".join(unknown))

    try:
        declarations = [read_declaration(declared[n], set(declared)) for n in checked]
    except DeclarationError as e:
        print("FAIL: %s" % e)
        return 1

    tools = sass.find_tools()
    if tools is None:
        print("SKIP: %s" % sass.missing_tools_message())
        return SKIP
    print("cuobjdump: %s (%s)\nnvdisasm:  %s" % (tools.cuobjdump, tools.version(), tools.nvdisasm))

    report = Report()
    kernels_of: dict[str, list[sass.Kernel]] = {}
    needed = dict.fromkeys(checked + [d.stage.parent for d in declarations if d.stage.parent])
    for name in needed:
        if name not in libraries:
            continue
        if report.expect(libraries[name].is_file(), name):
            kernels_of[name] = sass.disassemble(libraries[name], tools)
        else:
            print("FAIL: %s: library %s does not exist (build it first)" % (name, libraries[name]))
    columns = table_columns(declarations)
    not_evaluated: list[str] = []
    archs_checked: dict[str, int] = {}
    archs_absent: set[str] = set()
    for decl in declarations:
        name = decl.stage.name
        if name not in kernels_of:
            continue
        parent = decl.stage.parent
        present = check_stage(decl, kernels_of[name], kernels_of.get(parent) if parent else None,
                              columns, report, not_evaluated)
        for arch in present:
            archs_checked[arch] = archs_checked.get(arch, 0) + 1
        archs_absent |= (set(decl.spill_budget) | {decl.stage.target}) - present

    print("\narchitectures checked: %s" % (", ".join("%s (%d stages)" % a for a in sorted(archs_checked.items()))
                                           or "none"))
    print("declared but not in this build: %s" % (", ".join(sorted(archs_absent - set(archs_checked))) or "none"))
    for line in not_evaluated:
        print("versus_parent not evaluated: %s" % line)
    failed_kernels = sorted(set(report.failures))
    print("\n%d checks passed, %d failed%s" % (report.passed, len(report.failures),
                                               ": " + "; ".join(failed_kernels) if failed_kernels else ""))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
