#!/usr/bin/env bash
# Installs the loom Python package (python/) with pip, from this checkout:
#   scripts/install_python.sh [VENV]
# VENV (default .venv): a virtual environment made with Debian's python3
# that also sees its system packages (NumPy, PyTorch); it is made when
# missing. Run programs with VENV/bin/python. --user instead of VENV
# installs into the user site of /usr/bin/python3. No registry is needed:
# pip builds the package here, with Debian's setuptools, and finds its only
# dependency (NumPy) installed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release loom_static >/dev/null
py=/usr/bin/python3
[ -x "$py" ] || py=python3
target=${1:-.venv}
pip_args=(install --no-build-isolation --no-index --no-deps --force-reinstall --quiet)
if [ "$target" = "--user" ]; then
  # Debian marks its Python as externally managed (PEP 668): a user site
  # install must say it means it.
  "$py" -m pip "${pip_args[@]}" --user --break-system-packages ./python
  echo "installed loom for $py (user site)"
else
  [ -x "$target/bin/python" ] || "$py" -m venv --system-site-packages "$target"
  "$target/bin/python" -m pip "${pip_args[@]}" ./python
  echo "installed loom into $target: $target/bin/python -c 'import loom'"
fi
