/* python.h: what Sonde knows of CPython interpreters, for the Python frames
 * of its stacks. The BPF unwinder (bpf/unwind.h) walks a thread's Python
 * frames where its native stack reaches the interpreter loop, and hands
 * each one up as the address of its code object and the index of the
 * instruction it was running (bpf/unwind_abi.h: UNW_PY_*); this module
 * says where those are in a given interpreter (py_inspect_file, from the
 * ELF file alone), and turns a (code object, instruction) of a live
 * process into a function name, file and line (py_code_read, reading the
 * process's memory).
 *
 * Versions 3.10 to 3.13 (x86-64, glibc). Offsets within _PyRuntime, the
 * thread state, frames and code objects are per minor version: 3.13's come
 * from the _Py_DebugOffsets the interpreter publishes at the start of
 * _PyRuntime, earlier ones are known constants; code-object offsets are
 * checked against PyCode_Type's member table where the file has it.
 * Everything read from a file or a process is distrusted and bounded. */
#ifndef SONDE_PYTHON_PYTHON_H
#define SONDE_PYTHON_PYTHON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind_abi.h" /* struct unw_py_layout: what the BPF walker reads */

/* An interpreter file (a python executable that links libpython
 * statically, or libpythonX.Y.so): where its pieces are. */
struct py_interp {
	int major, minor; /* 3, 11 */
	/* The interpreter loop, as ranges of FILE OFFSETS (not ELF
	 * addresses): _PyEval_EvalFrameDefault, and its cold part(s) where
	 * the compiler split it (an unnamed range its body jumps to). */
	uint64_t eval_start[UNW_PY_EVAL_RANGES], eval_end[UNW_PY_EVAL_RANGES];
	int neval;
	/* _PyRuntime's ELF address in the file, and the address (also ELF)
	 * of the pthread key (Py_tss_t._key) whose thread-specific value is
	 * each thread's PyThreadState. */
	uint64_t runtime_addr, tss_key_addr;
	/* p_vaddr - p_offset of the executable PT_LOAD segment, which the
	 * eval ranges were converted through (struct unw_py_file). */
	uint64_t text_delta;
	struct unw_py_layout layout;
};

/* Whether path is a CPython 3.10-3.13 interpreter file, and its pieces.
 * Returns 0, -ENOENT/-ENOEXEC (not an ELF file we read), -ENODATA (no
 * interpreter in it, or no .eh_frame_hdr to bound its loop with),
 * -ENOTSUP (a version we don't know, or a build whose code objects are
 * laid out otherwise: debug, free-threaded), with a one-line reason in
 * err. */
int py_inspect_file(const char *path, struct py_interp *out, char *err, size_t errlen);

/* Where a code object of version 3.minor keeps what py_code_read reads,
 * and where a str object's characters start (compact ASCII, or compact
 * with 1, 2 or 4 bytes a character). 3.10 has no co_qualname (0 here: its
 * code objects name the function, not the class) and keeps its bytecode
 * in a bytes object (bytecode 0). NULL for a version we don't know. For
 * py_inspect_file, which checks them against the file's own tables. */
struct py_code_offsets {
	uint16_t filename, name, qualname, firstlineno, linetable;
	uint16_t bytecode; /* co_code_adaptive: PyCode_Type.tp_basicsize */
	uint16_t str_ascii, str_compact;
};
const struct py_code_offsets *py_code_offsets(int minor);

/* A code object of a live process, named. Strings are NUL-terminated,
 * cut to fit. */
struct py_code_info {
	char qualname[256]; /* "Trainer.step", "<module>", "<lambda>"; 3.10,
			     * whose code objects have no qualified name:
			     * co_name ("step") */
	char filename[512]; /* co_filename as the process has it */
	int firstlineno;    /* the function's first line */
	int line;	    /* the line of the instruction asked about; 0 if unknown */
};

/* Reads the code object at addr in pid (process_vm_readv) with the layout
 * of its interpreter, and the line that instruction index instr (in code
 * units from the start of its bytecode, as the BPF side hands it) belongs
 * to. A caller's frame holds an index inside its CALL instruction (seen
 * here: 3.10's f_lasti and 3.13's instr_ptr at the CALL, 3.11/3.12's
 * prev_instr at its last inline cache unit), which has the call's line:
 * no adjustment is needed. Returns 0, or a negative errno (-ESRCH: gone,
 * -EFAULT: unreadable, -EINVAL: not a code object of this layout). */
int py_code_read(pid_t pid, uint64_t addr, uint32_t instr, const struct unw_py_layout *layout,
		 struct py_code_info *out);

/* The line of instruction instr in a code object's line table, as the
 * interpreter of version minor (10..13) encodes it (3.10: co_linetable's
 * PEP 626 format; 3.11+: the location table). firstlineno is the code's.
 * 0 if the table doesn't say. For the fuzzer and py_code_read. */
int py_line_of(int minor, const uint8_t *table, size_t len, int firstlineno, uint32_t instr);

/* How a Python frame reads in folded stacks, flame graphs and top tables:
 * "QUALNAME (FILE)", FILE shortened to what follows the last
 * site-packages/ or dist-packages/ in it, else to the part below
 * script_dir (the directory of the script the process runs; NULL: none),
 * else kept whole. Into buf; returns buf. */
const char *py_frame_name(const char *qualname, const char *filename, const char *script_dir,
			  char *buf, size_t size);

#endif
