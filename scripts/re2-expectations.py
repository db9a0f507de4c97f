#!/usr/bin/env python3
"""Record what RE2 itself says about the patterns in crates/ci/tests/re2/cases.json.

GitLab compiles every `/pattern/flags` of a pipeline with RE2 (the `re2` gem, through
Gitlab::UntrustedRegexp::RubySyntax, which prepends the flags as `(?flags)`). flotilla reads the
same patterns with its own translation to the `regex` crate (crates/ci/src/re2.rs); this script
asks the real RE2 (Google's `google-re2` Python binding, the same C++ library the gem wraps)
whether each pattern compiles and whether it matches each text, and writes
crates/ci/tests/re2/expected.json, which a unit test of crates/ci compares against.

The cases are the hand-written ones in cases.json plus random patterns built from a seeded
generator (so the file is reproducible).

    python3 -m venv /tmp/re2venv && /tmp/re2venv/bin/pip install google-re2
    /tmp/re2venv/bin/python scripts/re2-expectations.py
"""
import json
import os
import random
import sys

import re2

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DIR = os.path.join(ROOT, "crates", "ci", "tests", "re2")

# Pieces the random patterns are built from: RE2 syntax, things the `regex` crate reads
# differently, and plain characters.
PIECES = [
    "a", "b", "x", "1", "9", "_", "-", "/", ".", "^", "$", "|", "(", ")", "(?:", "(?i)", "(?i:",
    "(?s)", "(?m)", "(?U)", "(?P<n>", "(?<n>", "(?=", "(?!", "(?x)", "*", "+", "?", "*?", "{2}",
    "{1,3}", "{,2}", "{", "}", "[", "]", "[^", "[a-z]", "[]a]", "[[:alpha:]]", "[[:^digit:]]",
    "[a&&b]", "[a--b]", "[a~~b]", "[\\d-z]", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\b",
    "\\B", "\\A", "\\z", "\\Z", "\\Q", "\\E", "\\C", "\\pL", "\\p{Greek}", "\\PN", "\\x41",
    "\\x{263a}", "\\101", "\\0", "\\1", "\\8", "\\<", "\\>", "\\.", "\\/", "\\-", "\\_", "\\e",
    "\\t", "\\n", "\\a", "\\v", "é", "☺", " ", "#", "&", "~",
]
TEXTS = ["", "a", "ab", "aab", "x1", "A", "release/1.2", "main", "a_b-9", "é☺", "[a]",
         "<x>", "a{2}", "a.b", "\n", "Greek αβ", "feature/login-page", "v1.2.3"]


def verdict(pattern, flags, texts):
    source = f"(?{flags}){pattern}" if flags else pattern
    try:
        compiled = re2.compile(source)
    except Exception as error:  # re2.error
        message = str(error)
        return {"pattern": pattern, "flags": flags, "valid": False, "error": message}
    out = {"pattern": pattern, "flags": flags, "valid": True}
    if texts is not TEXTS:
        out["texts"] = texts
    out["matches"] = "".join("1" if compiled.search(t) is not None else "0" for t in texts)
    return out


def main():
    with open(os.path.join(DIR, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        texts = case.get("texts", TEXTS)
        out.append(verdict(case["pattern"], case.get("flags", ""), texts))
    rng = random.Random(13)
    seen = set(c["pattern"] for c in cases)
    while len(out) < len(cases) + 2000:
        pattern = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))
        if pattern in seen:
            continue
        seen.add(pattern)
        flags = rng.choice(["", "", "", "i", "m", "s", "U", "is"])
        out.append(verdict(pattern, flags, TEXTS))
    document = {"texts": TEXTS, "cases": out}
    with open(os.path.join(DIR, "expected.json"), "w", encoding="utf-8") as f:
        f.write('{"texts": ' + json.dumps(TEXTS, ensure_ascii=False) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(o, ensure_ascii=False) for o in out))
        f.write("\n]}\n")
    valid = sum(1 for o in out if o["valid"])
    print(f"{len(out)} patterns, {valid} valid in RE2", file=sys.stderr)


if __name__ == "__main__":
    main()
