#!/usr/bin/env python3
"""Checks every #include of the repository against the allowed directions between folders.

The rules are the table "What each folder may include" in docs/architecture.md (the one copy of them): each
row names a folder and the folders its files may include besides their own. This script reads every
source file under the folders it scans, resolves each #include to a file of the repository (as the
compiler would: next to the including file, then under the include roots), and fails when an include
crosses folders in a direction the table does not allow. It also fails when the table's directions form a
cycle, when a folder of src/ has no row, and when an exception row grants what no include uses.

    architecture_test.py REPO            check the repository
    architecture_test.py --self-test     check that the checker catches a wrong include, a cycle, ...
"""
import os
import re
import sys
import tempfile

SCANNED = ["src", "include", "tools", "cli", "bench", "python/src", "tests", "fuzz", "scripts"]
INCLUDE_ROOTS = ["src", "include", "tools", "", "tests", "fuzz", "python/src"]
SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".c")
ANYTHING = "anything"
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
# A table row: | `folder` | `a`, `b` ... | (why, in the exception table) |
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|([^|]*)\|")


def read_tables(doc_path):
    """The rules table and the exceptions table of docs/architecture.md: {folder: set of folders}."""
    rules, exceptions, current = {}, {}, None
    with open(doc_path, encoding="utf-8") as doc:
        for line in doc:
            if line.startswith("#"):
                title = line.lower()
                current = rules if "may include" in title else exceptions if "exception" in title else None
                continue
            match = ROW.match(line)
            if current is None or not match:
                continue
            folder, cell = match.group(1).strip("/"), match.group(2)
            targets = re.findall(r"`([^`]+)`", cell)
            current[folder] = {ANYTHING} if ANYTHING in cell and not targets else {t.strip("/") for t in targets}
    return rules, exceptions


def table_cycle(rules):
    """A cycle among the table's directions, as a list of folders, or None."""
    state = {}

    def visit(folder, path):
        state[folder] = "open"
        for target in sorted(rules.get(folder, ())):
            if target == ANYTHING:
                continue
            if state.get(target) == "open":
                return path + [folder, target]
            if target not in state:
                cycle = visit(target, path + [folder])
                if cycle:
                    return cycle
        state[folder] = "done"
        return None

    for folder in sorted(rules):
        if folder not in state:
            cycle = visit(folder, [])
            if cycle:
                return cycle[cycle.index(cycle[-1]):]
    return None


def folder_of(path, folders):
    """The longest table folder that holds `path` (a repository-relative file path), or None."""
    best = None
    for folder in folders:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def source_files(repo):
    for top in SCANNED:
        root = os.path.join(repo, top)
        for directory, _, names in os.walk(root):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(directory, name), repo).replace(os.sep, "/")


def resolve(repo, including, header):
    """The repository file that `#include header` in `including` names, or None (a system header)."""
    candidates = [os.path.join(os.path.dirname(including), header)]
    candidates += [os.path.join(root, header) for root in INCLUDE_ROOTS]
    for candidate in candidates:
        candidate = os.path.normpath(candidate).replace(os.sep, "/")
        if os.path.isfile(os.path.join(repo, candidate)):
            return candidate
    return None


def check(repo):
    """The list of problems found in `repo` (empty when it follows its table)."""
    rules, exceptions = read_tables(os.path.join(repo, "docs", "architecture.md"))
    problems = []
    if not rules:
        return ["docs/architecture.md has no table 'What each folder may include'"]
    cycle = table_cycle(rules)
    if cycle:
        problems.append("the allowed directions form a cycle: " + " -> ".join(cycle))
    folders = set(rules) | set(exceptions)
    src_dirs = {d for d in os.listdir(os.path.join(repo, "src")) if os.path.isdir(os.path.join(repo, "src", d))}
    for directory in sorted(src_dirs):
        if "src/" + directory not in rules:
            problems.append(f"src/{directory}/ has no row in the table of docs/architecture.md")
    used_exceptions = set()
    for path in source_files(repo):
        source = folder_of(path, folders) or os.path.dirname(path)
        allowed = rules.get(source)
        if allowed is None:
            problems.append(f"{path}: its folder has no row in the table of docs/architecture.md")
            continue
        with open(os.path.join(repo, path), encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(text, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target_path = resolve(repo, path, match.group(1))
                if target_path is None:
                    continue
                target = folder_of(target_path, folders) or os.path.dirname(target_path)
                if target == source or ANYTHING in allowed or target in allowed:
                    continue
                if target in exceptions.get(source, ()):
                    used_exceptions.add((source, target))
                    continue
                problems.append(f"{path}:{number}: includes {target_path}, but {source}/ may not include {target}/")
    for source, targets in sorted(exceptions.items()):
        for target in sorted(targets - {ANYTHING}):
            if (source, target) not in used_exceptions:
                problems.append(f"the exception {source}/ -> {target}/ is no longer needed: remove its row")
    return problems


def self_test():
    """Checks the checker on small made-up trees: a clean one passes, and each kind of fault is reported."""
    table = """# Layers
## What each folder may include
| folder | may include |
| --- | --- |
| `include/flashattn` | nothing |
| `src/common` | `include/flashattn` |
| `src/kernel` | `include/flashattn`, `src/common` |
| `src` | `include/flashattn`, `src/common`, `src/kernel` |
| `tests` | anything |
"""
    files = {
        "include/flashattn/api.h": "",
        "src/common/util.h": '#include "flashattn/api.h"\n',
        "src/kernel/kernel.h": '#include "common/util.h"\n#include <vector>\n',
        "src/api.cc": '#include "kernel/kernel.h"\n',
        "tests/t.cc": '#include "kernel/kernel.h"\n#include "common/util.h"\n',
    }
    cases = {
        "clean": ({}, ""),
        "upward include": ({"src/common/util.h": '#include "kernel/kernel.h"\n'}, "may not include src/kernel/"),
        "cycle": ({}, "cycle"),
        "folder without row": ({"src/extra/x.h": ""}, "src/extra/ has no row"),
        "stale exception": ({}, "no longer needed"),
    }
    failures = []
    for name, (overrides, expected) in cases.items():
        with tempfile.TemporaryDirectory() as repo:
            doc = table
            if name == "cycle":
                doc = doc.replace("| `src/common` | `include/flashattn` |", "| `src/common` | `src/kernel` |")
            if name == "stale exception":
                doc += "\n## Exceptions\n| folder | may also include | why |\n| `tests` | `src` | none |\n"
                doc = doc.replace("| `tests` | anything |", "| `tests` | `src/kernel`, `src/common` |")
            for path, text in {**files, **overrides, "docs/architecture.md": doc}.items():
                os.makedirs(os.path.join(repo, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(repo, path), "w", encoding="utf-8") as out:
                    out.write(text)
            problems = check(repo)
            if not expected and problems:
                failures.append(f"{name}: expected no problem, got {problems}")
            if expected and not any(expected in problem for problem in problems):
                failures.append(f"{name}: expected a problem mentioning '{expected}', got {problems}")
    for failure in failures:
        print("self-test:", failure)
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    problems = check(argv[1])
    for problem in problems:
        print(problem)
    if not problems:
        print("every #include follows docs/architecture.md")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
