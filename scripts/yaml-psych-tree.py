#!/usr/bin/python3
"""Load YAML documents as GitLab loads .gitlab-ci.yml, with libyaml itself, and print the trees.

The independent side of crates/ci/tests/ci_yaml_differential.rs. GitLab reads pipeline files with
Ruby's Psych: libyaml's parser, then Psych's tree building (lib/psych/visitors/to_ruby.rb) and
its scalar resolution (Psych::ScalarScanner#tokenize, lib/psych/scalar_scanner.rb). Here:
- the events come from libyaml in C, through PyYAML's `CParser` (Debian's python3-yaml is built
  against libyaml-0-2), not from flotilla's Rust translation of it;
- the tree is built from those events as Psych builds it, written from Psych's Ruby source, and
  plain scalars are resolved with Psych's own regular expressions, copied verbatim (flotilla's
  Rust port decides the same questions by hand, without regexes).

Input on stdin: a JSON list of YAML texts. Output on stdout: a JSON list, one entry per text:
  {"documents": [tree, ...]} or {"error": kind, ...} where kind is
  "syntax" (libyaml refused it; with "message", "line", "column", one-based, as Psych reports),
  "refused" (a scalar GitLab refuses: a date, a time, a bad Integer() or Float()),
  "alias" (an alias with no anchor before it), "key" (a mapping key that is a collection),
  "reference" (a `!reference` tag on a scalar).
A tree: null, true/false, {"int": "123"}, {"float": "<16 hex digits of the IEEE bits>"},
a string, {"sym": "name"}, a list, {"map": [[key, value], ...]}, {"ref": [items]}.
Keys are text as flotilla keeps them: a string, a symbol's name, "true"/"false", "" for null,
an integer in decimal, a float as Ruby prints it.

    /usr/bin/python3 scripts/yaml-psych-tree.py < texts.json
"""
import decimal
import json
import math
import re
import struct
import sys

import yaml
from yaml._yaml import CParser
from yaml.events import (
    AliasEvent, DocumentStartEvent, MappingEndEvent, MappingStartEvent, ScalarEvent,
    SequenceEndEvent, SequenceStartEvent, StreamEndEvent,
)

# --- Psych::ScalarScanner, legacy integers (strict_integer: false) -------------------------

ALPHA = r"[^\W\d_]"  # Ruby's [[:alpha:]]
WORDISH = re.compile(r"^[^\d.:-]?(?:" + ALPHA + r"|[_\s!@#$%\^&*(){}<>|/\\~;=])+")
TIME = re.compile(
    r"^-?\d{4}-\d{1,2}-\d{1,2}(?:[Tt]|\s+)\d{1,2}:\d\d:\d\d(?:\.\d*)?"
    r"(?:\s*(?:Z|[-+]\d{1,2}:?(?:\d\d)?))?$", re.ASCII)
DATE = re.compile(r"^\d{4}-(?:1[012]|0\d|\d)-(?:[12]\d|3[01]|0\d|\d)$", re.ASCII)
FLOAT = re.compile(r"^(?:[-+]?([0-9][0-9_,]*)?\.[0-9]*([eE][-+][0-9]+)?)$")
INTEGER_LEGACY = re.compile(
    r"^(?:[-+]?0b[0-1_,]+"
    r"|[-+]?0[0-7_,]+"
    r"|[-+]?(?:0|[1-9](?:[0-9]|,[0-9]|_[0-9])*)"
    r"|[-+]?0x[0-9a-fA-F_,]+)$")
BASE60_INT = re.compile(r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9]){1,2}$")
BASE60_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9]){1,2}\.[0-9_]*$")
I64 = (-(2 ** 63), 2 ** 63 - 1)


class Refused(Exception):
    pass


def fullmatch_end(pattern, text):
    """Ruby's `$` also matches before a final newline; plain scalars never end in one."""
    return pattern.match(text) is not None


def ruby_to_i(text):
    """String#to_i: an optional sign, then digits and single underscores."""
    m = re.match(r"^\s*([-+]?)(\d+(?:_\d+)*)", text)
    if not m:
        return 0
    return int(m.group(1) + m.group(2).replace("_", ""))


def ruby_to_f(text):
    m = re.match(r"^\s*([-+]?\d+(?:_\d+)*(?:\.\d+(?:_\d+)*)?)", text)
    if not m:
        return 0.0
    return float(m.group(1).replace("_", ""))


