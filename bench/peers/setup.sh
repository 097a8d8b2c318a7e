#!/usr/bin/env bash
# Creates bench/peers/.venv with the peer orchestrators used by bench/compare.py.
# Pinned to the newest releases that installed on Python 3.11 when the comparison was made.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
DBOS_VERSION="${DBOS_VERSION:-3.4.0}"
PREFECT_VERSION="${PREFECT_VERSION:-3.9.1}"
if [ ! -x "$here/.venv/bin/python" ]; then
    "$python" -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -m pip install --quiet --upgrade pip
"$here/.venv/bin/python" -m pip install --quiet \
    "dbos==${DBOS_VERSION}" "prefect==${PREFECT_VERSION}"
"$here/.venv/bin/python" -m pip list 2>/dev/null | grep -Ei '^(dbos|prefect|sqlalchemy|psycopg)' || true
