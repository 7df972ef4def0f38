"""Conformance run: every op of Loom's op table against NumPy.

usage: /usr/bin/python3 tests/conformance/run.py path/to/libloom.so [op ...]

Prints one line per op ("op  cases  max_err  ok/FAIL"), the details of
failed cases on stderr, and a closing line "N passed, M failed" counting
cases. Exits non-zero if a case failed or an op of the table has no case.
"""
import os
import sys
import time
import warnings

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loomlib  # noqa: E402

# The structs the op modules use are built from the library's own listing
# (loom_api_describe), so the library loads before they do.
if __name__ == "__main__" and len(sys.argv) > 1:
    loomlib.load(sys.argv[1])

import conform  # noqa: E402
import ops_comm  # noqa: E402,F401  (the op modules register their cases)
import ops_contract  # noqa: E402,F401
import ops_control  # noqa: E402,F401
import ops_elementwise  # noqa: E402,F401
import ops_generate  # noqa: E402,F401
import ops_layout  # noqa: E402,F401
import ops_norm  # noqa: E402,F401
import ops_reduce  # noqa: E402,F401
from dtypes import ALL  # noqa: E402
from loomlib import Lib  # noqa: E402

SEED = 20261130
# Ops whose input 0 is no data tensor: no input (arange, full), a seed
# (random_*), a parameter (assign).
# Ops whose shape rules must work on symbolic dims: some of their cases
# declare the inputs' dims as symbols.
SYMBOLIC = {"unary", "binary", "reduce", "matmul", "softmax", "log_softmax",
            "layer_norm", "rms_norm", "global_avg_pool", "cumsum", "argmax",
            "argmin", "where", "cast", "transpose", "concat", "flip",
            "batch_norm", "gather", "embedding", "nonzero", "index_select"}
NO_DTYPE_COVERAGE = {"arange", "full", "random_uniform", "random_normal", "assign"}
MAX_DETAILS = 3  # failed cases shown per op


def symbolic_ok(name):
    from ops_elementwise import BINARY, UNARY_FLOAT, UNARY_NUMERIC
    from ops_reduce import REDUCE
    groups = {"unary": set(UNARY_FLOAT) | set(UNARY_NUMERIC), "binary": set(BINARY),
              "reduce": set(REDUCE) | {"variance"}}
    return name in SYMBOLIC or any(name in groups.get(g, ()) for g in SYMBOLIC)


STATS = {"non-contiguous": 0, "stride-0": 0, "symbolic": 0, "error-path": 0}


def count(case):
    STATS["non-contiguous"] += any(a.noncontig for a in case.args)
    STATS["stride-0"] += any(a.stride0 for a in case.args)
    STATS["symbolic"] += bool(case.symbolic)
    STATS["error-path"] += bool(case.error)


def rejections(name, case):
    """Copies of a case with input 0 in each dtype the op table does not
    accept for it: each must fail with LOOM_ERR_DTYPE."""
    accepted = conform.ACCEPTED.get(name, ALL)
    if name in NO_DTYPE_COVERAGE or name == "where" or not case.args or case.custom:
        return []
    out = []
    for dt in ALL:
        if dt in accepted:
            continue
        zeros = np.zeros(case.args[0].values.shape, dtype=bool if dt == "bool" else np.int64)
        args = [conform.Arg(zeros, dt)] + case.args[1:]
        out.append(conform.Case("%s rejects input 0 in %s" % (name, dt), args, case.build,
                                error="LOOM_ERR_DTYPE"))
    return out


def case_stream(name, rng):
    """The op's cases, with rejection cases after its first valid one."""
    first = True
    for case in conform.GENERATORS[name](name, rng):
        yield case
        if first and not case.error:
            first = False
            yield from rejections(name, case)


def run_op(lib, name, rng):
    """(cases, failed, max_err, details) of one op."""
    cases = failed = 0
    worst, details = 0.0, []
    tested = set()
    sym_rng = np.random.default_rng([SEED, 1, *name.encode()])
    sym = symbolic_ok(name)
    stream = case_stream(name, rng)
    while True:
        try:
            case = next(stream)
        except StopIteration:
            break
        except Exception as e:  # a broken generator counts as a failed case
            details.append("case generator: %s: %s" % (type(e).__name__, e))
            return cases + 1, failed + 1, float("inf"), details
        cases += 1
        if not case.error:
            tested.add(case.dtype)
        case.symbolic = sym and sym_rng.random() < 0.3
        count(case)
        try:
            err, ok, msg = conform.run_case(lib, case)
        except Exception as e:  # a broken case must not hide the others
            err, ok, msg = float("inf"), False, "%s: %s" % (type(e).__name__, e)
        worst = max(worst, err)
        if not ok:
            failed += 1
            if len(details) < MAX_DETAILS:
                details.append("%s%s: %s" % (conform.describe(case),
                                             " symbolic" if case.symbolic else "", msg))
    missing = [d for d in conform.ACCEPTED.get(name, []) if d not in tested]
    if missing and name not in NO_DTYPE_COVERAGE:
        cases, failed, worst = cases + 1, failed + 1, float("inf")
        details.append("no case in accepted dtype(s) %s" % ", ".join(missing))
    return cases, failed, worst, details


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    lib = Lib(argv[1])
    names = lib.op_names()
    only = set(argv[2:])
    start = time.time()
    passed = failed = 0
    uncovered = []
    print("%-18s %6s %10s  %s" % ("op", "cases", "max_err", "status"))
    for name in names:
        if only and name not in only:
            continue
        if name not in conform.GENERATORS:
            uncovered.append(name)
            print("%-18s %6d %10s  FAIL (no conformance case)" % (name, 0, "-"))
            continue
        # One generator per op, seeded by the op's name: adding an op's
        # cases does not change the others'.
        rng = np.random.default_rng([SEED, *name.encode()])
        n, bad, worst, details = run_op(lib, name, rng)
        passed += n - bad
        failed += bad
        print("%-18s %6d %10.3g  %s" % (name, n, worst, "ok" if not bad else
                                        "FAIL (%d)" % bad))
        for d in details:
            print("    %s: %s" % (name, d), file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    print("# %.1f s; cases with %s; ops without cases: %s" % (
        time.time() - start, ", ".join("%s %d" % kv for kv in STATS.items()),
        ", ".join(uncovered) or "none"))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or uncovered else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
