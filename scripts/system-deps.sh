#!/usr/bin/env bash
# Makes sure the system tools named as arguments are installed; installs the missing ones with apt.
#   scripts/system-deps.sh TOOL...    TOOL: make, venv, java, postgresql, chromium, chromedriver
# `make test` and `make example` call it first (Makefile), so the README's commands work on a fresh
# machine; .ci/run calls it for make itself. With every tool present it only looks them up (no apt,
# no network, milliseconds). apt-get runs only as root or through sudo; otherwise, or without
# apt-get, it names the packages to install and exits 1 before any test starts.
set -euo pipefail

# TOOL -> the Debian package that provides it.
package_of() {
  case $1 in
    make) echo make ;;
    # Debian's python3 has the venv module but not ensurepip, so `python3 -m venv` fails without it.
    venv) echo python3-venv ;;
    java) echo openjdk-17-jre-headless ;;
    # The real-Airflow test (tests/airflow/test_real_airflow.py): a throwaway PostgreSQL cluster as
    # the metadata DB, and Debian's headless Chromium with its chromedriver for the UI.
    postgresql) echo postgresql ;;
    chromium) echo chromium ;;
    chromedriver) echo chromium-driver ;;
    *) echo "system-deps.sh: unknown tool '$1' (make, venv, java, postgresql, chromium, chromedriver)" >&2; return 1 ;;
  esac
}

present() {
  case $1 in
    # Debian keeps initdb out of PATH, under /usr/lib/postgresql/<version>/bin.
    postgresql) command -v initdb >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null ;;
    # The interpreter make builds .venv with ($PYTHON, as in the Makefile).
    venv) "${PYTHON:-python3}" -c 'import ensurepip, venv' 2>/dev/null ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

missing=()
for tool in "$@"; do
  pkg=$(package_of "$tool")
  present "$tool" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
  sudo=""
elif command -v sudo >/dev/null; then
  sudo="sudo"
else
  sudo="none"
fi
if ! command -v apt-get >/dev/null || [ "$sudo" = none ]; then
  echo "system-deps.sh: missing: ${missing[*]} (Debian package names)." >&2
  if command -v apt-get >/dev/null; then
    echo "Install them as root (apt-get install ${missing[*]}), then run the command again." >&2
    echo "(SYSTEM_DEPS=skip make ... runs without them: the tests that need them fail.)" >&2
  else
    echo "No apt-get here: install them with your system's package manager, then run the command again." >&2
    echo "(SYSTEM_DEPS=skip make ... runs without them: the tests that need them fail.)" >&2
  fi
  exit 1
fi

echo "system-deps.sh: installing ${missing[*]} with apt-get${sudo:+ through sudo}"
$sudo apt-get update -qq
for pkg in "${missing[@]}"; do
  # The policy text is captured first: `apt-cache policy | grep -q` fails under pipefail when grep
  # stops reading early (apt-cache then dies of SIGPIPE).
  policy=$(apt-cache policy "$pkg")
  if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
    echo "system-deps.sh: apt has no candidate for $pkg" >&2
    exit 1
  fi
done
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
