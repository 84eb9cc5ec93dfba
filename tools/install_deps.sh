#!/usr/bin/env bash
# install_deps.sh - installs the Debian packages the build needs that are missing, and
# nothing when all are present (so the README's commands may start with it every time).
#   libmicrohttpd-dev  GNU libmicrohttpd (LGPL-2.1+): the HTTP server of `edgerunner serve`
#   libjansson-dev     jansson (MIT): JSON for `edgerunner serve`
#   chromium           the headless browser of the chat page's test (tests/server)
# Only the edgerunner binary links the first two; libedgerunner needs libc, libm, pthreads.
# Installing needs root (or sudo); without either, it names what to install and fails.
set -euo pipefail

PACKAGES="libmicrohttpd-dev libjansson-dev"
[ "${1:-}" = "--test" ] && PACKAGES="$PACKAGES chromium"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null; then
    SUDO="sudo"
else
    echo "install_deps.sh: missing Debian packages:$missing; install them as root (apt-get install$missing)" >&2
    exit 1
fi
echo "install_deps.sh: installing$missing" >&2
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >&2
