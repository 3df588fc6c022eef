/* code.c: names the Python frames of a live process. py_code_read reads a
 * code object with process_vm_readv (its type, qualified name, file, first
 * line and line table) and py_line_of finds an instruction's line in that
 * table, as each of 3.10-3.13 encodes it; py_frame_name makes the short
 * "qualname (file)" that stacks show. Used by the symbolizer for the frames
 * the BPF unwinder hands up (bpf/unwind_abi.h: UNW_PY_FRAME) and by the
 * fuzzer (tests/fuzz/fuzz_pyline.c). The process is distrusted: every read
 * is bounded, strings and tables are cut to fixed sizes, and an address
 * that holds no code object gives an error. See python.h for the contract. */
#include "python/python.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* Largest line table read: a function of some 20000 lines. Past it, the
 * lines of the instructions the cut-off part describes are unknown (0). */
#define PY_MAX_LINETABLE (64u << 10)
/* Bytes of a code object read at once: past every field used. */
#define PY_CODE_HEAD 0xd0
/* Largest str read: its header and the characters that can fit in
 * py_code_info (512 characters of 4 bytes). */
#define PY_STR_BUF 2560
/* A str's length and state word, and a bytes object's size and data: the
 * same in 3.10-3.13. */
#define PY_STR_LENGTH 16
#define PY_STR_STATE 32
#define PY_BYTES_SIZE 16
#define PY_BYTES_DATA 32
/* ob_type in every object; tp_name in a type object. */
#define PY_OB_TYPE 8
#define PY_TP_NAME 24

/* Offsets of 3.10 to 3.13, from the DWARF of the pyenv builds (gdb
 * "ptype/o PyCodeObject" on 3.10.13, 3.11.7, 3.12.1, 3.13.0) and, for
 * 3.13, the _Py_DebugOffsets of 3.13.0. Debian's 3.11.2 has 3.11.7's (its
 * PyCode_Type member table, read by py_inspect_file, says so). */
static const struct py_code_offsets code_offsets[] = {
	/* filename, name, qualname, firstlineno, linetable, bytecode, str_ascii, str_compact */
	{104, 112, 0, 40, 120, 0, 48, 72},     /* 3.10 */
	{112, 120, 128, 72, 136, 184, 48, 72}, /* 3.11 */
	{112, 120, 128, 68, 136, 192, 40, 56}, /* 3.12: no wstr in str objects */
	{112, 120, 128, 68, 136, 200, 40, 56}, /* 3.13 */
};

const struct py_code_offsets *py_code_offsets(int minor)
{
	if (minor < 10 || minor > 13)
		return NULL;
	return &code_offsets[minor - 10];
}

/* ---- Line tables ---- */

/* A line computed from a table: lines are positive ints, anything else
 * (a table of garbage) is unknown. */
static int line_ok(int64_t line)
{
	return line > 0 && line <= INT_MAX ? (int)line : 0;
}

/* 3.10 (PEP 626): pairs of an unsigned byte-offset delta and a signed line
 * delta; each pair is a range of bytecode bytes, with the line moved by
 * its delta, or no line when the delta is -128 (which leaves the line
 * where it was). Ranges of length 0 only move the line. */
static int line_310(const uint8_t *t, size_t len, int firstlineno, uint32_t instr)
{
	uint64_t addr = (uint64_t)instr * 2, end = 0;
	int64_t line = firstlineno;

	for (size_t i = 0; i + 1 < len; i += 2) {
		uint64_t start = end;
		int8_t delta = (int8_t)t[i + 1];

		end += t[i];
		if (delta != -128)
			line += delta;
		if (start <= addr && addr < end)
			return delta == -128 ? 0 : line_ok(line);
	}
	return 0;
}

/* A varint of the 3.11+ location table: 6 bits a byte, least significant
 * first, bit 6 set on every byte but the last. Cut at the table's end or
 * at 64 bits. */
static uint64_t loc_varint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b;

	do {
		if (*p >= end)
			break;
		b = *(*p)++;
		if (shift < 64)
			v |= (uint64_t)(b & 63) << shift;
		shift += 6;
	} while (b & 64);
	return v;
}

/* The signed form: the lowest bit is the sign. */
static int64_t loc_svarint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = loc_varint(p, end);

	return v & 1 ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
}

/* The line change of the entry whose first byte is at p (code: its bits
 * 3-6): 15 has no location; 14 (long form) and 13 (no columns) start with
 * a signed varint line delta; 10-12 move the line by 0-2; 0-9 (short
 * forms) keep it. */
static int64_t loc_line_delta(unsigned code, const uint8_t *p, const uint8_t *end)
{
	int64_t d;

	p++;
	if (code == 13 || code == 14) {
		/* Held to what a line can move, so that sums can't overflow. */
		d = loc_svarint(&p, end);
		return d < -(int64_t)INT_MAX ? -(int64_t)INT_MAX : d > INT_MAX ? INT_MAX : d;
	}
	if (code >= 10 && code <= 12)
		return code - 10;
	return 0;
}

