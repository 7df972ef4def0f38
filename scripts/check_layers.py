#!/usr/bin/env python3
"""Checks that Loom's source tree keeps its layers (docs/architecture.md).

Two graphs are read:
  includes  `#include "..."` lines of src/**/*.{c,h,inc}
  calls     which object file uses a global symbol that another defines
            (nm over the objects of a build; skipped without one)

and five rules are held:
  1. No include points up: a file includes headers of its own layer or of
     a lower one (include/loom, the public API, any layer may include).
  2. No call points up, except the edges listed in ALLOWED_UP (code that
     recurses through a higher layer, with the reason).
  3. No loop among source files in the call graph, except loops whose every
     edge is listed in ALLOWED_LOOPS (again recursion, with the reason).
  4. The backend seam: the neutral layers above the back ends (NEUTRAL)
     reach them only through src/backend/backend.h and the registry: they
     include no header of a back end's folder and call no function defined
     there (a back end is a table of functions, called through it).
  5. Only src/core/env.c reads the process environment (getenv, environ):
     a thread Loom starts reads the snapshot it was handed (core/env.h),
     since setenv on the program's thread moves what getenv reads.

Usage: scripts/check_layers.py [BUILD_DIR]   (exit status 1 on a violation)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first. A folder may use its own files and those of the layers
# before it; folders in one tuple are peers that must not use each other.
LAYERS = [
    ("src/core",),
    ("src/ir",),
    ("src/kernels",),
    ("src/passes",),
    ("src/train",),
    ("src/backend/backend.h",),             # the seam: what back ends implement
    ("src/backend/cpu", "src/backend/ref"),  # the back ends, peers
    ("src/backend/registry.c",),            # the table that names them
    ("src/runtime",),
    ("src/compiler",),
    ("src/trace",),
    ("src/frontend",),                      # importers: build IR, fold with the runtime
]

# Layers above the back ends that must not know which back end runs: they
# may include src/backend/backend.h, and call the registry (registry.c,
# the one table that names the back ends), nothing else of src/backend.
NEUTRAL = ("src/compiler", "src/runtime", "src/trace")
BACKEND_FOLDERS = ("src/backend/cpu", "src/backend/ref")


def neutral(path):
    return any(path == f or path.startswith(f + "/") for f in NEUTRAL)


def in_backend(path):
    return any(path.startswith(f + "/") for f in BACKEND_FOLDERS)


# Tables of rules built from the op table: they name every op's rule, and
# the rules are reached through them, so what a table names is not what
# the table's file imports (its edges out are left out of both checks).
TABLES = {
    "src/ir/op.c": "the op table: each op's shape rule",
    "src/kernels/ref.c": "each op's reference kernel",
    "src/frontend/onnx/ops_table.c": "the ONNX importer's table: each ONNX op's rule",
}

# Calls from a lower layer into a higher one that are recursion, not
# dependency: (caller file, callee file) -> why.
ALLOWED_UP = {
    ("src/runtime/control.c", "src/compiler/compile.c"):
        "an if/loop step compiles its subgraph bodies",
    ("src/kernels/ref_control.c", "src/runtime/interp.c"):
        "the reference if/loop interpret their subgraph bodies",
}

# Call-graph edges allowed inside loops, each a recursion through if/loop
# bodies: (caller, callee) -> why.
ALLOWED_LOOPS = {**ALLOWED_UP, **{
    ("src/compiler/compile.c", "src/runtime/control.c"):
        "compiling a graph builds its if/loop steps",
    ("src/runtime/control.c", "src/runtime/executable.c"):
        "an if/loop step runs its bodies' executables",
    ("src/passes/grad_control.c", "src/passes/autodiff.c"):
        "the gradient of an if differentiates its bodies",
    ("src/ir/op_control.c", "src/ir/verify.c"):
        "an if/loop node's check verifies its bodies",
}}


def layer_of(path):
    """(layer index, folder) of a path under src/, or None."""
    for i, folders in enumerate(LAYERS):
        for f in folders:
            if path == f or path.startswith(f + "/"):
                return i, f
    return None


def points_up(here, there):
    """Whether a file of layer `here` using one of `there` breaks the rule:
    a higher layer, or a peer folder of the same layer."""
    return there[0] > here[0] or (there[0] == here[0] and there[1] != here[1])


def broken_rule(path, here, target, there):
    """What is wrong with file `path` (layer `here`) using `target` (layer
    `there`), or None: the same rule for an #include and a call."""
    if points_up(here, there):
        return f"a file of a higher or peer layer ({there[1]} from {here[1]})"
    if neutral(path) and in_backend(target):
        return ("a back end's own file (the neutral layers see back ends only through "
                "src/backend/backend.h and its be_backend_t)")
    return None


