/*
 * events: the Event recorder of the extender and the agent. Posts core/v1
 * Events (what `kubectl describe` shows) about pods, nodes and PodGroups,
 * the way kube-scheduler's recorder does:
 *
 * - the caller only enqueues (a mutex held for a copy; never a wait on
 *   the API server): a bounded queue, drained by one thread of the
 *   recorder's own; a post that finds the queue full is dropped and
 *   counted;
 * - the same object, reason and message again within the dedup window is
 *   one Event whose count and lastTimestamp are PATCHed, not a new object
 *   (repeats still queued are folded into the queued one first);
 * - a token bucket per object (burst, then one every refill seconds), and
 *   optionally per object and reason at most one post every every_s
 *   seconds; what either holds back is dropped and counted ("limited");
 * - an Event about an object that is gone (no uid given, and a read of it
 *   finds none) is not posted ("gone").
 *
 * A NULL recorder is a recorder switched off: every call does nothing.
 */
#ifndef GPU_EVENTS_H
#define GPU_EVENTS_H

#include "buf.h"

#include <stdbool.h>
#include <stdint.h>

struct kube_client;

enum events_type { EVENTS_NORMAL, EVENTS_WARNING };

/* What an Event is about. Strings are copied by events_post. */
struct events_object {
	const char *api_version;   /* "v1", "scheduling.x-k8s.io/v1alpha1" */
	const char *kind;          /* "Pod", "Node", "PodGroup" */
	const char *ns;            /* "" for a cluster-scoped object (its Events go to "default") */
	const char *name;
	const char *uid;           /* NULL or "": the recorder reads it; an object not found gets no Event */
};

struct events_opts {
	const char *component;     /* source.component and reportingComponent: "gpu-extender", "gpu-agent" */
	const char *instance;      /* source.host and reportingInstance: the replica or the node */
	int queue;                 /* Events waiting at most (0: 4096: a burst of binds loses none) */
	int burst;                 /* per object (0: 25, as kube-scheduler) */
	int refill_s;              /* per object one more every this many seconds (0: 300) */
	int window_s;              /* repeats within this long are counted on one Event (0: 600) */
	long timeout_s;            /* each API call (0: 10) */
	bool warnings_only;        /* Normal Events are not posted (a busy cluster's GPUsAllocated: a write a pod) */
};

/* Starts the recorder's thread; NULL (recorder off) when it cannot. */
struct events *events_new(struct kube_client *kube, const struct events_opts *o);
/* Stops the thread; what is still queued is dropped. NULL: nothing. */
void events_free(struct events *e);

/*
 * Queues an Event (message: printf format). every_s > 0: at most one post
 * per object and reason in that many seconds, whatever the message.
 * False when dropped (queue full, recorder off, a Normal Event to a
 * recorder of warnings only); never blocks on the API.
 */
bool events_post(struct events *e, const struct events_object *o, enum events_type type, const char *reason,
		 int every_s, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Whether the recorder posts Events of this type (false: NULL, or Normal to one of warnings only). */
bool events_wants(const struct events *e, enum events_type type);

/* Shortcut for a pod (uid may be NULL). */
bool events_pod(struct events *e, const char *ns, const char *name, const char *uid, enum events_type type,
		const char *reason, int every_s, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

enum events_result { EVENTS_SENT, EVENTS_PATCHED, EVENTS_FAILED, EVENTS_DROPPED, EVENTS_LIMITED,
			  EVENTS_GONE, EVENTS_NRESULT };

/* Counts by result so far (out[EVENTS_NRESULT]); zeros for NULL. */
void events_counts(struct events *e, uint64_t *out);
/* The results' names, in enum order, and what they mean: the rows of both programs' metric tables. */
#define EVENTS_RESULT_NAMES "sent", "patched", "failed", "dropped", "limited", "gone"
#define EVENTS_RESULT_MEANING                                                                                     \
	"`sent`: a new Event; `patched`: a repeat counted on one; `dropped`: the queue was full; `limited`: past "  \
	"the rate limits; `gone`: its object no longer exists."
/* Tests: waits (up to timeout_ms) until nothing is queued or being posted; true when so. */
bool events_idle(struct events *e, int timeout_ms);

#endif
