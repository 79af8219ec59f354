#!/usr/bin/env python3
"""Module import circles in the workspace's crates (issue 38).

For each crate under crates/*/src this builds the graph of module
references between its files and prints every strongly connected
component of more than one file: a set of modules that import each other
round a circle, none of which can be understood, moved or split without
the others.

  module = file; a folder's mod.rs (or the a.rs beside a folder a/) is that
  folder's module; an inline `mod x { ... }` belongs to its file.

  edge   = a path in code (not in comments or strings) that starts with
  `crate::`, `super::` or `self::` (or `$crate::`), in a `use` tree or
  anywhere in an expression or type. With --child-paths, also a bare path
  whose first segment is a child module of the module it is written in
  (`use child::X`, the same as `use self::child::X`): that finds more
  circles, mostly a mod.rs or lib.rs re-exporting from a child that
  imports from it. `crate::a::b::Item` is an edge to the file of the deepest module
  of a, a::b that exists; `crate::Item` is one to lib.rs/main.rs. `mod x;`
  declarations are not edges.

Crate roots are src/lib.rs, src/main.rs and src/bin/*.rs; the module tree
is followed from them through `mod x;` declarations.

It also lists each import in crates/server/src/nfs4 that runs back up: from
a file in a subfolder of nfs4 to the file of one of its ancestor modules
(nfs4/mod.rs, state/mod.rs, attr.rs, ...). Files reached only through a
`#[cfg(test)] mod` are marked (test).

Usage: scripts/check-imports.py [--strict CRATE...] [--crate CRATE...]
                                [--child-paths] [-v]

Exits 1 when a crate named after --strict has a circle (for `server`,
also when a non-test file imports nfs4/mod.rs from below: the hub the
handlers once all reached up to); otherwise 0, whatever it reports (2 on
a bad command line). The other imports running back up are listed, not
failed: a test module's `use super::*` and a child file implementing its
parent's type (state/deleg.rs on state::State) are how Rust splits one
module. Python 3 standard library only.

The crates that must stay circle-free:
  python3 scripts/check-imports.py --strict rpc metrics
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_HEADS = {"crate", "super", "self"}
RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')


# ---------------------------------------------------------------- lexing


def tokens(src):
    """Rust tokens that matter here: identifiers, `::` and punctuation.
    Comments, string, char and number literals are dropped; lifetimes
    become the token "'"."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == '"':
            i = skip_string(src, i + 1)
        elif (m := RAW_STRING.match(src, i)) and (
            i == 0 or not is_ident_char(src[i - 1])
        ):
            close = '"' + m.group(1)
            j = src.find(close, m.end())
            i = n if j < 0 else j + len(close)
        elif c in "bc" and src.startswith('"', i + 1) and (i == 0 or not is_ident_char(src[i - 1])):
            i = skip_string(src, i + 2)
        elif c == "b" and src.startswith("'", i + 1) and (i == 0 or not is_ident_char(src[i - 1])):
            i = skip_char(src, i + 1)
        elif c == "'":
            if src.startswith("\\", i + 1) or src.startswith("'", i + 2):
                i = skip_char(src, i)
            else:
                out.append("'")
                i += 1
        elif c == "r" and src.startswith("#", i + 1) and i + 2 < n and is_ident_start(src[i + 2]):
            j = i + 2
            while j < n and is_ident_char(src[j]):
                j += 1
            out.append(src[i + 2 : j])
            i = j
        elif is_ident_start(c):
            j = i
            while j < n and is_ident_char(src[j]):
                j += 1
            out.append(src[i:j])
            i = j
        elif c.isdigit():
            j = i
            while j < n and (is_ident_char(src[j]) or (src[j] == "." and j + 1 < n and src[j + 1].isdigit())):
                j += 1
            out.append("0")
            i = j
        elif src.startswith("::", i):
            out.append("::")
            i += 2
        else:
            out.append(c)
            i += 1
    return out


def is_ident_start(c):
    return c.isalpha() or c == "_"


def is_ident_char(c):
    return c.isalnum() or c == "_"


def skip_quoted(src, i, quote):
    """The index past the closing `quote` of a literal whose body starts
    at src[i] (backslash escapes skipped); len(src) if it never closes."""
    n = len(src)
    while i < n:
        if src[i] == "\\":
            i += 2
        elif src[i] == quote:
            return i + 1
        else:
            i += 1
    return n


def skip_string(src, i):
    return skip_quoted(src, i, '"')


def skip_char(src, i):
    # src[i] is the opening quote
    return skip_quoted(src, i + 1, "'")


# ---------------------------------------------------------------- parsing


