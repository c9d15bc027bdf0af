/*
 * nudge: waiting GPU pods retried the moment GPUs free.
 *
 * kube-scheduler retries a pod the extender rejected only on cluster
 * events it watches (pods, nodes, ...), or after up to five minutes in its
 * unschedulable queue (docs/scheduling.md, "When a waiting pod is tried
 * again"). GPUs that free without such an event (a reservation the reaper
 * releases, a device turning healthy in its GpuNodeStatus, a gang's places
 * released) would leave the pods that wait for them there. So:
 *
 * - filter tells the nudger of each pod no node fits (nudge_waiting), and
 *   of each pod that fits somewhere (nudge_forget); the table is bounded
 *   (the longest waiting go when full) and forgets a pod not seen again
 *   within `keep_s` (kube-scheduler tries a waiting pod at least every five
 *   minutes);
 * - the cache tells it of each node whose devices gained (nudge_gained, a
 *   cache_on_gained hook: it only notes the name);
 * - its own thread then takes the waiting pods, oldest first, that fit on
 *   a gained node, each counted against what the ones before it took
 *   (nudge_fits), and PATCHes one annotation on each
 *   (gpu.scheduling/nudged, a JSON merge patch): an update of an
 *   unscheduled pod, which moves it out of kube-scheduler's unschedulable
 *   queue (to its backoff queue while the pod's backoff lasts);
 * - a gang member that only another try may place (nudge_retry) is
 *   nudged when it has not been tried for a while, without waiting for
 *   GPUs to free;
 * - at most `rate` PATCHes a second (a token bucket of `rate` tokens); a
 *   pod is nudged at most once a second.
 *
 * A NULL nudger is one switched off: every call does nothing.
 */
#ifndef GPU_NUDGE_H
#define GPU_NUDGE_H

#include "api.h"
#include "claim.h"
#include "gpu.h"

#include <stdbool.h>
#include <stdint.h>

struct cache;
struct kube_client;

struct nudge_opts {
	struct cache *cache;
	struct kube_client *kube;
	int rate;                  /* PATCHes a second at most, and the burst (0: 20) */
	int keep;                  /* waiting pods remembered at most (0: 4096) */
	int keep_s;                /* a pod not rejected again within this long is forgotten (0: 900) */
	long timeout_s;            /* each API call (0: 10) */
	int retry_delay_ms;        /* a gang member's first retry (nudge_retry) waits this long, doubled after each (0: 1500) */
};

/* Starts the nudger's thread; NULL when it cannot (then nothing is nudged). */
struct nudge *nudge_new(const struct nudge_opts *o);
/* Stops the thread and frees; NULL: nothing. Unhook it from the cache first. */
void nudge_free(struct nudge *n);

/* Filter: no node fits the pod (not a gang member): remember its claim. A mutex and a copy. */
void nudge_waiting(struct nudge *n, const struct api_pod_ref *pod, const struct claim *c);
/*
 * Filter: a gang member no node of this request fits that another try may
 * place with nothing else changed: its gang's free places are on nodes
 * kube-scheduler did not name (it names a sample of the nodes that pass its
 * own filters, percentageOfNodesToScore, from a new start each try), or its
 * gang's plan is being written. Nudged once it has not been tried again for
 * longer than kube-scheduler's backoff for it (retry_delay_ms after its
 * first rejection, doubled after each, at most ten times): its siblings'
 * binds wake it meanwhile, and a nudge that lands during a try changes the
 * pod's resourceVersion and fails its binding. The last member of a gang
 * has no sibling's bind left to wake it.
 */
void nudge_retry(struct nudge *n, const struct api_pod_ref *pod);
/* Filter: the pod fits a node: forget it. A load when nothing waits. */
void nudge_forget(struct nudge *n, const char *uid);
/* The cache's hook (cache_on_gained): node's devices gained. ctx is the nudger. */
void nudge_gained(void *ctx, const char *node);

enum nudge_result { NUDGE_SENT, NUDGE_FAILED, NUDGE_LIMITED, NUDGE_GONE, NUDGE_NRESULT };
/* The results' names in enum order: the values of the metric's label. */
#define NUDGE_RESULT_NAMES "sent", "failed", "limited", "gone"
/* Counts by result so far (out[NUDGE_NRESULT]); zeros for NULL. */
void nudge_counts(struct nudge *n, uint64_t *out);
/* Pods waiting in the table now; 0 for NULL. */
int nudge_waiting_count(struct nudge *n);
/* Tests: waits (up to timeout_ms) until no gained node is left to look at; true when so. */
bool nudge_idle(struct nudge *n, int timeout_ms);

/* ---- the pure parts, for the tests ---- */

/* A token bucket: rate tokens a second, at most burst. */
struct nudge_bucket {
	double tokens, rate, burst;
	int64_t at_ms;
};
void nudge_bucket_init(struct nudge_bucket *b, double rate, double burst, int64_t now_ms);
/* Takes one token if there is one at now_ms. */
bool nudge_bucket_take(struct nudge_bucket *b, int64_t now_ms);

/*
 * Which of the claims c[0..nc-1], in order, fit on n now, each placed
 * (binpack) before the next is tried: fits[i] for each. Returns how many
 * fit; -1 when out of memory. Pure: n is not changed.
 */
int nudge_fits(const struct gpu_node *n, const struct claim *const *c, int nc, bool *fits);

#endif
