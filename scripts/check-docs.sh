#!/bin/bash
# Checks the documentation: every relative link and #anchor in README.md and
# docs/*.md resolves (anchors as GitHub makes them from headings), and
# README.md is at most 200 lines. Prints each problem as FILE:LINE: ... and
# exits 1 if there is one. Needs only bash and python3.
#   scripts/check-docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - README.md docs/*.md <<'EOF'
import os
import re
import sys
import unicodedata

MAX_README_LINES = 200
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) or ![alt](target); the target ends at the first space or ')'.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif line.strip().startswith(fence):
                    fence = None
                continue
            if fence is None:
                yield n, line.rstrip("\n")


def slug(text):
    """The anchor GitHub gives a heading: its rendered text, lower case,
    without punctuation, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    out = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN" or cat == "Mn":
            out.append("-" if ch == " " else ch)
    return "".join(out)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        for _, line in prose_lines(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                k = seen.get(base, 0)
                seen[base] = k + 1
                found.add(base if k == 0 else f"{base}-{k}")
            for a in HTML_ANCHOR.findall(line):
                found.add(a)
        _anchors[path] = found
    return _anchors[path]


problems = []
files = sys.argv[1:]
for path in files:
    for n, line in prose_lines(path):
        text = INLINE_CODE.sub("", line)
        for target in LINK.findall(text):
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto: ...
            file_part, _, anchor = target.partition("#")
            if file_part:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(dest):
                    problems.append(f"{path}:{n}: broken link {target}: no {dest}")
                    continue
            else:
                dest = path
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    continue  # anchors into source files or directories are not checked
                if anchor not in anchors(dest):
                    problems.append(f"{path}:{n}: broken anchor {target}: no heading #{anchor} in {dest}")

with open("README.md", encoding="utf-8") as f:
    lines = sum(1 for _ in f)
if lines > MAX_README_LINES:
    problems.append(f"README.md: {lines} lines, more than {MAX_README_LINES}")

for p in problems:
    print(p)
if problems:
    print(f"check-docs: {len(problems)} problem(s) in {len(files)} files", file=sys.stderr)
    sys.exit(1)
print(f"check-docs: {len(files)} files, links and anchors resolve; README.md {lines} lines")
EOF