def parse_use_tree(toks, i):
    """Parses a use tree at toks[i]; returns (paths, next index). Each path
    is a list of segments; a `{self}` inside a group ends its prefix."""
    prefix = []
    n = len(toks)
    while i < n:
        t = toks[i]
        if t == "{":
            paths = []
            i += 1
            while i < n and toks[i] != "}":
                if toks[i] == ",":
                    i += 1
                    continue
                sub, i = parse_use_tree(toks, i)
                paths.extend(prefix + (p if p != ["self"] else []) for p in sub)
            return paths, i + 1
        if t == "*":
            return [prefix + ["*"]], i + 1
        if t == "$" and i + 1 < n and toks[i + 1] == "crate":
            i += 1
            continue
        if is_ident_start(t[0]):
            prefix.append(t)
            i += 1
            if i < n and toks[i] == "::":
                i += 1
                continue
            if i < n and toks[i] == "as":
                i += 2
            return [prefix], i
        return [prefix], i
    return [prefix], i


def parse_expr_path(toks, i):
    """A path in an expression or type, from toks[i]; returns (segments,
    next index). Stops at generics or anything not `ident ::`."""
    segs = []
    n = len(toks)
    while i < n and is_ident_start(toks[i][0]):
        segs.append(toks[i])
        if i + 1 < n and toks[i + 1] == "::":
            i += 2
            if i < n and toks[i] == "<":
                break
        else:
            i += 1
            break
    return segs, i


class Module:
    def __init__(self, path, file, test):
        self.path = path  # tuple of names from the crate root
        self.file = file  # relative to the crate's src/
        self.test = test
        self.children = {}  # name -> Module (file or inline)


def scan_file(crate_src, rel, modpath, test, modules, todo):
    """Reads one file: declares its modules, returns the references it
    makes as (module path in which it occurs, list of segments)."""
    with open(os.path.join(crate_src, rel), encoding="utf-8") as f:
        toks = tokens(f.read())
    # the folder in which this file's child modules live
    base = os.path.basename(rel)
    if base in ("lib.rs", "main.rs", "mod.rs") or (rel.startswith("bin" + os.sep) and rel.count(os.sep) == 1):
        childdir = os.path.dirname(rel)
    else:
        childdir = rel[: -len(".rs")]
    refs = []
    stack = [(modpath, childdir, None, test)]  # (module path, child folder, brace depth opened at, test)
    depth = 0
    pending_test = False
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        cur, cdir, _, ctest = stack[-1]
        if t == "#" and i + 1 < n and toks[i + 1] in ("[", "!"):
            # attribute: note #[cfg(test)], skip the rest
            j = i + 1 if toks[i + 1] == "[" else i + 2
            k, d = j, 0
            while k < n:
                if toks[k] == "[":
                    d += 1
                elif toks[k] == "]":
                    d -= 1
                    if d == 0:
                        break
                k += 1
            attr = toks[j + 1 : k]
            if attr[:4] == ["cfg", "(", "test", ")"]:
                pending_test = True
            i = k + 1
            continue
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if len(stack) > 1 and stack[-1][2] == depth:
                stack.pop()
        elif t == ";":
            pending_test = False
        if t == "mod" and i + 2 < n and is_ident_start(toks[i + 1][0]) and toks[i + 2] in ("{", ";"):
            name = toks[i + 1]
            mpath = cur + (name,)
            mtest = ctest or pending_test
            pending_test = False
            if toks[i + 2] == ";":
                cand = [os.path.join(cdir, name + ".rs"), os.path.join(cdir, name, "mod.rs")]
                found = [c for c in cand if os.path.isfile(os.path.join(crate_src, c))]
                if found:
                    m = Module(mpath, found[0], mtest)
                    modules[mpath] = m
                    todo.append(m)
                i += 3
            else:
                modules[mpath] = Module(mpath, rel, mtest)
                stack.append((mpath, os.path.join(cdir, name), depth, mtest))
                depth += 1
                i += 3
            continue
        if t == "use":
            paths, i = parse_use_tree(toks, i + 1)
            for p in paths:
                refs.append((cur, p))
            continue
        prev = toks[i - 1] if i else ""
        if prev != "::" and not (prev == "in" and i >= 2 and toks[i - 2] == "("):
            if t in PATH_HEADS and i + 1 < n and toks[i + 1] == "::":
                segs, i = parse_expr_path(toks, i)
                refs.append((cur, segs))
                continue
            if is_ident_start(t[0]) and i + 1 < n and toks[i + 1] == "::" and prev != "$":
                segs, i = parse_expr_path(toks, i)
                refs.append((cur, segs))
                continue
        i += 1
    return refs


def resolve(cur, segs, modules, child_paths):
    """The module path a reference names, or None for another crate."""
    if not segs:
        return None
    if segs[0] == "crate":
        path, rest = (), segs[1:]
    elif segs[0] in ("self", "super"):
        path, rest = cur, segs
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                if not path:
                    return None
                path = path[:-1]
            rest = rest[1:]
    elif child_paths and cur + (segs[0],) in modules:
        path, rest = cur, segs
    else:
        return None
    for s in rest:
        if path + (s,) in modules:
            path = path + (s,)
        else:
            break
    return path


