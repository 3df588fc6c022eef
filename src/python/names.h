/* names.h: the names of the Python frames in sampled stacks. A Python
 * frame comes from the BPF unwinder as a code object's address and an
 * instruction index (bpf/unwind_abi.h: UNW_PY_*); while its process lives,
 * py_names__load() reads that code object (src/python/python.h) and keeps
 * its name, file and line, so that the stack can be named after the
 * process has exited; a frame whose code object is gone by then (a
 * module's body, freed once it has run) gets the name an earlier frame of
 * the same code object had, its line unknown. Each process's interpreter
 * is found once, from the
 * files it maps. Bounded: at most PY_NAMES_MAX frames and PY_PIDS_MAX
 * processes are kept; past them new ones are named "[python]". Not
 * thread-safe. */
#ifndef SONDE_PYTHON_NAMES_H
#define SONDE_PYTHON_NAMES_H

#include <stdbool.h>
#include <stdint.h>

#define PY_NAMES_MAX 200000
#define PY_PIDS_MAX 8192

struct py_names;

struct py_name {
	const char *name; /* "QUALNAME (FILE)" (python.h: py_frame_name) */
	const char *file; /* co_filename */
	int line;	  /* of the instruction; 0 if unknown */
	int firstlineno;  /* of the function */
};

struct py_names *py_names__new(void);
void py_names__free(struct py_names *pn);

struct symbolizer;

/* The names of the Python frames of the processes s knows, kept with s
 * (src/symbolize/symbolize.h: made on first use, forgotten per process as
 * s forgets it, freed with s). */
struct py_names *symbolizer__python(struct symbolizer *s);

/* Whether ip (a user frame of a stack) is a Python frame. */
static inline bool py_names__is_frame(uint64_t ip)
{
	return ip >> 63;
}

/* Reads and keeps the name of Python frame ip of pid, if it is not known
 * yet. 0, or a negative errno (the process is gone, the code object can't
 * be read). */
int py_names__load(struct py_names *pn, uint32_t pid, uint64_t ip);

/* The name of Python frame ip of pid, as loaded; NULL if it never was. */
const struct py_name *py_names__get(struct py_names *pn, uint32_t pid, uint64_t ip);

/* Forgets what is kept for pid. */
void py_names__forget_pid(struct py_names *pn, uint32_t pid);

#endif
