#!/usr/bin/env python3
"""The tree's shape, checked (docs/architecture.md, "Layers").

Fails when
  - two files under src/ share a name;
  - a header in include/ is used by one module only, and by no other public
    header (it belongs beside that module);
  - a header in include/ has no owner: neither a module src/NAME/ (or
    src/PREFIX/ for PREFIX_NAME.h) nor a file NAME.c says where its code is;
  - a module includes a header of a module that test/structure/layers does
    not let it use, or the layers themselves go round in a circle;
  - a function in src/ (generated src/proto/ aside) is longer than
    MAX_FUNCTION_LINES, counted from its signature's first line to its
    closing brace.

Usage: test/structure/check.py [ROOT]    (prints "N passed, N failed")
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
MAX_FUNCTION_LINES = 80
# Functions allowed to be longer, with the reason; empty: none needs it.
LONG_FUNCTIONS = {}
FUNCTION_END = re.compile(r'^}\s*(/[*/].*)?$')
CALLED = re.compile(r'([A-Za-z_]\w*)\s*\(')


def files_under(top, exts):
    for d, _, names in os.walk(os.path.join(ROOT, top)):
        for n in sorted(names):
            if n.endswith(exts):
                yield os.path.relpath(os.path.join(d, n), ROOT)


def module_of(path):
    """src/reserve/store.c -> reserve; src/main.c -> main."""
    parts = path.split(os.sep)
    return parts[1] if len(parts) > 2 else os.path.splitext(parts[1])[0]


def functions(text):
    """(name, first line, length) of each function in a C file of the project's
    style: the definition starts at column 0 (return type, then the name, the
    signature maybe over several lines), its body ends with a '}' alone at
    column 0. Top-level initializers and struct bodies (ending '};') are not
    functions."""
    lines = text.split('\n')
    start = None          # the first line of the declaration being read
    body = None           # (name or None for data, start) while inside braces
    in_comment = False
    for i, line in enumerate(lines):
        if body is not None:
            if FUNCTION_END.match(line):
                if body[0]:
                    yield body[0], body[1] + 1, i - body[1] + 1
                body = start = None
            elif line.startswith('}'):
                body = start = None
            continue
        s = line.strip()
        if in_comment:
            in_comment = '*/' not in line
            continue
        if s.startswith('/*'):
            in_comment = '*/' not in s
            continue
        if not s or s.startswith('//') or line.startswith('#'):
            continue
        if start is None and re.match(r'[A-Za-z_]', line):
            start = i
        if start is None:
            continue
        code = re.sub(r'/\*.*?\*/|//.*$', '', line).rstrip()
        if code.endswith('{'):
            head = ' '.join(lines[start:i + 1])
            m = CALLED.search(head)
            fn = m and '=' not in head.split('(')[0]
            body = (m.group(1) if fn else None, start)
        elif code.endswith(';') or code.endswith('}'):    # a declaration, a one-line function
            start = None


def read_layers():
    allowed = {}
    with open(os.path.join(ROOT, 'test', 'structure', 'layers')) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            mod, _, uses = line.partition(':')
            allowed[mod.strip()] = set(uses.split())
    return allowed


def main():
    problems = []
    failing = []          # the number of the check each problem fails
    checks = 0

    def fail(text):
        problems.append(text)
        failing.append(checks)
    sources = list(files_under('src', ('.c', '.h')))

    # 1. Names a reader can place.
    checks += 1
    seen = {}
    for p in sources:
        seen.setdefault(os.path.basename(p), []).append(p)
    for name, paths in sorted(seen.items()):
        if len(paths) > 1 and not name.endswith('.pb-c.c') and not name.endswith('.pb-c.h'):
            fail('file name %s repeats: %s' % (name, ', '.join(paths)))

    # 2. Who owns each public header.
    checks += 1
    modules = {module_of(p) for p in sources}
    stems = {}
    for p in sources:
        if p.endswith('.c'):
            stems.setdefault(os.path.splitext(os.path.basename(p))[0], set()).add(module_of(p))
    owner = {}
    for h in files_under('include', ('.h',)):
        stem = os.path.splitext(os.path.basename(h))[0]
        if stem in modules:
            owner[os.path.basename(h)] = stem
        elif stem.split('_')[0] in modules:          # agent_parse.h -> agent
            owner[os.path.basename(h)] = stem.split('_')[0]
        elif len(stems.get(stem, ())) == 1:
            owner[os.path.basename(h)] = next(iter(stems[stem]))
        else:
            fail('%s: no module src/%s/ and no single %s.c says who owns it' % (h, stem, stem))
    for p in sources:                   # private headers belong to their module
        if p.endswith('.h'):
            owner.setdefault(os.path.basename(p), module_of(p))

    # 3. Edges between modules, and who uses each public header.
    users = {h: set() for h in owner if os.path.exists(os.path.join(ROOT, 'include', h))}
    edges = {}
    for p in sources + list(files_under('include', ('.h',))):
        text = open(os.path.join(ROOT, p), errors='replace').read()
        mod = module_of(p) if p.startswith('src') else owner.get(os.path.basename(p))
        for inc in INCLUDE.findall(text):
            h = os.path.basename(inc)
            o = owner.get(h)
            if o is None or mod is None:
                continue
            if h in users and (o != mod or p.startswith('include')):
                users[h].add(mod if o != mod else 'include/' + os.path.basename(p))
            if o != mod:
                edges.setdefault((mod, o), p)

    checks += 1
    for h, us in sorted(users.items()):
        if not us:
            fail('include/%s is used by %s only: keep it beside src/%s/' % (h, owner[h], owner[h]))

    # 4. Layers.
    checks += 1
    allowed = read_layers()
    for (a, b), where in sorted(edges.items()):
        if a not in allowed:
            fail('module %s is not in test/structure/layers' % a)
            allowed[a] = set()
        elif b not in allowed[a]:
            fail('%s (%s) includes %s, which its layer may not use' % (where, a, b))
    checks += 1
    state = {}

    def visit(m, path):
        if state.get(m) == 1:
            fail('test/structure/layers goes round: ' + ' -> '.join(path + [m]))
            return
        if state.get(m) == 2:
            return
        state[m] = 1
        for n in sorted(allowed.get(m, ())):
            visit(n, path + [m])
        state[m] = 2
    for m in sorted(allowed):
        visit(m, [])

    # 6. Functions short enough to read whole.
    checks += 1
    for p in sources:
        if not p.endswith('.c') or p.startswith(os.path.join('src', 'proto') + os.sep):
            continue
        for name, line, length in functions(open(os.path.join(ROOT, p), errors='replace').read()):
            if length > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS:
                fail('%s:%d: %s is %d lines, over %d: split it where its pieces have names of their own'
                     % (p, line, name, length, MAX_FUNCTION_LINES))

    for p in problems:
        print('structure: ' + p)
    failed = len(set(failing))
    print('%d passed, %d failed' % (checks - failed, failed))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
