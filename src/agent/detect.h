/*
 * detect: the detectors' one skeleton and each vendor's part of it.
 * Private to src/agent.
 *
 * Every vendor is detected the same way: run its inventory tools (two at
 * most), parse what each prints, then merge the parsed records into one
 * agent_vendor_result; islands come last. detect_run() does the running,
 * the error and note handling and the cleanup; a vendor's detector
 * (detect_<name>.c) gives a struct detect_vendor: its tools, its parsers
 * (agent_parse.h), its merge, and how its fast links make islands.
 */
#ifndef GPU_AGENT_DETECT_H
#define GPU_AGENT_DETECT_H

#include "agent.h"

#include <stdbool.h>
#include <stddef.h>

#define DETECT_MAX_TOOLS 2

/* One inventory tool. */
struct detect_tool {
	const char *const *argv;   /* NULL-terminated; argv[0] names the tool in messages */
	/* Parses the tool's output into the detector's work: 0, or -1 with err. */
	int (*parse)(const char *out, void *work, char *err, size_t errlen);
	/*
	 * Instead of argv and parse, a tool that needs more (a fallback, exit
	 * codes that still mean something): 1 ran and parsed, 0 not installed,
	 * -1 failed with err. It may add notes to vr.
	 */
	int (*run)(const struct toolrun_opts *opts, struct agent_vendor_result *vr, void *work, char *err,
		   size_t errlen);
	/* Not installed: the vendor is absent; failed: the vendor failed. Else a failure is a note. */
	bool required;
	/* The note's prefix when it fails ("nvidia-smi -L"); NULL: the tool's own words. */
	const char *what;
};

/* What each tool did, for the merge. */
struct detect_seen {
	bool ran[DETECT_MAX_TOOLS];      /* installed and exited well */
	bool parsed[DETECT_MAX_TOOLS];   /* and what it printed parsed */
};

struct detect_vendor {
	enum gpu_vendor vendor;
	size_t work_size;                /* the detector's scratch: zeroed, freed after the round */
	int ntools;
	struct detect_tool tool[DETECT_MAX_TOOLS];
	/*
	 * Fills vr's GPUs (and topology: it may run more tools) from the parsed
	 * tools. AGENT_DETECT_OK, or AGENT_DETECT_FAILED with err.
	 */
	int (*merge)(const struct toolrun_opts *opts, void *work, const struct detect_seen *seen,
		     struct agent_vendor_result *vr, char *err, size_t errlen);
	/* Islands (islands.c): the link type that joins GPUs, the islands' names, a member's bandwidth. */
	enum agent_link fast_link;
	const char *island_prefix;       /* "nvlink": islands "nvlink-0", ... */
	/* GB/s of GPU g with links fast links (lanes, bonded links) to the rest of its island. */
	double (*member_gbps)(const struct agent_gpu *g, int links);
};

/* The detectors, one per vendor (each detect_<name>.c). */
extern const struct detect_vendor detect_nvidia, detect_amd, detect_intel;

/* Vendor v's detector, or NULL. */
const struct detect_vendor *detect_vendor_of(enum gpu_vendor v);

/*
 * Runs d's tools and merge into vr (reset to d's vendor), then computes the
 * islands. AGENT_DETECT_ABSENT when a required tool, or every tool, is not
 * installed; AGENT_DETECT_FAILED with one line in err when a required tool
 * fails or no tool's output could be used; else AGENT_DETECT_OK, the other
 * tools' failures as notes.
 */
int detect_run(const struct detect_vendor *d, const struct toolrun_opts *opts, struct agent_vendor_result *vr,
	       char *err, size_t errlen);

#endif
