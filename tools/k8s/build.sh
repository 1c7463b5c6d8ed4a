#!/usr/bin/env bash
# Builds the test cluster's binaries from Go modules with the ordinary `go` client, once per
# machine and recipe, into a cache outside the tree:
#   ${FIREPOOL_K8S_CACHE:-~/.cache/firepool/k8s}/<release>-<recipe hash>/bin
#     etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kwok
# Prints that bin directory on its last line. The recipe is this script and the two modules
# beside it (control-plane/, kwok/); changing any of them builds into a new directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
release=v1.37.2

recipe="$(cat "$here/build.sh" "$here"/*/go.mod "$here"/*/go.sum "$here"/control-plane/cmd/etcd/main.go \
  | sha256sum | cut -c1-12)"
root="${FIREPOOL_K8S_CACHE:-$HOME/.cache/firepool/k8s}/$release-$recipe"
bin="$root/bin"
mkdir -p "$bin"
exec 9>"$root/.lock"
flock 9  # a second build of the same recipe waits for the first and then finds it done

if [[ ! -f "$root/.complete" ]]; then
  export CGO_ENABLED=0 GOFLAGS=-mod=mod
  version_flags=(
    -X "k8s.io/component-base/version.gitVersion=$release"
    -X "k8s.io/component-base/version.gitMajor=1"
    -X "k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$release")"
    -X "k8s.io/component-base/version.gitTreeState=clean"
    -X "k8s.io/client-go/pkg/version.gitVersion=$release"
  )
  started=$SECONDS
  echo "building the test cluster's binaries into $bin (the first time takes a while)" >&2
  (cd "$here/control-plane" && go build -trimpath -ldflags "-s -w ${version_flags[*]}" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet ./cmd/etcd)
  (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$bin/" sigs.k8s.io/kwok/cmd/kwok)
  echo "built in $((SECONDS - started)) s" >&2
  touch "$root/.complete"
fi
echo "$bin"
