#!/bin/bash
# Build the Kubernetes binaries, kwok (and its stock stages), kubectl, CoreDNS and the pause program into one folder, from the Go module proxy.
# usage: build.sh OUT_DIR K8S_VERSION KWOK_VERSION COREDNS_VERSION     (called by `python -m ignite_tf_dev.k8s build`)
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the ./staging modules), so a small wrapper
# module requires it and replaces each staging module with its published v0.X twin. Each step is skipped
# when its output already exists, so an interrupted build resumes where it stopped.
set -euo pipefail
OUT=$1 KV=$2 KWOKV=$3 COREDNSV=$4
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
JOBS=${K8S_BUILD_JOBS:-2}
NICE="nice -n ${K8S_BUILD_NICE:-10}"
SRC=$OUT/src BIN=$OUT/bin
mkdir -p "$SRC" "$BIN"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
say() { echo "[k8s-build $(date +%H:%M:%S)] $*"; }

CORE="kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy"
missing=""; for t in $CORE kubectl; do [ -x "$BIN/$t" ] || missing="$missing $t"; done
if [ -n "$missing" ]; then
  cd "$SRC"
  if ! grep -q "k8s.io/kubernetes $KV" go.mod 2>/dev/null; then
    say "wrapper module for k8s.io/kubernetes $KV"
    upstream=$($NICE "$GO" mod download -json "k8s.io/kubernetes@$KV" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    staging=v0.${KV#v1.}
    {
      printf 'module local/k8sbin\n\ngo 1.23.0\n\nrequire k8s.io/kubernetes %s\n\n' "$KV"
      grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$upstream" | awk '{print $1}' \
        | grep -vE 'sample-|code-generator' | sed "s|.*|replace & => & $staging|"
    } > go.mod
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for t in $CORE kubectl; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$t"; done
      printf ')\n'
    } > tools.go
    rm -f go.sum
    $NICE "$GO" mod tidy -e
  fi
  minor=$(echo "$KV" | cut -d. -f2)
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KV -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  pkgs=""; for t in $missing; do pkgs="$pkgs k8s.io/kubernetes/cmd/$t"; done
  say "go build$missing (-p $JOBS; a cold Go cache takes 10-15 minutes on 2 cores)"
  $NICE "$GO" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$BIN/" $pkgs
fi

if [ ! -x "$BIN/kwok" ]; then
  say "go install sigs.k8s.io/kwok/cmd/kwok@$KWOKV"
  GOBIN=$BIN $NICE "$GO" install -p "$JOBS" -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOKV"
fi

STAGES=$OUT/kwok-stages
if [ ! -f "$STAGES/pod-delete.yaml" ]; then
  say "kwok's stock node and pod stages"
  k=$("$GO" env GOMODCACHE)/sigs.k8s.io/kwok@$KWOKV/kustomize/stage
  [ -d "$k" ] || (cd "$SRC" && "$GO" mod download "sigs.k8s.io/kwok@$KWOKV")
  mkdir -p "$STAGES"
  cp "$k"/node/fast/node-initialize.yaml "$k"/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "$k"/pod/general/pod-*.yaml "$STAGES/"
fi

if [ ! -x "$BIN/coredns" ]; then
  # the cluster's DNS add-on (a one-layer image like pause); about 150 s on a cold Go cache
  say "go install github.com/coredns/coredns@$COREDNSV"
  GOBIN=$BIN GOFLAGS="$GOFLAGS -mod=mod" $NICE "$GO" install -p "$JOBS" -trimpath -ldflags "-s -w" \
    "github.com/coredns/coredns@$COREDNSV"
fi

if [ ! -x "$BIN/pause" ]; then
  say "pause (static C program from k8s.io/kubernetes $KV)"
  src=$("$GO" env GOMODCACHE)/k8s.io/kubernetes@$KV/build/pause/linux/pause.c
  [ -f "$src" ] || (cd "$SRC" && "$GO" mod download "k8s.io/kubernetes@$KV")
  ${CC:-cc} -Os -Wall -Werror -static -DVERSION="$KV" -o "$BIN/pause" "$src"
fi
say "done: $(ls "$BIN" | tr '\n' ' ')"