/* 3.11+ (Objects/locations.md): entries of 1-8 code units each, whose
 * first byte has bit 7 set and holds the entry's code and length; the
 * bytes that follow, up to the next with bit 7 set, are its operands. The
 * interpreter finds entries by that bit, not by decoding the operands, and
 * so does this. */
static int line_311(const uint8_t *t, size_t len, int firstlineno, uint32_t instr)
{
	const uint8_t *p = t, *end = t + len;
	int64_t line = firstlineno;
	uint64_t pc = 0;

	while (p < end) {
		unsigned code = (*p >> 3) & 15, n = (*p & 7) + 1;

		line += loc_line_delta(code, p, end);
		/* A line that far off is garbage, and past it sums could
		 * overflow. */
		if (line < INT_MIN || line > INT_MAX)
			return 0;
		if (instr < pc + n)
			return code == 15 ? 0 : line_ok(line);
		pc += n;
		do
			p++;
		while (p < end && !(*p & 0x80));
	}
	return 0;
}

int py_line_of(int minor, const uint8_t *table, size_t len, int firstlineno, uint32_t instr)
{
	if (!table || !len)
		return 0;
	if (minor == 10)
		return line_310(table, len, firstlineno, instr);
	if (minor >= 11 && minor <= 13)
		return line_311(table, len, firstlineno, instr);
	return 0;
}

/* ---- Reading a process ---- */

/* Reads up to n bytes at addr of pid into buf, stopping at the first
 * unreadable page. Returns the bytes read or a negative errno (-ESRCH:
 * no such process, -EFAULT: nothing readable at addr). */
static ssize_t mem_read_upto(pid_t pid, uint64_t addr, void *buf, size_t n)
{
	struct iovec local = {buf, n}, remote = {(void *)(uintptr_t)addr, n};
	ssize_t got;

	if (pid <= 0)
		return -ESRCH;
	got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	return got < 0 ? -errno : got;
}

/* Reads exactly n bytes: 0 or a negative errno (-EFAULT for a short read). */
static int mem_read(pid_t pid, uint64_t addr, void *buf, size_t n)
{
	ssize_t got = mem_read_upto(pid, addr, buf, n);

	if (got < 0)
		return (int)got;
	return (size_t)got == n ? 0 : -EFAULT;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Appends code point cp to out (size bytes, *n used) as UTF-8, keeping
 * room for the NUL; what can't be a character (a lone surrogate, as
 * surrogateescape leaves in file names, a NUL) becomes '?'. Returns false
 * when it doesn't fit. */
