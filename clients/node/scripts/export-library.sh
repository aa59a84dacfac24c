#!/bin/sh
# Regenerate src/library.generated.ts (shardq's Redis Functions library) from the Python
# reference implementation in this repository.  Run from anywhere; needs the repo's venv.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-"$repo/.venv/bin/python"}
cd "$repo"
exec "$python" -m wire.spec export-library --out "$here/src/library.generated.ts" "$@"
