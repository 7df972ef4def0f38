"""Checks libloom's listing of its API (loom_api_describe) against the
library and the headers, compiled independently of it:
  - its functions are exactly the symbols the library exports;
  - its structs, enums and typedefs are exactly the type names the
    headers' text defines (found here by regular expressions);
  - a C file made of its numbers (every struct's size and field offsets,
    sizes and types, every enum value and constant, every function's
    declaration restated) compiles against include/loom/ with a C compiler:
    a wrong number fails a static assertion, a wrong declaration conflicts;
  - ctypes, fed the listing, lays out every struct as the compiler does.

usage: /usr/bin/python3 tests/conformance/check_api.py libloom.so INCLUDE_DIR [CC]
"""
import ctypes as C
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from api import Api  # noqa: E402


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def declared_types(include):
    """Every type name include/loom/*.h defines: `} name;` closing a struct
    or enum, `typedef ... name;` and `typedef R (*name)(...);`."""
    names = set()
    for path in glob.glob(os.path.join(include, "loom", "*.h")):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", open(path).read(), flags=re.S)
        names |= set(re.findall(r"\}\s*(\w+)\s*;", text))
        names |= set(re.findall(r"typedef[^;{}()]*?\b(\w+)\s*;", text))
        names |= set(re.findall(r"typedef[^;{}]*?\(\s*\*\s*(\w+)\s*\)", text))
    return names


def struct_lines(s):
    """Size and offsets as assertions, and each field's listed type as the
    type of a pointer to it (a wrong type is an incompatible pointer)."""
    n = s["name"]
    lines = ['_Static_assert(sizeof(%s) == %d, "%s size");' % (n, s["size"], n)]
    body = []
    for f in s["fields"]:
        lines.append('_Static_assert(offsetof(%s, %s) == %d && sizeof(((%s *)0)->%s) == %d, '
                     '"%s.%s");' % (n, f["name"], f["offset"], n, f["name"], f["size"], n, f["name"]))
        array = "[%d]" % f["count"] if f["count"] != 1 else ""
        body.append("  %s (*%s)%s = &p->%s;\n  (void)%s;" % (f["type"], f["name"], array,
                                                          f["name"], f["name"]))
    lines.append("void check_%s(%s *p) {\n%s\n}" % (n, n, "\n".join(body)))
    return lines


def literal(v):
    """v as a C long long literal (INT64_MIN has none of its own)."""
    return "(%dLL - 1)" % (v + 1) if v == -2 ** 63 else "%dLL" % v


def assertions(listing):
    """C lines restating every number and declaration of the listing."""
    lines = ["#include <stddef.h>"]
    lines += ['#include "loom/%s"' % h for h in sorted({f["header"] for f in listing["functions"]})]
    for s in listing["structs"]:
        lines += struct_lines(s)
    for e in listing["enums"]:
        lines.append('_Static_assert(sizeof(%s) == %d, "%s size");' % (e["name"], e["size"], e["name"]))
        for v in e["values"]:
            lines.append('_Static_assert(%s == %d, "%s");' % (v["name"], v["value"], v["name"]))
    for c in listing["constants"]:
        lines.append('_Static_assert((long long)(%s) == %s, "%s");' % (c["name"], literal(c["value"]),
                                                                      c["name"]))
    for t in listing["typedefs"]:
        lines.append("typedef %s;" % t["decl"])  # a typedef restated must match
        if t["size"]:
            lines.append('_Static_assert(sizeof(%s) == %d, "%s size");' % (t["name"], t["size"], t["name"]))
    for f in listing["functions"]:
        lines.append(f["decl"])  # a declaration restated must match
    return "\n".join(lines) + "\n"


def compile_check(text, include, cc):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "listing_check.c")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([cc, "-std=c11", "-fsyntax-only", "-Wall", "-Werror", "-I", include, path],
                           capture_output=True, text=True)
        return r.returncode, r.stderr


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    lib, include = argv[1], argv[2]
    cc = argv[3] if len(argv) > 3 else "cc"
    api = Api(C.CDLL(os.path.abspath(lib)))
    listing = api.listing
    failures = []
    names, symbols = set(api.functions()), exported(lib)
    if names != symbols:
        failures.append("listed, not exported: %s; exported, not listed: %s" % (
            sorted(names - symbols), sorted(symbols - names)))
    listed = {t["name"] for k in ("structs", "enums", "typedefs") for t in listing[k]}
    declared = declared_types(include)
    if listed != declared:
        failures.append("types listed, not in the headers: %s; in the headers, not listed: %s" % (
            sorted(listed - declared), sorted(declared - listed)))
    rc, err = compile_check(assertions(listing), include, cc)
    if rc != 0:
        failures.append("the listing's numbers do not compile against %s:\n%s" % (include, err[:4000]))
    for s in listing["structs"]:
        try:
            api.struct(s["name"])
        except (KeyError, ValueError) as e:
            failures.append("ctypes: %s" % e)
    for f in failures:
        print("FAIL", f)
    print("%d functions, %d structs, %d enums, %d typedefs, %d constants checked" % (
        len(listing["functions"]), len(listing["structs"]), len(listing["enums"]),
        len(listing["typedefs"]), len(listing["constants"])))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
