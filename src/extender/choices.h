/*
 * choices: the nodes a filter chose alone (filterKeepsBest 1), kept by pod
 * UID until the pod's bind arrives or they expire. While kept, the devices
 * the pod would take there count in the cache as assumed: kube-scheduler
 * sends the next pods' filters before this pod's bind, and they must not
 * be handed the same devices. Bounded; thread-safe. The caller keeps the
 * cache in step: what a call hands back is the caller's to forget there.
 */
#ifndef GPU_CHOICES_H
#define GPU_CHOICES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct choice {
	char uid[64];
	char node[254];
	int64_t until_ms;              /* clock_mono_ms() after which it is dropped */
};

struct choices {
	pthread_mutex_t lock;
	struct choice *c;
	int n, cap;
};

int choices_init(struct choices *s, int cap);
void choices_release(struct choices *s);
/* Keeps the pod's choice; false when full (then nothing is kept). */
bool choices_put(struct choices *s, const char *uid, const char *node, int64_t until_ms);
/* Removes the pod's choice into *out; false when it has none. */
bool choices_take(struct choices *s, const char *uid, struct choice *out);
/* Removes up to max choices expired at now_ms into out; returns how many. */
int choices_take_expired(struct choices *s, int64_t now_ms, struct choice *out, int max);

#endif
