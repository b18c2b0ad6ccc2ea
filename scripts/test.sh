#!/bin/bash
# Second command of the README: install, build, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
meson test -C build --print-errorlogs "$@"
