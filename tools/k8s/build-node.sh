#!/usr/bin/env bash
# Builds the test node's own binary from the Go module in node/ (the pod sandbox's `pause`),
# once per machine and recipe, into a cache outside the tree:
#   ${FIREPOOL_K8S_CACHE:-~/.cache/firepool/k8s}/node-<recipe hash>/bin/pause
# Prints that bin directory on its last line. Apart from build.sh so that the node's recipe
# changing does not rebuild the control plane (and the other way round). The node's other parts
# come from the machine: kubelet from build.sh, containerd, runc and the CNI plugins from
# Debian's packages (.ci/run installs them).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

recipe="$(cat "$here/build-node.sh" "$here"/node/go.mod "$here"/node/cmd/*/main.go \
  | sha256sum | cut -c1-12)"
root="${FIREPOOL_K8S_CACHE:-$HOME/.cache/firepool/k8s}/node-$recipe"
bin="$root/bin"
mkdir -p "$bin"
exec 9>"$root/.lock"
flock 9

if [[ ! -f "$root/.complete" ]]; then
  (cd "$here/node" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/" ./cmd/pause)
  touch "$root/.complete"
fi
echo "$bin"
