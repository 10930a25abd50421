#!/usr/bin/env bash
# Install Arize Phoenix into its own virtualenv for the end-to-end tests.
#
#   scripts/e2e-setup.sh [VENV]        (default VENV: .venv-phoenix)
#
# Phoenix pins many packages (OpenTelemetry, SQLAlchemy, pandas, ...), so it
# never shares the project's virtualenv: the tests start `VENV/bin/phoenix
# serve` as a subprocess and talk to it over loopback only. The install is
# skipped when VENV already holds the pinned version; a fresh one takes
# about 850 MB of disk and a minute or two, from PyPI.
set -euo pipefail

PHOENIX_VERSION="${PHOENIX_VERSION:-20.26.1}"
PYTHON="${PYTHON:-python3}"
VENV="${1:-.venv-phoenix}"
STAMP="$VENV/.phoenix-$PHOENIX_VERSION"

if [[ -x "$VENV/bin/phoenix" && -f "$STAMP" ]]; then
  exit 0
fi

if [[ -e "$VENV" && ! -f "$VENV/pyvenv.cfg" ]]; then
  echo "e2e-setup: $VENV exists and is not a virtualenv; not replacing it" >&2
  exit 1
fi

echo "e2e-setup: installing arize-phoenix==$PHOENIX_VERSION into $VENV" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "arize-phoenix==$PHOENIX_VERSION"
"$VENV/bin/python" -c "import importlib.metadata as m; print('arize-phoenix', m.version('arize-phoenix'))" >&2
test -x "$VENV/bin/phoenix"
touch "$STAMP"
