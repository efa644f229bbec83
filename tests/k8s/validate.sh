#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# validate.sh: checks deploy/kubernetes/ without a cluster.
#   1. tests/k8s/node_modules from the committed package-lock.json (npm ci), only when it is
#      missing or was installed from another lock: offline once it is there;
#   2. validate.mjs: every YAML document of deploy/kubernetes/*.yaml against the Kubernetes
#      API's schemas (kubernetes-models), unknown fields, and the API server's rules that a
#      schema cannot say; a failure here stops the run, naming file:line, kind, name and field;
#   3. the CNI install script: sh -n, shellcheck (where installed: apt-get install shellcheck);
#   4. validate_test.mjs: validate.mjs refuses planted errors;
#   5. install_test.sh: the install script on scratch directories;
#   6. daemon_test.mjs: the DaemonSet's command lines with the built tricolord (root and a
#      build; skipped otherwise).
# Usage: tests/k8s/validate.sh [FILE.yaml ...]  (files: step 2 alone, on those files)
# Exits 0 when everything passed; prints 'N passed, N failed' last.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
script=$repo/deploy/kubernetes/tricolor-cni-install
die() { echo "validate.sh: $*" >&2; exit 1; }

command -v node >/dev/null || die "needs node (apt-get install nodejs npm)"

# 1. Dependencies, pinned by package-lock.json.
# shellcheck source=tests/common/npm_deps.sh
. "$repo/tests/common/npm_deps.sh"
npm_deps "$here" validate.sh || exit 1

# 2. The manifests.
if [ $# -gt 0 ]; then
    exec node "$here/validate.mjs" "$@"
fi
node "$here/validate.mjs" || die "deploy/kubernetes/ does not validate (above)"

passed=1 failed=0 skipped=0
step() { # NAME COMMAND...: runs it, counts it
    local name=$1
    shift
    echo "== $name"
    if "$@"; then passed=$((passed + 1)); else
        echo "FAIL $name"
        failed=$((failed + 1))
    fi
}

# 3. The install script.
step "sh -n tricolor-cni-install" sh -n "$script"
if command -v shellcheck >/dev/null; then
    step "shellcheck tricolor-cni-install" shellcheck -s sh "$script"
else
    echo "== shellcheck: skipped (not installed: apt-get install shellcheck)"
    skipped=$((skipped + 1))
fi

# 4-6. The tests of the checks, of the script, of the DaemonSet's command lines.
step "validate_test.mjs" node "$here/validate_test.mjs"
step "install_test.sh" "$here/install_test.sh"
if [ "$(id -u)" = 0 ]; then
    step "daemon_test.mjs" node "$here/daemon_test.mjs"
else
    echo "== daemon_test.mjs: skipped (needs root)"
    skipped=$((skipped + 1))
fi

echo "validate.sh: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
