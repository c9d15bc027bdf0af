/*
 * toolrun: runs one vendor tool (nvidia-smi, rocm-smi, clinfo, ...) the way
 * the node agent needs it: an argv, never a shell; a wall-clock timeout
 * after which the whole process group is killed; a hard cap on the output
 * kept; and one status that says what happened.
 *
 * The agent is single-threaded; toolrun forks, so do not call it from a
 * process with other threads that hold locks the child might need (it only
 * calls async-signal-safe functions between fork and exec).
 */
#ifndef GPU_AGENT_TOOLRUN_H
#define GPU_AGENT_TOOLRUN_H

#include <stdbool.h>
#include <stddef.h>

enum toolrun_status {
	TOOLRUN_OK = 0,          /* exited with status 0 */
	TOOLRUN_EXIT_NONZERO,    /* exited with another status (exit_code) */
	TOOLRUN_SIGNALED,        /* killed by a signal it did not get from us */
	TOOLRUN_TIMEOUT,         /* ran past timeout_ms; its process group was killed */
	TOOLRUN_TOO_BIG,         /* printed more than out_cap bytes; killed */
	TOOLRUN_NOT_FOUND,       /* no such executable (in tools_dir, or on PATH) */
	TOOLRUN_SPAWN_ERROR,     /* pipe/fork/exec failed for another reason */
};

struct toolrun_opts {
	const char *tools_dir;   /* look the tool up here only; NULL: search PATH */
	/*
	 * NULL, or the host's root file system as mounted in the agent's
	 * container (e.g. /host): the tool is looked up in the host's usual
	 * directories (TOOLRUN_HOST_PATH) and run chrooted into host_root, so it
	 * finds the host's own libraries (libnvidia-ml, ROCm, the OpenCL ICDs)
	 * and interpreters. Needs CAP_SYS_CHROOT. When host_root has a proc
	 * directory, the tool gets this process's /proc there, in a mount
	 * namespace of its own (with CAP_SYS_ADMIN; without, no /proc).
	 * tools_dir, when set, wins.
	 */
	const char *host_root;
	int timeout_ms;          /* <= 0: 10000 */
	size_t out_cap;          /* most stdout bytes kept; 0: 8 MiB */
};

/* Where a tool is looked for under host_root, in order. */
#define TOOLRUN_HOST_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" \
	"/opt/rocm/bin:/home/kubernetes/bin/nvidia/bin"

#define TOOLRUN_ERR_MAX 2048     /* stderr bytes kept (the rest is dropped) */

struct toolrun_result {
	enum toolrun_status status;
	int exit_code;           /* TOOLRUN_OK / TOOLRUN_EXIT_NONZERO */
	int signal;              /* TOOLRUN_SIGNALED */
	char *out;               /* stdout, NUL-terminated, owned; "" when none */
	size_t out_len;
	char err[TOOLRUN_ERR_MAX];   /* stderr, NUL-terminated, cut to fit */
	long elapsed_ms;
	char path[512];          /* the executable that was run (when found) */
};

/*
 * Runs argv[0] with argv (NULL-terminated) and LC_ALL=C added to the
 * environment. Returns 0 when the tool ran (see res->status for how it
 * ended, TOOLRUN_NOT_FOUND included), -1 only when res could not even be
 * filled (out of memory). Always call toolrun_result_release() afterwards.
 */
int toolrun_run(const struct toolrun_opts *opts, const char *const argv[],
		struct toolrun_result *res);
void toolrun_result_release(struct toolrun_result *res);
/*
 * Runs a tool for its output: 1 it ran and exited 0 (*out is the caller's
 * to free), 0 it is not installed, -1 it failed (err says how, in one line).
 */
int toolrun_capture(const struct toolrun_opts *opts, const char *const argv[], char **out,
		    char *err, size_t errlen);

/*
 * One line for a log: "nvidia-smi exited with status 9: NVIDIA-SMI has
 * failed because ..." (the first non-empty line of stderr, else of stdout).
 */
void toolrun_describe(const struct toolrun_result *res, const char *tool, char *buf, size_t len);

/* Full path of tool (in tools_dir, or on PATH) into buf; false when absent. */
bool toolrun_find(const char *tools_dir, const char *tool, char *buf, size_t len);

#endif