def ruby_integer(text):
    """Kernel#Integer on what INTEGER_LEGACY matched, commas and underscores deleted."""
    t = text.replace(",", "").replace("_", "")
    sign = -1 if t.startswith("-") else 1
    body = t.lstrip("+-")
    try:
        if body.startswith("0x"):
            value = int(body[2:], 16)
        elif body.startswith("0b"):
            value = int(body[2:], 2)
        elif len(body) > 1 and body.startswith("0"):
            value = int(body[1:], 8)
        else:
            value = int(body, 10)
    except ValueError:
        raise Refused('invalid value for Integer(): "%s"' % t)
    value *= sign
    if not I64[0] <= value <= I64[1]:
        return text  # a Ruby bignum: flotilla keeps the text
    return ("int", value)


def tokenize(string):
    if string == "":
        return None
    if WORDISH.match(string) or "\n" in string:
        if len(string) > 5:
            return string
        if re.match(r"^[^ytonf~]", string, re.I):
            return string
        if string == "~" or re.match(r"^null$", string, re.I):
            return None
        if re.match(r"^(yes|true|on)$", string, re.I):
            return True
        if re.match(r"^(no|false|off)$", string, re.I):
            return False
        return string
    if TIME.match(string):
        raise Refused("Tried to load unspecified class: Time")
    if DATE.match(string):
        raise Refused("Tried to load unspecified class: Date")
    if re.match(r"^\+?\.inf$", string, re.I):
        return ("float", math.inf)
    if re.match(r"^-\.inf$", string, re.I):
        return ("float", -math.inf)
    if re.match(r"^\.nan$", string, re.I):
        return ("float", math.nan)
    if re.match(r"^:.", string):
        m = re.match(r"^:([\"'])(.*)\1", string)
        name = m.group(2) if m else string[1:]
        if m:
            name = re.sub(r"^:", "", name)
        return ("sym", name)
    if BASE60_INT.match(string):
        total = 0
        for e, n in enumerate(string.split(":")):
            total += ruby_to_i(n) * 60 ** abs(e - 2)
        return ("int", total)
    if BASE60_FLOAT.match(string):
        total = 0.0
        for e, n in enumerate(string.split(":")):
            total += ruby_to_f(n) * 60 ** abs(e - 2)
        return ("float", total)
    if FLOAT.match(string):
        if re.match(r"\A[-+]?\.\Z", string):
            return string
        cleaned = re.sub(r"\.([Ee]|$)", r"\1", string.replace(",", "").replace("_", ""))
        try:
            return ("float", float(cleaned))
        except ValueError:
            raise Refused('invalid value for Float(): "%s"' % cleaned)
    if INTEGER_LEGACY.match(string):
        return ruby_integer(string)
    return string


def ruby_float_of(value):
    """Kernel#Float on what tokenize gave."""
    if isinstance(value, tuple) and value[0] in ("int", "float"):
        return ("float", float(value[1]))
    if isinstance(value, str):
        if re.match(r"^[-+]?\d+(?:_\d+)*(?:\.\d+(?:_\d+)*)?(?:[eE][-+]?\d+)?$", value.strip()):
            return ("float", float(value.strip().replace("_", "")))
        raise Refused('invalid value for Float(): "%s"' % value)
    names = {None: "nil", True: "true", False: "false"}
    raise Refused("can't convert %s into Float" % names.get(value, "the value"))


def deserialize(event):
    """Psych's ToRuby#deserialize, for the tags a pipeline meets."""
    tag = event.tag
    quoted = event.implicit[1]  # libyaml's quoted_implicit: Psych's `o.quoted`
    if quoted:
        return event.value
    if tag is None:
        return tokenize(event.value)
    if tag == "!reference":
        raise Failure("reference")
    if tag in ("tag:yaml.org,2002:str", "!str"):
        return event.value
    if tag in ("tag:yaml.org,2002:float", "!float"):
        return ruby_float_of(tokenize(event.value))
    return tokenize(event.value)


# --- Psych's tree building -----------------------------------------------------------------

class Failure(Exception):
    def __init__(self, kind, **extra):
        super().__init__(kind)
        self.kind = kind
        self.extra = extra


