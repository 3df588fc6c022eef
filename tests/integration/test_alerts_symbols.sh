#!/usr/bin/env bash
# The alert engine keeps its names to itself: every global symbol an object
# of src/alerts/ defines starts with "alert", so that its internals (sinks,
# templates, expressions, formats) can't collide with the rest of
# libsonde.a. Reads the objects `make` built from src/alerts/*.c.
cd "$(dirname "$0")/../.."
B=${B:-build}
command -v nm >/dev/null || { echo "SKIP: nm (binutils) not installed"; exit 77; }
objs=()
for c in src/alerts/*.c; do
	o="$B/obj/alerts/$(basename "${c%.c}").o"
	[ "$o" -nt "$c" ] || { echo "SKIP: $o is missing or older than $c -- run make first"; exit 77; }
	objs+=("$o")
done
bad=$(nm -g --defined-only "${objs[@]}" | awk 'NF == 3 && $3 !~ /^alert/ {print $3}')
if [ -n "$bad" ]; then
	echo "FAIL: global symbols of src/alerts/ without the alert prefix:"
	echo "$bad"
	exit 1
fi
echo "ok: $(nm -g --defined-only "${objs[@]}" | awk 'NF == 3' | wc -l) global symbols in" \
	"${#objs[@]} objects, all alert*"
