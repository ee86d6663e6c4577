#!/usr/bin/env python3
"""The repository stands alone: no tracked file names a path outside it.

Usage: standalone_test.py SOURCE_DIR

Checks every tracked text file (`git ls-files`; without git, every file under SOURCE_DIR except
build*/, .venv*/, models/ and .git/), skipping binary files and files over 2 MB, for:

  (a) a mention of the `shared` folder beside the repository (as a `..` path) or of an absolute
      path in the `/work` tree (see OUTSIDE);
  (b) a Markdown link [text](target) whose relative target resolves outside the repository or to
      nothing in it (http(s):, mailto: and #anchor targets are not checked; an anchor after a
      path is dropped before the path is checked).

Prints each problem as FILE:LINE: what, then "N files checked, M problems"; exits 1 when there is
a problem, 2 on a usage error.
"""
import os
import re
import subprocess
import sys

MAX_BYTES = 2 * 1024 * 1024
SKIPPED_DIRS = re.compile(r"^(build[^/]*|\.venv[^/]*|models|\.git)$")
# Spelled in two parts so that this file does not report itself.
OUTSIDE = re.compile(r"\.\./" + "shared" + r"|(?<![\w.])/" + "work" + r"/")
# [text](target) or [text](target "title"); images too. Targets in <...> may hold spaces.
MD_LINK = re.compile(r"\[[^\]\n]*\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+\"[^\"\n]*\")?\s*\)")
EXTERNAL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|#)")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files(root):
    """Relative paths of the repository's files: git's list, or a walk of the tree."""
    if os.path.exists(os.path.join(root, ".git")):
        try:
            out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                                 capture_output=True).stdout
            return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
        except (OSError, subprocess.CalledProcessError):
            pass
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if not SKIPPED_DIRS.match(d)]
        else:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            files.append(os.path.normpath(os.path.join(rel_dir, name)))
    return sorted(files)


def read_text(path):
    """The file's text, or None for a binary, unreadable or oversized file."""
    try:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def link_problem(root, rel_file, target):
    """Why the Markdown link `target` in `rel_file` does not stay in the repository, or None."""
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1].strip()
    if not target or EXTERNAL.match(target):
        return None
    path = target.split("#", 1)[0].split("?", 1)[0]
    if not path:
        return None
    if path.startswith("/"):
        return f"link to the absolute path {target}"
    resolved = os.path.normpath(os.path.join(root, os.path.dirname(rel_file), path))
    if os.path.commonpath([root, resolved]) != root:
        return f"link {target} leads outside the repository"
    if not os.path.exists(resolved):
        return f"link {target} leads to nothing in the repository"
    return None


def check_file(root, rel_file, text):
    """The problems of one file, as 'FILE:LINE: what'."""
    problems = []
    markdown = rel_file.lower().endswith((".md", ".markdown"))
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        for match in OUTSIDE.finditer(line):
            problems.append(f"{rel_file}:{number}: names {match.group(0)!r}, outside the repository")
        if not markdown:
            continue
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in MD_LINK.finditer(line):
            why = link_problem(root, rel_file, match.group(1))
            if why:
                problems.append(f"{rel_file}:{number}: {why}")
    return problems


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = os.path.realpath(argv[1])
    checked = 0
    problems = []
    for rel_file in tracked_files(root):
        text = read_text(os.path.join(root, rel_file))
        if text is None:
            continue
        checked += 1
        problems.extend(check_file(root, rel_file, text))
    for problem in problems:
        print(problem)
    print(f"{checked} files checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
