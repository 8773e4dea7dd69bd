#!/bin/bash
# Root filesystem of the TensorFlow task image, from Debian's packages and the project's lock, no registry:
#   rootfs.sh base     DIR LOCK_FILE      Debian bookworm (minbase) + python3 + every locked dependency
#   rootfs.sh provider DIR PROJECT_DIR    the ignite-tf provider alone (a second, small layer)
# Called by `python -m ignite_tf_dev.k8s.images`; docker/worker/Dockerfile makes the same image with a registry.
# Packages go to /usr/local/lib/python3.11/dist-packages, which Debian's python3 puts on sys.path.
set -euo pipefail
what=$1 dir=$2 src=$3
UV=${UV:-uv}
SITE=usr/local/lib/python3.11/dist-packages
NICE="nice -n ${IMAGE_BUILD_NICE:-15}"
# Copy, never hardlink, out of the uv cache: the rootfs is packed into an image and must not share inodes.
uv_install() { $NICE "$UV" pip install -q --no-deps --link-mode copy --compile-bytecode --target "$1/$SITE" \
  --python-version 3.11 --python-platform x86_64-manylinux_2_36 "${@:2}"; rm -rf "${1:?}/$SITE/bin"; }
# debootstrap mounts /proc and /sys into the target: never delete through a mount left by a killed run.
wipe() { { awk '{print $5}' /proc/self/mountinfo | grep "^$1/" | sort -r | xargs -r -n1 umount -l; } || true; rm -rf --one-file-system "$1"; }
case $what in
  base)
    wipe "$dir"
    $NICE debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$dir" \
      "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$dir.debootstrap.log" 2>&1 \
      || { tail -20 "$dir.debootstrap.log"; exit 1; }
    ln -sf python3 "$dir/usr/bin/python"  # what python-is-python3 does: `python -c ...` works in pods
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir.debootstrap.log"
    uv_install "$dir" -r "$src"
    ;;
  provider)
    wipe "$dir"; mkdir -p "$dir"
    uv_install "$dir" "$src"
    ;;
  *) echo "usage: rootfs.sh base|provider DIR SRC" >&2; exit 2 ;;
esac
