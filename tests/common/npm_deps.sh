# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# npm_deps.sh: a test directory's node_modules from its committed package-lock.json (npm ci),
# only when it is missing or was installed from another lock: offline once it is there.
# Source it; npm_deps DIR NAME (NAME: who asks, for messages). Used by tests/k8s and tests/web.
npm_deps() {
    local dir=$1 name=$2 lock_sum stamp
    lock_sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    stamp=$dir/node_modules/.tricolor-lock-sha256
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
        command -v npm >/dev/null || {
            echo "$name: needs npm to install $dir/node_modules (apt-get install npm)" >&2
            return 1
        }
        echo "$name: npm ci --prefix $dir (kept in its node_modules for later runs)"
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error || {
            echo "$name: npm ci failed: the registry must be reachable once (or copy a node_modules made by it)" >&2
            return 1
        }
        echo "$lock_sum" >"$stamp"
    fi
}
