/* fuzz_pyline.c: libFuzzer target for py_line_of() (src/python/code.c),
 * which finds an instruction's line in a code object's line table as it
 * was read from a live process: outside data. The first byte picks the
 * version (3.10 to 3.13), the next four the instruction index and four more
 * the first line; the rest is the table, copied into a buffer of exactly
 * its size so that ASan catches a read past its end. Every input must end
 * (a hang fails the run) with a line that is 0 or positive; 0 for an empty
 * table and for an instruction past what the table can describe (a 3.10
 * pair covers 255 bytes at most, a 3.11+ entry 8 code units); the same line
 * for 3.11, 3.12 and 3.13, which share the format; and the same line when
 * asked twice. No seeds: the tables are small and libFuzzer finds their
 * shape. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "python/python.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t instr;
	int32_t first;
	uint8_t *table;
	size_t len;
	int minor, line;

	if (size < 9)
		return 0;
	minor = 10 + data[0] % 4;
	memcpy(&instr, data + 1, sizeof(instr));
	memcpy(&first, data + 5, sizeof(first));
	len = size - 9;
	/* A buffer of its own, never empty, so that malloc(0) isn't in play. */
	table = malloc(len ? len : 1);
	FUZZ_CHECK(table, "no memory for %zu bytes", len);
	memcpy(table, data + 9, len);

	line = py_line_of(minor, table, len, first, instr);
	FUZZ_CHECK(line >= 0, "3.%d: line %d", minor, line);
	FUZZ_CHECK(line == py_line_of(minor, table, len, first, instr), "3.%d: not the same twice",
		   minor);
	if (!len)
		FUZZ_CHECK(!line, "3.%d: line %d from an empty table", minor, line);
	if (minor == 10 && (uint64_t)instr * 2 >= 255 * (uint64_t)(len / 2))
		FUZZ_CHECK(!line, "3.10: line %d for instruction %u past a %zu-byte table", line,
			   instr, len);
	if (minor > 10) {
		FUZZ_CHECK((uint64_t)instr < 8 * (uint64_t)len || !line,
			   "3.%d: line %d for instruction %u past a %zu-byte table", minor, line,
			   instr, len);
		for (int m = 11; m <= 13; m++)
			FUZZ_CHECK(py_line_of(m, table, len, first, instr) == line,
				   "3.%d and 3.%d disagree", m, minor);
	}
	free(table);
	return 0;
}
