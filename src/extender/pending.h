/*
 * pending: claims of pods seen by filter or prioritize, kept by pod UID
 * until bind, since bind carries only the pod's name, namespace and UID.
 * Bounded: at most `cap` entries; the oldest go first. Thread-safe.
 */
#ifndef GPU_PENDING_H
#define GPU_PENDING_H

#include "claim.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct pending {
	pthread_mutex_t lock;
	struct pending_entry **ring;   /* FIFO of entries, oldest at head */
	size_t cap, head, len;
	void *map;                     /* uid -> entry */
};

int pending_init(struct pending *p, size_t cap);
void pending_release(struct pending *p);
/* Remembers (or refreshes) the pod's claim. 0 or -1 (no memory). */
int pending_put(struct pending *p, const char *uid, const struct claim *c);
/* Copies the pod's claim into *out (caller releases it); false if unknown. */
bool pending_get(struct pending *p, const char *uid, struct claim *out);

#endif
