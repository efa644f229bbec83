#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# page_test.sh: tricolord --web's page in headless Chromium (page_test.mjs, which says what it
# checks), with tests/web/node_modules (puppeteer-core) from the committed package-lock.json.
# Usage: tests/web/page_test.sh [--screenshot FILE] [--bench]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v node >/dev/null || { echo "page_test.sh: needs node (apt-get install nodejs npm)" >&2; exit 1; }
# shellcheck source=tests/common/npm_deps.sh
. "$repo/tests/common/npm_deps.sh"
npm_deps "$here" page_test.sh
exec node "$here/page_test.mjs" "$@"