def ruby_float_text(value):
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    # flotilla's key text is Rust's Display of the shortest digits, positional, with ".0"
    # added when it has no point.
    text = format(decimal.Decimal(repr(value)), "f")
    return text if "." in text else text + ".0"


def key_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        kind, inner = value
        if kind == "int":
            return str(inner)
        if kind == "float":
            return ruby_float_text(inner)
        if kind == "sym":
            return inner
    raise Failure("key")


class Map:
    def __init__(self):
        self.keys = []
        self.values = {}

    def set(self, key, value):
        if key not in self.values:
            self.keys.append(key)
        self.values[key] = value


def merge(target, source):
    for k in source.keys:
        target.set(k, source.values[k])


def build(text):
    """The documents of `text`, or a Failure."""
    # Psych parses the whole text into nodes before building anything, so a syntax error
    # anywhere wins over what building would have refused.
    parser = CParser(text.encode("utf-8"))
    events = []
    while True:
        event = parser.get_event()
        events.append(event)
        if isinstance(event, StreamEndEvent):
            break
    documents = []
    stack = []  # each: ["seq", items, anchor, is_ref] or ["map", Map, anchor, pending]
    anchors = {}

    def finish(value, anchor, origin="literal", merge_key=False):
        if anchor is not None:
            anchors[anchor] = value
        if not stack:
            documents.append(value)
            return
        top = stack[-1]
        if top[0] == "seq":
            top[1].append(value)
            return
        mapping = top[1]
        if top[3] is None:
            top[3] = (value, merge_key)
            return
        key, is_merge = top[3]
        top[3] = None
        if is_merge:
            # revive_hash: Alias or Mapping -> merge!, Sequence -> reverse merge of hashes;
            # a TypeError (anything not a hash) keeps `<<` as an ordinary key.
            if isinstance(value, Map):
                merge(mapping, value)
                return
            if origin == "literal" and isinstance(value, list) and not isinstance(value, Ref) \
                    and all(isinstance(v, Map) for v in value):
                combined = Map()
                for v in reversed(value):
                    merge(combined, v)
                merge(mapping, combined)
                return
            mapping.set("<<", value)
            return
        if isinstance(key, (list, Map)):
            raise Failure("key")
        mapping.set(key_text(key), value)

    for event in events:
        if isinstance(event, StreamEndEvent):
            break
        if isinstance(event, DocumentStartEvent):
            anchors = {}
        elif isinstance(event, ScalarEvent):
            is_key = bool(stack) and stack[-1][0] == "map" and stack[-1][3] is None
            if is_key and event.value == "<<" and event.tag != "tag:yaml.org,2002:str":
                finish("<<", None, merge_key=True)
                continue
            finish(deserialize(event), event.anchor)
        elif isinstance(event, AliasEvent):
            if event.anchor not in anchors:
                raise Failure("alias")
            finish(anchors[event.anchor], None, origin="alias")
        elif isinstance(event, SequenceStartEvent):
            stack.append(["seq", Ref() if event.tag == "!reference" else [], event.anchor, None])
        elif isinstance(event, MappingStartEvent):
            stack.append(["map", Map(), event.anchor, None])
        elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
            kind, value, anchor, _ = stack.pop()
            finish(value, anchor)
    return documents


class Ref(list):
    pass


def to_json(value):
    if value is None or isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, Ref):
        return {"ref": [to_json(v) for v in value]}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, Map):
        return {"map": [[k, to_json(value.values[k])] for k in value.keys]}
    kind, inner = value
    if kind == "int":
        return {"int": str(inner)}
    if kind == "float":
        bits = "7ff8000000000000" if math.isnan(inner) else struct.pack(">d", inner).hex()
        return {"float": bits}
    if kind == "sym":
        return {"sym": inner}
    raise TypeError(value)


def judge(text):
    try:
        return {"documents": [to_json(d) for d in build(text)]}
    except yaml.MarkedYAMLError as e:
        message = " ".join(p for p in (e.problem, e.context) if p)
        mark = e.context_mark if e.context else e.problem_mark
        return {"error": "syntax", "message": message,
                "line": mark.line + 1, "column": mark.column + 1}
    except Refused as e:
        return {"error": "refused", "message": str(e)}
    except Failure as e:
        return {"error": e.kind}


def main():
    texts = json.load(sys.stdin)
    json.dump([judge(t) for t in texts], sys.stdout)


if __name__ == "__main__":
    main()
