#!/usr/bin/env python3
"""Checks the size limits of the C++ and CUDA sources: no file over 600 lines and no function
(or lambda, counted from its opening brace to its closing one) over 80 lines.

  tools/check_sizes.py    exit 0 and "sizes: N files within 600 lines, functions within 80",
                          else one line per file or function over, and exit 1

Functions are found by their braces, with comments, strings and character literals blanked
first: a brace whose text since the last ';', '{' or '}' ends in ')' (and qualifiers such as
const, override, noexcept, a trailing return type or a constructor's initializer list) opens a
function unless that text starts with a control keyword. Only outermost functions count (a lambda
inside a function is part of it).
"""
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else)\b")
QUALIFIERS = re.compile(
    r"\)\s*(const\s*)?(volatile\s*)?(&&?\s*)?(noexcept(\([^()]*\))?\s*)?(override\s*)?(final\s*)?"
    r"(mutable\s*)?(->[^{;]*)?$")


def blank_literals(text):
    """The text with comments, strings and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:j]))
                i = j
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " ")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path, text):
    code = blank_literals(text)
    line = 1
    depth = 0
    header = []  # Text since the last ';', '{' or '}'.
    start = None  # (line, depth) of the open function.
    found = []
    for c in code:
        if c == "\n":
            line += 1
        if c == "{":
            h = "".join(header).strip()
            # An initializer list: "Foo(int a) : a_(a), b_{b}" ends in ')' or '}'-less text.
            h_sig = re.sub(r"\)\s*:\s*[\w:<>,\s()]*$", ")", h) if ":" in h else h
            if start is None and not CONTROL.match(h) and QUALIFIERS.search(h_sig):
                start = (line, depth, " ".join(h.split())[-70:])
            depth += 1
            header = []
        elif c == "}":
            depth -= 1
            if start is not None and depth == start[1]:
                length = line - start[0] + 1
                if length > MAX_FUNCTION_LINES:
                    found.append((path, start[0], length, start[2]))
                start = None
            header = []
        elif c == ";":
            header = []
        else:
            header.append(c)
    return found


def main():
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    files = subprocess.run(["git", "ls-files", "*.cc", "*.h", "*.cu", "*.cuh"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    bad = 0
    for path in files:
        with open(f"{root}/{path}", encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            print(f"sizes: {path}: {lines} lines (limit {MAX_FILE_LINES})", file=sys.stderr)
            bad += 1
        for p, at, length, what in long_functions(path, text):
            print(f"sizes: {p}:{at}: a function of {length} lines (limit {MAX_FUNCTION_LINES}): "
                  f"...{what}", file=sys.stderr)
            bad += 1
    if bad:
        print(f"sizes: {bad} over the limits; split them", file=sys.stderr)
        return 1
    print(f"sizes: {len(files)} files within {MAX_FILE_LINES} lines, functions within "
          f"{MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
