#!/usr/bin/env bash
# Installs what Funnel's tests need when the machine lacks it: Go on PATH,
# staticcheck (with go install),
# and redis-server / redis-cli / curl / chromium / a C compiler (Debian's packages), as root or through
# sudo. Under CI (CI=true) a test that misses one of them fails.
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
  echo "deps: go is not on PATH; install Go 1.26 or newer" >&2
  exit 1
fi

# staticcheck, pinned: `make test` runs it before the tests.
STATICCHECK_VERSION=v0.8.2
gobin="$(go env GOPATH)/bin"
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
  echo "deps: installing staticcheck ${STATICCHECK_VERSION}"
  GOBIN="$gobin" go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# The tests build Funnel's Redis module (module/funnel.c) with cc.
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
# The console's browser test drives Debian's chromium.
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "deps: need ${missing[*]} and cannot install as $(id -un); install them and rerun" >&2
      exit 1
    fi
  fi
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's package starts a redis-server on 6379; tests start their own.
  $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
