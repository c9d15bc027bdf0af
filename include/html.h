/*
 * html: the cluster's GPUs as one self-contained HTML page (inline CSS, no
 * script, nothing fetched), each device a cell coloured by who holds it.
 * Served by the extender's debug listener (/debug/nodes?format=html, from
 * its cache) and printed by `kubectl gpu node NAME -o html` (from the
 * ledgers): both fill the same plain structures, so they draw alike.
 *
 * Every string is HTML-escaped as it is written (names come from users).
 * The page marks what it shows for programs too: each node section has
 * data-node, each device cell data-device and data-state, each holder
 * data-holder and data-group, each legend entry data-group and its colour.
 */
#ifndef GPU_HTML_H
#define GPU_HTML_H

#include "buf.h"

#include <stdbool.h>
#include <stdint.h>

/* One reservation on a device. */
struct html_holder {
	const char *ns;             /* NULL: a holder the reader may not name (shown as name alone) */
	const char *name;           /* the pod, or the gang for a gang's place */
	const char *gang;           /* the gang it belongs to, or "" (colours a gang's places and members alike) */
	bool place;                 /* a gang's place, reserved for a member not bound yet */
	bool missing;               /* the reader knows the pod is gone ("(no such pod)") */
	bool shared;                /* a share (mem_mib, core_pct) rather than the whole device */
	uint32_t mem_mib;
	uint32_t core_pct;
};

enum html_gpu_state { HTML_GPU_OK = 0, HTML_GPU_UNHEALTHY, HTML_GPU_EXTERNAL };

struct html_gpu {
	int id;
	const char *model;          /* "" when unknown */
	const char *island;         /* "" when none */
	const char *uuid;
	uint32_t memory_mib;
	enum html_gpu_state state;
	int nholders;
	const struct html_holder *holders;
};

struct html_node {
	const char *name;
	int ngpus;
	const struct html_gpu *gpus;
	const char *note;           /* one line shown under the node, or NULL */
};

struct html_page {
	const char *title;          /* "GPUs" when NULL */
	const char *source;         /* where the page's facts come from, one line */
	int nnodes;
	const struct html_node *nodes;
	int hidden;                 /* nodes left out because they have no GPUs (counted in the summary) */
};

/* Appends s with &, <, >, " and ' escaped. -1 when out's cap is reached. */
int html_escape(struct buf *out, const char *s);

/* Appends the whole page. 0, or -1 when out of memory (or out's cap reached). */
int html_gpu_page(const struct html_page *p, struct buf *out);

#endif
