#!/usr/bin/env bash
# The C sources are in the house format (.clang-format: kernel style).
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || { echo "SKIP: clang-format not installed"; exit 77; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null)
[ -n "$files" ] || { echo "SKIP: not a git checkout"; exit 77; }
clang-format --dry-run -Werror $files