def sources():
    for base, _, names in os.walk(os.path.join(ROOT, "src")):
        for n in sorted(names):
            if n.endswith((".c", ".h", ".inc", ".def")):
                yield os.path.relpath(os.path.join(base, n), ROOT)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def check_includes(errors):
    for path in sources():
        here = layer_of(path)
        if here is None:
            errors.append(f"{path}: in no layer (add its folder to LAYERS)")
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            if inc.startswith("loom/"):
                continue
            target = "src/" + inc
            there = layer_of(target)
            if there is None or not os.path.exists(os.path.join(ROOT, target)):
                errors.append(f"{path}: includes \"{inc}\", which is not a file of src/")
                continue
            why = broken_rule(path, here, target, there)
            if why:
                errors.append(f"{path}: includes {target}, {why}")


def objects(build):
    """Maps each source file of src/ to its object file in a CMake build."""
    out = {}
    for base, _, names in os.walk(build):
        for n in names:
            if not n.endswith(".c.o"):
                continue
            full = os.path.join(base, n)
            m = re.search(r"loom_objects\.dir/(src/.*)\.o$", full)
            # Objects of files since moved or deleted stay in a build.
            if m and os.path.exists(os.path.join(ROOT, m.group(1))):
                out[m.group(1)] = full
    return out


def symbols(obj):
    res = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True, text=True,
                         check=True)
    defined = {l.split()[-1] for l in res.stdout.splitlines() if len(l.split()) >= 3}
    res = subprocess.run(["nm", "-u", obj], capture_output=True, text=True, check=True)
    used = {l.split()[-1] for l in res.stdout.splitlines() if l.strip()}
    return defined, used


def call_graph(build):
    objs = objects(build)
    if not objs:
        return None
    defined_in, uses = {}, {}
    for src, obj in objs.items():
        d, u = symbols(obj)
        uses[src] = u
        for s in d:
            defined_in[s] = src
    edges = {}
    for src, used in uses.items():
        for s in used:
            dst = defined_in.get(s)
            if dst and dst != src and src not in TABLES:
                edges.setdefault(src, {}).setdefault(dst, []).append(s)
    return edges, uses


# Rule 5: the symbols that read the environment, and the one file that may.
ENVIRONMENT = {"getenv", "secure_getenv", "environ", "__environ"}
ENVIRONMENT_READER = "src/core/env.c"


def check_environment(uses, errors):
    for src, used in sorted(uses.items()):
        bad = sorted(used & ENVIRONMENT)
        if bad and src != ENVIRONMENT_READER:
            errors.append(f"{src} reads the environment ({', '.join(bad)}): use core_getenv "
                          "(core/env.h)")


def check_calls(edges, errors):
    for a, outs in edges.items():
        la = layer_of(a)
        for b, syms in outs.items():
            lb = layer_of(b)
            if la is None or lb is None or (a, b) in ALLOWED_UP:
                continue
            why = broken_rule(a, la, b, lb)
            if why:
                errors.append(f"{a}: calls {b} ({', '.join(sorted(syms)[:4])}), {why}")


def loops(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {b for outs in edges.values() for b in outs}

    def visit(v):
        work = [(v, iter(sorted(edges.get(v, {}))))]
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on:
                    low[u] = min(low[u], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[u])
            if low[u] == index[u]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == u:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def check_loops(edges, errors):
    # Drop the allowed edges, then any loop left is a violation.
    kept = {a: {b: s for b, s in outs.items() if (a, b) not in ALLOWED_LOOPS}
            for a, outs in edges.items()}
    for comp in loops(kept):
        inside = set(comp)
        ties = [f"{a} -> {b} ({', '.join(sorted(s)[:3])})"
                for a in comp for b, s in sorted(kept.get(a, {}).items()) if b in inside]
        errors.append("a loop of calls among " + ", ".join(comp) + ":\n    " +
                      "\n    ".join(ties))


def main():
    errors = []
    check_includes(errors)
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    graph = call_graph(build) if os.path.isdir(build) else None
    if graph is None:
        print(f"check_layers: no objects under {build}; checked includes only")
    else:
        edges, uses = graph
        check_calls(edges, errors)
        check_loops(edges, errors)
        check_environment(uses, errors)
    for e in errors:
        print("check_layers: " + e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s); the layers are in "
              "docs/architecture.md")
        return 1
    print("check_layers: includes and calls follow the layers, no loops, "
          "the environment read in one place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
