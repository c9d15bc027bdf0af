#!/usr/bin/env bash
# The harness's real node (containerd + runc + CNI + kubelet on this machine):
# test/cluster/node-smoke.sh, run with the other e2e suites. Needs root.
exec bash "$(dirname "$0")/../cluster/node-smoke.sh"
