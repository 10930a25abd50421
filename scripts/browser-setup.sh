#!/bin/sh
# The viewer's browser tests drive a headless Chromium through chromedriver.
# `make test` runs this first: it says what it installs, and installs it only
# where it can (Debian or Ubuntu, as root); anywhere else it prints one line
# saying how, and the browser tests fail with the same advice until then.
CHROMIUM=/usr/bin/chromium
DRIVER=/usr/bin/chromedriver
if [ -x "$CHROMIUM" ] && [ -x "$DRIVER" ]; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "browser tests: installing Debian's chromium and chromium-driver with apt-get (about 300 MB)"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            chromium chromium-driver >/dev/null &&
        exit 0
    echo "browser tests: apt-get could not install chromium chromium-driver; the browser tests will fail until they are installed"
    exit 0
fi
echo "browser tests: need $CHROMIUM and $DRIVER; install them (Debian/Ubuntu: sudo apt-get install chromium chromium-driver), or the browser tests fail"
exit 0
