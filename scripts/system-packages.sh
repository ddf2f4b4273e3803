#!/usr/bin/env bash
# Usage: bash scripts/system-packages.sh PACKAGE...
# Debian packages a command needs (e.g. libmariadb-dev to build mysqlclient): installed when
# missing and run as root, otherwise the exact command to run is printed and this fails.
set -euo pipefail
if ! command -v dpkg >/dev/null 2>&1; then
  echo "not a Debian system: make sure these (or your system's equivalents) are installed: $*" >&2
  exit 0
fi
missing=()
for package in "$@"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing system packages; install them, then run this again:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
