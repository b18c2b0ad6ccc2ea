"""same_tokens.py: the Python program of the cross-language check
(tests/bindings_same_tokens.sh): loads the model argv[1], makes a tree and
generates greedily (Tree.generate, clade_generate) from three prompts
(1..24; [30 31 32] and [40 41] under it), 32 new tokens each with
end-of-generation ignored, printing each sequence's tokens on a line,
separated by single spaces.

usage: python3 bindings/python/same_tokens.py MODEL
(CLADE_LIBRARY: the libclade.so to load, as for the tests)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clade  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: same_tokens.py MODEL")
    prompts = [list(range(1, 25)), ([30, 31, 32], 0), ([40, 41], 0)]
    with clade.Model(sys.argv[1]) as model, clade.Tree(model) as tree:
        results = tree.generate(prompts, max_new_tokens=32, temperature=0.0, ignore_eog=True)
    for g in results:
        print(" ".join(str(t) for t in g.tokens))


if __name__ == "__main__":
    main()
