#!/usr/bin/env python3
"""lib/'s folders stand one above another: a file includes headers only from
its own folder and the folders below it (docs/design.md, "Layout"). Prints
every include that runs upward or sideways, or into a folder not listed,
and fails if there is one. usage: layers.py SOURCE_ROOT"""
import os
import re
import sys

# Bottom to top.
LAYERS = ['base', 'format', 'backend', 'cpu', 'text', 'engine', 'kv', 'gen', 'api']
RANK = {name: i for i, name in enumerate(LAYERS)}

def main():
    lib = os.path.join(sys.argv[1] if len(sys.argv) > 1 else '.', 'lib')
    bad = []
    seen = 0
    for entry in sorted(os.listdir(lib)):
        path = os.path.join(lib, entry)
        if os.path.isfile(path):
            if entry.endswith(('.h', '.cpp', '.inc')):
                bad.append(f'lib/{entry}: a source file outside the layer folders')
            continue
        if entry not in RANK:
            bad.append(f'lib/{entry}/: a folder that is not a layer ({", ".join(LAYERS)})')
            continue
        for root, _, files in os.walk(path):
            for f in sorted(files):
                if not f.endswith(('.h', '.cpp', '.inc', '.c')):
                    continue
                rel = os.path.relpath(os.path.join(root, f), lib)
                seen += 1
                with open(os.path.join(root, f), encoding='utf-8') as fh:
                    for n, line in enumerate(fh, 1):
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if inc.startswith('clade/'):
                            continue  # the public header
                        top = inc.split('/')[0] if '/' in inc else None
                        if top is None:
                            if not os.path.exists(os.path.join(root, inc)):
                                bad.append(f'lib/{rel}:{n}: "{inc}" names no folder')
                            continue
                        if top not in RANK:
                            bad.append(f'lib/{rel}:{n}: "{inc}" is not in a layer folder')
                        elif RANK[top] > RANK[entry]:
                            bad.append(f'lib/{rel}:{n}: {entry}/ includes "{inc}" from {top}/, a layer above it')
    for b in bad:
        print(b)
    print(f'{seen} files in {len(LAYERS)} layers; {len(bad)} problem(s)')
    return 1 if bad or seen == 0 else 0

if __name__ == '__main__':
    sys.exit(main())
