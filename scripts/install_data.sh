#!/usr/bin/env bash
# `make data`: the data sets the experiments read from local files (nothing is downloaded
# at run time). Fashion-MNIST comes from Debian's dataset-fashion-mnist package: the four
# IDX files land in /usr/share/datasets/fashion-mnist/ (clients.data.FASHION_MNIST_DIR).
# Idempotent: does nothing when the files are there.
set -euo pipefail
DIR=/usr/share/datasets/fashion-mnist
if [ -f "$DIR/train-images-idx3-ubyte.gz" ] && [ -f "$DIR/t10k-labels-idx1-ubyte.gz" ]; then
    echo "fashion-mnist: present in $DIR"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq dataset-fashion-mnist
ls "$DIR"
