"""The SASS of the built stage libraries: finding cuobjdump and nvdisasm, disassembling, counting.

    import sass
    tools = sass.find_tools()                      # None if cuobjdump or nvdisasm is missing
    for kernel in sass.disassemble(Path("build/libstage_04_swizzle.a"), tools):
        kernel.arch, kernel.dtype, kernel.head_dim, kernel.count("MUFU.EX2"), kernel.count("LDG")
    sass.resource_usage(library, tools)            # {(arch, kernel name): {"REG": 96, "LOCAL": 0, ...}}
    sass.main_loop(kernel.instructions)            # the body of the main K/V loop

One reading of the machine code for every script that looks at it: tests/check_sass.py (each stage's
declared SASS signature), tools/sass_counts.py (the SASS tables) and tools/gen_docs.py (the SASS
sections of docs/stages).

Opcodes are counted with prefix semantics: count("LDG") counts LDG.E.128 and LDG.E but not LDGSTS;
count("MUFU.EX2") counts MUFU.EX2 only, not MUFU.RCP. A kernel's dtype and head_dim come from its
mangled name: every stage's kernel is a template whose first two arguments are the element type
and head_dim (attention_kernel<__half, 128> is ...I6__halfLi128E...). Bool template arguments after
them are a stage's compile-time feature switches (attention_kernel<__half, 128, true> is
...I6__halfLi128ELb1EE...): kernel.flags, (1,) there; a stage.json names them ("kernel_flags").

cuobjdump -sass runs nvdisasm, so both are needed. Each is looked up in $CUOBJDUMP / $NVDISASM,
next to the other, on PATH, in /usr/local/cuda/bin, and in NVIDIA's pip wheels
(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm). Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

# "        /*0120*/  @!P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;   /* 0x... */"
INSTRUCTION = re.compile(
    r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")
FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
CODE_FOR = re.compile(r"code for (sm_\d+[a-z]?)")
ELF_ARCH = re.compile(r"^arch = (sm_\d+[a-z]?)\s*$")
USAGE_FUNCTION = re.compile(r"^\s*Function (\S+):\s*$")
USAGE_LINE = re.compile(r"^\s*((?:[A-Z_]+(?:\[\d+\])?:\d+\s*)+)$")
DTYPES = {"6__half": "fp16", "13__nv_bfloat16": "bf16"}
TEMPLATE_ARGS = re.compile(r"I(%s)Li(\d+)E((?:Lb[01]E)*)" % "|".join(DTYPES))


@dataclass(frozen=True)
class Instruction:
    address: int
    opcode: str    # the full opcode with its modifiers: "LDGSTS.E.BYPASS.128", "MUFU.EX2"
    operands: str  # the rest of the line up to ';', e.g. "R4, [R2.64]"
    guard: str = ""  # the predicate guard, e.g. "@!P0", or ""


@dataclass
class Kernel:
    arch: str      # "sm_80", "sm_90a", ...
    name: str      # the mangled name
    instructions: list[Instruction] = field(default_factory=list)

    @cached_property
    def opcodes(self) -> Counter:
        """{full opcode: number of instructions}; read once the disassembly is complete."""
        return Counter(i.opcode for i in self.instructions)

    def count(self, opcode: str) -> int:
        """Instructions whose opcode is `opcode` or starts with `opcode` + "."."""
        return count_opcode(self.opcodes, opcode)

    @property
    def dtype(self) -> str | None:
        m = TEMPLATE_ARGS.search(self.name)
        return DTYPES[m.group(1)] if m else None

    @property
    def head_dim(self) -> int | None:
        m = TEMPLATE_ARGS.search(self.name)
        return int(m.group(2)) if m else None

    @property
    def flags(self) -> tuple:
        """The bool template arguments after dtype and head_dim, as 0/1 in order; () if none."""
        m = TEMPLATE_ARGS.search(self.name)
        return tuple(int(bit) for bit in re.findall(r"Lb([01])E", m.group(3))) if m else ()

    @property
    def instantiation(self) -> tuple:
        """What a kernel is compared by across stages: (dtype, head_dim), or its name without the
        stage's namespace when the name does not say. (Kernels of one stage that differ only in their
        flags share it; see find_kernel.)"""
        if self.dtype is not None:
            return (self.dtype, self.head_dim)
        return (unqualified(self.name),)

    @property
    def label(self) -> str:
        if not self.dtype:
            return unqualified(self.name)[:40]
        flags = "".join(str(f) for f in self.flags)
        return "%s d%d%s" % (self.dtype, self.head_dim, " <%s>" % flags if flags else "")


def count_opcode(opcodes: Counter, opcode: str) -> int:
    """Prefix semantics over {full opcode: n}: "LDG" counts LDG.E.128, not LDGSTS."""
    return sum(n for full, n in opcodes.items() if full == opcode or full.startswith(opcode + "."))


def unqualified(mangled: str) -> str:
    """The name without the stage's namespace: _ZN16stage_04_swizzle16attention... -> 16attention..."""
    m = re.match(r"_ZN(\d+)", mangled)
    return mangled[m.end() + int(m.group(1)):] if m else mangled


