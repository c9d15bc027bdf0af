/*
 * backlog: the filter's back-pressure on binds that queue. With the filter
 * choosing the node (filterKeepsBest 1) kube-scheduler's cycle costs a
 * pod so little that, on a saturated API server, it sends binds faster
 * than they are carried out; past its httpTimeout (5 s) it gives a bind
 * up and places the pod again, which doubles the work and collapses the
 * rate. So a GPU pod's filter waits, a bounded time, while the oldest bind
 * in flight has waited longer than the limit: the scheduler's cycle then
 * goes at the pace binds are carried out, and no bind nears the timeout.
 *
 * Binds are taken in the order they arrive, so the oldest in flight is
 * read, without a search, as the arrival of the first not yet answered
 * (a bind answered out of turn makes it look younger: the wait errs on the
 * side of not waiting).
 */
#ifndef GPU_EXTENDER_BACKLOG_H
#define GPU_EXTENDER_BACKLOG_H

#include <pthread.h>
#include <stdint.h>

#define BACKLOG_RING 4096   /* arrivals remembered; more in flight count as the oldest remembered */

struct backlog {
	pthread_mutex_t lock;
	pthread_cond_t answered_one;
	uint64_t arrived, answered;
	int waiters;
	int64_t arrival_ms[BACKLOG_RING];
};

void backlog_init(struct backlog *b);
void backlog_destroy(struct backlog *b);
/* A bind arrived (before it waits for a thread). */
void backlog_arrive(struct backlog *b);
/* A bind was answered (an answer without an arrival counts nothing). */
void backlog_answer(struct backlog *b);
/* How long the oldest bind in flight has waited, in ms (0: none in flight). */
int64_t backlog_oldest_ms(struct backlog *b);
/*
 * Waits while the oldest bind in flight has waited over limit_ms, at most
 * limit_ms in all; returns the ms waited (0 at once when limit_ms <= 0).
 */
int64_t backlog_wait(struct backlog *b, int64_t limit_ms);

#endif