static bool put_utf8(char *out, size_t size, size_t *n, uint32_t cp)
{
	uint8_t b[4];
	size_t k;

	if (!cp || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		cp = '?';
	if (cp < 0x80) {
		b[0] = (uint8_t)cp;
		k = 1;
	} else if (cp < 0x800) {
		b[0] = 0xc0 | cp >> 6;
		b[1] = 0x80 | (cp & 63);
		k = 2;
	} else if (cp < 0x10000) {
		b[0] = 0xe0 | cp >> 12;
		b[1] = 0x80 | ((cp >> 6) & 63);
		b[2] = 0x80 | (cp & 63);
		k = 3;
	} else {
		b[0] = 0xf0 | cp >> 18;
		b[1] = 0x80 | ((cp >> 12) & 63);
		b[2] = 0x80 | ((cp >> 6) & 63);
		b[3] = 0x80 | (cp & 63);
		k = 4;
	}
	if (*n + k >= size)
		return false;
	memcpy(out + *n, b, k);
	*n += k;
	return true;
}

/* Reads the str object at addr into out as UTF-8, cut to fit at a
 * character's end. Only compact strings (what the interpreter makes for
 * names and file names): ASCII, or 1, 2 or 4 bytes a character.
 * -EINVAL for anything else. */
static int read_str(pid_t pid, uint64_t addr, const struct py_code_offsets *o, char *out,
		    size_t size)
{
	uint8_t buf[PY_STR_BUF];
	unsigned state, kind, data;
	ssize_t got;
	int64_t len;
	size_t n = 0;

	got = mem_read_upto(pid, addr, buf, sizeof(buf));
	if (got < 0)
		return (int)got;
	if ((size_t)got < PY_STR_STATE + sizeof(state))
		return -EINVAL;
	memcpy(&len, buf + PY_STR_LENGTH, sizeof(len));
	memcpy(&state, buf + PY_STR_STATE, sizeof(state));
	kind = (state >> 2) & 7;
	if (len < 0 || len > INT_MAX || !(state & 0x20) || (kind != 1 && kind != 2 && kind != 4))
		return -EINVAL;
	/* ASCII strings keep their characters right after the header; other
	 * compact ones after the UTF-8 cache fields. */
	data = state & 0x40 ? o->str_ascii : o->str_compact;
	if (((state & 0x40) && kind != 1) || (size_t)got < data)
		return -EINVAL;
	/* As many characters as were read; the output cuts them anyway. */
	if ((uint64_t)len * kind > (uint64_t)got - data)
		len = (int64_t)((size_t)got - data) / kind;
	for (int64_t i = 0; i < len; i++) {
		const uint8_t *c = buf + data + i * kind;
		uint32_t cp = kind == 1 ? c[0] : kind == 2 ? (uint32_t)(c[0] | c[1] << 8) : 0;

		if (kind == 4)
			memcpy(&cp, c, 4);
		if (!put_utf8(out, size, &n, cp))
			break;
	}
	out[n] = '\0';
	return 0;
}

/* Whether the object at addr (whose first PY_CODE_HEAD bytes are head) is
 * a code object: its type's tp_name is "code". -EINVAL when not, or when
 * its type can't be read (then it was no object). */
static int check_code_type(pid_t pid, const uint8_t *head)
{
	uint8_t ptr[8];
	char name[8];
	int err;

	err = mem_read(pid, get_u64(head + PY_OB_TYPE) + PY_TP_NAME, ptr, sizeof(ptr));
	if (!err)
		err = mem_read_upto(pid, get_u64(ptr), name, sizeof(name)) >= 5 ? 0 : -EINVAL;
	if (err == -ESRCH)
		return err;
	if (err || memcmp(name, "code", 5))
		return -EINVAL;
	return 0;
}

/* The line of instr in the code's line table (a bytes object at addr). 0
 * when the table can't be read. */
static int read_line(pid_t pid, uint64_t addr, int minor, int firstlineno, uint32_t instr)
{
	uint8_t *buf = malloc(PY_BYTES_DATA + PY_MAX_LINETABLE);
	ssize_t got;
	int64_t size;
	int line = 0;

	if (!buf)
		return 0;
	got = mem_read_upto(pid, addr, buf, PY_BYTES_DATA + PY_MAX_LINETABLE);
	if (got >= PY_BYTES_DATA) {
		memcpy(&size, buf + PY_BYTES_SIZE, sizeof(size));
		if (size > got - PY_BYTES_DATA)
			size = got - PY_BYTES_DATA;
		if (size > 0)
			line = py_line_of(minor, buf + PY_BYTES_DATA, (size_t)size, firstlineno,
					  instr);
	}
	free(buf);
	return line;
}

/* An error of reading a field of what should be a code object: the
 * process gone stays -ESRCH; anything else means it wasn't one. */
static int field_err(int err)
{
	return err == -ESRCH ? err : -EINVAL;
}

int py_code_read(pid_t pid, uint64_t addr, uint32_t instr, const struct unw_py_layout *layout,
		 struct py_code_info *out)
{
	const struct py_code_offsets *o = layout ? py_code_offsets(layout->minor) : NULL;
	uint8_t head[PY_CODE_HEAD];
	int32_t first;
	int err;

	memset(out, 0, sizeof(*out));
	if (!o)
		return -EINVAL;
	err = mem_read(pid, addr, head, sizeof(head));
	if (err)
		return err;
	err = check_code_type(pid, head);
	if (err)
		return err;
	/* 3.10's code objects have no qualified name: the function's. */
	err = read_str(pid, get_u64(head + (o->qualname ? o->qualname : o->name)), o, out->qualname,
		       sizeof(out->qualname));
	if (!err)
		err = read_str(pid, get_u64(head + o->filename), o, out->filename,
			       sizeof(out->filename));
	if (err)
		return field_err(err);
	memcpy(&first, head + o->firstlineno, sizeof(first));
	out->firstlineno = first;
	out->line = read_line(pid, get_u64(head + o->linetable), layout->minor, first, instr);
	return 0;
}

/* ---- Names ---- */

/* The part of filename a frame name shows: below the last site-packages/
 * or dist-packages/ in it, else below script_dir, else all of it. */
static const char *short_file(const char *filename, const char *script_dir)
{
	const char *best = NULL;
	size_t n;

	for (const char *p = filename; (p = strstr(p, "-packages/")); p++)
		if (p - filename >= 4 && (!strncmp(p - 4, "site", 4) || !strncmp(p - 4, "dist", 4)))
			best = p + strlen("-packages/");
	if (best && *best)
		return best;
	if (!script_dir || !*script_dir)
		return filename;
	n = strlen(script_dir);
	while (n > 1 && script_dir[n - 1] == '/')
		n--;
	if (!strncmp(filename, script_dir, n) && filename[n] == '/' && filename[n + 1])
		return filename + n + 1;
	return filename;
}

const char *py_frame_name(const char *qualname, const char *filename, const char *script_dir,
			  char *buf, size_t size)
{
	if (!size)
		return buf;
	snprintf(buf, size, "%s (%s)", qualname ? qualname : "?",
		 filename ? short_file(filename, script_dir) : "?");
	return buf;
}
