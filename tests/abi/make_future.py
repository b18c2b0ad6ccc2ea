#!/usr/bin/env python3
"""Make the header and version script of a "future" clade for the ABI test.

header IN OUT: IN with one field appended to every caller-sized struct
(uint64_t future_field, after the last field), as a later 1.x release
would grow them.
map IN OUT: IN with every *_init listed under a new version node
CLADE_FUTURE too, as such a release would do: the library's own *_init
becomes the default clade_X_init@@CLADE_FUTURE, and
tests/abi/future_compat.cpp adds clade_X_init@CLADE_1, filling the 1.0
size (a name in both nodes is how glibc's maps version a symbol twice).
"""
import re
import sys

STRUCTS = [
    "clade_model_params", "clade_model_info", "clade_special_tokens",
    "clade_tree_params", "clade_node_info", "clade_cache_params",
    "clade_batch", "clade_sampler_params", "clade_append_item", "clade_sample_result",
    "clade_generate_params", "clade_speculative_params", "clade_generation_stats",
    "clade_cache_stats", "clade_tree_stats", "clade_device_peaks",
    "clade_grammar_params",
]


def header(text):
    for name in STRUCTS:
        end = re.compile(r"^\} %s;$" % name, re.M)
        begin = text.find("typedef struct %s {" % name)
        m = end.search(text, begin) if begin >= 0 else None
        if not m:
            sys.exit("make_future.py: struct %s not found" % name)
        field = "  uint64_t future_field; /* added by tests/abi/make_future.py */\n"
        text = text[:m.start()] + field + text[m.start():]
    return text


def version_map(text):
    # (a grown struct's *_init is listed in two nodes: once here)
    inits = list(dict.fromkeys(re.findall(r"^\s*(clade_[a-z0-9_]*_init);\s*$", text, re.M)))
    if not inits:
        sys.exit("make_future.py: no *_init in the map")
    text += "\n/* the grown structs' *_init (tests/abi/make_future.py) */\n"
    text += "CLADE_FUTURE {\n  global:\n"
    text += "".join("    %s;\n" % n for n in inits)
    text += "} CLADE_1;\n"
    return text


def main():
    kind, src, dst = sys.argv[1:4]
    with open(src) as f:
        text = f.read()
    text = header(text) if kind == "header" else version_map(text)
    with open(dst, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
