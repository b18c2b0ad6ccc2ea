"""The training corpus: the King James Bible from Debian's bible-kjv-text.

The text of the King James Version (1611) is in the public domain; Debian
ships it compressed with the `bible` reader (package bible-kjv). Each
chapter becomes one line of prose (its verses joined by spaces, verse
numbers dropped), so nearly every word is a space-prefixed SentencePiece
word, as in a prompt. Every 20th chapter is held out for evaluation.
"""
import re
import subprocess

HELD_OUT_EVERY = 20


def chapters():
    """Yield (heading, text) for each of the 1189 chapters, in order."""
    raw = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    heading, verses = None, []
    for line in raw.splitlines():
        line = line.rstrip()
        if not line:
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            verses.append(m.group(1).strip())
            continue
        if heading is not None:
            yield heading, " ".join(verses)
        heading, verses = line.strip(), []
    if heading is not None:
        yield heading, " ".join(verses)


def split():
    """(train_text, held_out_text): one chapter per line."""
    train, held = [], []
    for i, (_, text) in enumerate(chapters()):
        (held if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(text)
    return "\n".join(train) + "\n", "\n".join(held) + "\n"


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Write the held-out chapters (models/kjv-heldout.txt).")
    ap.add_argument("--heldout", required=True, help="file to write")
    out = ap.parse_args().heldout
    with open(out, "w") as f:
        f.write(split()[1])