# ------------------------------------------------------------------------------------------------
# The tools


@dataclass(frozen=True)
class Tools:
    cuobjdump: Path
    nvdisasm: Path

    def run(self, *args: str) -> str:
        env = dict(os.environ)
        env["PATH"] = "%s%s%s" % (self.nvdisasm.parent, os.pathsep, env.get("PATH", ""))
        done = subprocess.run([str(self.cuobjdump), *args], capture_output=True, text=True, env=env,
                              timeout=600)
        if done.returncode != 0:
            raise RuntimeError("cuobjdump %s failed (%d):\n%s" % (" ".join(args), done.returncode,
                                                                  done.stderr.strip()))
        return done.stdout

    def version(self) -> str:
        lines = self.run("--version").strip().splitlines()
        return lines[-1] if lines else "(version unknown)"


def find_tool(name: str, env_var: str, near: Path | None = None) -> Path | None:
    """`name` from $env_var, next to `near`, on PATH, in /usr/local/cuda/bin, or from a pip wheel."""
    candidates: list[Path] = []
    if os.environ.get(env_var):
        candidates.append(Path(os.environ[env_var]))
    if near is not None:
        candidates.append(near.parent / name)
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    candidates.append(Path("/usr/local/cuda/bin") / name)
    try:
        import nvidia  # the namespace package of NVIDIA's pip wheels

        for root in nvidia.__path__:
            candidates += sorted(Path(root).glob("cu*/bin/%s" % name), reverse=True)  # CUDA 13 wheels
            candidates += sorted(Path(root).glob("cuda_*/bin/%s" % name))  # CUDA 12 wheels
    except ImportError:
        pass
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def find_tools() -> Tools | None:
    cuobjdump = find_tool("cuobjdump", "CUOBJDUMP")
    nvdisasm = find_tool("nvdisasm", "NVDISASM", near=cuobjdump)
    return Tools(cuobjdump, nvdisasm) if cuobjdump and nvdisasm else None


def missing_tools_message() -> str:
    cuobjdump = find_tool("cuobjdump", "CUOBJDUMP")
    nvdisasm = find_tool("nvdisasm", "NVDISASM", near=cuobjdump)
    missing = [n for n, p in (("cuobjdump", cuobjdump), ("nvdisasm", nvdisasm)) if p is None]
    return ("%s not found ($CUOBJDUMP/$NVDISASM, PATH, /usr/local/cuda/bin, "
            "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)" % " and ".join(missing))


# ------------------------------------------------------------------------------------------------
# Reading a library


def disassemble(library: Path, tools: Tools) -> list[Kernel]:
    """Every kernel of every SASS architecture in `library`, in the order cuobjdump prints them."""
    kernels: list[Kernel] = []
    arch, current = None, None
    for line in tools.run("-sass", str(library)).splitlines():
        m = CODE_FOR.search(line)
        if m:
            arch, current = m.group(1), None
            continue
        m = FUNCTION.search(line)
        if m and arch:
            current = Kernel(arch, m.group(1))
            kernels.append(current)
            continue
        m = INSTRUCTION.search(line)
        if m and current is not None:
            current.instructions.append(Instruction(int(m.group(1), 16), m.group(3), m.group(4).strip(),
                                                    (m.group(2) or "").strip()))
    return kernels


def resource_usage(library: Path, tools: Tools) -> dict[tuple[str, str], dict[str, int]]:
    """{(arch, mangled name): {"REG": registers per thread, "STACK": bytes, "LOCAL": bytes, ...}}."""
    usage: dict[tuple[str, str], dict[str, int]] = {}
    arch, function = None, None
    for line in tools.run("-res-usage", str(library)).splitlines():
        m = ELF_ARCH.match(line)
        if m:
            arch = m.group(1)
            continue
        m = USAGE_FUNCTION.match(line)
        if m:
            function = m.group(1)
            continue
        m = USAGE_LINE.match(line)
        if m and function and arch:
            usage[(arch, function)] = {k: int(v) for k, v in (p.split(":") for p in m.group(1).split())}
            function = None
    return usage


