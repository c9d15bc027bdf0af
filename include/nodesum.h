/*
 * nodesum: each node's GPU counts with the extender's reservations, written
 * into its GpuNodeStatus (status.allocation) for `kubectl get gns`.
 *
 * Nothing on the verbs' path: a background writer looks at the cache's
 * snapshot once a period, counts the nodes whose view changed since it last
 * looked (only the ledger's records: binds in flight are left out), and
 * patches the nodes whose counts differ from what their GpuNodeStatus
 * holds, at most writes_per_s * interval_s of them a pass (the rest wait for
 * the next pass). What a GpuNodeStatus holds comes from the extender's own
 * watch of them (nodesum_writer_seen), so a restarted replica writes nothing
 * that is already there, and replicas that count alike write a node once
 * between them (a second, racing write is the same counts again: a JSON
 * merge patch of status.allocation alone, no resourceVersion).
 *
 * The pure parts (the counts, the patch body, reading an object's counts,
 * the pass over a snapshot) are exposed for tests.
 */
#ifndef GPU_NODESUM_H
#define GPU_NODESUM_H

#include "buf.h"
#include "cache.h"
#include "kube.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* One node's counts, as status.allocation holds them. */
struct nodesum {
	int allocated;       /* devices a reservation holds, whole or in part: whole + shared */
	int whole;           /* held whole (a pod, a gang's place, a MIG instance) */
	int shared;          /* held by shares and by nothing whole */
	int free;            /* healthy, not in use outside the extender (inUseBy), held by nobody */
	int unhealthy;       /* not Healthy, held or not */
	int reservations;    /* the ledger's entries on the node (pods and gang places) */
};

/* The counts of n's devices with the nrecs records of recs held (ids n lacks are skipped). Pure. */
void nodesum_count(const struct gpu_node *n, const struct alloc_rec *recs, int nrecs, struct nodesum *out);
/* The counts of a cache view: its ledger's records only, not binds in flight (cache_node.nassumed). */
void nodesum_of_view(const struct cache_node *v, struct nodesum *out);
bool nodesum_equal(const struct nodesum *a, const struct nodesum *b);
/*
 * The JSON merge patch that sets status.allocation: the counts, countedAt
 * (timestamp, RFC 3339) and countedBy (the replica's identity). 0 or -1.
 */
int nodesum_patch(const struct nodesum *s, const char *timestamp, const char *by, struct buf *out);
/* The counts a GpuNodeStatus object holds; false when it has none (or they do not read as counts). */
bool nodesum_read(const cJSON *gns, struct nodesum *out);

/*
 * What the writer knows of each node: the view it last counted and the
 * counts its GpuNodeStatus holds. Not thread-safe: the writer serialises.
 */
struct nodesum_table;

struct nodesum_table *nodesum_table_new(void);
void nodesum_table_free(struct nodesum_table *t);
/* A GpuNodeStatus as the watch shows it (obj NULL: deleted). */
int nodesum_table_seen(struct nodesum_table *t, const char *node, const cJSON *obj);
/* A node whose counts are due: its name, its GpuNodeStatus's name and the counts to write. */
struct nodesum_due {
	char name[254];
	char object[254];
	struct nodesum sum;
};
/*
 * One pass over snap: each node with a GpuNodeStatus whose view changed
 * since the last pass (or that is marked to be looked at again) is counted;
 * those whose counts differ from what the object holds are put in due, at
 * most max of them. The others that differ are marked for the next pass,
 * which starts with them; *pending gets how many. Returns the number in due.
 */
int nodesum_table_scan(struct nodesum_table *t, const struct snapshot *snap, struct nodesum_due *due, int max,
		       int *pending);
/* After a write of due: written (the object holds d->sum now), or not (looked at again next pass). */
void nodesum_table_done(struct nodesum_table *t, const struct nodesum_due *d, bool written);

/* ---- the writer ---- */

struct nodesum_opts {
	struct kube_client *client;
	struct cache *cache;
	const char *identity;          /* countedBy */
	int interval_s;                /* a pass this often (>= 1) */
	int writes_per_s;              /* at most interval_s * writes_per_s writes a pass (>= 1) */
	/* Passes wait until this says the cache holds every list and the ledgers (NULL: always). */
	bool (*ready)(void *ctx, char *why, size_t size);
	void *ready_ctx;
};

struct nodesum_writer;

/* A writer, not started yet (its hook works at once); NULL when out of memory. */
struct nodesum_writer *nodesum_writer_new(const struct nodesum_opts *o);
/* Starts its thread: a pass every interval_s. 0, or -1 when the thread does not start. */
int nodesum_writer_start(struct nodesum_writer *w);
/* Stops the thread (a write in flight finishes); nodesum_writer_seen still works. NULL is fine. */
void nodesum_writer_stop(struct nodesum_writer *w);
/* Stops it if need be and frees it; nothing may call nodesum_writer_seen after. NULL is fine. */
void nodesum_writer_free(struct nodesum_writer *w);
/* The watch's hook: a GpuNodeStatus seen (obj NULL: deleted). Any thread; w may be NULL. */
void nodesum_writer_seen(void *w, const char *node, const cJSON *obj);
/* Nodes whose counts are behind and wait for a write (the last pass's). */
int nodesum_writer_pending(struct nodesum_writer *w);

#endif
