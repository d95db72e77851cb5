#!/usr/bin/env python3
"""Lists the functions (and lambdas) of the C++ sources longer than a line limit.

    scripts/long_functions.py [--max 80] [path ...]     (default path: src)

Prints `lines file:line name` per function body over the limit, longest first,
and exits 1 when there is any, so CI can hold the line. A body is a `{ ... }`
whose opening brace follows a parameter list (or a constructor's initializer
list); comments, string and character literals are blanked first, so braces
inside them do not count. Lines are counted from the opening brace to the
closing one.
"""
import argparse
import pathlib
import re
import sys

CONTROL = {"if", "for", "while", "switch", "catch"}


def blank_literals(src):
    """The source with comments and string/char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i) + 2
        elif c == '"' and i > 0 and src[i - 1] == "R":
            delim = re.match(r'R"([^(]*)\(', src[i - 1:]).group(1)
            j = src.find(")" + delim + '"', i) + len(delim) + 2
        elif c == '"' or (c == "'" and not (i > 0 and src[i - 1].isalnum())):  # 1'000 is a digit separator
            j = i + 1
            while src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    return "".join(out)


def body_name(before):
    """The function's name when `before` (the text up to a `{`) ends a function head, else None."""
    head = re.sub(r"\b(const|override|noexcept|final|mutable|try)\s*$", "", before).rstrip()
    head = re.sub(r"->\s*[\w:<>,\s*&]+$", "", head).rstrip()  # trailing return type
    if head.endswith(")"):
        depth, k = 0, len(head) - 1
        while k >= 0:
            if head[k] == ")":
                depth += 1
            elif head[k] == "(":
                depth -= 1
                if depth == 0:
                    break
            k -= 1
        name = re.search(r"(\w+)\s*$", head[:k])
        if name:
            return None if name.group(1) in CONTROL else name.group(1)
        return "lambda" if head[:k].rstrip().endswith("]") else None
    if re.search(r"\)\s*:\s*[\w:]+[({].*[)}]$", head, re.S):
        return "constructor"
    return None


def long_bodies(path, limit):
    text = blank_literals(path.read_text())
    found, open_braces = [], []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            open_braces.append((m.start(), body_name(text[max(0, m.start() - 300):m.start()].rstrip())))
        elif open_braces:
            start, name = open_braces.pop()
            if name:
                first = text.count("\n", 0, start) + 1
                last = text.count("\n", 0, m.start()) + 1
                if last - first + 1 > limit:
                    found.append((last - first + 1, f"{path}:{first}", name))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=80, help="longest body allowed, in lines")
    parser.add_argument("paths", nargs="*", default=["src"])
    args = parser.parse_args()
    files = []
    for p in map(pathlib.Path, args.paths):
        files += sorted(q for q in p.rglob("*") if q.suffix in (".h", ".cpp")) if p.is_dir() else [p]
    found = sorted((f for path in files for f in long_bodies(path, args.max)), reverse=True)
    for lines, where, name in found:
        print(f"{lines:5} {where} {name}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
