#!/usr/bin/env python3
"""Checks the module dependency plan of ../shared/DESIGN.md ("Layout") against the code.

    core <- formats <- data
    core <- ir <- kernels, opt, import <- exec <- runtime <- serving <- tools/python
    data and runtime meet only through core::Tensor and formats; opt does not link kernels;
    serving_base (the codecs) is runtime-free.

Two kinds of edges are read: `#include "..."` lines of every source and header under src/ and
include/kiln/, and the kiln_* libraries named by kiln_module(...) and target_link_libraries(...)
in src/**/CMakeLists.txt. An edge from module A to module B is allowed when B is in ALLOWED[A].
tools/, tests/, bench/, fuzz/ and python/ sit above every module and are not checked.
Edges the plan forbids but the code still has are listed in KNOWN_EXCEPTIONS with the reason;
they are printed on every run, and an exception that the code no longer needs is an error too,
so the list can only shrink.

Usage: check-layering.py [REPO_ROOT]   (exit status 0: clean, 1: violations)
"""

import os
import re
import sys

# What each module may use (directly). Not transitive on purpose: kernels may use formats, but
# nothing lets exec include a data header because kernels happen to.
ALLOWED = {
    "core": set(),
    "formats": {"core"},
    "data": {"core", "formats"},
    "ir": {"core"},
    "kernels": {"core", "ir", "formats"},
    "opt": {"core", "ir"},
    "import": {"core", "ir", "formats"},
    "exec": {"core", "ir", "kernels", "opt", "import", "formats"},
    "runtime": {"core", "ir", "kernels", "opt", "import", "exec", "formats"},
    # The JSON codecs, metrics, batcher and flags: usable without the runtime.
    "serving_base": {"core", "formats"},
    "serving": {"core", "formats", "ir", "exec", "runtime", "serving_base"},
}

# Edges the plan forbids that the code still has, each with why and with exactly which
# includes (or "link <library>") make it up: any other edge between the same modules is a
# violation, and an entry the code no longer needs is an error, so the list can only shrink.
KNOWN_EXCEPTIONS = {
}

# Two libraries are carved out of a folder by a source list in its CMakeLists.txt, read from
# there so that the check follows the build: kiln_formats (formats_srcs in src/data/, the codecs
# under src/data/formats/; the CSV, image, text-line and element-function files beside them
# belong to data) and kiln_serving_base (base_srcs in src/serving/, the runtime-free codecs).
# A header belongs with the source of the same name.
CARVED = {
    # module: (folder under src/ and include/kiln/, CMakeLists.txt, variable)
    "formats": ("data/formats", "src/data/CMakeLists.txt", "formats_srcs"),
    "serving_base": ("serving", "src/serving/CMakeLists.txt", "base_srcs"),
}
CARVED_STEMS = {}  # module -> file stems; filled by load_carved()


def load_carved(root):
    for module, (_, cmake, var) in CARVED.items():
        with open(os.path.join(root, cmake), encoding="utf-8") as f:
            m = re.search(r"set\(\s*%s\s+([^)]*)\)" % var, f.read())
        if m is None:
            sys.exit(f"check-layering: no set({var} ...) in {cmake}")
        CARVED_STEMS[module] = {os.path.splitext(os.path.basename(n))[0] for n in m.group(1).split()}


LIBRARY_MODULES = {
    "kiln_core": "core",
    "kiln_formats": "formats",
    "kiln_data": "data",
    "kiln_ir": "ir",
    "kiln_kernels_cpu": "kernels",
    "kiln_kernels_cuda": "kernels",
    "kiln_opt": "opt",
    "kiln_import_tf": "import",
    "kiln_import_onnx": "import",
    "kiln_exec": "exec",
    "kiln_runtime": "runtime",
    "kiln_serving_base": "serving_base",
    "kiln_serving": "serving",
}


def module_of(path):
    """The module of a repository-relative path (a file or an include), or None."""
    parts = path.split("/")
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "kiln":
        parts = parts[2:]
    elif parts[0] == "src":
        parts = parts[1:]
    elif parts[0] == "kiln":  # an include spelled "kiln/<module>/..."
        parts = parts[1:]
    if len(parts) < 2:
        return None
    stem = os.path.splitext(parts[-1])[0]
    folder = "/".join(parts[:-1])
    for module, (carved_folder, _, _) in CARVED.items():
        if folder == carved_folder and stem in CARVED_STEMS[module]:
            return module
    top = parts[0]
    if top in ("core", "formats", "data", "ir", "kernels", "opt", "import", "exec", "runtime",
               "serving"):
        return top
    return None


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_edges(root):
    for base in ("src", os.path.join("include", "kiln")):
        for dirpath, _, files in os.walk(os.path.join(root, base)):
            for name in files:
                if not name.endswith((".h", ".cc")) or re.search(r"_(test|fuzz|bench)\.cc$", name):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                src_module = module_of(rel)
                if src_module is None:
                    continue
                with open(full, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE_RE.finditer(text):
                    target = module_of(m.group(1))
                    if target is not None and target != src_module:
                        line = text.count("\n", 0, m.start()) + 1
                        yield (src_module, target, m.group(1),
                               f"{rel}:{line}: #include \"{m.group(1)}\"")


def cmake_calls(text):
    """(command, argument text, line) of each kiln_module/target_link_libraries call."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b(kiln_module|target_link_libraries)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), text[m.end():i - 1], text.count("\n", 0, m.start()) + 1


def link_edges(root):
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        if "CMakeLists.txt" not in files:
            continue
        full = os.path.join(dirpath, "CMakeLists.txt")
        rel = os.path.relpath(full, root)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        for _, args, line in cmake_calls(text):
            names = re.findall(r"\bkiln_\w+", args)
            if not names or names[0] not in LIBRARY_MODULES:
                continue
            src_module = LIBRARY_MODULES[names[0]]
            for dep in names[1:]:
                target = LIBRARY_MODULES.get(dep)
                if target is not None and target != src_module:
                    yield src_module, target, f"link {dep}", f"{rel}:{line}: {names[0]} links {dep}"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    load_carved(root)
    violations, excepted = [], {}
    for edges in (include_edges(root), link_edges(root)):
        for src, dst, what, where in edges:
            if dst in ALLOWED[src]:
                continue
            exception = KNOWN_EXCEPTIONS.get((src, dst))
            if exception is not None and what in exception[1]:
                excepted.setdefault((src, dst), {}).setdefault(what, []).append(where)
            else:
                violations.append(f"{where}  ({src} may not depend on {dst})")
    for (src, dst), (reason, allowed_edges) in sorted(KNOWN_EXCEPTIONS.items()):
        seen = excepted.get((src, dst), {})
        if seen:
            print(f"known exception {src} -> {dst}: {reason}")
            for what in sorted(seen):
                for where in seen[what]:
                    print(f"    {where}")
        for what in sorted(allowed_edges - set(seen)):
            violations.append(f"known exception {src} -> {dst} no longer needs {what}: remove it "
                              "from KNOWN_EXCEPTIONS in scripts/check-layering.py")
    if violations:
        print("layering violations (see ../shared/DESIGN.md, Layout):")
        for v in violations:
            print(f"  {v}")
        return 1
    print("layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
