#!/usr/bin/env bash
# What a user's install meets, end to end (issue 26): `pip wheel .` gives a wheel that installs in a
# fresh venv and plans from another directory with site-packages mounted read-only and HOME
# unwritable; `python -m build --sdist` carries the C++ sources. Also prints the install size.
# Usage: tools/check_install.sh [work folder, default build/install-check]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-build/install-check}
PY=${PYTHON:-python3}
rm -rf "$WORK" && mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q build
"$WORK/tools/bin/python" -m build -q --sdist --outdir "$WORK/dist" . >/dev/null
SDIST=$(ls "$WORK"/dist/padless-*.tar.gz)
LISTING=$(tar -tzf "$SDIST")
for f in CMakeLists.txt csrc/module.cpp csrc/common.hpp src/padless/data/bible-en-es.lengths.npz; do
  grep -q "/$f$" <<<"$LISTING" || { echo "sdist lacks $f"; exit 1; }
done
echo "sdist: $(basename "$SDIST") ($(du -k "$SDIST" | cut -f1) KiB) carries CMakeLists.txt and csrc/"

"$WORK/tools/bin/pip" wheel -q --no-deps -w "$WORK/dist" "$SDIST"   # the wheel, from the sdist
WHEEL=$(ls "$WORK"/dist/padless-*.whl)
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q "$WHEEL"
SITE=$("$WORK/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "wheel: $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"
echo "installed: padless $(du -sk "$SITE/padless" | cut -f1) KiB; all of site-packages (numpy, pip...) $(du -sk "$SITE" | cut -f1) KiB"

mkdir -p "$WORK/home" "$WORK/elsewhere"
CODE='import padless, numpy as np
from padless import _core
x = padless.builtin_corpus()
plan = padless.plan_token_budget(x, max_tokens=4096)
rows = padless.plan_packing(x, capacity=1024)
print("planned", len(plan), "batches and", len(rows), "rows from", _core.__file__)'
cd "$WORK/elsewhere"
unshare -m --propagation private sh -c '
  for d in "$0" "$1"; do mount --bind "$d" "$d" && mount -o remount,bind,ro "$d"; done
  touch "$0/probe" 2>/dev/null && { echo "site-packages is writable"; exit 1; }
  touch "$1/probe" 2>/dev/null && { echo "HOME is writable"; exit 1; }
  HOME="$1" exec "$2" -c "$3"' "$SITE" "$WORK/home" "$WORK/venv/bin/python" "$CODE"
echo "ok: the wheel plans from a read-only site-packages with a read-only HOME"