def main_loop(instructions: list[Instruction]) -> list[Instruction]:
    """The main K/V loop, found without source-line information: the body of the innermost (shortest)
    backward branch that contains an HMMA or HGMMA and no EXIT. Without the EXIT rule, ptxas's retry
    paths of mbarrier waits (placed after the kernel's EXIT, branching back into the loop) would
    pass for the loop; innermost, because a persistent kernel's tile loop contains the K/V loop."""
    best: list[Instruction] = []
    for branch in instructions:
        if branch.opcode.split(".")[0] != "BRA":
            continue
        target = re.search(r"0x([0-9a-f]+)", branch.operands)
        if not target or int(target.group(1), 16) >= branch.address:
            continue
        start = int(target.group(1), 16)
        body = [i for i in instructions if start <= i.address <= branch.address]
        if any(i.opcode == "EXIT" for i in body):
            continue
        if any(i.opcode.startswith(("HMMA", "HGMMA")) for i in body) and (not best or len(body) < len(best)):
            best = body
    return best


# The columns of the SASS tables (tools/sass_counts.py, the SASS sections of docs/stages), and
# how an instruction is counted in them.
TABLE_COLUMNS = ["HMMA", "HGMMA", "LDSM", "LDSM.T", "LDGSTS", "LDG", "STS", "LDS", "MUFU.EX2", "FMUL", "FFMA",
                 "FADD", "FMNMX", "SHFL", "F2FP", "BAR.SYNC", "LDL", "STL"]


def table_counts(instructions: list[Instruction]) -> Counter:
    """Counts for TABLE_COLUMNS, plus "total" (every instruction but NOP). LDSM.T counts the .trans
    ldmatrix (LDSM.16.MT88) among LDSM; LDS leaves out the `@!PT LDS RZ, [RZ]` that ptxas places
    before LDGSTS groups (predicated off, it never executes)."""
    counts: Counter = Counter()
    for ins in instructions:
        op, base = ins.opcode, ins.opcode.split(".")[0]
        if op == "NOP":
            continue
        counts["total"] += 1
        if base == "LDSM":
            counts["LDSM"] += 1
            if op.startswith("LDSM.16.MT"):
                counts["LDSM.T"] += 1
        elif base == "LDS":
            if not ins.operands.startswith("RZ, [RZ]"):
                counts["LDS"] += 1
        elif op.startswith("MUFU.EX2"):
            counts["MUFU.EX2"] += 1
        elif op.startswith("BAR.SYNC"):
            counts["BAR.SYNC"] += 1
        elif base in TABLE_COLUMNS:
            counts[base] += 1
    return counts


def find_kernel(kernels: list[Kernel], arch: str, dtype: str, head_dim: int,
                switches_on: bool = False) -> Kernel | None:
    """The kernel of that architecture, dtype and head_dim; of several that differ in their flags,
    the one with every feature switch off (the common case, comparable with a parent without them),
    or with switches_on the one with every switch on."""
    matches = [k for k in kernels if k.arch == arch and k.dtype == dtype and k.head_dim == head_dim]
    # The stage's attention kernel is in the stage's namespace itself; kernels in a namespace nested in
    # it (backward_01_base's backward, bwd::backward_kernel and its helpers) come only where there is no
    # other. A nested name reads <length><namespace><length><name> after the stage's namespace.
    top_level = [k for k in matches if not _nested(unqualified(k.name))]
    matches = top_level or matches
    if not matches:
        return None
    pick = max if switches_on else min
    return pick(matches, key=lambda k: (sum(k.flags), k.flags))


def _nested(name: str) -> bool:
    """Whether a mangled name (after the stage's namespace) is that of something in a nested namespace:
    its first <length><identifier> is followed by another <length>..., not by template arguments."""
    m = re.match(r"(\d+)", name)
    return bool(m) and name[m.end() + int(m.group(1)):][:1].isdigit()


def library_of(build_dir: Path, stage: str) -> Path:
    """Where CMake puts a stage's kernel library (the target stage_<name>)."""
    return Path(build_dir) / ("libstage_%s.a" % stage)
