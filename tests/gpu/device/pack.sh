#!/usr/bin/env bash
# pack.sh: copies the shared libraries build/sonde needs, except the C and C++ runtimes
# every Linux machine has, into build/device-libs, so that sonde runs on a GPU machine
# whose image lacks them (tests/gpu/device/run.sh puts them on LD_LIBRARY_PATH). Run on
# the build machine after make.
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${B:-build}
rm -rf "$B/device-libs"
mkdir -p "$B/device-libs"
ldd "$B/sonde" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
	case $(basename "$lib") in
	libc.so.* | libm.so.* | libstdc++.so.* | libgcc_s.so.* | ld-linux*) ;;
	*) cp -L "$lib" "$B/device-libs/" ;;
	esac
done
du -sh "$B/device-libs" "$B/sonde"