def crate_graph(crate_src, child_paths):
    """(files, edges, test files, up-import candidates) of one crate:
    edges maps file -> {file: [(module path, segments)]}."""
    roots = []
    for r in ("lib.rs", "main.rs"):
        if os.path.isfile(os.path.join(crate_src, r)):
            roots.append(r)
    bindir = os.path.join(crate_src, "bin")
    if os.path.isdir(bindir):
        roots += [os.path.join("bin", f) for f in sorted(os.listdir(bindir)) if f.endswith(".rs")]
    files, edges, tests, modfile = set(), {}, set(), {}
    for root in roots:
        modules = {(): Module((), root, False)}
        todo = [modules[()]]
        refs = []
        while todo:
            m = todo.pop()
            files.add(m.file)
            if m.test:
                tests.add(m.file)
            refs.append((m.file, scan_file(crate_src, m.file, m.path, m.test, modules, todo)))
        for f, rs in refs:
            for cur, segs in rs:
                target = resolve(cur, segs, modules, child_paths)
                if target is None:
                    continue
                tf = modules[target].file
                if tf != f:
                    edges.setdefault(f, {}).setdefault(tf, []).append((cur, segs))
        for p, m in modules.items():
            if m.file not in modfile or len(p) < len(modfile[m.file]):
                modfile[m.file] = p
    return files, edges, tests, modfile


def sccs(nodes, edges):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out, key=lambda c: (-len(c), c))


def up_imports(files, edges, modfile, under):
    """Edges from a file in a subfolder of `under` (a folder relative to
    src/) to the file of one of its ancestor modules inside `under`."""
    found = []
    top = modfile.get(os.path.join(under, "mod.rs"))
    if top is None:
        return found
    for f in sorted(files):
        if not f.startswith(under + os.sep) or os.path.dirname(f) == under:
            continue
        mine = modfile[f]
        for tf, why in sorted(edges.get(f, {}).items()):
            tp = modfile.get(tf)
            if tp is not None and len(tp) >= len(top) and tp == mine[: len(tp)] and tp != mine:
                found.append((f, tf, why))
    return found


def rel_crate(c, f):
    return os.path.join("crates", c, "src", f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strict", nargs="+", default=[], metavar="CRATE", help="crates that must have no circle")
    ap.add_argument("--crate", nargs="+", default=[], metavar="CRATE", help="only these crates")
    ap.add_argument("--child-paths", action="store_true", help="count `use child::X` as `use self::child::X`")
    ap.add_argument("-v", "--verbose", action="store_true", help="show the edges inside each circle")
    a = ap.parse_args()
    crates_dir = os.path.join(ROOT, "crates")
    crates = sorted(d for d in os.listdir(crates_dir) if os.path.isdir(os.path.join(crates_dir, d, "src")))
    for c in a.strict + a.crate:
        if c not in crates:
            ap.error(f"no crate {c} (have: {' '.join(crates)})")
    if a.crate:
        crates = [c for c in crates if c in a.crate]
    failed = []
    for c in crates:
        files, edges, tests, modfile = crate_graph(os.path.join(crates_dir, c, "src"), a.child_paths)
        circles = sccs(files, edges)
        strict = c in a.strict
        nedges = sum(len(v) for v in edges.values())
        status = "ok" if not circles else ("FAIL" if strict else "circles")
        print(f"{c}: {len(files)} files, {nedges} edges, {len(circles)} circle(s){' [strict]' if strict else ''}: {status}")
        for comp in circles:
            print(f"  circle of {len(comp)}:")
            for f in comp:
                mark = " (test)" if f in tests else ""
                inside = sorted(t for t in edges.get(f, {}) if t in comp)
                print(f"    {f}{mark} -> {', '.join(inside)}")
                if a.verbose:
                    for t in inside:
                        shown = sorted({"::".join(s) for _, s in edges[f][t]})
                        print(f"        {t}: {', '.join(shown[:6])}{' ...' if len(shown) > 6 else ''}")
        if circles and strict:
            failed.append(c)
        if c == "server":
            ups = up_imports(files, edges, modfile, "nfs4")
            print(f"  nfs4: {len(ups)} import(s) running back up{' [strict]' if strict else ''}")
            for f, tf, why in ups:
                mark = " (test)" if f in tests else ""
                shown = sorted({"::".join(s) for _, s in why})
                print(f"    {f}{mark} -> {tf}: {', '.join(shown[:4])}{' ...' if len(shown) > 4 else ''}")
            top = os.path.join("nfs4", "mod.rs")
            hub = [u for u in ups if u[1] == top and u[0] not in tests]
            if hub and strict and c not in failed:
                failed.append(c)
    if failed:
        print(f"check-imports: module import circles in strict crate(s): {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
