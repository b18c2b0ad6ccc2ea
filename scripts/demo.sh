#!/bin/bash
# First command of the README: install, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build/tools/clade/clade demo "$@"
